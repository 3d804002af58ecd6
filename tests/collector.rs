//! The parallel collector over real browsers: groups, batching across envs, and browsers
//! killed mid-collection.

use guirl::env::{EnvConfig, EpisodeStatus, ScreenState};
use guirl::policy::{oracle::OraclePolicy, Decision, Policy};
use guirl::rollout::{Collector, Job, TrajectoryBuffer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Browsers are found as this process's grandchildren, and cargo runs the tests of a binary
/// on parallel threads: each test holds this lock while its browsers run, so that no test
/// kills or counts another's.
static BROWSERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The oracle, recording batch sizes; when armed, kills the browsers at its next call.
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
            // Kill every browser: the rollouts of the states in this call (at least one) wait
            // for these actions mid-episode, so they must end as env_error. (Killing one
            // browser is not enough: its env may still be resetting, with its state not in
            // this call, and a reset replaces a dead browser and goes on.) Our chromedrivers
            // are our children; a browser is a chromedriver's child.
            let children = |pid: u32| -> Vec<u32> {
                let out =
                    std::process::Command::new("pgrep").args(["-P", &pid.to_string()]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
            };
            let browsers: Vec<u32> = children(std::process::id()).into_iter().flat_map(children).collect();
            assert!(!browsers.is_empty(), "running browsers");
            for b in browsers {
                std::process::Command::new("kill").args(["-9", &b.to_string()]).status()?;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        self.inner.act(states)
    }
}

#[tokio::test]
async fn groups_batching_and_a_killed_browser() {
    let _browsers = BROWSERS.lock().await;
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

    // Round 2 with the same (warm) browsers: they get killed mid-episode.
    kill.store(true, Ordering::SeqCst);
    let (recs, stats) = collector.collect(&mut policy, jobs, |_, _| {}).await.unwrap();
    assert_eq!(recs.len(), 9, "the collection finished despite the crash");
    assert!(stats.env_errors >= 1, "the killed browser's rollout is marked env_error");
    let ok = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
    assert_eq!(
        ok + stats.env_errors,
        9,
        "the other rollouts still succeed (fresh browsers replace the dead ones)"
    );
    let mut buffer = TrajectoryBuffer::new(100, 0);
    for r in &recs {
        buffer.add_recorded(r);
    }
    assert!(buffer.groups().any(|g| g.stats().env_errors >= 1));
    collector.close().await;
}

/// Rollout trees: rollouts started from a recorded episode's mid-episode state (its seed and
/// first steps replayed, every screen checked) are in exactly that state at the branch
/// point, keep the replayed steps marked, and count them as env steps; a prefix whose
/// screen is not the recorded one ends the rollout as `env_error` naming the step.
#[tokio::test]
async fn branched_rollouts_start_from_the_exact_recorded_state() {
    let _browsers = BROWSERS.lock().await;
    use guirl::rollout::Prefix;
    use guirl::train::advantage::gigpo::screenshot_key;
    let task = guirl::tasks::load_task("miniwob/click-checkboxes").unwrap();
    let mut collector = Collector::new(2, EnvConfig::default());
    collector.keep_frames = true;
    let mut policy = OraclePolicy;
    let jobs: Vec<Job> = (0..4)
        .map(|seed| Job { task: task.clone(), seed, group: None, prefix: None, stream: None })
        .collect();
    let (recs, _) = collector.collect(&mut policy, jobs, |_, _| {}).await.unwrap();
    let src = recs.iter().max_by_key(|r| r.trajectory.steps.len()).unwrap();
    let n = src.trajectory.steps.len();
    assert!(n >= 3, "an oracle episode of several steps: {n}");
    let t = n - 1;
    let prefix = Arc::new(Prefix::of(src, t).unwrap());
    let job = Job {
        task: task.clone(),
        seed: src.trajectory.seed,
        group: Some(7),
        prefix: Some(prefix.clone()),
        stream: None,
    };
    let (branches, stats) = collector.collect(&mut policy, vec![job.clone(), job], |_, _| {}).await.unwrap();
    assert_eq!(stats.env_steps, 2 * n, "the replayed steps are env steps");
    for b in &branches {
        let bt = &b.trajectory;
        assert_eq!((bt.branch_point(), bt.group, bt.outcome.status), (t, Some(7), EpisodeStatus::Success));
        let actions = |r: &guirl::rollout::Recorded| {
            r.trajectory.steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>()
        };
        assert_eq!(actions(b), actions(src), "the deterministic oracle takes the source's last step too");
        assert!(bt.steps[..t].iter().all(|s| s.prefix) && !bt.steps[t].prefix);
        assert_eq!(b.frames.len(), src.frames.len());
        assert_eq!(
            screenshot_key(&b.frames[t]),
            screenshot_key(&src.frames[t]),
            "the branch point is the same state, pixel for pixel (a GiGPO anchor)"
        );
    }

    let mut wrong = (*prefix).clone();
    std::sync::Arc::make_mut(&mut wrong.frames[1]).pixels_mut().for_each(|p| p.0 = [0, 0, 0]);
    let job =
        Job { task, seed: src.trajectory.seed, group: None, prefix: Some(Arc::new(wrong)), stream: None };
    let (bad, stats) = collector.collect(&mut policy, vec![job], |_, _| {}).await.unwrap();
    let o = &bad[0].trajectory.outcome;
    assert_eq!((o.status, stats.env_errors), (EpisodeStatus::EnvError, 1));
    assert!(o.error.as_deref().unwrap_or("").contains("diverged at step 1"), "{o:?}");
    collector.close().await;
}

/// A policy that decodes token by token (the tiny random Qwen3-VL checkpoint) takes each
/// env's state as soon as the env is ready and answers it between its decode steps
/// (continuous batching); its episodes are bit for bit those of one env that has no one to
/// share a step with.
#[tokio::test]
async fn continuous_batching_gives_the_episodes_one_env_alone_gives() {
    use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
    use guirl::policy::{Sampling, TrainablePolicy};
    let _browsers = BROWSERS.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let prompt = tmp.path().join("prompt.md");
    std::fs::write(&prompt, "Act on the screen. {frame}").unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/qwen_vl/qwen3_vl");
    let mut s = QwenPolicySettings::new("qwen3_vl", fixture.to_str().unwrap());
    s.prompt = Some(prompt);
    s.lora_rank = 2;
    s.lora_alpha = 4.0;
    s.max_new_tokens = 24;
    s.decode_rows = Some(2);
    let mut policy = QwenVlPolicy::new(s, &candle_core::Device::Cpu, 0).unwrap();
    policy.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 3 });
    let task = guirl::tasks::load_task("builtin/counter").unwrap();
    let jobs = Job::groups(&[(task.clone(), 1), (task, 2)], 3, 0);
    let cfg = EnvConfig { max_steps: Some(3), ..EnvConfig::default() };
    let mut runs = Vec::new();
    for envs in [3, 1] {
        let mut collector = Collector::new(envs, cfg.clone());
        let (recs, stats) = collector.collect(&mut policy, jobs.clone(), |_, _| {}).await.unwrap();
        collector.close().await;
        eprintln!(
            "{envs} envs: {} decode steps, {:.2} answers per step, {} env steps",
            stats.policy_calls, stats.mean_batch, stats.env_steps
        );
        assert_eq!(stats.env_steps, 18, "6 episodes of 3 steps (random answers end no episode early)");
        let (p, d) = (stats.prefill_secs, stats.decode_secs);
        assert!(
            p > 0.0 && d > 0.0 && p + d <= stats.policy_secs + 1e-9,
            "prefill {p} + decode {d}: {stats:?}"
        );
        runs.push(recs);
    }
    let answers = |recs: &[guirl::rollout::Recorded]| -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
        recs.iter()
            .map(|r| {
                r.trajectory
                    .steps
                    .iter()
                    .map(|s| (s.tokens.clone(), s.token_logprobs.iter().map(|x| x.to_bits()).collect()))
                    .collect()
            })
            .collect()
    };
    let (together, alone) = (answers(&runs[0]), answers(&runs[1]));
    assert!(together.iter().flatten().all(|(t, _)| !t.is_empty()), "every step has its answer's tokens");
    for (i, (a, b)) in together.iter().zip(&alone).enumerate() {
        assert_eq!(a, b, "episode {i}: its answers with 3 envs differ from those with 1");
    }
    // each member of a group draws from its own stream
    assert_ne!(together[0], together[1], "one group's members answered alike");
}

