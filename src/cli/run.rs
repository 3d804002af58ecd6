//! `guirl run` and `guirl bench-env`.

use super::browser::BrowserArgs;
use super::policy::make_policy;
use crate::rollout::{Collector, Job};
use anyhow::{bail, Context};
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `guirl run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Task id (`miniwob/click-test`, `builtin/NAME`) or path to a website spec (.toml).
    #[arg(long)]
    task: String,
    /// Policy: `random`, `oracle`, a checkpoint (greedy decoding): a checkpoint folder,
    /// a run folder (its best checkpoint, else its latest), RUN/checkpoints/latest or best;
    /// or `openai:MODEL@BASE_URL`, a model behind an OpenAI-compatible API.
    #[arg(long, default_value = "random")]
    policy: String,
    /// Number of episodes.
    #[arg(long, default_value_t = 10)]
    episodes: u64,
    /// Seed of the first episode; episode i uses seed + i.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Browsers running at once.
    #[arg(long, default_value_t = 1)]
    envs: usize,
    #[command(flatten)]
    episode: super::policy::EpisodeArgs,
    /// Print one JSON object instead of text lines.
    #[arg(long)]
    json: bool,
    /// Record the episodes as a trajectory set in this folder (appends if it exists).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    #[command(flatten)]
    api: super::policy::ApiArgs,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.envs == 0 {
        bail!("--envs must be at least 1");
    }
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    if args.episodes > super::policy::MAX_EPISODES {
        bail!("--episodes {}: at most {} in one command", args.episodes, super::policy::MAX_EPISODES);
    }
    if args.seed.checked_add(args.episodes - 1).is_none() {
        bail!(
            "--seed {} with --episodes {} runs seeds past the largest ({}): use a smaller --seed",
            args.seed,
            args.episodes,
            u64::MAX
        );
    }
    let cfg = args.episode.env_config(&args.browser)?;
    let task = crate::tasks::load_task(&args.task)?;
    // A judge nobody runs would end every episode in `judge_error`, slowly: said first.
    crate::policy::judge::Judge::check_tasks(std::slice::from_ref(&task))?;
    let mut policy = make_policy(&args.policy, &[task.id()], args.seed, &args.episode, &args.api)?;
    // What reached the policy, said with its score (as a bench's report says it).
    let observation = super::policy::observation(&args.policy, &args.api, &policy.info())?;
    let jobs: Vec<Job> = (0..args.episodes).map(|i| Job::episode(task.clone(), args.seed + i)).collect();
    let mut collector = Collector::new(args.envs, cfg);
    collector.keep_frames = args.record.is_some();
    collector.progress = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut writer = args.record.as_deref().map(super::record::open_set).transpose()?;
    let mut write_error = None;
    let quiet = args.json;
    let t0 = std::time::Instant::now();
    let (mut ended, mut succeeded, mut infra) = (0, 0, 0);
    let kept =
        args.record.as_ref().map(|d| format!("; they are recorded in {}", d.display())).unwrap_or_default();
    // The episodes' trajectories, without their screenshots (which went to disk, if
    // recorded): a long run's frames are not held in memory.
    let mut slots: Vec<Option<crate::rollout::Trajectory>> = vec![None; jobs.len()];
    let collected = collector
        .collect_each(policy.as_mut(), jobs, |i, rec| {
            // Each episode is on disk as soon as it ends: a killed run keeps what it finished,
            // and a Ctrl-C says how many that is.
            let status = rec.trajectory.outcome.status;
            ended += 1;
            succeeded += usize::from(status == crate::env::EpisodeStatus::Success);
            infra += usize::from(status.is_infrastructure_failure());
            let written = super::signals::done_so_far(
                || writer.as_mut().map(|w| w.append(&rec)),
                || {
                    format!(
                        "{ended} of {} episodes had ended: {succeeded} succeeded, {} did not (failed, ran \
                         out of steps or took an invalid action), {infra} infrastructure errors{kept}",
                        args.episodes,
                        ended - succeeded - infra
                    )
                },
            );
            if let Some(Err(e)) = written {
                write_error.get_or_insert(e);
            }
            if !quiet {
                let t = &rec.trajectory;
                let err = t.outcome.error.as_deref().map(|e| format!(" error={e:?}")).unwrap_or_default();
                outln!(
                    "episode={i} seed={} status={} reward={:.3} steps={}{err}",
                    t.seed,
                    t.outcome.status,
                    t.outcome.reward,
                    t.outcome.steps
                );
            }
            slots[i] = Some(rec.trajectory);
        })
        .await;
    collector.close().await;
    let stats = collected.with_context(|| format!("running {}", task.id()))?;
    let results: Vec<crate::rollout::Trajectory> = slots.into_iter().flatten().collect();
    if let Some(e) = write_error {
        return Err(e.context("recording trajectories"));
    }
    // Episodes the browser, the policy's endpoint or the judge failed are not the agent's:
    // the rates leave them out (as `guirl bench` does) and the summary counts them.
    let scored: Vec<_> = results.iter().filter(|r| !r.outcome.status.is_infrastructure_failure()).collect();
    let infra = results.len() - scored.len();
    let n = scored.len().max(1) as f64;
    // With no episode scored there is no rate: `null` in JSON, "none" in text, exit non-zero.
    let measured = !scored.is_empty();
    let success =
        scored.iter().filter(|r| r.outcome.status == crate::env::EpisodeStatus::Success).count() as f64 / n;
    let mean_reward = scored.iter().map(|r| r.outcome.reward).sum::<f64>() / n;
    let (success, mean_reward) = (measured.then_some(success), measured.then_some(mean_reward));
    let steps: u64 = results.iter().map(|r| r.outcome.steps as u64).sum();
    let secs = t0.elapsed().as_secs_f64();
    // Episodes of a task with both a success check and a reward model.
    let compared = stats.reward_model_agree + stats.reward_model_disagree;
    if args.json {
        let per: Vec<_> = results
            .iter()
            .map(|t| {
                json!({"seed": t.seed, "reward": t.outcome.reward, "status": t.outcome.status, "steps": t.outcome.steps,
                       "instruction": t.instruction, "error": t.outcome.error})
            })
            .collect();
        let mut out = json!({
            "task": task.id(), "policy": args.policy, "episodes": results.len(), "success_rate": success,
            "mean_reward": mean_reward, "observation": observation, "env_steps": steps, "seconds": secs,
            "per_episode": per,
        });
        if compared > 0 {
            out["reward_model_agreement"] = json!({"agree": stats.reward_model_agree, "episodes": compared});
        }
        if stats.judge_errors > 0 {
            out["judge_errors"] = json!(stats.judge_errors);
        }
        if infra > 0 {
            out["infrastructure_errors"] = json!(infra);
        }
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let agreement = if compared > 0 {
            format!(" reward_model_agreement={}/{compared}", stats.reward_model_agree)
        } else {
            String::new()
        };
        let judge_errors = match stats.judge_errors {
            0 => String::new(),
            n => format!(" judge_errors={n}"),
        };
        let infra = match infra {
            0 => String::new(),
            n => format!(" infrastructure_errors={n} (left out of the rates)"),
        };
        let rate = |v: Option<f64>| v.map_or("none".to_string(), |v| format!("{v:.3}"));
        match super::policy::why_no_observation(&args.policy) {
            Some(why) => outln!("observation: {observation} ({why})"),
            None => outln!("observation: {observation}"),
        }
        if let Some(dir) = &args.record {
            outln!("recorded in {} (guirl view / replay / export read it)", dir.display());
        }
        outln!(
            "episodes={} success_rate={} mean_reward={}{agreement}{judge_errors}{infra}",
            results.len(),
            rate(success),
            rate(mean_reward)
        );
    }
    if !measured {
        let first = results.iter().find_map(|r| r.outcome.error.clone()).unwrap_or_default();
        anyhow::bail!(
            "nothing was measured: all {} episodes ended in infrastructure errors (the browser, the \
             policy's endpoint or the judge failed, not the agent); the first: {first}. Fix that \
             (`guirl doctor` checks the set-up) and run again",
            results.len()
        );
    }
    Ok(())
}

/// Arguments of `guirl bench-env`.
#[derive(Debug, clap::Args)]
pub struct BenchEnvArgs {
    /// Tasks to measure (comma-separated ids).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "miniwob/click-test,miniwob/click-button,miniwob/enter-text"
    )]
    tasks: Vec<String>,
    /// Concurrent env counts for the throughput runs (1 to 64 each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4", value_parser = clap::value_parser!(u16).range(1..=64))]
    envs: Vec<u16>,
    /// Timed steps per measurement (at least 1).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Timed resets per task (at least 1).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    resets: u32,
    /// Also run MiniWoB++'s own Python environment on the same tasks (needs
    /// benches/setup_baseline.sh) and print the ratio.
    #[arg(long)]
    baseline: bool,
    /// Python with the `miniwob` package, for --baseline.
    #[arg(long, default_value = ".cache/baseline-venv/bin/python")]
    baseline_python: PathBuf,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure every task a second time with Chromium's sandbox off (--no-sandbox) and
    /// print both side by side: the sandbox's cost on reset and step.
    #[arg(long, conflicts_with = "no_sandbox")]
    compare_sandbox: bool,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl bench-env`.
pub async fn bench_env(args: BenchEnvArgs) -> anyhow::Result<()> {
    let opts = crate::bench::env_bench::EnvBenchOptions {
        tasks: args.tasks,
        envs: args.envs.into_iter().map(usize::from).collect(),
        steps: args.steps as usize,
        resets: args.resets as usize,
        browser: args.browser.config(),
        baseline_python: args.baseline.then_some(args.baseline_python),
        compare_sandbox: args.compare_sandbox,
    };
    let report = crate::bench::env_bench::run(&opts).await?;
    outln!("{}", report.markdown());
    if let Some(p) = args.json {
        std::fs::write(&p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
