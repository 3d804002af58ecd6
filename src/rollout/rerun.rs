//! Episodes a browser failure broke, run again: evaluations over fixed seeds.

use super::{Collector, Job, Recorded};
use crate::env::EpisodeStatus;
use crate::policy::Policy;

/// What [`Collector::collect_complete`] gives.
#[derive(Debug)]
pub struct Completed {
    /// The episodes that ran to an outcome, in the jobs' order.
    pub recs: Vec<Recorded>,
    /// Episodes run again after ending as `env_error`.
    pub reruns: usize,
    /// Episodes that ended as `env_error` at every try: left out of `recs`.
    pub lost: usize,
}

impl Collector {
    /// Collect `jobs`, running every episode that ends as `env_error` (a browser that
    /// crashed or was killed) again, up to `tries` tries in all. An evaluation's rate is
    /// then over its own seeds, not lowered by the machine; an episode that fails at every
    /// try is left out and counted. A job drawing from its own stream ([`Job::episode`])
    /// runs the same episode again.
    pub async fn collect_complete(
        &mut self,
        policy: &mut dyn Policy,
        jobs: Vec<Job>,
        tries: usize,
    ) -> anyhow::Result<Completed> {
        let mut slots: Vec<Option<Recorded>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        let mut reruns = 0;
        for attempt in 0..tries.max(1) {
            let batch = pending.iter().map(|&i| jobs[i].clone()).collect();
            let (recs, _) = self.collect(policy, batch, |_, _| {}).await?;
            if attempt > 0 {
                reruns += pending.len();
            }
            let mut broken = Vec::new();
            for (i, rec) in pending.into_iter().zip(recs) {
                match rec.trajectory.outcome.status {
                    EpisodeStatus::EnvError => broken.push(i),
                    _ => slots[i] = Some(rec),
                }
            }
            pending = broken;
            if pending.is_empty() {
                break;
            }
        }
        if !pending.is_empty() {
            tracing::warn!(
                "{} of {} episodes ended as env_error at each of {} tries (browsers failing): left out",
                pending.len(),
                jobs.len(),
                tries.max(1)
            );
        }
        Ok(Completed { recs: slots.into_iter().flatten().collect(), reruns, lost: pending.len() })
    }
}
