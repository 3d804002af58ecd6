//! The trainer and its run folder: checkpoints (and `best`), the KL reference, a failing
//! run's last checkpoint. In a data-parallel run only rank 0 writes ([`Trainer::writes`]).

use super::*;

/// The folder of the kept rollouts of iteration `it` (`[rollout] record_every`).
pub fn rollouts_dir(run_dir: &Path, it: u64) -> PathBuf {
    run_dir.join("rollouts").join(checkpoint::name(it))
}

impl Trainer {
    /// Keep this iteration's rollouts as a trajectory set. An iteration run again after a
    /// resume replaces what its first run kept.
    pub(super) fn record_rollouts(&self, recs: &[crate::rollout::Recorded]) -> anyhow::Result<()> {
        let dir = rollouts_dir(&self.run_dir, self.state.iteration);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot replace {}", dir.display()))?;
        }
        let mut w = crate::rollout::TrajectoryWriter::open(&dir)?;
        for rec in recs {
            w.append(rec)?;
        }
        Ok(())
    }

    /// A run that must stop on an error first checkpoints what it has (unless the error
    /// struck mid-update), so `--resume` continues from the last finished iteration.
    pub(super) async fn stop_with(&mut self, e: anyhow::Error) -> anyhow::Error {
        // The browsers of a collection under way come back first (its error is this one's
        // consequence or a later iteration's: not reported).
        let _ = self.settle().await;
        self.collector.close().await;
        if !self.consistent || !self.writes() {
            return e;
        }
        match self.save_checkpoint() {
            Ok(dir) => {
                // as it ran: a resume on another number of ranks gives other results
                let resume = crate::train::run_folder::resume_command(&self.run_dir, self.state.world_size);
                e.context(format!("training stopped; {} saved, continue with `{resume}`", dir.display()))
            }
            Err(save) => {
                e.context(format!("training stopped, and its checkpoint could not be saved: {save:#}"))
            }
        }
    }

    /// Save a checkpoint of the current iteration (the clone's with cloning's optimizer);
    /// returns its folder.
    pub(super) fn save_checkpoint(&self) -> anyhow::Result<PathBuf> {
        if !self.writes() {
            return Ok(
                checkpoint::checkpoints_dir(&self.run_dir).join(checkpoint::name(self.state.iteration))
            );
        }
        let before =
            checkpoint::checkpoints_dir(&self.run_dir).join(checkpoint::name(0)).join(SFT_OPTIMIZER_FILE);
        checkpoint::save_with(&self.run_dir, self.policy.as_ref(), &self.opt, &self.state, |dir| {
            if let Some(o) = &self.sft_opt {
                o.save(&dir.join(SFT_OPTIMIZER_FILE))?;
            } else if self.state.iteration == 0 && before.is_file() {
                // The clone's checkpoint saved again (its evaluation): keep what it held.
                std::fs::copy(&before, dir.join(SFT_OPTIMIZER_FILE))
                    .with_context(|| format!("cannot copy {}", before.display()))?;
            }
            self.replay.save(dir)?;
            // The weights the next iteration collects with (max_staleness = 1).
            if let Some(b) = &self.overlap.behaviour {
                b.save(&dir.join(super::behaviour::BEHAVIOUR_DIR))?;
            }
            self.algorithm.save(dir)
        })
    }

    /// An evaluation of the current policy: checkpoint it, and point `best` at it when it
    /// beats every earlier evaluation.
    pub(super) fn consider_best(&mut self, e: EvalResult) -> anyhow::Result<()> {
        let best = self
            .state
            .best_eval
            .as_ref()
            .filter(|(s, _)| *s >= 0.0)
            .map(|(s, _)| (*s, self.state.best_reward));
        let better = e.beats(best);
        if better {
            let dir = checkpoint::checkpoints_dir(&self.run_dir).join(checkpoint::name(self.state.iteration));
            self.state.best_eval = Some((e.success, dir.display().to_string()));
            self.state.best_reward = e.reward;
        }
        let dir = self.save_checkpoint()?;
        if better && self.writes() {
            checkpoint::mark_best(&self.run_dir, &dir)?;
        }
        Ok(())
    }

    /// With `beta > 0`, the KL reference is the policy RL starts from (the clone after
    /// `[sft]`, else `[model] init` or the initial weights), kept in `reference/` so a
    /// resume compares against the same policy.
    pub(super) fn ensure_reference(&mut self) -> anyhow::Result<()> {
        if self.cfg.algo.beta <= 0.0 || self.kl.reference().is_some() {
            return Ok(());
        }
        let dir = self.run_dir.join(REFERENCE_DIR);
        if self.state.iteration > 0 {
            bail!(
                "{} is missing: this run trains with [algo] beta > 0 but its KL reference was not kept; \
                 start a new run (or set beta = 0)",
                dir.display()
            );
        }
        let reference = self.policy.reference()?;
        if self.writes() {
            checkpoint::write_dir_atomically(&dir, |tmp| reference.save(tmp))?;
        }
        self.kl.set_reference(reference);
        Ok(())
    }

    /// Whether `metrics.jsonl` already holds the starting policy's evaluation (a run
    /// stopped after behaviour cloning and started again).
    pub(super) fn has_baseline(&self) -> bool {
        read_metrics(&self.run_dir.join("metrics.jsonl")).is_ok_and(|ms| ms.iter().any(|m| m.iteration == 0))
    }

    /// Whether this process writes the run folder (rank 0, or a run of one process).
    pub fn writes(&self) -> bool {
        self.group.as_ref().is_none_or(|g| g.is_root())
    }
}
