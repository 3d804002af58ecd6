//! `guirl stats`.

use crate::bench::set_stats::{GroupBy, SetStats};
use crate::rollout::TrajectorySet;
use std::path::PathBuf;

/// Arguments of `guirl stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Trajectory set folders (written by `guirl run --record`, `guirl play --record`,
    /// `guirl bench`, `[rollout] record_every`), pooled; a folder of sets (a bench's, a
    /// training run's `rollouts/`) stands for every set in it. A set named twice counts once.
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
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for d in &args.dirs {
        // a folder of sets stands for them; one that holds none gets read's error
        let found = match crate::rollout::store::sets_in(d) {
            none if none.is_empty() => vec![d.clone()],
            sets => sets,
        };
        for set in found {
            if seen.insert(std::fs::canonicalize(&set).unwrap_or_else(|_| set.clone())) {
                dirs.push(set);
            } else {
                tracing::warn!("{} is named twice: its episodes are counted once", set.display());
            }
        }
    }
    let sets = dirs.iter().map(|d| TrajectorySet::read(d)).collect::<anyhow::Result<Vec<_>>>()?;
    if sets.iter().all(|s| s.trajectories.is_empty()) {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        anyhow::bail!(
            "no episode in {}: {} no finished episode yet (a run stopped before its first one ended?)",
            names.join(", "),
            if names.len() == 1 { "the set holds" } else { "the sets hold" }
        );
    }
    let stats = SetStats::of(&sets, args.by);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        out!("{}", stats.table());
    }
    Ok(())
}
