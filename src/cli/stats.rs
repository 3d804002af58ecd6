//! `guirl stats`.

use crate::bench::set_stats::{GroupBy, SetStats};
use crate::rollout::TrajectorySet;
use std::path::PathBuf;

/// Arguments of `guirl stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Trajectory set folders (written by `guirl run --record`, `guirl play --record`,
    /// `guirl bench`, `[rollout] record_every`), pooled: a bench's task folders are
    /// `BENCH/trajectories/*/*`.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// One row per task or per policy.
    #[arg(long, value_enum, default_value = "task")]
    by: GroupBy,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `guirl stats`.
pub fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let sets = args.dirs.iter().map(|d| TrajectorySet::read(d)).collect::<anyhow::Result<Vec<_>>>()?;
    let stats = SetStats::of(&sets, args.by);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", stats.table());
    }
    Ok(())
}
