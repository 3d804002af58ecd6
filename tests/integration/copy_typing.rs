//! Typing from the instruction on a real task: `configs/enter-text.toml` (a tiny policy
//! with copy, cloned from oracle demonstrations of miniwob/enter-text) types names it
//! never saw on held-out seeds, and an RL iteration over its sampled copies starts at
//! importance ratio 1 (sampling and scoring agree on every copied span).

use crate::common;

use common::repo;
use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// About 30 s: 80 demonstrations, 20 SFT epochs, 20 held-out episodes, one GRPO iteration.
#[tokio::test]
async fn a_cloned_policy_types_names_it_never_saw() {
    let text = std::fs::read_to_string(repo("configs/enter-text.toml")).unwrap();
    let mut cfg = TrainConfig::parse(&text).unwrap();
    cfg.run.iterations = 1;
    cfg.eval.interval = 1;
    cfg.eval.episodes = 20;
    cfg.tasks.eval_seeds.count = 20;
    cfg.algo.batch_seeds = 2;
    cfg.checkpoint.interval = 0;
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(cfg, dir.path().to_path_buf(), false, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();

    // The demonstrations type the instruction's name; their seeds are not the held-out ones.
    let demos = std::fs::read_to_string(dir.path().join("demos/trajectories.jsonl")).unwrap();
    let types = demos
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .flat_map(|t| t["steps"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["action"].as_str().is_some_and(|a| a.starts_with("type(")))
        .count();
    assert!(types > 0, "no typing in the demonstrations");
    let metrics: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cloned = metrics[0]["eval_success"].as_f64().unwrap();
    assert!(cloned >= 0.8, "the clone types unseen names on {cloned} of 20 held-out seeds");
    let ratio = metrics[1]["first_ratio_mean"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() < 1e-4, "first minibatch ratio {ratio}: sampled and scored copies differ");
}
