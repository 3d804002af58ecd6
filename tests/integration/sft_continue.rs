//! Continuing behaviour cloning from a clone (`[model] init` + `[sft] start_epoch`), as
//! the trainer runs it: two epochs, then two more from the clone's checkpoint, give the
//! weights of four epochs in one run (real oracle demonstrations, real tiny policy); and
//! a cloning stopped midway (or its recording of demonstrations), then resumed, ends as
//! one uninterrupted cloning.

use crate::common::trainer::train;
use guirl::train::checkpoint::CLONING;
use guirl::train::trainer::{Trainer, SFT_OPTIMIZER_FILE};
use guirl::train::TrainConfig;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// Stop `run` once `file` (a journal it writes) has a line.
fn stop_at_first_line(file: std::path::PathBuf) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let raise = stop.clone();
    let watcher = std::thread::spawn(move || {
        while std::fs::read_to_string(&file).unwrap_or_default().lines().count() < 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
        raise.store(true, Ordering::SeqCst);
    });
    (stop, watcher)
}

fn sft_epochs(dir: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join("sft.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["epoch"].as_u64().unwrap())
        .collect()
}

/// A cloning stopped after an epoch (Ctrl-C) is kept in `checkpoints/cloning/`; `--resume`
/// ends it with the weights of one uninterrupted cloning, and records no demonstration again.
#[tokio::test]
async fn a_stopped_cloning_resumes_to_the_weights_of_one_run() {
    let root = tempfile::tempdir().unwrap();
    let (whole, cut) = (root.path().join("whole"), root.path().join("cut"));
    let cfg = || config("oracle_episodes = 6\nepochs = 6", None);
    train(cfg(), &whole, false).await;
    // Stop once the first epoch is logged: the trainer stops before the next one it starts.
    let (stop, watcher) = stop_at_first_line(cut.join("sft.jsonl"));
    let state = Trainer::new(cfg(), cut.clone(), false, false).unwrap().run(stop).await.unwrap();
    watcher.join().unwrap();
    assert!(!state.sft_done && (1..6).contains(&state.sft_epochs), "{state:?}");
    let cloning = cut.join("checkpoints").join(CLONING);
    assert!(cloning.join(SFT_OPTIMIZER_FILE).is_file(), "the cloning so far is saved");
    assert!(!cut.join("checkpoints/latest").exists(), "latest names finished checkpoints only");
    let recorded = || std::fs::metadata(cut.join("demos/trajectories.jsonl")).unwrap().modified().unwrap();
    let demos = recorded();
    // One run per folder: a new start there is refused, and says how to go on.
    let e = Trainer::new(cfg(), cut.clone(), false, false).err().unwrap().to_string();
    assert!(e.contains("stopped during behaviour cloning") && e.contains("pass --resume"), "{e}");
    train(cfg(), &cut, true).await;
    assert!(weights(&cut) == weights(&whole), "a stopped and resumed cloning differs from one run");
    assert_eq!(sft_epochs(&cut), (1..=6).collect::<Vec<_>>(), "each epoch logged once");
    assert!(!cloning.exists(), "the clone's checkpoint replaces checkpoints/cloning");
    assert_eq!(recorded(), demos, "the demonstrations are not recorded again");
}

/// A recording of oracle demonstrations stopped midway keeps what it recorded; `--resume`
/// records the rest (the same episodes, appended) and clones as one uninterrupted run.
#[tokio::test]
async fn a_stopped_recording_keeps_its_demonstrations_and_resume_records_the_rest() {
    let root = tempfile::tempdir().unwrap();
    let (whole, cut) = (root.path().join("whole"), root.path().join("cut"));
    // 2 browsers record 8 episodes between two looks at the stop flag.
    let cfg = || config("oracle_episodes = 20\nepochs = 2", None);
    train(cfg(), &whole, false).await;
    let journal = |run: &Path| std::fs::read_to_string(run.join("demos/trajectories.jsonl")).unwrap();
    let (stop, watcher) = stop_at_first_line(cut.join("demos/trajectories.jsonl"));
    let state = Trainer::new(cfg(), cut.clone(), false, false).unwrap().run(stop).await.unwrap();
    watcher.join().unwrap();
    assert!(!state.sft_done && state.sft_epochs == 0, "{state:?}");
    let kept = journal(&cut);
    let n = kept.lines().count();
    assert!(n > 0 && n < 20 && n % 8 == 0, "stopped between recordings: {n} kept");
    assert!(cut.join("checkpoints").join(CLONING).join(SFT_OPTIMIZER_FILE).is_file());
    train(cfg(), &cut, true).await;
    assert!(journal(&cut).starts_with(&kept), "what was recorded is kept as it was");
    let episodes = |run: &Path| -> Vec<(String, u64)> {
        journal(run)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| (v["task_id"].as_str().unwrap().to_string(), v["seed"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(episodes(&cut), episodes(&whole), "the same episodes, in the same order");
    assert!(weights(&cut) == weights(&whole), "a stopped and resumed recording clones differently");
}
