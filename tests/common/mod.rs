//! Shared helpers for the integration tests (real headless Chromium).
#![allow(dead_code)]

pub mod qwen;
pub mod trainer;

use guirl::env::{EnvConfig, GuiEnv};
use std::path::PathBuf;

/// Path of a file in the repo.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// An env for a task id or spec path with default settings.
pub fn env_for(task: &str) -> GuiEnv {
    env_with(task, EnvConfig::default())
}

/// An env for a task id or spec path.
pub fn env_with(task: &str, cfg: EnvConfig) -> GuiEnv {
    let t = guirl::tasks::load_task(task).unwrap_or_else(|e| panic!("loading {task}: {e:#}"));
    GuiEnv::new(t, cfg)
}

/// (task, seed, status, reward, each step's action and why it could not be taken) of an
/// episode of a bench folder.
pub type BenchEpisode = (String, u64, guirl::env::EpisodeStatus, String, Vec<(String, Option<String>)>);

/// Every episode of a bench folder, by task and seed: what two ways of running a policy
/// compare step by step.
pub fn bench_episodes(out: &std::path::Path) -> Vec<BenchEpisode> {
    use guirl::bench::harness::journal;
    let rows = journal::read_rows(&out.join(journal::RESULTS_FILE)).unwrap();
    let mut v: Vec<_> = rows
        .iter()
        .map(|r| {
            let set = guirl::rollout::TrajectorySet::read(&out.join(&r.trajectory)).unwrap();
            let t = &set.trajectories[r.index].trajectory;
            let steps = t.steps.iter().map(|s| (s.action.clone(), s.action_error.clone())).collect();
            (r.task.clone(), r.seed, r.status, format!("{:.6}", r.reward), steps)
        })
        .collect();
    v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    v
}

/// Bench options: `n` episodes (seeds 0..n) of each task with `envs` browsers into `out`.
pub fn bench_options(
    tasks: &[&str],
    n: u64,
    envs: usize,
    out: &std::path::Path,
    env: EnvConfig,
) -> guirl::bench::harness::BenchOptions {
    guirl::bench::harness::BenchOptions {
        tasks: tasks.iter().map(|t| guirl::tasks::load_task(t).unwrap()).collect(),
        skipped: vec![],
        policy_spec: "test".into(),
        checkpoint: None,
        episodes_per_task: n,
        seed: 0,
        envs,
        env,
        out: out.to_path_buf(),
        resume: false,
        progress: false,
        observation: "n/a".into(),
        keep_and_say: None,
    }
}

/// Run the built `guirl` binary with `args`.
pub fn guirl(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_guirl")).args(args).output().expect("running guirl")
}

/// Assert that `out` failed and its stderr names every one of `needles`.
pub fn fails_with(out: &std::process::Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

/// A small synthetic screen state (a 70×45 gradient, a fixed instruction) for the policy
/// tests that need no browser, with `history` as the earlier actions.
pub fn synthetic_state(step: u32, history: &[&str]) -> guirl::env::ScreenState {
    guirl::env::ScreenState {
        task_id: "t".into(),
        instruction: "Click the button.".into(),
        url: String::new(),
        step,
        frame: Default::default(),
        elements: vec![],
        screenshot: image::RgbImage::from_fn(70, 45, |x, y| image::Rgb([(x * 3) as u8, (y * 5) as u8, 40]))
            .into(),
        history: history.iter().map(|s| s.to_string()).collect(),
        previous_screenshot: None,
    }
}

/// Threads spinning until dropped: the CPU the browsers and the policy compete for.
pub struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Start `n` spinning threads.
    pub fn spin(n: usize) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The name libtest gives test `name` of the module at `module_path` (pass
/// `module_path!()`), for `--exact` when a test runs itself in a child process: the path
/// without the crate's segment (`integration::checkpoints` → `checkpoints::name`).
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}

/// A website task in `dir` that opens the viewer page `html` (for reading it in the
/// browser; it never succeeds by itself).
pub fn view_task(dir: &std::path::Path, html: &std::path::Path) -> PathBuf {
    let p = dir.join("view.toml");
    std::fs::write(
        &p,
        format!(
            "start_url = \"file://{}\"\ninstruction = \"Look\"\n[viewport]\nwidth = 900\nheight = 600\n\
             [success]\njs = \"false\"\n",
            html.display()
        ),
    )
    .unwrap();
    p
}
