//! `guirl judge RUN_OR_SET --judge MODEL@BASE_URL`: re-score recorded episodes offline.

use crate::policy::judge::Judge;
use crate::rollout::rescore::rescore;
use crate::tasks::JudgeSpec;
use anyhow::{bail, Context};
use std::path::PathBuf;

/// Arguments of `guirl judge`.
#[derive(Debug, clap::Args)]
pub struct JudgeArgs {
    /// A trajectory set (from `guirl run --record`, `guirl play --record`) or a folder
    /// holding sets (a bench's, a training run's).
    #[arg(value_name = "RUN_OR_SET")]
    path: PathBuf,
    /// The judge: MODEL@BASE_URL (`judge:` in front is accepted), a model behind an
    /// OpenAI-compatible API (vLLM, SGLang, a hosted API).
    #[arg(long, value_name = "MODEL@BASE_URL")]
    judge: String,
    /// Samples per episode.
    #[arg(long, default_value_t = 1, value_name = "K")]
    votes: u32,
    /// The fraction of SUCCESS votes at which an episode counts as a success.
    #[arg(long, default_value_t = 0.5)]
    threshold: f64,
    /// Screenshots shown, the final one included.
    #[arg(long, default_value_t = 1, value_name = "K")]
    frames: usize,
    /// Show the episode's actions as text too.
    #[arg(long)]
    actions: bool,
    /// A rubric file replacing the built-in one.
    #[arg(long, value_name = "FILE")]
    rubric: Option<PathBuf>,
    /// The verdict cache folder (default: RUN_OR_SET/judge-cache).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Ask the judge every time (no cache read or written).
    #[arg(long, conflicts_with = "cache")]
    no_cache: bool,
    /// Sampling temperature (default: 0 for one vote, 1 for several).
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Answer length limit.
    #[arg(long, default_value_t = 512)]
    max_tokens: u32,
    /// The environment variable holding the API key (sent as a Bearer token if set).
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR")]
    api_key_env: String,
    /// Limit on one request, in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    api_timeout: f64,
    /// Retries of a request after 429, 5xx, a timeout or a refused connection (with
    /// backoff), and re-asks of an answer with no verdict line.
    #[arg(long, default_value_t = 3)]
    api_retries: u32,
    /// Print the report (with every episode's verdict) as JSON.
    #[arg(long)]
    json: bool,
}

/// Run `guirl judge`.
pub fn judge(args: JudgeArgs) -> anyhow::Result<()> {
    let mut spec = JudgeSpec::parse(&args.judge).context("--judge")?;
    if !(1..=64).contains(&args.votes) {
        bail!("--votes {} is out of range: use 1 to 64", args.votes);
    }
    if !(args.threshold > 0.0 && args.threshold <= 1.0) {
        bail!("--threshold {} is out of range: use a fraction in (0, 1]", args.threshold);
    }
    if !(1..=16).contains(&args.frames) {
        bail!("--frames {} is out of range: use 1 to 16", args.frames);
    }
    if !(args.api_timeout > 0.0 && args.api_timeout.is_finite()) {
        bail!("--api-timeout must be a positive number of seconds");
    }
    spec.votes = args.votes;
    spec.frames = args.frames;
    spec.actions = args.actions;
    spec.rubric = args.rubric;
    spec.api_key_env = args.api_key_env;
    spec.timeout_s = args.api_timeout;
    spec.retries = args.api_retries;
    spec.temperature = args.temperature.unwrap_or(if args.votes > 1 { 1.0 } else { 0.0 });
    spec.max_tokens = args.max_tokens;
    spec.cache = match (args.no_cache, args.cache) {
        (true, _) => None,
        (false, Some(c)) => Some(c),
        (false, None) => Some(args.path.join("judge-cache")),
    };
    // (Checked before the cache folder is made inside it.)
    crate::rollout::rescore::find_sets(&args.path)?;
    let judge = Judge::new(&spec)?;
    // Every episode would fail, slowly (retries with backoff), against a judge nobody runs.
    judge.check_reachable().map_err(anyhow::Error::msg)?;
    let report = rescore(&args.path, &judge, args.threshold)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.text());
        for r in report.rows.iter().filter(|r| r.error.is_some()) {
            errln!("{}:{}: {}", r.set.display(), r.line, r.error.as_deref().unwrap_or_default());
        }
    }
    if report.judged == 0 && report.judge_failures > 0 {
        // The report is printed, but no figure in it measures the judge.
        bail!(
            "nothing was judged: the judge gave no verdict on any of the {} episode(s) it was asked about (see \
             the errors above); check its answers end with a `VERDICT:` line",
            report.judge_failures
        );
    }
    Ok(())
}
