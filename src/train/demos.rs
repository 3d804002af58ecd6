//! `[sft] oracle_episodes`: demonstrations recorded with the scripted oracle on training
//! seeds, into the run folder's `demos/`.

use crate::env::EpisodeStatus;
use crate::policy::oracle::OraclePolicy;
use crate::rollout::store::TrajectoryWriter;
use crate::rollout::{Collector, Job, Recorded, TrajectorySet};
use crate::tasks::Task;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How far a recording got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// Every demonstration is in the folder.
    Complete,
    /// `stop` was raised: the first ones are in the folder, and the next call records
    /// the rest.
    Stopped {
        /// The demonstrations in the folder.
        kept: usize,
        /// All of them.
        wanted: usize,
    },
}

/// Record `counts[i]` oracle episodes of `tasks[i]`, on seeds drawn from `seeds` with
/// `rng`, into `dir`. The episodes are written in their order, a few browsers' worth at a
/// time, and `stop` is looked at in between: a stopped or killed recording keeps what it
/// wrote, and the next call records only the rest (the episodes the folder holds are the
/// first ones this call would record; a folder of others is recorded again). In a
/// data-parallel run (the collector's group) every rank records its share and rank 0
/// writes them all; the others read its folder once it is complete.
pub async fn record_oracle_demos(
    collector: &mut Collector,
    tasks: &[Arc<dyn Task>],
    counts: &[usize],
    seeds: std::ops::Range<u64>,
    rng: &mut ChaCha8Rng,
    dir: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<Recording> {
    anyhow::ensure!(
        tasks.len() == counts.len(),
        "{} tasks but {} demonstration counts",
        tasks.len(),
        counts.len()
    );
    // Task by task: switching an env to another task reloads its page.
    let jobs: Vec<Job> = tasks
        .iter()
        .zip(counts)
        .flat_map(|(t, &n)| std::iter::repeat_n(t, n))
        .map(|t| Job {
            task: t.clone(),
            seed: rng.gen_range(seeds.clone()),
            group: None,
            prefix: None,
            stream: None,
        })
        .collect();
    let kept = recorded_prefix(dir, &jobs);
    let group = collector.group.clone();
    // Every rank has looked at the folder before rank 0 changes it.
    let writes = match &group {
        Some(g) => g.barrier().map(|_| g.is_root())?,
        None => true,
    };
    if kept == Some(jobs.len()) {
        return Ok(Recording::Complete);
    }
    let mut done = kept.unwrap_or(0);
    if writes && kept.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    if done > 0 {
        tracing::info!(
            "{done} of {} oracle demonstrations are in {}: recording the rest",
            jobs.len(),
            dir.display()
        );
    }
    let mut writer = if writes { Some(TrajectoryWriter::open(dir)?) } else { None };
    let world = group.as_ref().map_or(1, |g| g.world());
    let chunk = 4 * collector.envs() * world;
    let (mut ok, mut all) = (0, 0);
    while done < jobs.len() {
        let stopping = stop.load(Ordering::SeqCst);
        if group.as_ref().map_or(Ok(stopping), |g| g.any(stopping))? {
            return Ok(Recording::Stopped { kept: done, wanted: jobs.len() });
        }
        let part = jobs[done..(done + chunk).min(jobs.len())].to_vec();
        let n = part.len();
        let (recs, failed) = record(collector, part, writer.as_mut()).await?;
        let failed = failed
            .map(|e| format!("{:#}", e.context(format!("writing demonstrations to {}", dir.display()))));
        if let Some(g) = &group {
            // The others go on (or stop) with rank 0's write.
            g.all_gather(failed.clone().map_or(Ok(Vec::new()), Err))?;
        }
        if let Some(e) = failed {
            anyhow::bail!(e);
        }
        ok += recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
        all += recs.len();
        done += n;
    }
    tracing::info!("recorded {all} oracle demonstrations ({ok} successful) in {}", dir.display());
    Ok(Recording::Complete)
}

/// Collect `jobs` with the oracle, writing them with `writer` in job order, not in the
/// order the browsers finish (which depends on timing): each episode waits for those
/// before it, so the file is the same every run. Returns the episodes and the first
/// write error.
async fn record(
    collector: &mut Collector,
    jobs: Vec<Job>,
    mut writer: Option<&mut TrajectoryWriter>,
) -> anyhow::Result<(Vec<Recorded>, Option<anyhow::Error>)> {
    let mut failed = None;
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
    Ok((recs, failed))
}

/// How many of `jobs`' episodes `dir` holds already, in order: `None` when it holds
/// others (another config's), which are then recorded again.
fn recorded_prefix(dir: &Path, jobs: &[Job]) -> Option<usize> {
    if !dir.exists() {
        return Some(0);
    }
    let set = TrajectorySet::read(dir).ok()?;
    let held = &set.trajectories;
    let same = held.len() <= jobs.len()
        && held
            .iter()
            .zip(jobs)
            .all(|(t, j)| t.trajectory.task_id == j.task.id() && t.trajectory.seed == j.seed);
    same.then_some(held.len())
}
