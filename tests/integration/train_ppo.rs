//! PPO end to end on real browsers and the real (tiny) policy: the critic warms up, trains
//! with GAE, is checkpointed, and a resumed run continues with the same critic.

use crate::common;
use crate::common::trainer::train;

use common::repo;
use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The tiny two-button task, one browser: with two, the policy's forward passes are
/// batched by timing, and a batch of one and a batch of two round the recorded log-probs
/// differently in the last bit; PPO's whitened advantages make the policy update sensitive
/// enough to that for the weights to differ by ~1e-6 between two identical runs (the
/// critic's do not). One browser keeps the comparison exact.
fn config(iterations: u64) -> TrainConfig {
    let task = repo("fixtures/tasks/two-buttons.toml");
    TrainConfig::parse(&format!(
        r#"
[run]
name = "ppo"
seed = 5
iterations = {iterations}
[tasks]
ids = ["{}"]
[model]
preset = "tiny"
[algo]
kind = "ppo"
group_size = 2
batch_seeds = 2
epochs = 2
minibatch = 4
lr = 1e-2
gamma = 0.9
[algo.ppo]
gae_lambda = 0.8
value_lr = 1e-2
value_clip = 0.5
critic_warmup = 1
[rollout]
envs = 1
max_steps = 1
[eval]
interval = 0
[checkpoint]
interval = 1
"#,
        task.display()
    ))
    .unwrap()
}

fn tensors(file: &Path) -> Vec<(String, Vec<f32>)> {
    let map = candle_core::safetensors::load(file, &candle_core::Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<f32>)> = map
        .into_iter()
        .map(|(k, t)| {
            (k, t.to_dtype(candle_core::DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[tokio::test]
async fn ppo_warms_up_its_critic_trains_and_resumes_with_the_same_critic() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    train(config(3), &a, false).await;
    train(config(2), &b, false).await;
    train(config(3), &b, true).await;
    let ckpt = |run: &Path, i: u64| run.join(format!("checkpoints/iter-{i:06}"));
    for file in ["model.safetensors", "critic.safetensors", "critic_optimizer.safetensors"] {
        // (assert!, not assert_eq!: a failure would print every weight)
        assert!(
            tensors(&ckpt(&a, 3).join(file)) == tensors(&ckpt(&b, 3).join(file)),
            "{file}: the resumed run differs from the uninterrupted one"
        );
    }
    // The warm-up iteration trains the critic only: the policy is still the initial one.
    let cfg = config(3);
    let initial = cfg.model.build(&candle_core::Device::Cpu, cfg.run.seed).unwrap();
    let dir = root.path().join("initial");
    initial.save(&dir).unwrap();
    let w0 = tensors(&dir.join("model.safetensors"));
    assert_eq!(
        tensors(&ckpt(&a, 1).join("model.safetensors")),
        w0,
        "critic_warmup = 1 left the policy alone"
    );
    assert_ne!(tensors(&ckpt(&a, 2).join("model.safetensors")), w0, "the policy trains after the warm-up");
    assert_ne!(
        tensors(&ckpt(&a, 1).join("critic.safetensors")),
        tensors(&ckpt(&a, 2).join("critic.safetensors")),
        "the critic trains every iteration"
    );
    // The critic's metrics are in every line, and plotted.
    let text = std::fs::read_to_string(a.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    for m in &lines {
        for key in ["value_loss", "value_mean", "return_mean", "value_grad_norm", "loss"] {
            assert!(m[key].as_f64().is_some_and(f64::is_finite), "{key} = {} in {m}", m[key]);
        }
        let ev = &m["explained_variance"];
        assert!(ev.is_null() || ev.as_f64().is_some_and(|x| x <= 1.0), "{m}");
    }
    assert_eq!(lines[0]["optimizer_steps"], 0, "no policy step during the warm-up");
    assert!(lines[1]["optimizer_steps"].as_u64().unwrap() > 0);
    assert!(a.join("plots/value.png").is_file());
}

/// PPO from random init on MiniWoB++ click-test, the GRPO test's budget (10 iterations of
/// 32 rollouts, up to 3 steps each: a miss goes on, and a rollout that misses three times
/// is truncated and bootstrapped): greedy held-out success before against after.
#[tokio::test]
async fn ppo_from_scratch_raises_held_out_success_on_click_test() {
    let cfg = TrainConfig::parse(
        r#"
[run]
name = "ppo-learns"
seed = 0
iterations = 10
[tasks]
ids = ["miniwob/click-test"]
train_seeds = { start = 0, end = 100000 }
eval_seeds = { start = 1000000, count = 40 }
[model]
preset = "tiny"
kinds = ["click"]
[algo]
kind = "ppo"
group_size = 8
batch_seeds = 4
epochs = 2
minibatch = 32
lr = 3e-3
gamma = 0.9
[rollout]
envs = 2
max_steps = 3
[eval]
interval = 10
episodes = 40
[checkpoint]
interval = 0
"#,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(cfg, dir.path().to_path_buf(), false, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();
    let text = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let before = lines[0]["eval_success"].as_f64().expect("an evaluation of the starting policy");
    let after = lines[10]["eval_success"].as_f64().expect("an evaluation at the last iteration");
    // The critic learned something: its loss fell from the first iteration's.
    let vl = |i: usize| lines[i]["value_loss"].as_f64().unwrap();
    assert!(vl(10) < vl(1), "value loss {} -> {}", vl(1), vl(10));
    assert!(before < 0.5, "the untrained policy already succeeds {before}");
    assert!(after >= 0.8 && after > before + 0.3, "held-out success {before} -> {after}");
}
