//! The `guirl` command: parses arguments, then calls the library.

mod bench;
mod bench_learn;
mod browser;
mod doctor;
mod export;
mod judge;
mod launch;
mod play;
mod policy;
mod record;
mod replay;
mod run;
mod serve;
mod serve_policy;
mod signals;
mod stats;
mod train;
mod train_reward;

pub use browser::BrowserArgs;
use clap::{Parser, Subcommand};
use signals::watch_signals;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// Train and evaluate GUI agents with reinforcement learning in a real headless Chromium.
#[derive(Debug, Parser)]
#[command(
    name = "guirl",
    version,
    about,
    after_help = "Logging: guirl's progress lines and every warning by default \
                  (warn,guirl=info); GUIRL_LOG, else RUST_LOG, sets the filter, e.g. \
                  GUIRL_LOG=debug or GUIRL_LOG=warn."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List task ids, one a line.
    Tasks {
        /// Only this suite.
        #[arg(long, value_parser = ["miniwob", "builtin"])]
        suite: Option<String>,
        /// Only the tasks a scripted oracle solves (`--policy oracle`, `[sft] oracle_episodes`).
        #[arg(long)]
        oracle: bool,
    },
    /// Run episodes of a task with a policy and report success.
    Run(run::RunArgs),
    /// Step one task by hand, a line at a time (actions in the text form, `:elements`,
    /// `:reset [SEED]`, `:quit`), from a terminal or a piped actions file; `--record`
    /// keeps the finished episodes as demonstrations.
    Play(play::PlayArgs),
    /// Train a policy from a TOML config: reinforcement learning (GRPO family, PPO, GiGPO)
    /// and/or behaviour cloning.
    Train(train::TrainArgs),
    /// Train a reward model (P(success) from the final screenshot and the instruction)
    /// on recorded trajectory folders; a website spec uses it with `reward = "model:PATH"`.
    TrainReward(train_reward::TrainRewardArgs),
    /// Re-execute recorded trajectories and check they reproduce.
    Replay(replay::ReplayArgs),
    /// Re-score recorded episodes with a judge model behind an OpenAI-compatible API and
    /// report its agreement with the tasks' own checks (precision, recall, Cohen's κ);
    /// verdicts are cached, so a second pass costs nothing.
    Judge(judge::JudgeArgs),
    /// Run a policy over a suite of tasks and report success with 95 % intervals
    /// (`guirl bench compare A B` compares two such reports).
    Bench(bench::BenchArgs),
    /// The learning benchmark: every algorithm of a plan from a behaviour-cloned policy,
    /// on the same env-step budget over several training seeds (table and plots).
    BenchLearn(bench_learn::BenchLearnArgs),
    /// Serve environments over REST (/v1/sessions) and OpenEnv's WebSocket protocol (/ws).
    Serve(serve::ServeArgs),
    /// Write a trajectory set as parquet or JSON lines for Python trainers (veRL, TRL,
    /// datasets): `--layout rl|sft|steps`, see docs/export.md.
    Export(export::ExportArgs),
    /// Serve a checkpoint behind an OpenAI-compatible API (/v1/models, /v1/chat/completions).
    ServePolicy(serve_policy::ServePolicyArgs),
    /// Measure environment speed (reset/step latency, steps/s with 1, 2, 4 envs).
    BenchEnv(run::BenchEnvArgs),
    /// Check the set-up (Chromium, chromedriver, MiniWoB++ pages, a browser launch, the
    /// Python client, disk, CUDA): one line each, with the fix for every problem; exits
    /// non-zero when no browser can run.
    Doctor(doctor::DoctorArgs),
    /// Summarise trajectory sets offline: per task (or policy) the episodes, their final
    /// statuses, the success rate with a 95 % interval, mean reward and steps.
    Stats(stats::StatsArgs),
    /// Write a self-contained HTML page showing a trajectory set, step by step.
    View {
        /// The trajectory set folder (written by `guirl run --record`).
        dir: PathBuf,
        /// Where to write the page (default: DIR/view.html).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// The log filter: `GUIRL_LOG`, else `RUST_LOG` (what users of other Rust tools try
/// first), else guirl's own progress lines and every warning: without a terminal (a log
/// file, CI) `train` says each epoch and iteration there instead of drawing bars. A
/// filter that does not parse is said, not silently dropped. A data-parallel rank other
/// than 0 logs warnings only ([`rank_label`]).
fn log_filter() -> tracing_subscriber::EnvFilter {
    for var in ["GUIRL_LOG", "RUST_LOG"] {
        let Ok(text) = std::env::var(var) else { continue };
        match tracing_subscriber::EnvFilter::try_new(&text) {
            Ok(filter) => return filter,
            Err(e) => errln!(
                "guirl: {var}={text:?} is not a log filter ({e}); using the default, {DEFAULT_LOG}. \
                 Write e.g. {var}=debug or {var}=guirl::env=debug,warn"
            ),
        }
    }
    match rank_label() {
        Some(_) => "warn".into(),
        None => DEFAULT_LOG.into(),
    }
}

/// The log filter without `GUIRL_LOG` or `RUST_LOG`.
const DEFAULT_LOG: &str = "warn,guirl=info";

/// `[rank N] ` in a data-parallel run's process of rank N > 0: rank 0 speaks for the run
/// (its progress lines), the others say their warnings only, marked.
fn rank_label() -> Option<String> {
    std::env::var("RANK").ok().filter(|r| r != "0" && !r.is_empty()).map(|r| format!("[rank {r}] "))
}

/// Standard error, each log line led by the rank's label (the formatter writes a line at once).
struct RankedStderr {
    label: Option<&'static str>,
}

impl std::io::Write for RankedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut err = std::io::stderr().lock();
        if let Some(l) = self.label {
            err.write_all(l.as_bytes())?;
        }
        err.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    // read once: the writer is made per log line
    let label: Option<&'static str> = rank_label().map(|l| &*Box::leak(l.into_boxed_str()));
    tracing_subscriber::fmt()
        // Colour codes only on a terminal: piped or logged warnings stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(log_filter())
        // A closed stderr (a `| tee` the same Ctrl-C stopped) loses log lines, not the run:
        // the subscriber's own report of a failed write would panic on the same stream.
        .log_internal_errors(false)
        // Silent while an interrupted command kills its browsers (see `signals::QUIET`).
        .with_writer(
            (move || RankedStderr { label })
                .with_filter(|_| !signals::QUIET.load(std::sync::atomic::Ordering::SeqCst)),
        )
        .init();
    let result = match cli.command {
        Command::Tasks { suite, oracle } => list_tasks(suite.as_deref(), oracle),
        Command::Run(args) => interruptible(run::run(args)),
        Command::Play(args) => interruptible(play::play(args)),
        Command::Bench(args) => interruptible(bench::bench(args)),
        Command::BenchLearn(args) => runtime().block_on(bench_learn::bench_learn(args)),
        Command::Serve(args) => runtime().block_on(serve::run(args)),
        Command::ServePolicy(args) => runtime().block_on(serve_policy::serve_policy(args)),
        Command::BenchEnv(args) => interruptible(run::bench_env(args)),
        Command::Train(args) => match runtime().block_on(train::train(args)) {
            Ok(Some(signal)) => return ExitCode::from(signal),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        },
        Command::TrainReward(args) => train_reward::train_reward(args),
        Command::Judge(args) => judge::judge(args),
        Command::Replay(args) => match interruptible(replay::replay(args)) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Command::Doctor(args) => match interruptible(doctor::doctor(args)) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Command::View { dir, out } => view(&dir, out),
        Command::Export(args) => export::export(args),
        Command::Stats(args) => stats::stats(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // marked like the rank's log lines: whose error it is, among the ranks' output
            errln!("{}error: {e:#}", label.unwrap_or(""));
            ExitCode::from(2)
        }
    }
}

