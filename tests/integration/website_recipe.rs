//! A website task learned from hand-made demonstrations, end to end as a user runs it:
//! `guirl play --record` reads the 20 demonstrations of
//! `environments/websites/todo-demos.txt`, `configs/todo.toml` clones them, and the clone
//! adds items no demonstration typed on held-out seeds.

use crate::common;

use common::repo;
use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// About 30 s: 20 recorded episodes, 40 SFT epochs of the tiny policy, 30 held-out episodes.
#[tokio::test]
async fn twenty_hand_made_demonstrations_teach_the_todo_app() {
    let dir = tempfile::tempdir().unwrap();
    let demos = dir.path().join("todo-demos");
    let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["play", "--task", "environments/websites/todo.toml", "--record"])
        .arg(&demos)
        .arg("--screenshot")
        .arg(dir.path().join("play.png"))
        .current_dir(repo(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let actions = std::fs::read_to_string(repo("environments/websites/todo-demos.txt")).unwrap();
    child.stdin.take().unwrap().write_all(actions.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "play failed: {}", String::from_utf8_lossy(&out.stderr));
    let wins =
        stdout.lines().filter(|l| l.starts_with("episode over:") && l.contains("status=success")).count();
    assert_eq!(wins, 20, "every hand-made demonstration succeeds:\n{stdout}");

    let typed: std::collections::HashSet<&str> =
        actions.lines().filter_map(|l| l.strip_prefix("type(\"")?.strip_suffix("\")")).collect();
    let text = std::fs::read_to_string(repo("configs/todo.toml")).unwrap();
    let mut cfg = TrainConfig::parse(&text).unwrap();
    cfg.sft.as_mut().unwrap().dir = Some(demos.clone());
    cfg.run.iterations = 0;
    cfg.eval.episodes = 30;
    cfg.tasks.eval_seeds.count = 30;
    let run = dir.path().join("run");
    let mut t = Trainer::new(cfg, run.clone(), false, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();
    let best = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(best.lines().next().unwrap()).unwrap();
    let success = first["eval_success"].as_f64().unwrap();
    assert!(success >= 0.8, "held-out success of the clone {success}");

    // Most of those held-out seeds name an item no demonstration typed.
    let spec_text = std::fs::read_to_string(repo("environments/websites/todo.toml")).unwrap();
    let spec = guirl::tasks::website::WebsiteSpec::parse(&spec_text).unwrap();
    let unseen = (1_000_000..1_000_030).filter(|&s| !typed.contains(spec.draw(s)["item"].as_str())).count();
    assert!(unseen >= 15, "only {unseen} of 30 held-out seeds name an item not demonstrated");
}
