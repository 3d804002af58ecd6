//! Every MiniWoB++ oracle solves its task in a real headless Chromium: at least 19 of 20
//! seeds per task, run the way `guirl run --policy oracle` runs them (a `Collector` over
//! the `OraclePolicy`), with the same two browsers reused across all tasks and seeds.

use guirl::env::{EnvConfig, EpisodeStatus};
use guirl::policy::oracle::{miniwob::TASKS, OraclePolicy};
use guirl::rollout::{Collector, Job};
use std::collections::BTreeMap;

const SEEDS: u64 = 20;
const MIN_SOLVED: usize = 19;

/// Per task: episodes solved, and `(seed, status, steps)` of the others.
type Tally = (usize, Vec<(u64, EpisodeStatus, u32)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_miniwob_oracle_solves_19_of_20_seeds() {
    let mut jobs = Vec::new();
    for name in TASKS {
        let task = guirl::tasks::load_task(&format!("miniwob/{name}"))
            .unwrap_or_else(|e| panic!("loading miniwob/{name}: {e:#}"));
        jobs.extend((0..SEEDS).map(|seed| Job { task: task.clone(), seed, group: None }));
    }
    let mut collector = Collector::new(2, EnvConfig::default());
    let collected = collector.collect(&mut OraclePolicy, jobs, |_, _| {}).await;
    collector.close().await;
    let (episodes, _stats) = collected.expect("collecting oracle episodes");
    assert_eq!(episodes.len(), TASKS.len() * SEEDS as usize);

    let mut per_task: BTreeMap<&str, Tally> = BTreeMap::new();
    for rec in &episodes {
        let t = &rec.trajectory;
        let name = t.task_id.strip_prefix("miniwob/").expect("a miniwob task id");
        let name = TASKS.iter().find(|n| **n == name).expect("a task from TASKS");
        let entry = per_task.entry(name).or_default();
        if t.outcome.status == EpisodeStatus::Success {
            entry.0 += 1;
        } else {
            entry.1.push((t.seed, t.outcome.status, t.outcome.steps));
        }
    }
    let failing: Vec<String> = per_task
        .iter()
        .filter(|(_, (solved, _))| *solved < MIN_SOLVED)
        .map(|(name, (solved, misses))| {
            format!("miniwob/{name}: {solved}/{SEEDS} solved; missed (seed, status, steps): {misses:?}")
        })
        .collect();
    assert!(
        failing.is_empty(),
        "oracles below {MIN_SOLVED}/{SEEDS}:\n{}\n(debug one with `guirl run --task miniwob/NAME \
         --policy oracle --seed SEED --episodes 1 --json`)",
        failing.join("\n")
    );
}