/// Run `job` to completion; a signal kills its browsers and exits (see [`watch_signals`]).
fn interruptible<F: std::future::Future>(job: F) -> F::Output {
    runtime().block_on(async {
        watch_signals(None);
        job.await
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime")
}

fn list_tasks(suite: Option<&str>, oracle_only: bool) -> anyhow::Result<()> {
    let ids = crate::tasks::all_task_ids(suite);
    if ids.is_empty() {
        anyhow::bail!(
            "no tasks found: MiniWoB++ pages are not installed in {} (run scripts/setup.sh; \
             `guirl doctor` checks the whole set-up)",
            crate::tasks::server::miniwob_dir().display()
        );
    }
    for id in ids.iter().filter(|id| !oracle_only || crate::policy::oracle::has_oracle(id)) {
        outln!("{id}");
    }
    Ok(())
}

fn view(dir: &std::path::Path, out: Option<PathBuf>) -> anyhow::Result<()> {
    let set = crate::rollout::TrajectorySet::read(dir)?;
    let out = out.unwrap_or_else(|| dir.join("view.html"));
    crate::rollout::viewer::write_html(&set, &out)?;
    outln!("{}", out.display());
    Ok(())
}

/// Raises glibc's mmap and trim thresholds, unless the user set them
/// (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`). The CLI calls it first thing; a
/// program that embeds guirl (the benches do) calls it before starting any thread.
///
/// By default glibc serves every allocation above 128 KiB-32 MiB (a sliding threshold)
/// with a fresh `mmap` and returns it on free, so each large temporary tensor of a CPU
/// training step is faulted in page by page: 40 % system time, and a small policy's
/// training step 1.8× slower (docs/contributing/candle.md).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MAX_MMAP_THRESHOLD: libc::c_int = 32 << 20; // glibc's largest allowed value
        const TRIM_THRESHOLD: libc::c_int = 1 << 30;
        // SAFETY: mallopt only sets allocator parameters; called before any thread starts.
        unsafe {
            if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD);
            }
            if std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none() {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            }
        }
    }
}
