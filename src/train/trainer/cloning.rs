//! The trainer's behaviour-cloning stage: the demonstrations (`[sft] dir`, or oracle
//! episodes recorded first), cloning them (`sft.rs`), continuing a saved clone's optimizer,
//! and seeding success replay from them.

use super::*;
use crate::train::config::SftConfig;

impl Trainer {
    /// Behaviour cloning on `[sft] dir` or on oracle demonstrations recorded first.
    /// Returns false when `stop` was raised (checked between epochs).
    pub(super) async fn sft(&mut self, stop: &AtomicBool) -> anyhow::Result<bool> {
        let sft = self.cfg.sft.clone().expect("sft configured");
        // Validation guarantees exactly one of the two.
        let dir = match (&sft.dir, sft.oracle_episodes) {
            (Some(d), _) => d.clone(),
            (None, Some(n)) => {
                let tr = self.cfg.tasks.train_seeds;
                let mut rng = rng_for(self.cfg.run.seed, 0, 11);
                let dir = self.run_dir.join("demos");
                // `self.tasks` is built from `[tasks] ids`, in order.
                let counts: Vec<usize> = self
                    .cfg
                    .tasks
                    .ids
                    .iter()
                    .map(|id| sft.oracle_episodes_for.get(id).copied().unwrap_or(n))
                    .collect();
                crate::train::demos::record_oracle_demos(
                    &mut self.collector,
                    &self.tasks,
                    &counts,
                    tr.start..tr.end,
                    &mut rng,
                    &dir,
                )
                .await?
            }
            (None, None) => bail!("[sft] needs sft.dir or sft.oracle_episodes"),
        };
        let set = TrajectorySet::read(&dir)?;
        // A resumed cloning goes on after the epochs its folder holds, so it draws what
        // one uninterrupted cloning would have.
        let done = self.state.sft_epochs.min(sft.epochs);
        let rest =
            SftConfig { start_epoch: sft.start_epoch + done, epochs: sft.epochs - done, ..sft.clone() };
        let how = crate::train::sft::SftSettings {
            sft: &rest,
            opt: self.cfg.algo.adamw_config(),
            max_grad_norm: self.cfg.algo.max_grad_norm,
            seed: self.cfg.run.seed,
            group: self.group.as_deref(),
        };
        let mut opt = crate::train::sft::sft_optimizer(self.policy.as_ref(), &how)?;
        let saved = checkpoint::cloning_dir(&self.run_dir);
        if saved.join(SFT_OPTIMIZER_FILE).is_file() {
            opt.load(&saved.join(SFT_OPTIMIZER_FILE))
                .with_context(|| format!("resuming behaviour cloning from {}", saved.display()))?;
            tracing::info!(
                "behaviour cloning resumes after epoch {} of {} ({})",
                rest.start_epoch,
                sft.start_epoch + sft.epochs,
                saved.display()
            );
        } else if sft.start_epoch > 0 {
            self.continue_sft_optimizer(&mut opt)?;
        }
        // After each epoch but the last (the clone's own checkpoint follows it), and at a
        // stop: `checkpoints/cloning/`, so that a killed or stopped cloning loses at most
        // the epoch under way.
        let (writes, run_dir, t0) = (self.writes(), self.run_dir.clone(), Instant::now());
        let base = self.state.clone();
        let at = |epoch: usize| TrainerState {
            sft_epochs: epoch - sft.start_epoch,
            wall_secs: base.wall_secs + t0.elapsed().as_secs_f64(),
            ..base.clone()
        };
        let mut saved_at = None;
        let mut save = |epoch: usize, policy: &dyn TrainablePolicy, opt: &AdamW| -> anyhow::Result<()> {
            if writes && saved_at != Some(epoch) {
                checkpoint::save_cloning(&run_dir, policy, opt, &at(epoch))?;
                saved_at = Some(epoch);
            }
            Ok(())
        };
        let end = sft.start_epoch + sft.epochs;
        let policy = self.policy.as_mut();
        let log = self.run_dir.join("sft.jsonl");
        let report = off_runtime(|| {
            let mut after_epoch = |epoch: usize, policy: &dyn TrainablePolicy, opt: &AdamW| match epoch < end
            {
                true => save(epoch, policy, opt),
                false => Ok(()),
            };
            let report = crate::train::sft::clone_demonstrations(
                policy,
                &set,
                how,
                &mut opt,
                &log,
                stop,
                &mut after_epoch,
            )?;
            if !report.finished {
                save(report.epoch, policy, &opt)?;
            }
            anyhow::Ok(report)
        })?;
        self.state.sft_epochs = report.epoch - sft.start_epoch;
        if !report.finished {
            self.state.wall_secs = at(report.epoch).wall_secs;
            if writes {
                tracing::warn!(
                    "stopped during behaviour cloning after epoch {} of {end}: saved in {}; \
                     continue it with --resume",
                    report.epoch,
                    saved.display()
                );
            }
            return Ok(false);
        }
        self.sft_opt = Some(opt);
        if report.finished && self.replay.is_on() {
            // The clone's own scores of the demonstrations: a replayed one starts at ratio 1.
            let (policy, replay) = (self.policy.as_ref(), &mut self.replay);
            let n = off_runtime(|| replay.seed_from_demos(policy, &set))?;
            tracing::info!("success replay: {n} demonstration(s) of {} kept", dir.display());
        }
        Ok(report.finished)
    }

    /// `algo.success_replay_demos`: the buffer of a run that starts from a clone, seeded
    /// from the clone's demonstrations as a cloning run seeds its own.
    pub(super) fn seed_replay_from_demos(&mut self) -> anyhow::Result<()> {
        let Some(dir) = self.cfg.algo.success_replay_demos.clone() else { return Ok(()) };
        let set = TrajectorySet::read(&dir).context("algo.success_replay_demos")?;
        let (policy, replay) = (self.policy.as_ref(), &mut self.replay);
        let n = off_runtime(|| replay.seed_from_demos(policy, &set))?;
        if n == 0 {
            tracing::warn!(
                "success replay: {} holds no successful episode the policy can score; the buffer \
                 fills from the run's own successes",
                dir.display()
            );
        }
        tracing::info!("success replay: {n} demonstration(s) of {} kept", dir.display());
        Ok(())
    }

    /// `[sft] start_epoch`: cloning's AdamW moments from the `[model] init` checkpoint. A
    /// clone saved before they were kept continues with fresh ones, and says so.
    fn continue_sft_optimizer(&self, opt: &mut AdamW) -> anyhow::Result<()> {
        let init = self.cfg.model.init.as_deref().expect("validated: start_epoch needs model.init");
        let dir = checkpoint::resolve_policy_dir(init).map_or_else(|_| init.to_path_buf(), |p| p.dir);
        let file = dir.join(SFT_OPTIMIZER_FILE);
        if file.is_file() {
            return opt
                .load(&file)
                .with_context(|| format!("sft.start_epoch: continuing from {}", dir.display()));
        }
        tracing::warn!(
            "sft.start_epoch: {} holds no {SFT_OPTIMIZER_FILE} (a clone saved before it was kept); \
             cloning continues with fresh AdamW moments",
            dir.display()
        );
        Ok(())
    }
}