/// Double-clicks the link at the top of fixtures/pages/links.html, every step.
struct DoubleClicks;

impl Policy for DoubleClicks {
    fn name(&self) -> String {
        "double-clicks".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        let a = guirl::env::GuiAction::DoubleClick { x: 100, y: 16 };
        Ok(states.iter().map(|_| Decision::deterministic(a.clone())).collect())
    }
}

/// Two envs whose every step double-clicks a link (two navigations requested, one new
/// document) finish their episodes, none as env_error: such a step once waited forever,
/// and the collection with it.
#[tokio::test]
async fn double_clicks_on_links_end_every_episode() {
    let _browsers = BROWSERS.lock().await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tasks/links.toml");
    let task = guirl::tasks::load_task(path).unwrap();
    let jobs: Vec<Job> = (0..4)
        .map(|seed| Job { task: task.clone(), seed, group: None, prefix: None, stream: None })
        .collect();
    let cfg = EnvConfig { max_steps: Some(5), ..EnvConfig::default() };
    let mut collector = Collector::new(2, cfg);
    let mut policy = DoubleClicks;
    let collect = collector.collect(&mut policy, jobs, |_, _| {});
    let (recs, stats) = tokio::time::timeout(std::time::Duration::from_secs(120), collect)
        .await
        .expect("the collection ends within two minutes")
        .unwrap();
    collector.close().await;
    assert_eq!(recs.len(), 4);
    for r in &recs {
        let t = &r.trajectory;
        assert_eq!(t.outcome.status, EpisodeStatus::Truncated, "seed {}: {:?}", t.seed, t.outcome);
        assert_eq!(t.steps.len(), 5, "seed {}", t.seed);
    }
    assert_eq!(stats.env_errors, 0);
}

