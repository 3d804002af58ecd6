//! `guirl bench`: run a policy over a suite of tasks and report; `guirl bench compare`.

use super::browser::BrowserArgs;
use super::policy::make_policy;
use crate::bench::harness::{self, BenchOptions};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `guirl bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: Option<BenchCmd>,
    #[command(flatten)]
    run: BenchRunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCmd {
    /// Per-task success deltas between two bench folders (B − A); tasks whose 95 %
    /// intervals do not overlap are flagged.
    Compare {
        /// The baseline bench folder (or its report.json).
        a: PathBuf,
        /// The bench folder to compare with it.
        b: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of a bench run.
#[derive(Debug, clap::Args)]
pub struct BenchRunArgs {
    /// Every task of a suite.
    #[arg(long, value_parser = ["miniwob", "builtin"], conflicts_with_all = ["tasks", "tasks_file"])]
    suite: Option<String>,
    /// Task ids (or website spec paths), comma-separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "tasks_file")]
    tasks: Vec<String>,
    /// A file with one task id a line (`#` starts a comment).
    #[arg(long, value_name = "FILE")]
    tasks_file: Option<PathBuf>,
    /// Policy: `random`, `oracle` (tasks without one are skipped and listed), a checkpoint
    /// (folder, run folder, RUN/checkpoints/latest or best; greedy unless --temperature),
    /// or `openai:MODEL@BASE_URL` (a model behind an OpenAI-compatible API, e.g. vLLM's
    /// `http://127.0.0.1:8000/v1`; see the API policy options).
    #[arg(long, default_value = "random")]
    policy: String,
    /// Episodes per task: seeds S..S+N−1.
    #[arg(long, default_value_t = 10, value_name = "N")]
    episodes_per_task: u64,
    /// First seed S. The default is the test split's first seed, which no training config
    /// may name; seeds below it are for training and validation.
    #[arg(long, default_value_t = crate::train::seeds::TEST_SEEDS)]
    seed: u64,
    /// Browsers running at once.
    #[arg(long, default_value_t = 1, value_name = "K")]
    envs: usize,
    /// The bench folder (results.jsonl, report.{json,md,html}, errors.md, trajectories/).
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,
    /// Continue the bench in --out: finished episodes are kept, the rest run.
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    episode: super::policy::EpisodeArgs,
    #[command(flatten)]
    api: super::policy::ApiArgs,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl bench`.
pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    match args.cmd {
        Some(BenchCmd::Compare { a, b, json }) => compare(&a, &b, json),
        None => run(args.run).await,
    }
}

fn compare(a: &std::path::Path, b: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let (ra, rb) = (harness::compare::read_report(a)?, harness::compare::read_report(b)?);
    let deltas = harness::compare::compare(&ra, &rb);
    let mut notes = harness::compare::notes(&ra, &rb);
    let same = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    if same(a) == same(b) {
        notes.insert(0, "A and B are the same bench: every delta is 0 by construction".into());
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&serde_json::json!({"notes": notes, "tasks": deltas}))?);
    } else {
        outln!("A = {}\nB = {}\n", a.display(), b.display());
        for n in &notes {
            outln!("note: {n}");
        }
        if !notes.is_empty() {
            outln!();
        }
        out!("{}", harness::compare::table(&deltas));
    }
    Ok(())
}

/// The task ids asked for, in order, without repeats.
fn task_ids(args: &BenchRunArgs) -> anyhow::Result<Vec<String>> {
    let mut ids: Vec<String> = if let Some(suite) = &args.suite {
        let ids = crate::tasks::all_task_ids(Some(suite));
        if ids.is_empty() {
            bail!(
                "the {suite} suite has no tasks here: MiniWoB++ pages are not installed in {} (run scripts/setup.sh; \
                 `guirl doctor` checks the whole set-up)",
                crate::tasks::server::miniwob_dir().display()
            );
        }
        ids
    } else if let Some(f) = &args.tasks_file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading --tasks-file {}", f.display()))?;
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    } else {
        if args.tasks.iter().any(|t| t.trim().is_empty()) {
            bail!(
                "--tasks {:?} has an empty entry: separate task ids with single commas",
                args.tasks.join(",")
            );
        }
        args.tasks.iter().map(|t| t.trim().to_string()).collect()
    };
    let mut seen = std::collections::HashSet::new();
    let given = ids.len();
    ids.retain(|t| seen.insert(t.clone()));
    if ids.len() < given {
        errln!("{} task id(s) were given more than once; each task runs once", given - ids.len());
    }
    if ids.is_empty() {
        bail!("no tasks: give --suite miniwob|builtin, --tasks a,b,c or --tasks-file FILE");
    }
    Ok(ids)
}

/// The checkpoint folder `policy` means, when it is a path: what it resolves to now, or,
/// when `--resume` continues a bench of the same path, the folder that bench ran (a run
/// folder's best checkpoint moves on as it trains, and one bench must not mix two).
fn checkpoint_of(policy: &str, out: &std::path::Path, resume: bool) -> anyhow::Result<Option<PathBuf>> {
    if !super::policy::names_a_checkpoint(policy) {
        return Ok(None);
    }
    let recorded = match resume {
        true => harness::read_manifest(out)?.filter(|m| m.policy == policy).and_then(|m| m.checkpoint),
        false => None,
    };
    let found = crate::train::checkpoint::resolve_policy_dir(std::path::Path::new(policy))?;
    let now = std::fs::canonicalize(&found.dir).unwrap_or(found.dir.clone());
    match recorded {
        Some(ran) if ran != now => {
            if !ran.is_dir() {
                bail!(
                    "--resume: this bench ran {policy} as the checkpoint {}, which no longer exists (it now \
                     means {}); bench that one in a new --out",
                    ran.display(),
                    now.display()
                );
            }
            errln!(
                "{policy} now means {}; the bench goes on with the checkpoint it ran, {}",
                now.display(),
                ran.display()
            );
            Ok(Some(ran))
        }
        _ => {
            if let Some(note) = &found.note {
                errln!("{note}");
            }
            Ok(Some(now))
        }
    }
}

async fn run(args: BenchRunArgs) -> anyhow::Result<()> {
    if args.envs == 0 {
        bail!("--envs must be at least 1");
    }
    if args.episodes_per_task == 0 {
        bail!("--episodes-per-task must be at least 1");
    }
    if args.episodes_per_task > super::policy::MAX_EPISODES {
        bail!(
            "--episodes-per-task {}: at most {} a task",
            args.episodes_per_task,
            super::policy::MAX_EPISODES
        );
    }
    if args.seed.checked_add(args.episodes_per_task - 1).is_none() {
        bail!(
            "--seed {} with --episodes-per-task {} runs seeds past the largest ({}): use a smaller --seed",
            args.seed,
            args.episodes_per_task,
            u64::MAX
        );
    }
    let env = args.episode.env_config(&args.browser)?;
    let out = args.out.clone().context("--out DIR is required")?;
    let mut tasks = Vec::new();
    let mut skipped = Vec::new();
    for id in task_ids(&args)? {
        let task = crate::tasks::load_task(&id)?;
        if args.policy == "oracle" && !crate::policy::oracle::has_oracle(task.id()) {
            skipped.push((task.id().to_string(), "no oracle for this task".to_string()));
            continue;
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        bail!("none of the tasks has an oracle; use --policy random or a checkpoint");
    }
    if !skipped.is_empty() {
        errln!(
            "skipping {} task(s) without an oracle: {}",
            skipped.len(),
            skipped.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    // A judge nobody runs would end every episode of its tasks in `judge_error`: said first.
    crate::policy::judge::Judge::check_tasks(&tasks)?;
    let ids: Vec<&str> = tasks.iter().map(|t: &Arc<dyn crate::tasks::Task>| t.id()).collect();
    let checkpoint = checkpoint_of(&args.policy, &out, args.resume)?;
    // A checkpoint policy is loaded from the folder it resolved to, which the bench records.
    let load = checkpoint.as_ref().map_or(args.policy.clone(), |d| d.display().to_string());
    let mut policy = make_policy(&load, &ids, args.seed, &args.episode, &args.api)?;
    let observation = super::policy::observation(&load, &args.api, &policy.info())?;
    let opts = BenchOptions {
        tasks,
        skipped,
        policy_spec: args.policy.clone(),
        checkpoint,
        episodes_per_task: args.episodes_per_task,
        seed: args.seed,
        envs: args.envs,
        env,
        out: out.clone(),
        resume: args.resume,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        observation,
        keep_and_say: Some(keep_and_say),
    };
    let report = harness::run(&opts, policy.as_mut()).await?;
    out!("{}", report.markdown());
    outln!("\nwritten: {}/report.{{json,md,html}}, errors.md, results.jsonl", out.display());
    // A score that leaves tasks out is no score of the bench: said, and not a success.
    if let Some(why) = report.incomplete() {
        bail!("{why}");
    }
    Ok(())
}

/// Journal an episode and set what a Ctrl-C's exit says, under the signal's lock.
fn keep_and_say(
    keep: &mut dyn FnMut() -> anyhow::Result<()>,
    line: &dyn Fn() -> String,
) -> anyhow::Result<()> {
    super::signals::done_so_far(keep, line)
}
