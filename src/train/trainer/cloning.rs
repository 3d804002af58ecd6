//! The trainer's behaviour-cloning stage: the demonstrations (`[sft] dir`, or oracle
//! episodes recorded first), cloning them (`sft.rs`), keeping a cloning under way in
//! `checkpoints/cloning/` and continuing it, continuing a saved clone's optimizer, and
//! seeding success replay from them.

use super::*;
use crate::train::config::SftConfig;
use crate::train::demos::Recording;

/// Saves a cloning under way in `checkpoints/cloning/` (rank 0 only), once per epoch.
struct CloningSaver {
    writes: bool,
    run_dir: PathBuf,
    /// The state when cloning started, and since when it runs.
    base: TrainerState,
    t0: Instant,
    /// `[sft] start_epoch`: `sft_epochs` counts from it.
    first: usize,
    saved_at: Option<usize>,
}

impl CloningSaver {
    /// The trainer state at `epoch` (counted as `sft.jsonl` counts).
    fn state(&self, epoch: usize) -> TrainerState {
        TrainerState {
            sft_epochs: epoch - self.first,
            wall_secs: self.base.wall_secs + self.t0.elapsed().as_secs_f64(),
            ..self.base.clone()
        }
    }

    fn save(&mut self, epoch: usize, policy: &dyn TrainablePolicy, opt: &AdamW) -> anyhow::Result<()> {
        if self.writes && self.saved_at != Some(epoch) {
            checkpoint::save_cloning(&self.run_dir, policy, opt, &self.state(epoch))?;
            self.saved_at = Some(epoch);
        }
        Ok(())
    }
}

impl Trainer {
    /// Behaviour cloning on `[sft] dir` or on oracle demonstrations recorded first.
    /// Returns false when `stop` was raised (checked between recordings and epochs), the
    /// cloning so far saved in `checkpoints/cloning/`: after each epoch but the last (the
    /// clone's own checkpoint follows it), and at a stop, so that a killed or stopped
    /// cloning loses at most the epoch under way.
    pub(super) async fn sft(&mut self, stop: &AtomicBool) -> anyhow::Result<bool> {
        let sft = self.cfg.sft.clone().expect("sft configured");
        // A resumed cloning goes on after the epochs its folder holds, so it draws what
        // one uninterrupted cloning would have.
        let done = self.state.sft_epochs.min(sft.epochs);
        let rest =
            SftConfig { start_epoch: sft.start_epoch + done, epochs: sft.epochs - done, ..sft.clone() };
        let group = self.group.clone();
        let how = crate::train::sft::SftSettings {
            sft: &rest,
            opt: self.cfg.algo.adamw_config(),
            max_grad_norm: self.cfg.algo.max_grad_norm,
            seed: self.cfg.run.seed,
            group: group.as_deref(),
        };
        let mut opt = self.cloning_optimizer(&sft, &how)?;
        let mut saver = CloningSaver {
            writes: self.writes(),
            run_dir: self.run_dir.clone(),
            base: self.state.clone(),
            t0: Instant::now(),
            first: sft.start_epoch,
            saved_at: None,
        };
        let end = sft.start_epoch + sft.epochs;
        let Some(dir) = self.demonstrations(&sft, stop).await? else {
            saver.save(rest.start_epoch, self.policy.as_ref(), &opt)?;
            self.state.wall_secs = saver.state(rest.start_epoch).wall_secs;
            return Ok(false);
        };
        let set = TrajectorySet::read(&dir)?;
        let others: std::collections::BTreeSet<&str> = set
            .trajectories
            .iter()
            .map(|st| st.trajectory.task_id.as_str())
            .filter(|id| !self.tasks.iter().any(|t| t.id() == *id))
            .collect();
        if !others.is_empty() && self.writes() {
            tracing::warn!(
                "{} holds demonstrations of tasks this run does not train on ({}): they are cloned too",
                dir.display(),
                others.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        let policy = self.policy.as_mut();
        let log = self.run_dir.join("sft.jsonl");
        let report = off_runtime(|| {
            let mut after_epoch = |epoch: usize, policy: &dyn TrainablePolicy, opt: &AdamW| match epoch < end
            {
                true => saver.save(epoch, policy, opt),
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
                saver.save(report.epoch, policy, &opt)?;
            }
            anyhow::Ok(report)
        })?;
        self.state.sft_epochs = report.epoch - sft.start_epoch;
        if !report.finished {
            self.state.wall_secs = saver.state(report.epoch).wall_secs;
            if self.writes() {
                tracing::warn!(
                    "stopped during behaviour cloning after epoch {} of {end}: saved in {}; \
                     continue it with --resume",
                    report.epoch,
                    checkpoint::cloning_dir(&self.run_dir).display()
                );
            }
            return Ok(false);
        }
        self.sft_opt = Some(opt);
        if self.replay.is_on() {
            // The clone's own scores of the demonstrations: a replayed one starts at ratio 1.
            let (policy, replay) = (self.policy.as_ref(), &mut self.replay);
            let n = off_runtime(|| replay.seed_from_demos(policy, &set))?;
            tracing::info!("success replay: {n} demonstration(s) of {} kept", dir.display());
        }
        Ok(true)
    }

    /// The demonstrations' folder: `[sft] dir`, or oracle episodes recorded into the run's
    /// `demos/` (`None`: `stop` was raised first; what was recorded is kept for the next
    /// start).
    async fn demonstrations(
        &mut self,
        sft: &SftConfig,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<PathBuf>> {
        // Validation guarantees exactly one of the two.
        let n = match (&sft.dir, sft.oracle_episodes) {
            (Some(d), _) => return Ok(Some(d.clone())),
            (None, Some(n)) => n,
            (None, None) => bail!("[sft] needs sft.dir or sft.oracle_episodes"),
        };
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
        let recording = crate::train::demos::record_oracle_demos(
            &mut self.collector,
            &self.tasks,
            &counts,
            tr.start..tr.end,
            &mut rng,
            &dir,
            stop,
        )
        .await?;
        match recording {
            Recording::Complete => Ok(Some(dir)),
            Recording::Stopped { kept, wanted } => {
                if self.writes() {
                    tracing::warn!(
                        "stopped while recording oracle demonstrations: {kept} of {wanted} are kept in {}; \
                         continue with --resume, which records the rest",
                        dir.display()
                    );
                }
                Ok(None)
            }
        }
    }

    /// Cloning's AdamW: a cloning under way's own (`checkpoints/cloning/`), else the
    /// `[model] init` clone's with `[sft] start_epoch`, else fresh.
    fn cloning_optimizer(
        &self,
        sft: &SftConfig,
        how: &crate::train::sft::SftSettings,
    ) -> anyhow::Result<AdamW> {
        let mut opt = crate::train::sft::sft_optimizer(self.policy.as_ref(), how)?;
        let saved = checkpoint::cloning_dir(&self.run_dir);
        if saved.join(SFT_OPTIMIZER_FILE).is_file() {
            opt.load(&saved.join(SFT_OPTIMIZER_FILE))
                .with_context(|| format!("resuming behaviour cloning from {}", saved.display()))?;
            tracing::info!(
                "behaviour cloning resumes after epoch {} of {} ({})",
                how.sft.start_epoch,
                sft.start_epoch + sft.epochs,
                saved.display()
            );
        } else if sft.start_epoch > 0 {
            self.continue_sft_optimizer(&mut opt)?;
        }
        Ok(opt)
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