/// An evaluation's episodes that a killed browser broke run again, on their own seeds: every
/// seed ends with an outcome, none lowered to a failure by the crash.
#[tokio::test]
async fn episodes_a_killed_browser_broke_are_run_again() {
    let _browsers = BROWSERS.lock().await;
    let task = guirl::tasks::load_task("miniwob/enter-text").unwrap();
    let jobs: Vec<Job> = (0..4).map(|s| Job::episode(task.clone(), 700 + s)).collect();
    let mut collector = Collector::new(2, EnvConfig::default());
    let kill = Arc::new(AtomicBool::new(true));
    let mut policy = Probe { inner: OraclePolicy, batches: vec![], kill_once: kill.clone() };
    let done = collector.collect_complete(&mut policy, jobs, 3).await.unwrap();
    assert!(!kill.load(Ordering::SeqCst), "the browsers were killed");
    assert!(done.reruns >= 1, "a broken episode ran again: {done:?}");
    assert_eq!(done.lost, 0);
    let seeds: Vec<u64> = done.recs.iter().map(|r| r.trajectory.seed).collect();
    assert_eq!(seeds, [700, 701, 702, 703], "every seed, in the jobs' order");
    assert!(done.recs.iter().all(|r| r.trajectory.outcome.status == EpisodeStatus::Success));
    collector.close().await;
}
