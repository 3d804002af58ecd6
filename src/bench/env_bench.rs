//! `guirl bench-env`: reset and step latency (median, p90; screenshot included) and
//! aggregate steps/s with K concurrent envs, with random clicks; optionally side by side
//! with MiniWoB++'s own Python environment run in the same process tree.

use super::Latency;
use crate::env::{BrowserConfig, EnvConfig, GuiEnv};
use crate::policy::random::RandomPolicy;
use crate::rollout::{Collector, Job};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone)]
pub struct EnvBenchOptions {
    /// Task ids.
    pub tasks: Vec<String>,
    /// Concurrent env counts for throughput.
    pub envs: Vec<usize>,
    /// Timed steps per measurement (per env for throughput).
    pub steps: usize,
    /// Timed resets per task.
    pub resets: usize,
    /// Browser settings.
    pub browser: BrowserConfig,
    /// Python with `miniwob` installed, to run the baseline.
    pub baseline_python: Option<PathBuf>,
    /// Measure every task a second time with Chromium's sandbox off, right after the
    /// sandboxed run (see [`crate::env::sandbox`]).
    pub compare_sandbox: bool,
}

/// Figures for one task.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskFigures {
    /// Reset latency, ms.
    pub reset_ms: Latency,
    /// Step latency, ms.
    pub step_ms: Latency,
    /// Aggregate steps/s by env count.
    pub steps_per_s: BTreeMap<String, f64>,
    /// Aggregate episodes/s of guirl's collector by env count.
    #[serde(default)]
    pub episodes_per_s: BTreeMap<String, f64>,
    /// Per-phase step medians (action, settle, screenshot), ms.
    #[serde(default)]
    pub phases_ms: BTreeMap<String, f64>,
    /// The first reset, browser start included, ms (one sample).
    #[serde(default)]
    pub first_reset_ms: f64,
}

/// The whole report: guirl's figures and, if run, the baseline's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EnvBenchReport {
    /// guirl, by task id.
    pub guirl: BTreeMap<String, TaskFigures>,
    /// MiniWoB++'s Python env, by task id.
    pub baseline: Option<BTreeMap<String, TaskFigures>>,
    /// Whether guirl's browsers ran sandboxed (`on (as user ...)`, or `off: <why>`).
    #[serde(default)]
    pub sandbox: String,
    /// guirl with the sandbox off (`--compare-sandbox`), by task id.
    #[serde(default)]
    pub unsandboxed: Option<BTreeMap<String, TaskFigures>>,
}

