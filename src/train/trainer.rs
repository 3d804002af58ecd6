//! The training loop: collect G rollouts of B task seeds, score them group-relative,
//! then μ epochs of clipped-surrogate minibatch updates; metrics, plots, evaluation and
//! checkpoints along the way. Reads top to bottom like the GRPO paper's algorithm 1.

use super::checkpoint::{self, TrainerState};
use super::config::TrainConfig;
use super::metrics::{mean_loss_stats, read_metrics, IterationMetrics, MetricsWriter};
use super::optim::{clip_grad_norm, AdamW};
use super::{group_advantages, policy_loss, LossInputs};
use crate::env::{EnvConfig, EpisodeStatus, GuiAction, ScreenState};
use crate::policy::vlm::VlmPolicy;
use crate::rollout::{Collector, Group, Job, Recorded, TrainingBatch, Trajectory, TrajectorySet};
use crate::tasks::Task;
use anyhow::{bail, Context};
use candle_core::{Device, Tensor};
use image::RgbImage;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One action to learn from: the state it was taken in, the action, the log-probs the
/// policy had when it acted, and the trajectory's advantage.
struct Sample {
    state: ScreenState,
    action: GuiAction,
    old_logp: Vec<f32>,
    adv: f32,
}

/// Deterministic per-(seed, iteration, purpose) generator, so a resumed run draws exactly
/// what an uninterrupted one would without saving generator state.
fn rng_for(seed: u64, iteration: u64, purpose: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (iteration << 8) ^ purpose)
}

/// The observation step `i` of trajectory `t` acted on, rebuilt from its screenshot
/// (what the policy reads: task, instruction, frame, elements, screenshot).
fn recorded_state(t: &Trajectory, i: usize, screenshot: RgbImage) -> ScreenState {
    ScreenState {
        task_id: t.task_id.clone(),
        instruction: t.instruction.clone(),
        url: String::new(),
        step: i as u32,
        frame: t.frame,
        elements: t.steps.get(i).map(|s| s.elements.clone()).unwrap_or_default(),
        screenshot,
    }
}

/// Rebuild the observation a step acted on from a recorded episode's frames.
fn step_state(rec: &Recorded, i: usize) -> Option<ScreenState> {
    Some(recorded_state(&rec.trajectory, i, rec.frames.get(i)?.clone()))
}

/// `[algo] truncation_reward`: rollouts that hit the step limit train on this reward
/// instead of the task's (`reward_mean` counts it too; success is by status).
fn score_truncations(recs: &mut [Recorded], reward: Option<f64>) {
    let Some(r) = reward else { return };
    for rec in recs {
        let out = &mut rec.trajectory.outcome;
        if out.status == EpisodeStatus::Truncated {
            out.reward = r;
        }
    }
}

/// Group recorded episodes by their group id, in order of first appearance.
fn into_batch(recs: &[Recorded]) -> (TrainingBatch, Vec<Vec<usize>>) {
    let mut batch = TrainingBatch::default();
    let mut index: Vec<Vec<usize>> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let t = &r.trajectory;
        match batch.groups.iter().position(|g| g.id == t.group) {
            Some(g) => {
                batch.groups[g].trajectories.push(t.clone());
                index[g].push(i);
            }
            None => {
                batch.groups.push(Group {
                    task_id: t.task_id.clone(),
                    seed: t.seed,
                    id: t.group,
                    trajectories: vec![t.clone()],
                });
                index.push(vec![i]);
            }
        }
    }
    (batch, index)
}

/// Pad per-sample vectors into a `[B, T]` tensor.
fn padded(rows: &[&[f32]], t: usize, device: &Device) -> candle_core::Result<Tensor> {
    let mut flat = vec![0f32; rows.len() * t];
    for (b, r) in rows.iter().enumerate() {
        for (j, v) in r.iter().take(t).enumerate() {
            flat[b * t + j] = *v;
        }
    }
    Tensor::from_vec(flat, (rows.len(), t), device)
}

