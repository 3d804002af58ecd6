//! Continuing behaviour cloning from a clone (`[model] init` + `[sft] start_epoch`), as
//! the trainer runs it: two epochs, then two more from the clone's checkpoint, give the
//! weights of four epochs in one run (real oracle demonstrations, real tiny policy).

use crate::common::trainer::train;
use guirl::train::trainer::SFT_OPTIMIZER_FILE;
use guirl::train::TrainConfig;
use std::path::Path;

fn config(sft: &str, init: Option<&Path>) -> TrainConfig {
    let init = init.map(|p| format!("init = {:?}\n", p.display().to_string())).unwrap_or_default();
    let mut c = TrainConfig::parse(&format!(
        "[run]\nname = \"c\"\nseed = 3\niterations = 0\n[tasks]\nids = [\"miniwob/click-test\"]\n\
         [model]\npreset = \"tiny\"\nkinds = [\"click\"]\n{init}[sft]\n{sft}\nlr = 1e-3\nminibatch = 2\n\
         [rollout]\nenvs = 2\nmax_steps = 2\n[eval]\ninterval = 0\n"
    ))
    .unwrap();
    c.resolve();
    c.validate().unwrap();
    c
}

fn weights(dir: &Path) -> Vec<(String, Vec<u32>)> {
    let ckpt = dir.join("checkpoints/iter-000000/model.safetensors");
    let map = candle_core::safetensors::load(ckpt, &candle_core::Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<u32>)> = map
        .into_iter()
        .map(|(k, t)| {
            (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect())
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn two_more_epochs_from_the_clone_are_four_epochs_of_one_run() {
    let root = tempfile::tempdir().unwrap();
    let (long, clone, more) = (root.path().join("long"), root.path().join("clone"), root.path().join("more"));
    // Four epochs on oracle demonstrations recorded by this run.
    train(config("oracle_episodes = 6\nepochs = 4", None), &long, false).await;
    // The same demonstrations: two epochs, then two more from the clone's checkpoint.
    let demos = format!("dir = {:?}", long.join("demos").display().to_string());
    train(config(&format!("{demos}\nepochs = 2"), None), &clone, false).await;
    let init = clone.join("checkpoints/iter-000000");
    assert!(init.join(SFT_OPTIMIZER_FILE).is_file(), "the clone keeps cloning's optimizer");
    train(config(&format!("{demos}\nepochs = 2\nstart_epoch = 2"), Some(&init)), &more, false).await;
    assert!(weights(&more) == weights(&long), "2 + 2 epochs from the clone differ from 4 in one run");
    // Without start_epoch the same run repeats the clone's first two epochs instead.
    let again = root.path().join("again");
    train(config(&format!("{demos}\nepochs = 2"), Some(&init)), &again, false).await;
    assert!(weights(&again) != weights(&long));
}
