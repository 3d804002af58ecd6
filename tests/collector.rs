//! The parallel collector over real browsers: groups, batching across envs, and a
//! browser killed mid-collection.

use guirl::env::{EnvConfig, EpisodeStatus, ScreenState};
use guirl::policy::{oracle::OraclePolicy, Decision, Policy};
use guirl::rollout::{Collector, Job, TrajectoryBuffer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The oracle, recording batch sizes; kills one browser the first time it sees step 1.
struct Probe {
    inner: OraclePolicy,
    batches: Vec<usize>,
    kill_once: Arc<AtomicBool>,
}

impl Policy for Probe {
    fn name(&self) -> String {
        "probe".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        self.batches.push(states.len());
        if self.kill_once.swap(false, Ordering::SeqCst) {
            // Kill one of the browsers: its current rollout must end as env_error.
            // Our chromedrivers are our children; the browser is a chromedriver's child.
            let children = |pid: u32| -> Vec<u32> {
                let out =
                    std::process::Command::new("pgrep").args(["-P", &pid.to_string()]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
            };
            let browser = children(std::process::id())
                .into_iter()
                .flat_map(children)
                .next()
                .expect("a running browser");
            std::process::Command::new("kill").args(["-9", &browser.to_string()]).status()?;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        self.inner.act(states)
    }
}

#[tokio::test]
async fn groups_batching_and_a_killed_browser() {
    let a = guirl::tasks::load_task("miniwob/click-checkboxes").unwrap();
    let b = guirl::tasks::load_task("miniwob/enter-text").unwrap();
    let instances = vec![(a.clone(), 3), (b.clone(), 4), (a.clone(), 5)];
    let jobs = Job::groups(&instances, 3, 100);
    assert_eq!(jobs.len(), 9);
    let mut collector = Collector::new(3, EnvConfig::default());
    // A window longer than a reset, so envs that just reset join the batch.
    collector.batch_wait = std::time::Duration::from_millis(500);
    let kill = Arc::new(AtomicBool::new(false));
    let mut policy = Probe { inner: OraclePolicy, batches: vec![], kill_once: kill.clone() };

    // Round 1: everything succeeds, policy calls are batched across the 3 envs.
    let (recs, stats) = collector.collect(&mut policy, jobs.clone(), |_, _| {}).await.unwrap();
    assert_eq!(recs.len(), 9);
    assert!(
        recs.iter().all(|r| r.trajectory.outcome.status == EpisodeStatus::Success),
        "{:?}",
        recs.iter().map(|r| (&r.trajectory.task_id, r.trajectory.outcome.status)).collect::<Vec<_>>()
    );
    assert!(stats.mean_batch > 1.5, "policy calls were batched: mean batch {}", stats.mean_batch);
    assert!(policy.batches.contains(&3));
    let mut buffer = TrajectoryBuffer::new(100, 0);
    for r in &recs {
        buffer.add_recorded(r);
    }
    let groups: Vec<_> = buffer.groups().collect();
    assert_eq!(groups.len(), 3);
    for g in &groups {
        assert_eq!(g.trajectories.len(), 3);
        let inst: Vec<_> = g.trajectories.iter().map(|t| t.instruction.clone()).collect();
        assert!(inst.windows(2).all(|w| w[0] == w[1]), "every member starts from the same instance");
    }

    // Round 2 with the same (warm) browsers: one gets killed mid-episode.
    kill.store(true, Ordering::SeqCst);
    let (recs, stats) = collector.collect(&mut policy, jobs, |_, _| {}).await.unwrap();
    assert_eq!(recs.len(), 9, "the collection finished despite the crash");
    assert!(stats.env_errors >= 1, "the killed browser's rollout is marked env_error");
    let ok = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
    assert_eq!(
        ok + stats.env_errors,
        9,
        "the other rollouts still succeed (a fresh browser replaces the dead one)"
    );
    let mut buffer = TrajectoryBuffer::new(100, 0);
    for r in &recs {
        buffer.add_recorded(r);
    }
    assert!(buffer.groups().any(|g| g.stats().env_errors >= 1));
    collector.close().await;
}