/// Everything a training run holds.
pub struct Trainer {
    cfg: TrainConfig,
    run_dir: PathBuf,
    policy: VlmPolicy,
    reference: Option<VlmPolicy>,
    opt: AdamW,
    tasks: Vec<Arc<dyn Task>>,
    collector: Collector,
    state: TrainerState,
    metrics: MetricsWriter,
    /// Show progress bars.
    pub progress: bool,
}

impl Trainer {
    /// Set up a run in `run_dir` (resuming from its latest checkpoint if asked).
    pub fn new(cfg: TrainConfig, run_dir: PathBuf, resume: bool) -> anyhow::Result<Trainer> {
        let device = cfg.candle_device()?;
        let tasks =
            cfg.tasks.ids.iter().map(|id| crate::tasks::load_task(id)).collect::<anyhow::Result<Vec<_>>>()?;
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("cannot create run folder {}", run_dir.display()))?;
        let latest = if resume { checkpoint::latest(&run_dir)? } else { None };
        if resume && latest.is_none() {
            bail!("--resume: {} has no checkpoint yet; start without --resume", run_dir.display());
        }
        if !resume && checkpoint::latest(&run_dir)?.is_some() {
            bail!(
                "{} already holds a run: pass --resume to continue it, or choose another --out",
                run_dir.display()
            );
        }
        std::fs::write(run_dir.join("config.toml"), cfg.to_toml()?)?;
        let policy = match &latest {
            Some(dir) => VlmPolicy::load(dir, &device)?,
            None => cfg.model.build_policy(&device, cfg.run.seed)?,
        };
        let mut opt = AdamW::from_varmap(policy.varmap(), cfg.algo.adamw_config())?;
        let state = match &latest {
            Some(dir) => checkpoint::load_state(dir, &mut opt)?,
            None => TrainerState::default(),
        };
        // The KL reference is the starting policy, kept on disk so a resume finds it.
        let reference = if cfg.algo.beta > 0.0 {
            let dir = run_dir.join("reference");
            if !dir.join(crate::policy::vlm::WEIGHTS_FILE).is_file() {
                policy.save(&dir)?;
            }
            Some(VlmPolicy::load(&dir, &device)?)
        } else {
            None
        };
        let metrics_path = run_dir.join("metrics.jsonl");
        let metrics = if resume {
            MetricsWriter::resume(&metrics_path, state.iteration)?
        } else {
            MetricsWriter::open(&metrics_path)?
        };
        let env = EnvConfig { max_steps: Some(cfg.rollout.max_steps), ..Default::default() };
        let mut collector = Collector::new(cfg.rollout.envs, env);
        collector.keep_frames = true;
        // A batched forward pass is much cheaper per state than single ones.
        collector.batch_wait = std::time::Duration::from_millis(30);
        Ok(Trainer {
            cfg,
            run_dir,
            policy,
            reference,
            opt,
            tasks,
            collector,
            state,
            metrics,
            progress: false,
        })
    }

    /// The policy being trained.
    pub fn policy(&self) -> &VlmPolicy {
        &self.policy
    }

    /// Run every remaining iteration (after the optional SFT stage); a raised `stop` flag
    /// (Ctrl-C) saves a checkpoint and returns early.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) -> anyhow::Result<TrainerState> {
        let started = Instant::now();
        let wall0 = self.state.wall_secs;
        if self.cfg.sft.is_some() && !self.state.sft_done && self.state.iteration == 0 {
            if !self.sft(&stop).await? {
                tracing::warn!("stopped during behaviour cloning: nothing saved; a restart clones again");
                self.collector.close().await;
                return Ok(self.state.clone());
            }
            // The behaviour-cloned policy is a checkpoint of its own (`iter-000000`): GRPO's
            // gain is measured against it, and a resume does not clone again.
            self.state.sft_done = true;
            self.state.wall_secs = wall0 + started.elapsed().as_secs_f64();
            checkpoint::save(&self.run_dir, &self.policy, &self.opt, &self.state)?;
        }
        if self.state.iteration == 0 && self.cfg.eval.interval > 0 && !self.has_baseline() {
            // The starting policy (random init, or the cloned one) on the held-out seeds:
            // the first point of the success curves, what training is measured against.
            let (s, r) = self.evaluate().await?;
            self.state.wall_secs = wall0 + started.elapsed().as_secs_f64();
            self.metrics.append(&IterationMetrics {
                eval_success: Some(s),
                eval_reward: Some(r),
                wall_secs: self.state.wall_secs,
                ..Default::default()
            })?;
        }
        let total = self.cfg.run.iterations;
        let bar = self.progress.then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} iter {pos}/{len} {msg} eta {eta}")
                    .expect("template"),
            );
            b.set_position(self.state.iteration);
            b
        });
        while self.state.iteration < total {
            let m = self.iteration().await?;
            self.state.wall_secs = wall0 + started.elapsed().as_secs_f64();
            if let Some(b) = &bar {
                b.set_position(self.state.iteration);
                b.set_message(format!("reward {:.2} success {:.2}", m.reward_mean, m.success_rate));
            }
            let last = self.state.iteration == total;
            let interval = self.cfg.checkpoint.interval;
            let stopping = stop.load(Ordering::SeqCst);
            if last || stopping || (interval > 0 && self.state.iteration.is_multiple_of(interval)) {
                let dir = checkpoint::save(&self.run_dir, &self.policy, &self.opt, &self.state)?;
                if let (Some(s), Some((best, _))) = (m.eval_success, &self.state.best_eval) {
                    if s >= *best {
                        self.state.best_eval = Some((s, dir.display().to_string()));
                        checkpoint::mark_best(&self.run_dir, &dir)?;
                        std::fs::write(dir.join("trainer.json"), serde_json::to_string_pretty(&self.state)?)?;
                    }
                }
            }
            if stopping {
                tracing::warn!("stopped at iteration {}: checkpoint saved", self.state.iteration);
                break;
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        self.collector.close().await;
        Ok(self.state.clone())
    }

    /// One GRPO iteration.
    async fn iteration(&mut self) -> anyhow::Result<IterationMetrics> {
        let (cfg, it) = (self.cfg.clone(), self.state.iteration);
        let algo = &cfg.algo;
        let t0 = Instant::now();

        // 1. Sample B task seeds and collect G rollouts of each (a group).
        let mut rng = rng_for(cfg.run.seed, it, 1);
        let instances: Vec<(Arc<dyn Task>, u64)> = (0..algo.batch_seeds)
            .map(|_| {
                let task = self.tasks[rng.gen_range(0..self.tasks.len())].clone();
                (task, rng.gen_range(cfg.tasks.train_seeds.start..cfg.tasks.train_seeds.end))
            })
            .collect();
        let jobs = Job::groups(&instances, algo.group_size, it * algo.batch_seeds as u64);
        self.policy.temperature = algo.temperature;
        self.policy.greedy = false;
        // The KL compares log-probs at the same (sampling) temperature.
        if let Some(r) = self.reference.as_mut() {
            r.temperature = algo.temperature;
        }
        self.policy.set_seed(rng_for(cfg.run.seed, it, 2).gen());
        let (mut recs, cstats) = self.collector.collect(&mut self.policy, jobs, |_, _| {}).await?;
        score_truncations(&mut recs, algo.truncation_reward);
        let rollout_secs = t0.elapsed().as_secs_f64();

        // 2. Group-relative advantages; env_error rollouts get none.
        let (batch, index) = into_batch(&recs);
        let (adv, astats) = group_advantages(&batch, algo.scale_std, algo.eps);
        let mut samples = Vec::new();
        for (g, group) in batch.groups.iter().enumerate() {
            if algo.drop_all_equal_groups() && group.stats().all_equal {
                continue;
            }
            for (j, a) in adv[g].iter().enumerate() {
                let Some(a) = a else { continue };
                let rec = &recs[index[g][j]];
                for (i, step) in rec.trajectory.steps.iter().enumerate() {
                    let (Ok(action), Some(state)) = (GuiAction::parse(&step.action), step_state(rec, i))
                    else {
                        continue;
                    };
                    samples.push(Sample {
                        state,
                        action,
                        old_logp: step.token_logprobs.clone(),
                        adv: *a as f32,
                    });
                }
            }
        }

        // 3. μ epochs of minibatch updates of the clipped surrogate (+ KL, entropy).
        let t1 = Instant::now();
        let lr = algo.lr_scheduler(cfg.run.iterations).lr(it);
        self.opt.set_lr(lr);
        let loss_cfg = algo.loss_config();
        let (mut loss_stats, mut norms, mut tokens) = (Vec::new(), Vec::new(), 0usize);
        for epoch in 0..algo.epochs {
            let mut order: Vec<usize> = (0..samples.len()).collect();
            order.shuffle(&mut rng_for(cfg.run.seed, it, 100 + epoch as u64));
            for chunk in order.chunks(algo.minibatch.max(1)) {
                let states: Vec<ScreenState> = chunk.iter().map(|&k| samples[k].state.clone()).collect();
                let actions: Vec<GuiAction> = chunk.iter().map(|&k| samples[k].action.clone()).collect();
                let prep = self.policy.prepare(&states, &actions)?;
                let scores = self.policy.score(&prep)?;
                let (b, t) = scores.logp.dims2()?;
                let dev = scores.logp.device().clone();
                let old_rows: Vec<&[f32]> = chunk.iter().map(|&k| samples[k].old_logp.as_slice()).collect();
                let old = padded(&old_rows, t, &dev)?;
                let advs =
                    Tensor::from_vec(chunk.iter().map(|&k| samples[k].adv).collect::<Vec<_>>(), b, &dev)?;
                let reference = match &self.reference {
                    Some(r) => Some(r.score(&prep)?.logp.detach()),
                    None => None,
                };
                let inputs = LossInputs {
                    logp: &scores.logp,
                    old_logp: &old,
                    ref_logp: reference.as_ref(),
                    adv: &advs,
                    mask: &scores.mask,
                    entropy: Some(&scores.entropy),
                };
                let (loss, ls) = policy_loss(&loss_cfg, &inputs)?;
                let mut grads = loss.backward()?;
                let norm = clip_grad_norm(&mut grads, self.opt.vars(), algo.max_grad_norm)?;
                if norm.is_finite() {
                    self.opt.step(&grads)?;
                }
                norms.push(norm);
                tokens += ls.tokens;
                loss_stats.push(ls);
            }
        }
        let update_secs = t1.elapsed().as_secs_f64();

        // 4. Metrics, evaluation.
        self.state.iteration += 1;
        self.state.env_steps += cstats.env_steps as u64;
        let counted: Vec<&Recorded> =
            recs.iter().filter(|r| r.trajectory.outcome.status != EpisodeStatus::EnvError).collect();
        let n = counted.len().max(1) as f64;
        let rewards: Vec<f64> = counted.iter().map(|r| r.trajectory.outcome.reward).collect();
        let (rm, rs) = super::advantage::mean_std(&rewards);
        let mut m = IterationMetrics {
            iteration: self.state.iteration,
            env_steps: self.state.env_steps,
            episodes: recs.len() as u64,
            reward_mean: rm,
            reward_std: rs,
            success_rate: counted
                .iter()
                .filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success)
                .count() as f64
                / n,
            lr,
            grad_norm: norms.iter().sum::<f64>() / norms.len().max(1) as f64,
            optimizer_steps: norms.len() as u64,
            episode_len: counted.iter().map(|r| r.trajectory.outcome.steps as f64).sum::<f64>() / n,
            all_equal_groups: astats.all_equal_groups as u64,
            groups: batch.groups.len() as u64,
            env_errors: cstats.env_errors as u64,
            rollout_secs,
            update_secs,
            env_steps_per_sec: cstats.steps_per_s(),
            train_tokens_per_sec: tokens as f64 / update_secs.max(1e-9),
            wall_secs: self.state.wall_secs + t0.elapsed().as_secs_f64(),
            ..Default::default()
        };
        m.set_advantage(&astats);
        m.set_loss(&mean_loss_stats(&loss_stats));
        let interval = cfg.eval.interval;
        if interval > 0
            && (self.state.iteration.is_multiple_of(interval) || self.state.iteration == cfg.run.iterations)
        {
            let (s, r) = self.evaluate().await?;
            m.eval_success = Some(s);
            m.eval_reward = Some(r);
            if self.state.best_eval.is_none() {
                self.state.best_eval = Some((-1.0, String::new()));
            }
        }
        self.metrics.append(&m)?;
        if let Err(e) = super::plots::plot_run(&self.run_dir) {
            tracing::warn!("plots not written: {e:#}");
        }
        Ok(m)
    }

    /// Whether `metrics.jsonl` already holds the starting policy's evaluation (a run
    /// stopped after behaviour cloning and started again).
    fn has_baseline(&self) -> bool {
        read_metrics(self.metrics.path()).is_ok_and(|ms| ms.iter().any(|m| m.iteration == 0))
    }

    /// Greedy success rate and mean reward on the held-out seeds.
    pub async fn evaluate(&mut self) -> anyhow::Result<(f64, f64)> {
        let e = &self.cfg.tasks.eval_seeds;
        let t = self.tasks.len() as u64;
        let mut order: Vec<u64> = (0..self.cfg.eval.episodes as u64).collect();
        // Task by task (switching an env to another task reloads its page); the same
        // task/seed pairs as round-robin.
        order.sort_by_key(|i| i % t);
        let jobs: Vec<Job> = order
            .into_iter()
            .map(|i| Job {
                task: self.tasks[(i % t) as usize].clone(),
                seed: e.start + i % e.count.max(1),
                group: None,
            })
            .collect();
        let greedy = self.policy.greedy;
        self.policy.greedy = true;
        self.collector.keep_frames = false;
        let res = self.collector.collect(&mut self.policy, jobs, |_, _| {}).await;
        self.collector.keep_frames = true;
        self.policy.greedy = greedy;
        let (recs, _) = res?;
        let n = recs.len().max(1) as f64;
        let s =
            recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count() as f64 / n;
        let r = recs.iter().map(|r| r.trajectory.outcome.reward).sum::<f64>() / n;
        Ok((s, r))
    }

    /// Record `n` oracle episodes per task on training seeds into `demos/` (kept if it
    /// is already complete, so a restarted run does not record twice).
    async fn record_demos(&mut self, n: usize) -> anyhow::Result<PathBuf> {
        let dir = self.run_dir.join("demos");
        let want = n * self.tasks.len();
        if TrajectorySet::read(&dir).is_ok_and(|s| s.trajectories.len() >= want) {
            return Ok(dir);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let tr = self.cfg.tasks.train_seeds;
        let mut rng = rng_for(self.cfg.run.seed, 0, 11);
        // Task by task: switching an env to another task reloads its page.
        let jobs: Vec<Job> = (0..want)
            .map(|i| Job {
                task: self.tasks[i / n].clone(),
                seed: rng.gen_range(tr.start..tr.end),
                group: None,
            })
            .collect();
        let mut writer = crate::rollout::store::TrajectoryWriter::open(&dir)?;
        let mut oracle = crate::policy::oracle::OraclePolicy;
        let mut failed = None;
        let (recs, _) = self
            .collector
            .collect(&mut oracle, jobs, |_, rec| {
                if let Err(e) = writer.append(rec) {
                    failed.get_or_insert(e);
                }
            })
            .await?;
        if let Some(e) = failed {
            return Err(e.context(format!("writing demonstrations to {}", dir.display())));
        }
        let ok = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
        tracing::info!(
            "recorded {} oracle demonstrations ({ok} successful) in {}",
            recs.len(),
            dir.display()
        );
        Ok(dir)
    }

    /// Behaviour cloning on a recorded trajectory set (cross-entropy on the action
    /// tokens at temperature 1); metrics go to `sft.jsonl` in the run folder. Returns
    /// false when `stop` was raised (checked between epochs).
    async fn sft(&mut self, stop: &AtomicBool) -> anyhow::Result<bool> {
        let sft = self.cfg.sft.clone().expect("sft configured");
        // Validation guarantees exactly one of the two.
        let dir = match (&sft.dir, sft.oracle_episodes) {
            (Some(d), _) => d.clone(),
            (None, Some(n)) => self.record_demos(n).await?,
            (None, None) => bail!("[sft] needs sft.dir or sft.oracle_episodes"),
        };
        let set = TrajectorySet::read(&dir)?;
        let mut samples = Vec::new();
        for st in &set.trajectories {
            let t = &st.trajectory;
            for (i, step) in t.steps.iter().enumerate() {
                let (Some(frame), Ok(action)) = (&step.frame, GuiAction::parse(&step.action)) else {
                    continue;
                };
                samples.push((recorded_state(t, i, set.load_frame(frame)?), action));
            }
        }
        if samples.is_empty() {
            bail!("{} has no steps with frames to learn from", dir.display());
        }
        let mut log = std::fs::File::create(self.run_dir.join("sft.jsonl"))?;
        let (temp, lr) = (self.policy.temperature, self.opt.lr());
        self.policy.temperature = 1.0;
        self.opt.set_lr(sft.lr);
        let mut finished = true;
        for epoch in 0..sft.epochs {
            if stop.load(Ordering::SeqCst) {
                finished = false;
                break;
            }
            let mut order: Vec<usize> = (0..samples.len()).collect();
            order.shuffle(&mut rng_for(self.cfg.run.seed, epoch as u64, 7));
            let (mut total, mut count) = (0.0, 0);
            for chunk in order.chunks(sft.minibatch.max(1)) {
                let states: Vec<ScreenState> = chunk.iter().map(|&k| samples[k].0.clone()).collect();
                let actions: Vec<GuiAction> = chunk.iter().map(|&k| samples[k].1.clone()).collect();
                let s = self.policy.log_probs(&states, &actions)?;
                // Token-mean negative log-likelihood over the real action tokens.
                let loss = (s.logp.sum_all()?.neg()? / s.mask.sum_all()?.to_scalar::<f32>()? as f64)?;
                let mut grads = loss.backward()?;
                clip_grad_norm(&mut grads, self.opt.vars(), self.cfg.algo.max_grad_norm)?;
                self.opt.step(&grads)?;
                total += loss.to_scalar::<f32>()? as f64;
                count += 1;
            }
            use std::io::Write;
            writeln!(
                log,
                "{}",
                serde_json::json!({"epoch": epoch + 1, "nll": total / count.max(1) as f64, "samples": samples.len()})
            )?;
        }
        self.policy.temperature = temp;
        self.opt.set_lr(lr);
        Ok(finished)
    }
}

