//! Every oracle (MiniWoB++ and built-in) solves its task in a real headless Chromium: at
//! least 19 of 20 seeds per task (built-in: all 20), run the way `guirl run --policy
//! oracle` runs them (a `Collector` over the `OraclePolicy`), with the same two browsers
//! reused across all tasks and seeds of a suite, at 4 envs beside a busy core: no episode
//! may end as `env_error` (a native popup, a slow page or a screenshot that did not answer
//! is the env's fault, never the oracle's).

use crate::common;

use guirl::env::{EnvConfig, EpisodeStatus};
use guirl::policy::oracle::{self, OraclePolicy};
use guirl::rollout::{Collector, Job};
use std::collections::BTreeMap;

const SEEDS: u64 = 20;

/// Per task: episodes solved, and `(seed, status, steps)` of the others.
type Tally = (usize, Vec<(u64, EpisodeStatus, u32)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_miniwob_oracle_solves_19_of_20_seeds() {
    solve_all("miniwob", &oracle::tasks("miniwob"), 19).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_oracle_solves_20_of_20_seeds() {
    solve_all("builtin", &oracle::tasks("builtin"), 20).await;
}

async fn solve_all(suite: &str, tasks: &[&str], min_solved: usize) {
    let mut jobs = Vec::new();
    for name in tasks {
        let task = guirl::tasks::load_task(&format!("{suite}/{name}"))
            .unwrap_or_else(|e| panic!("loading {suite}/{name}: {e:#}"));
        jobs.extend((0..SEEDS).map(|seed| Job {
            task: task.clone(),
            seed,
            group: None,
            prefix: None,
            stream: None,
        }));
    }
    let mut collector = Collector::new(4, EnvConfig::default());
    let load = common::Load::spin(1);
    let collected = collector.collect(&mut OraclePolicy, jobs, |_, _| {}).await;
    drop(load);
    collector.close().await;
    let (episodes, _stats) = collected.expect("collecting oracle episodes");
    assert_eq!(episodes.len(), tasks.len() * SEEDS as usize);

    let mut per_task: BTreeMap<&str, Tally> = BTreeMap::new();
    for rec in &episodes {
        let t = &rec.trajectory;
        let name = t.task_id.split_once('/').expect("a suite/name task id").1;
        let name = tasks.iter().find(|n| **n == name).expect("a task from the suite");
        let entry = per_task.entry(name).or_default();
        if t.outcome.status == EpisodeStatus::Success {
            entry.0 += 1;
        } else {
            entry.1.push((t.seed, t.outcome.status, t.outcome.steps));
        }
    }
    let env_errors: Vec<String> = episodes
        .iter()
        .map(|r| &r.trajectory)
        .filter(|t| t.outcome.status == EpisodeStatus::EnvError)
        .map(|t| format!("{} seed {}: {}", t.task_id, t.seed, t.outcome.error.as_deref().unwrap_or("")))
        .collect();
    assert!(env_errors.is_empty(), "env errors on pages that are fine:\n{}", env_errors.join("\n"));
    let failing: Vec<String> = per_task
        .iter()
        .filter(|(_, (solved, _))| *solved < min_solved)
        .map(|(name, (solved, misses))| {
            format!("{suite}/{name}: {solved}/{SEEDS} solved; missed (seed, status, steps): {misses:?}")
        })
        .collect();
    assert!(
        failing.is_empty(),
        "oracles below {min_solved}/{SEEDS}:\n{}\n(debug one with `guirl run --task {suite}/NAME \
         --policy oracle --seed SEED --episodes 1 --json`)",
        failing.join("\n")
    );
}
