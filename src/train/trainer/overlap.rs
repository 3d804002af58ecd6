//! Rollouts that overlap updates (`[rollout] max_staleness = 1`).
//!
//! Lock-step training (`max_staleness = 0`) takes turns: collect iteration k with the
//! weights w_k, update w_k → w_(k+1), collect k + 1, … With `max_staleness = 1` the
//! collection of iteration k + 1 runs while update k does, with a frozen copy of the
//! weights update k starts from (on a GPU on a second stream, `Overlap::freeze`):
//!
//! ```text
//! iteration 0:   collect(w_0)                      update w_0 → w_1
//! iteration 1:                 collect(w_0) ──────  (during update 0)
//!                                                  update w_1 → w_2 on rollouts of w_0
//! iteration k:   rollouts of w_(k−1), collected during update k − 1; update w_k → w_(k+1)
//! ```
//!
//! The schedule is fixed by the iteration index, never by the clock: iteration k ≥ 1
//! collects with w_(k−1), whatever the timing, so a seed and a bound give the same run. Its
//! samples train with the decoupled objective (`decoupled.rs`): π_prox = w_k, rescored
//! before the first step; π_behav = w_(k−1), the log-probs recorded at sampling.
//!
//! - **What collection k + 1 reads** is fixed before update k starts: the task weights
//!   from the tallies through iteration k, the success-replay buffer after iteration k's
//!   collection (the background task works on a copy; the trainer keeps the buffer it
//!   started from, which is what a checkpoint saves), the seeds (by iteration index).
//! - **The collector** moves into the background task and comes back with the rollouts.
//!   An evaluation waits for it first (`Trainer::settle`): its episodes then start after
//!   collection k + 1 ends, and the collection is kept for iteration k + 1.
//! - **Checkpoints** after iteration k hold w_(k+1) and, in `behaviour/`, w_k: a resume
//!   collects iteration k + 1 with w_k, as the uninterrupted run did. The last iteration of
//!   a run starts no collection (nothing would train on it) but its checkpoint keeps
//!   `behaviour/` all the same, so a run continued with more iterations follows the same
//!   schedule.
//! - Iteration 0, and the first iteration after resuming from a checkpoint without
//!   `behaviour/` (written with `max_staleness = 0`), collect with the current weights
//!   (staleness 0).

use super::behaviour::{Finished, Pending};
use super::*;
use crate::train::dynamic_sampling::Collection;

impl Trainer {
    /// The sampling settings of iteration `it`'s first collection.
    pub(super) fn sampling_for(&self, it: u64) -> Sampling {
        Sampling {
            temperature: self.cfg.algo.temperature,
            greedy: false,
            seed: rng_for(self.cfg.run.seed, it, 2).gen(),
        }
    }

    /// The task weights of the next collection (progress sampling; `None`: uniform), from
    /// the tallies so far.
    pub(super) fn task_weights(&self) -> Option<Vec<f64>> {
        let ids: Vec<String> = self.tasks.iter().map(|t| t.id().to_string()).collect();
        (self.cfg.tasks.sampling == TaskSampling::Progress).then(|| {
            curriculum::progress_weights(&ids, &self.state.task_tallies, self.cfg.tasks.progress_mix)
        })
    }

    /// Iteration `it`'s rollouts and how many updates old the weights that collected them
    /// are: the collection started during the last update, else one made now, with the
    /// behaviour weights when there are some (`max_staleness = 1`), else with the policy.
    pub(super) async fn rollouts(
        &mut self,
        it: u64,
        sampling: Sampling,
        weights: Option<&[f64]>,
    ) -> anyhow::Result<(Collection, u64)> {
        self.settle().await?;
        match self.overlap.pending.take() {
            Some(Pending::Done { it: p, finished }) => {
                anyhow::ensure!(
                    p == it,
                    "iteration {}: the collection made was iteration {}'s",
                    it + 1,
                    p + 1
                );
                let Finished { collected, replay } = *finished;
                let collected = collected?;
                self.replay = replay;
                return Ok((collected, 1));
            }
            Some(Pending::Running { .. }) => unreachable!("settled"),
            None => {}
        }
        let stale = self.cfg.rollout.max_staleness > 0 && self.overlap.behaviour.is_some();
        let policy: &mut dyn TrainablePolicy = match self.overlap.behaviour.as_mut() {
            Some(b) if stale => b.as_mut(),
            _ => self.policy.as_mut(),
        };
        let collected = collect_groups(
            &mut self.collector,
            policy,
            &self.tasks,
            &self.cfg,
            it,
            sampling,
            weights,
            &mut self.replay,
        )
        .await?;
        Ok((collected, u64::from(stale)))
    }

    /// Before update `it` (with `max_staleness > 0`): keep a copy of the weights it starts
    /// from (the next iteration's behaviour weights), and, when the next iteration will
    /// run (`env_steps` so far against the budget), start collecting it in the background.
    pub(super) fn start_next(&mut self, it: u64, env_steps: u64) -> anyhow::Result<()> {
        if self.cfg.rollout.max_staleness == 0 {
            return Ok(());
        }
        let behaviour = self.overlap.freeze(self.policy.as_ref())?;
        let next = it + 1;
        let runs = next < self.cfg.run.iterations && self.cfg.run.max_env_steps.is_none_or(|b| env_steps < b);
        if runs {
            let mut policy = behaviour.reference()?;
            let placeholder = Collector::new(1, EnvConfig::default());
            let mut collector = std::mem::replace(&mut self.collector, placeholder);
            let mut replay = self.replay.clone();
            let (tasks, cfg) = (self.tasks.clone(), self.cfg.clone());
            let (sampling, weights) = (self.sampling_for(next), self.task_weights());
            let task = tokio::spawn(async move {
                let collected = collect_groups(
                    &mut collector,
                    policy.as_mut(),
                    &tasks,
                    &cfg,
                    next,
                    sampling,
                    weights.as_deref(),
                    &mut replay,
                )
                .await;
                (collector, Finished { collected, replay })
            });
            self.overlap.pending = Some(Pending::Running { it: next, task });
        }
        self.overlap.behaviour = Some(behaviour);
        Ok(())
    }

    /// Wait for a collection under way, so the collector is back (it keeps the rollouts
    /// for their iteration). Nothing to do without one.
    pub(super) async fn settle(&mut self) -> anyhow::Result<()> {
        if let Some(Pending::Running { it, task }) = self.overlap.pending.take() {
            let (collector, finished) =
                task.await.with_context(|| format!("iteration {}'s background collection failed", it + 1))?;
            self.collector = collector;
            self.overlap.pending = Some(Pending::Done { it, finished: Box::new(finished) });
        }
        Ok(())
    }
}
