//! `guirl bench-learn`: the learning benchmark (every algorithm from several clones, same
//! budget, beside more cloning; test and validation side by side).

use crate::bench::learning::{self, BenchOptions, Plan};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Arguments of `guirl bench-learn`.
#[derive(Debug, clap::Args)]
pub struct BenchLearnArgs {
    /// The plan (TOML): env_steps, seeds, clone_seeds, algos, test_episodes, [[tasks]]
    /// with a config each (see benches/learning/plan.toml).
    plan: PathBuf,
    /// Output folder: one run folder per cell, report.md, results.json, learning-TASK.png.
    /// Running again continues where a stopped benchmark left off.
    #[arg(long)]
    out: PathBuf,
    /// Only the cells whose TASK/CELL contains this (cells: clone-cK, ALGO-cK-sSEED,
    /// more-sft-cK; without clone_seeds in the plan clone, ALGO-sSEED, more-sft; e.g.
    /// `toggle-switches/ppo-c0-s0`; a clone is made first whenever one of its cells runs);
    /// the report covers every finished cell.
    #[arg(long)]
    only: Option<String>,
    /// Write the report from the finished cells and exit (no training).
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    browser: super::browser::BrowserArgs,
}

/// `guirl bench-learn`.
pub async fn bench_learn(args: BenchLearnArgs) -> anyhow::Result<()> {
    let plan = Plan::load(&args.plan)?;
    if args.report {
        if !args.out.is_dir() {
            anyhow::bail!(
                "{} does not exist: run the benchmark first (without --report)",
                args.out.display()
            );
        }
        let cells = learning::read_cells(&args.out)?;
        learning::report::write(&plan, &cells, &args.out)?;
    } else {
        let opts = BenchOptions {
            only: args.only,
            env: crate::env::EnvConfig { browser: args.browser.config(), ..Default::default() },
        };
        // Ctrl-C / SIGTERM: the running cell checkpoints and stops; run again to continue.
        let stop = Arc::new(AtomicBool::new(false));
        super::signals::watch_signals(Some(stop.clone()));
        learning::run(&plan, &args.out, &opts, stop).await?;
    }
    let report = args.out.join("report.md");
    out!("{}", std::fs::read_to_string(&report)?);
    outln!("\nreport: {}", report.display());
    Ok(())
}