/// The run folder for a config and an optional `--out`.
pub fn run_dir(cfg: &TrainConfig, out: Option<&Path>) -> PathBuf {
    out.map(Path::to_path_buf).unwrap_or_else(|| cfg.run_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Outcome, FORMAT_VERSION};

    #[test]
    fn truncations_train_on_the_configured_reward() {
        let rec = |status, reward| Recorded {
            trajectory: Trajectory {
                version: FORMAT_VERSION,
                task_id: "builtin/counter".into(),
                seed: 0,
                instruction: String::new(),
                frame: Default::default(),
                max_steps: Some(3),
                policy: String::new(),
                group: Some(0),
                steps: vec![],
                final_frame: None,
                outcome: Outcome { reward, status, steps: 3, error: None },
            },
            frames: vec![],
        };
        let mut recs = vec![
            rec(EpisodeStatus::Truncated, 0.0),
            rec(EpisodeStatus::Fail, -1.0),
            rec(EpisodeStatus::Success, 1.0),
        ];
        let rewards = |r: &[Recorded]| r.iter().map(|r| r.trajectory.outcome.reward).collect::<Vec<_>>();
        score_truncations(&mut recs, None);
        assert_eq!(rewards(&recs), [0.0, -1.0, 1.0], "unset: the task's rewards");
        score_truncations(&mut recs, Some(-1.0));
        assert_eq!(rewards(&recs), [-1.0, -1.0, 1.0], "only the truncated rollout changes");
    }
}