async fn measure_latency(task: &str, cfg: &EnvConfig, opts: &EnvBenchOptions) -> anyhow::Result<TaskFigures> {
    let t = crate::tasks::load_task(task)?;
    let mut env = GuiEnv::new(t, cfg.clone());
    let mut policy = RandomPolicy::new(7);
    policy.clicks_only = true;
    // Warm up: browser start, page load, caches.
    let t0 = Instant::now();
    env.reset(0).await?;
    let first_reset_ms = t0.elapsed().as_secs_f64() * 1000.0;
    for _ in 0..5 {
        let out = env.step(&policy.sample(160, 210)).await?;
        if out.terminated || out.truncated {
            env.reset(1).await?;
        }
    }
    let mut resets = Vec::new();
    for i in 0..opts.resets {
        let t0 = Instant::now();
        env.reset(1000 + i as u64).await?;
        resets.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let (mut steps, mut phases): (Vec<f64>, [Vec<f64>; 3]) = (Vec::new(), Default::default());
    let mut seed = 5000;
    while steps.len() < opts.steps {
        let obs = env.last_observation().expect("reset done").clone();
        let a = policy.sample(obs.frame.width, obs.frame.height);
        let t0 = Instant::now();
        let out = env.step(&a).await?;
        steps.push(t0.elapsed().as_secs_f64() * 1000.0);
        phases[0].push(out.info.timings.action_ms);
        phases[1].push(out.info.timings.settle_ms);
        phases[2].push(out.info.timings.screenshot_ms);
        if out.terminated || out.truncated {
            seed += 1;
            env.reset(seed).await?;
        }
    }
    env.close().await;
    let mut f = TaskFigures {
        reset_ms: Latency::of(&resets),
        step_ms: Latency::of(&steps),
        first_reset_ms,
        ..Default::default()
    };
    for (name, xs) in ["action", "settle", "screenshot"].iter().zip(phases.iter()) {
        f.phases_ms.insert(name.to_string(), Latency::of(xs).median);
    }
    Ok(f)
}

/// Aggregate throughput of the collector with `k` envs running random-click episodes
/// (resets inside the window, as in MiniWoB++'s own measurement): (steps/s, episodes/s).
async fn measure_throughput(
    task: &str,
    cfg: &EnvConfig,
    k: usize,
    steps_per_env: usize,
) -> anyhow::Result<(f64, f64)> {
    let t = crate::tasks::load_task(task)?;
    let mut collector = Collector::new(k, cfg.clone());
    let mut policy = RandomPolicy::new(100 + k as u64);
    policy.clicks_only = true;
    // Warm-up round: starts the browsers and loads the page in each.
    let warm: Vec<Job> = (0..k as u64)
        .map(|s| Job { task: t.clone(), seed: s, group: None, prefix: None, stream: None })
        .collect();
    collector.collect(&mut policy, warm, |_, _| {}).await?;
    let episodes = (k * steps_per_env).div_ceil(t.max_steps().max(1) as usize / 2 + 1).max(2 * k);
    let jobs: Vec<Job> = (0..episodes as u64)
        .map(|s| Job { task: t.clone(), seed: 10_000 + s, group: None, prefix: None, stream: None })
        .collect();
    let (_, stats) = collector.collect(&mut policy, jobs, |_, _| {}).await?;
    collector.close().await;
    Ok((stats.steps_per_s(), stats.episodes_per_s()))
}

/// Every figure for `task` under `cfg`.
async fn measure_task(task: &str, cfg: &EnvConfig, opts: &EnvBenchOptions) -> anyhow::Result<TaskFigures> {
    let mut f = measure_latency(task, cfg, opts).await.with_context(|| format!("measuring {task}"))?;
    for &k in &opts.envs {
        let (sps, eps) = measure_throughput(task, cfg, k, opts.steps.div_ceil(2).max(20)).await?;
        f.steps_per_s.insert(k.to_string(), sps);
        f.episodes_per_s.insert(k.to_string(), eps);
    }
    Ok(f)
}

/// Run the benchmark.
pub async fn run(opts: &EnvBenchOptions) -> anyhow::Result<EnvBenchReport> {
    // Said before minutes of measuring guirl, not after.
    if let Some(py) = opts.baseline_python.as_ref().filter(|p| !p.exists()) {
        anyhow::bail!(
            "--baseline runs MiniWoB++'s Python environment with {}, which is not there: run \
             benches/setup_baseline.sh first (or pass --baseline-python)",
            py.display()
        );
    }
    let cfg = EnvConfig { browser: opts.browser.clone(), ..Default::default() };
    let off = EnvConfig { browser: opts.browser.clone().with_sandbox(false), ..Default::default() };
    let mut report = EnvBenchReport {
        sandbox: crate::env::sandbox::plan(&cfg.browser).note,
        unsandboxed: opts.compare_sandbox.then(BTreeMap::new),
        ..Default::default()
    };
    for task in &opts.tasks {
        errln!("guirl: measuring {task} (sandbox {}) ...", report.sandbox);
        report.guirl.insert(task.clone(), measure_task(task, &cfg, opts).await?);
        if let Some(u) = report.unsandboxed.as_mut() {
            errln!("guirl: measuring {task} (sandbox off) ...");
            u.insert(task.clone(), measure_task(task, &off, opts).await?);
        }
        // Each task's baseline right after guirl's, so a shared machine's drift over the
        // run falls on both sides of a ratio alike (run after all of guirl's tasks, the
        // first task measured was often a run's slowest).
        if let Some(py) = &opts.baseline_python {
            let figures = run_baseline(py, opts, task)?;
            report.baseline.get_or_insert_with(BTreeMap::new).extend(figures);
        }
    }
    Ok(report)
}

/// MiniWoB++'s own env on `task`.
fn run_baseline(
    py: &PathBuf,
    opts: &EnvBenchOptions,
    task: &str,
) -> anyhow::Result<BTreeMap<String, TaskFigures>> {
    let script = crate::tasks::server::project_root().join("benches").join("miniwob_baseline.py");
    let out_json = tempfile::NamedTempFile::new()?;
    let name = task.strip_prefix("miniwob/").unwrap_or(task);
    let envs: Vec<String> = opts.envs.iter().map(|k| k.to_string()).collect();
    // The same browser binary on both sides.
    let chrome = opts.browser.chromium_path()?;
    errln!("guirl: measuring MiniWoB++'s Python environment on {task} ({}) ...", chrome.display());
    let status = std::process::Command::new(py)
        .arg(&script)
        .arg("--chrome")
        .arg(&chrome)
        .args(["--tasks", name, "--envs", &envs.join(",")])
        .args(["--steps", &opts.steps.to_string(), "--resets", &opts.resets.to_string()])
        .arg("--json")
        .arg(out_json.path())
        .status()
        .with_context(|| format!("cannot run {} (run benches/setup_baseline.sh first)", py.display()))?;
    anyhow::ensure!(status.success(), "the MiniWoB++ baseline failed ({status})");
    #[derive(Deserialize)]
    struct Baseline {
        tasks: BTreeMap<String, TaskFigures>,
    }
    let b: Baseline = serde_json::from_str(&std::fs::read_to_string(out_json.path())?)?;
    Ok(b.tasks.into_iter().map(|(k, v)| (format!("miniwob/{k}"), v)).collect())
}

impl EnvBenchReport {
    /// A markdown table of the figures (and ratios to the baseline when present).
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let ks: Vec<String> =
            self.guirl.values().next().map(|f| f.steps_per_s.keys().cloned().collect()).unwrap_or_default();
        s.push_str("| task | env | reset median / p90 (ms) | step median / p90 (ms) |");
        for k in &ks {
            s.push_str(&format!(" steps/s K={k} |"));
        }
        s.push_str("\n|---|---|---|---|");
        s.push_str(&"---|".repeat(ks.len()));
        s.push('\n');
        let row = |s: &mut String, task: &str, who: &str, f: &TaskFigures| {
            s.push_str(&format!(
                "| {task} | {who} | {:.1} / {:.1} | {:.1} / {:.1} |",
                f.reset_ms.median, f.reset_ms.p90, f.step_ms.median, f.step_ms.p90
            ));
            for k in &ks {
                s.push_str(&format!(" {:.1} |", f.steps_per_s.get(k).copied().unwrap_or(f64::NAN)));
            }
            s.push('\n');
        };
        // A ratio row: latencies `lat.0 / lat.1`, throughputs `thr.0 / thr.1`.
        let ratios = |s: &mut String,
                      task: &str,
                      label: &str,
                      lat: (&TaskFigures, &TaskFigures),
                      thr: (&TaskFigures, &TaskFigures)| {
            s.push_str(&format!(
                "| {task} | {label} | {:.2}x | {:.2}x |",
                lat.0.reset_ms.median / lat.1.reset_ms.median,
                lat.0.step_ms.median / lat.1.step_ms.median
            ));
            for k in &ks {
                let per_s = |t: &TaskFigures| t.steps_per_s.get(k).copied().unwrap_or(f64::NAN);
                s.push_str(&format!(" {:.2}x |", per_s(thr.0) / per_s(thr.1)));
            }
            s.push('\n');
        };
        for (task, f) in &self.guirl {
            row(&mut s, task, "guirl", f);
            if let Some(u) = self.unsandboxed.as_ref().and_then(|u| u.get(task)) {
                row(&mut s, task, "guirl, sandbox off", u);
                ratios(
                    &mut s,
                    task,
                    "cost of the sandbox (on / off latency, on / off steps/s)",
                    (f, u),
                    (f, u),
                );
            }
            if let Some(b) = self.baseline.as_ref().and_then(|b| b.get(task)) {
                row(&mut s, task, "MiniWoB++ (Python)", b);
                ratios(
                    &mut s,
                    task,
                    "ratio (MiniWoB++ / guirl latency, guirl / MiniWoB++ steps/s)",
                    (b, f),
                    (f, b),
                );
            }
        }
        if !self.sandbox.is_empty() {
            s.push_str(&format!("\nChromium's sandbox (guirl rows): {}\n", self.sandbox));
        }
        s.push_str("\nFirst reset, browser start included (ms, one sample):\n");
        for (t, f) in &self.guirl {
            let off = self.unsandboxed.as_ref().and_then(|u| u.get(t)).map(|u| u.first_reset_ms);
            let off = off.map(|ms| format!(", sandbox off {ms:.0}")).unwrap_or_default();
            s.push_str(&format!("- {t}: {:.0}{off}\n", f.first_reset_ms));
        }
        s.push_str("\nguirl collector episodes/s (random clicks, resets included):\n");
        for (t, f) in &self.guirl {
            let e: Vec<String> = f.episodes_per_s.iter().map(|(k, v)| format!("K={k}: {v:.1}")).collect();
            s.push_str(&format!("- {t}: {}\n", e.join(", ")));
        }
        let phases: Vec<String> = self
            .guirl
            .iter()
            .map(|(t, f)| {
                format!(
                    "{t}: action {:.1} ms, settle+state {:.1} ms, screenshot {:.1} ms",
                    f.phases_ms.get("action").unwrap_or(&0.0),
                    f.phases_ms.get("settle").unwrap_or(&0.0),
                    f.phases_ms.get("screenshot").unwrap_or(&0.0)
                )
            })
            .collect();
        s.push_str("\nguirl step phases (medians):\n");
        for p in phases {
            s.push_str(&format!("- {p}\n"));
        }
        s
    }
}
