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
/// record twice). In a data-parallel run (the collector's group) every rank records its
/// share and rank 0 writes them all; the others read its folder once it is complete.
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
    let done = TrajectorySet::read(dir).is_ok_and(|s| s.trajectories.len() >= want);
    let group = collector.group.clone();
    // Every rank has looked at the folder before rank 0 changes it.
    let writes = match &group {
        Some(g) => g.barrier().map(|_| g.is_root())?,
        None => true,
    };
    if done {
        return Ok(dir.to_path_buf());
    }
    if writes {
        let _ = std::fs::remove_dir_all(dir);
    }
    // Task by task: switching an env to another task reloads its page.
    let jobs: Vec<Job> = tasks
        .iter()
        .zip(counts)
        .flat_map(|(t, &n)| std::iter::repeat_n(t, n))
        .map(|t| Job { task: t.clone(), seed: rng.gen_range(seeds.clone()), group: None, prefix: None })
        .collect();
    let mut writer = if writes { Some(TrajectoryWriter::open(dir)?) } else { None };
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
                    if let Err(e) = writer.as_mut().map_or(Ok(()), |w| w.append(&rec).map(|_| ())) {
                        failed = Some(e);
                    }
                }
            }
        })
        .await?;
    drop(writer);
    let failed =
        failed.map(|e| format!("{:#}", e.context(format!("writing demonstrations to {}", dir.display()))));
    if let Some(g) = &group {
        // The others read the folder once rank 0 has written it (or all stop with it).
        g.all_gather(failed.clone().map_or(Ok(Vec::new()), Err))?;
    }
    if let Some(e) = failed {
        anyhow::bail!(e);
    }
    let ok = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
    tracing::info!("recorded {} oracle demonstrations ({ok} successful) in {}", recs.len(), dir.display());
    Ok(dir.to_path_buf())
}
