//! The update and log phases of [`Trainer::iteration`]: the policy's update with what the
//! algorithm and the KL add around it, and an iteration's metrics line.

use super::*;
use crate::rollout::Recorded;
use crate::train::advantage::AdvantageStats;
use crate::train::algorithm::Scored;
use crate::train::config::AlgoConfig;
use crate::train::decoupled::{decouple, Decoupled};
use crate::train::dynamic_sampling::Collection;
use crate::train::update::{Sample, UpdateStats};

/// What an iteration's update phase did.
pub(super) struct Updated {
    /// The policy's update (zeros when the algorithm held it back).
    stats: UpdateStats,
    /// The policy's learning rate.
    lr: f64,
    /// The decoupled objective's weights (rollouts of older weights only).
    decoupled: Option<Decoupled>,
    /// Seconds spent rescoring for them (part of the scoring, not the update).
    rescore_secs: f64,
    /// The KL to the reference the metrics report and the adaptive β steers.
    kl: f64,
    /// The β the update used.
    beta: f64,
}

impl Trainer {
    /// The update phase of iteration `it`: rollouts of older weights (`staleness` > 0)
    /// first get the decoupled objective's weights; then μ epochs of minibatch updates at
    /// the scored β unless the algorithm holds the policy back (PPO's critic warm-up), the
    /// ranks brought in step, the algorithm's own training (PPO's critic), and the
    /// adaptive β.
    pub(super) fn update(
        &mut self,
        it: u64,
        sampling: Sampling,
        staleness: u64,
        mut samples: Vec<Sample>,
        scored: &Scored<'_>,
    ) -> anyhow::Result<Updated> {
        let algo = &self.cfg.algo;
        let rescoring = std::time::Instant::now();
        let decoupled = match staleness {
            0 => None,
            _ => {
                self.policy.set_sampling(sampling);
                let (policy, chunk, cap) =
                    (self.policy.as_ref(), algo.minibatch.max(1), algo.behaviour_weight_cap());
                let group = self.group.as_deref();
                Some(off_runtime(|| decouple(policy, &mut samples, chunk, cap, group))?)
            }
        };
        let rescore_secs = rescoring.elapsed().as_secs_f64();
        let lr = algo.policy_lr(self.cfg.run.iterations, it);
        self.opt.set_lr(lr);
        let step_algo = AlgoConfig { beta: scored.beta, ..algo.clone() };
        let trains_policy = self.algorithm.trains_policy(it);
        // Off the async runtime: browsers kept open between iterations keep their tasks.
        let (policy, opt, reference) = (self.policy.as_ref(), &mut self.opt, self.kl.in_loss(algo));
        let (seed, group) = (self.cfg.run.seed, self.group.as_deref());
        let stats = match trains_policy {
            true => off_runtime(|| {
                update_parallel(policy, reference, opt, &samples, &step_algo, seed, it, group)
            })?,
            false => Default::default(),
        };
        self.keep_ranks_in_step(it)?;
        self.algorithm.after_update(&self.cfg.algo, seed, it)?;
        let kl = scored.rollout_kl.unwrap_or(stats.loss.kl);
        if trains_policy {
            if let Some(b) = KlTerm::adapt(&self.cfg.algo, scored.beta, kl, samples.len()) {
                self.state.kl_coef = Some(b);
            }
        }
        Ok(Updated { stats, lr, decoupled, rescore_secs, kl, beta: scored.beta })
    }

    /// In a data-parallel run the ranks took the same steps from the same sums; a
    /// difference means a kernel that is not deterministic. Rank 0's weights then become
    /// everyone's.
    fn keep_ranks_in_step(&self, it: u64) -> anyhow::Result<()> {
        let Some(g) = self.group.as_deref() else { return Ok(()) };
        let differing = off_runtime(|| crate::dist::tensors::keep_in_step(g, &self.policy.trainable_vars()))?;
        if !differing.is_empty() {
            tracing::warn!(
                "iteration {}: rank(s) {differing:?} held other weights than rank 0 after the update; \
                 they now hold rank 0's",
                it + 1
            );
        }
        Ok(())
    }

