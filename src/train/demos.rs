//! `[sft] oracle_episodes`: demonstrations recorded with the scripted oracle on training
//! seeds, into the run folder's `demos/`.

use crate::env::EpisodeStatus;
use crate::policy::oracle::OraclePolicy;
use crate::rollout::store::TrajectoryWriter;
use crate::rollout::{Collector, Job, Recorded, TrajectorySet};
use crate::tasks::Task;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Record `counts[i]` oracle episodes of `tasks[i]`, on seeds drawn from `seeds` with
/// `rng`, into `dir` (kept as it is when already complete, so a restarted run does not
/// record twice).
pub async fn record_oracle_demos(
    collector: &mut Collector,
    tasks: &[Arc<dyn Task>],
    counts: &[usize],
    seeds: std::ops::Range<u64>,
    rng: &mut ChaCha8Rng,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        tasks.len() == counts.len(),
        "{} tasks but {} demonstration counts",
        tasks.len(),
        counts.len()
    );
    let want: usize = counts.iter().sum();
    if TrajectorySet::read(dir).is_ok_and(|s| s.trajectories.len() >= want) {
        return Ok(dir.to_path_buf());
    }
    let _ = std::fs::remove_dir_all(dir);
    // Task by task: switching an env to another task reloads its page.
    let jobs: Vec<Job> = tasks
        .iter()
        .zip(counts)
        .flat_map(|(t, &n)| std::iter::repeat_n(t, n))
        .map(|t| Job { task: t.clone(), seed: rng.gen_range(seeds.clone()), group: None, prefix: None })
        .collect();
    let mut writer = TrajectoryWriter::open(dir)?;
    let mut failed = None;
    // Written in job order, not in the order the browsers finish (which depends on
    // timing): each episode waits for those before it, so the file is the same every run.
    let mut finished: Vec<Option<Recorded>> = vec![None; jobs.len()];
    let mut next = 0;
    let (recs, _) = collector
        .collect(&mut OraclePolicy, jobs, |i, rec| {
            finished[i] = Some(rec.clone());
            while let Some(rec) = finished.get_mut(next).and_then(Option::take) {
                next += 1;
                if failed.is_none() {
                    if let Err(e) = writer.append(&rec) {
                        failed = Some(e);
                    }
                }
            }
        })
        .await?;
    if let Some(e) = failed {
        return Err(e.context(format!("writing demonstrations to {}", dir.display())));
    }
    let ok = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
    tracing::info!("recorded {} oracle demonstrations ({ok} successful) in {}", recs.len(), dir.display());
    Ok(dir.to_path_buf())
}