    /// The metrics line of the iteration just done (`self.state` already counts it).
    pub(super) fn metrics_of(
        &self,
        collected: &Collection,
        staleness: u64,
        astats: &AdvantageStats,
        u: &Updated,
        weights: Option<&[f64]>,
        t: Timing,
    ) -> IterationMetrics {
        let up = &u.stats;
        // the update's own rescoring counts as scoring
        let update_secs = t.update_secs - u.rescore_secs;
        let mut m = IterationMetrics {
            iteration: self.state.iteration,
            env_steps: self.state.env_steps,
            lr: u.lr,
            grad_norm: up.grad_norm,
            optimizer_steps: up.optimizer_steps,
            skipped_steps: up.skipped_steps,
            flat_steps: up.flat_steps,
            first_ratio_mean: up.first.map_or(1.0, |f| f.ratio_mean),
            rollout_secs: t.rollout_secs,
            score_secs: t.score_secs + u.rescore_secs,
            switch_secs: t.switch_secs,
            update_secs,
            train_tokens_per_sec: up.tokens as f64 / update_secs.max(1e-9),
            wall_secs: t.wall_secs,
            ..Default::default()
        };
        m.set_advantage(astats);
        collected.set_metrics(&mut m); // every collected rollout, not only those trained on
        let ids: Vec<String> = self.tasks.iter().map(|t| t.id().to_string()).collect();
        if ids.len() > 1 {
            m.task_success = collected
                .task_counts
                .iter()
                .map(|(id, &(n, s))| (id.clone(), s as f64 / n.max(1) as f64))
                .collect();
        }
        if let Some(w) = weights {
            m.task_weights = ids.iter().cloned().zip(w.iter().copied()).collect();
        }
        if self.cfg.rollout.max_staleness > 0 {
            m.staleness = Some(staleness);
            m.behaviour_weight_mean = Some(u.decoupled.map_or(1.0, |d| d.weight_mean));
            m.behaviour_weight_capped = Some(u.decoupled.map_or(0.0, |d| d.capped_frac));
        }
        m.set_loss(&up.loss);
        if let Some(s) = up.kl_stop {
            m.kl_early_stop = 1;
            m.kl_stop_epoch = Some(s.epoch as u64);
            m.kl_stop_minibatch = Some(s.minibatch as u64);
            m.kl_stop_approx_kl = Some(s.approx_kl);
        }
        self.algorithm.log(&mut m);
        (m.kl, m.kl_coef) = (u.kl, u.beta);
        m
    }

    /// The log phase: the evaluation when one is due (every `eval.interval` iterations,
    /// the last one, the budget's end), then the metrics line (with a few of `recs`'
    /// frames) and the plots.
    pub(super) async fn log(
        &mut self,
        mut m: IterationMetrics,
        recs: &[Recorded],
    ) -> anyhow::Result<IterationMetrics> {
        let (interval, done) = (self.cfg.eval.interval, self.state.iteration);
        if interval > 0
            && (done.is_multiple_of(interval) || done == self.cfg.run.iterations || self.budget_spent())
        {
            let e = self.evaluate().await?;
            m.eval_success = Some(e.success);
            m.eval_reward = Some(e.reward);
            m.eval_env_errors = (e.lost > 0).then_some(e.lost as u64);
        }
        let every = self.cfg.rollout.record_every;
        if every > 0 && done.is_multiple_of(every) && self.writes() {
            self.record_rollouts(recs)?;
        }
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.append_with_frames(&m, recs)?;
            if let Err(e) = crate::train::plots::plot_run(&self.run_dir) {
                tracing::warn!("plots not written: {e:#}");
            }
        }
        Ok(m)
    }
}
