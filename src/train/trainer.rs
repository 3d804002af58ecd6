//! The training loop. One iteration, top to bottom like the GRPO paper's algorithm 1:
//!
//! ```text
//! jobs      = B task seeds × G rollouts                      (one group per seed)
//! rollouts  = collector.collect(policy, jobs)                (token ids + log-probs kept)
//!             again on fresh seeds until B groups are informative (dynamic_sampling.rs)
//! rewards   = task reward, truncation / give-up / overlong corrections  (rewards.rs)
//!             − β·KL per step with kl_mode = "reward"        (algorithm/kl_term.rs, kl.rs)
//! adv       = algorithm.advantages(groups)                   (algorithm/, advantage/)
//!             GiGPO: with its anchor states; PPO: GAE over the critic's values (value/)
//! μ epochs of minibatches: objective(logπ, logπ_old, logπ_ref, adv) → AdamW step  (update.rs)
//! algorithm.after_update: PPO's critic's value-loss epochs; the policy waits out `critic_warmup`
//! β ← adaptive(β, KL) with kl_target                        (algorithm/kl_term.rs, kl.rs)
//! metrics, evaluation (every one a candidate for `best`), checkpoint
//! ```
//!
//! What depends on `[algo] kind` is the run's [`Algorithm`] (it owns PPO's critic); the
//! iteration calls its hooks in a fixed order (`trainer/phases.rs`: update and log).
//!
//! With `[rollout] max_staleness = 1` the next iteration's collection runs during the
//! update, with the weights the update starts from ([`overlap`]).
//!
//! Behaviour cloning (`sft.rs`), oracle demonstrations (`demos.rs`) and evaluation
//! (`eval.rs`) live in their own files. The trainer knows the policy only through
//! [`TrainablePolicy`].

use super::algorithm::kl_term::KlTerm;
use super::algorithm::Algorithm;
use super::checkpoint::{self, ResumePoint, TrainerState};
use super::config::TrainConfig;
use super::curriculum::{self, TaskSampling};
use super::dynamic_sampling::collect_groups;
use super::eval::{eval_jobs, evaluate, evaluate_counts, test_jobs, EvalCounts, EvalResult};
use super::metrics::{read_metrics, IterationMetrics, MetricsWriter};
use super::optim::AdamW;
use super::seeds::rng_for;
use super::success_replay::SuccessReplay;
use super::update::update_parallel;
use crate::dist::ProcessGroup;
use crate::env::EnvConfig;
use crate::policy::{Sampling, TrainablePolicy};
use crate::rollout::runtime::off_runtime;
use crate::rollout::{Collector, TrajectorySet};
use crate::tasks::Task;
use anyhow::{bail, Context};
use rand::Rng;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod behaviour;
mod cloning;
mod folder;
pub mod overlap;
mod phases;

/// The KL reference's folder inside a run folder.
pub const REFERENCE_DIR: &str = "reference";
pub use super::checkpoint::SFT_OPTIMIZER_FILE;

/// Everything a training run holds.
pub struct Trainer {
    cfg: TrainConfig,
    run_dir: PathBuf,
    policy: Box<dyn TrainablePolicy>,
    /// The KL to the frozen reference (in the reward or the loss, the adaptive β).
    kl: KlTerm,
    opt: AdamW,
    /// What depends on `[algo] kind`, with its own state (PPO's critic).
    algorithm: Box<dyn Algorithm>,
    tasks: Vec<Arc<dyn Task>>,
    collector: Collector,
    state: TrainerState,
    /// `None` on the ranks other than 0 (only rank 0 writes the run folder).
    metrics: Option<MetricsWriter>,
    /// Show progress bars.
    pub progress: bool,
    /// False while an update is under way: the weights then belong to no iteration, and
    /// a failing run must not checkpoint them.
    consistent: bool,
    /// Behaviour cloning's optimizer, until the clone's checkpoint holds it.
    sft_opt: Option<AdamW>,
    /// `algo.success_replay`'s buffer (empty when off).
    replay: SuccessReplay,
    /// The ranks of a data-parallel run ([`crate::dist`]); `None`: this process alone.
    group: Option<Arc<ProcessGroup>>,
    /// `[rollout] max_staleness = 1`: the behaviour weights and the collection under way.
    overlap: behaviour::Overlap,
}

/// An iteration's wall-clock figures.
struct Timing {
    rollout_secs: f64,
    /// Scoring before the update phase (the update's own rescoring is added to it).
    score_secs: f64,
    switch_secs: f64,
    /// The update phase, its rescoring included.
    update_secs: f64,
    wall_secs: f64,
}

impl Trainer {
    /// Set up a run in `run_dir` (resuming from its latest checkpoint if asked; `force`
    /// resumes with a config that differs from the run's, see [`super::run_folder`]).
    pub fn new(cfg: TrainConfig, run_dir: PathBuf, resume: bool, force: bool) -> anyhow::Result<Trainer> {
        Trainer::new_in_group(cfg, run_dir, resume, force, None)
    }

    /// [`Trainer::new`] as one rank of a data-parallel run (see [`crate::dist`]): rank 0
    /// prepares and writes the run folder, every rank reads it, and each uses the GPU
    /// `cuda:(N + LOCAL_RANK)` for a config's `cuda:N`.
    pub fn new_in_group(
        cfg: TrainConfig,
        run_dir: PathBuf,
        resume: bool,
        force: bool,
        group: Option<Arc<ProcessGroup>>,
    ) -> anyhow::Result<Trainer> {
        let device = cfg.candle_device_for_rank(group.as_ref().map_or(0, |g| g.local_rank()))?;
        let tasks =
            cfg.tasks.ids.iter().map(|id| crate::tasks::load_task(id)).collect::<anyhow::Result<Vec<_>>>()?;
        crate::policy::judge::Judge::check_tasks(&tasks)?;
        // The model first: a checkpoint that does not load must not leave a run folder.
        let mut policy = cfg.model.build(&device, cfg.run.seed)?;
        let start = match &group {
            None => super::run_folder::prepare(&run_dir, &cfg, resume, force)?,
            Some(g) => {
                // Rank 0 prepares the folder (its refusals stop every rank); then all read it.
                let prepared = match g.is_root() {
                    true => super::run_folder::prepare(&run_dir, &cfg, resume, force).map(|_| Vec::new()),
                    false => Ok(Vec::new()),
                };
                g.all_gather(prepared.map_err(|e| format!("{e:#}")))?;
                checkpoint::resume_point(&run_dir)?.filter(|_| resume)
            }
        };
        let latest = start.as_ref().and_then(|p| p.checkpoint()).map(Path::to_path_buf);
        let writes = group.as_ref().is_none_or(|g| g.is_root());
        let worst_failure = tasks.iter().map(|t| t.failure_reward()).fold(0.0, f64::min);
        if let Some(w) = cfg.algo.stalling_warning(worst_failure) {
            tracing::warn!("{w}");
        }
        for w in cfg.algo.warnings() {
            tracing::warn!("{w}");
        }
        if cfg.rollout.max_staleness == 0 && cfg.algo.behaviour_weight_cap.is_some() {
            tracing::warn!(
                "algo.behaviour_weight_cap weights samples collected with older weights, which only \
                 rollout.max_staleness = 1 collects: at 0 it does nothing"
            );
        }
        if let Ok(o) = cfg.model.observation() {
            tracing::info!(
                "training {} on {}: observation: {o}",
                run_dir.display(),
                cfg.tasks.ids.join(", ")
            );
        }
        let mut opt = AdamW::new(policy.trainable_vars(), cfg.algo.adamw_config())?;
        // A cloning under way resumes in `sft()` (its optimizer is cloning's own).
        let mut state = match &start {
            Some(ResumePoint::Checkpoint(dir)) => {
                policy.load(dir)?;
                checkpoint::load_state(dir, &mut opt)?
            }
            Some(ResumePoint::Cloning(dir)) => {
                policy.load(dir)?;
                checkpoint::read_state(dir)?
            }
            None => TrainerState::default(),
        };
        let world_size = group.as_ref().map_or(1, |g| g.world());
        // said once (rank 0); a new run has nothing to differ from
        let changed = super::run_folder::world_size_warning(&run_dir, state.world_size, world_size);
        if let Some(w) = changed.filter(|_| writes && start.is_some()) {
            tracing::warn!("{w}");
        }
        state.world_size = world_size;
        let algorithm = super::algorithm::for_run(&cfg, &device, latest.as_deref())?;
        let replay = match &latest {
            Some(dir) => SuccessReplay::load(cfg.algo.success_replay, dir)?,
            None => SuccessReplay::new(cfg.algo.success_replay),
        };
        // A resumed run finds its KL reference on disk; a new one makes it when RL starts.
        let kl = KlTerm::resume(&cfg.algo, policy.as_ref(), &run_dir.join(REFERENCE_DIR), latest.is_some())?;
        let overlap = behaviour::Overlap::resume(&cfg, policy.as_ref(), latest.as_deref())?;
        let metrics_path = run_dir.join("metrics.jsonl");
        let metrics = match writes {
            false => None,
            true => {
                let mut metrics = if resume {
                    MetricsWriter::resume(&metrics_path, state.iteration)?
                } else {
                    MetricsWriter::open(&metrics_path)?
                };
                if cfg.run.tensorboard {
                    metrics.log_to_tensorboard(&run_dir.join(super::tensorboard::TENSORBOARD_DIR))?;
                }
                Some(metrics)
            }
        };
        if let Some(g) = &group {
            // Fresh adapters drawn on different GPUs need not agree: every rank starts from
            // rank 0's weights.
            crate::dist::tensors::keep_in_step(g, &policy.trainable_vars())?;
        }
        let env = EnvConfig { max_steps: Some(cfg.rollout.max_steps), ..Default::default() };
        let mut collector = Collector::new(cfg.rollout.envs, env);
        collector.keep_frames = true;
        // Bit-exact runs whatever the timing and the number of browsers: each state has a
        // forward pass of its own, never shaped by whichever other envs were waiting.
        collector.one_state_per_call = true;
        // An overlapped collection exchanges its episodes while the update sums gradients:
        // over connections of its own, so that the two never meet.
        collector.group = match &group {
            Some(g) if cfg.rollout.max_staleness > 0 => Some(Arc::new(g.another()?)),
            g => g.clone(),
        };
        Ok(Trainer {
            cfg,
            run_dir,
            policy,
            kl,
            opt,
            algorithm,
            tasks,
            collector,
            state,
            metrics,
            progress: false,
            consistent: true,
            sft_opt: None,
            replay,
            group,
            overlap,
        })
    }

    /// The policy being trained.
    pub fn policy(&self) -> &dyn TrainablePolicy {
        self.policy.as_ref()
    }

    /// The frozen KL reference, once RL has started (`beta > 0` only).
    pub fn reference(&self) -> Option<&dyn TrainablePolicy> {
        self.kl.reference()
    }

    /// Run every remaining iteration (after the optional SFT stage); a raised `stop` flag
    /// (Ctrl-C) saves a checkpoint and returns early.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) -> anyhow::Result<TrainerState> {
        let started = Instant::now();
        let wall0 = self.state.wall_secs;
        let elapsed = |wall0: f64| wall0 + started.elapsed().as_secs_f64();
        if self.cfg.sft.is_some() && !self.state.sft_done && self.state.iteration == 0 {
            if !self.sft(&stop).await? {
                // `sft()` saved the cloning so far in `checkpoints/cloning/`.
                self.collector.close().await;
                return Ok(self.state.clone());
            }
            // The behaviour-cloned policy is a checkpoint of its own (`iter-000000`): GRPO's
            // gain is measured against it, and a resume does not clone again. RL starts
            // with a fresh optimizer (see sft.rs).
            self.state.sft_done = true;
            self.opt = AdamW::new(self.policy.trainable_vars(), self.cfg.algo.adamw_config())?;
            self.state.wall_secs = elapsed(wall0);
            self.save_checkpoint()?;
            if self.writes() {
                checkpoint::remove_cloning(&self.run_dir);
            }
            self.sft_opt = None;
        }
        self.ensure_reference()?;
        if self.state.iteration == 0 && self.replay.is_empty() {
            self.seed_replay_from_demos()?;
        }
        if self.state.iteration == 0 && self.cfg.eval.interval > 0 && !self.has_baseline() {
            // The starting policy on the held-out seeds: the first point of the success
            // curves, what training is measured against, and the first `best` candidate.
            let e = self.evaluate().await?;
            self.state.wall_secs = elapsed(wall0);
            self.consider_best(e)?;
            if let Some(metrics) = self.metrics.as_mut() {
                metrics.append(&IterationMetrics {
                    eval_success: Some(e.success),
                    eval_reward: Some(e.reward),
                    eval_env_errors: (e.lost > 0).then_some(e.lost as u64),
                    wall_secs: self.state.wall_secs,
                    ..Default::default()
                })?;
            }
        }
        // The last held-out success, shown on the progress line (a resumed run's from its file).
        let mut last_eval = read_metrics(&self.run_dir.join("metrics.jsonl"))
            .ok()
            .and_then(|ms| ms.iter().rev().find_map(|m| m.eval_success.map(|s| (m.iteration, s))));
        let total = self.cfg.run.iterations;
        if self.state.iteration >= total && total > 0 {
            tracing::warn!(
                "the run is already at iteration {} of run.iterations = {total}: nothing to train; \
                 raise run.iterations in the config to continue it",
                self.state.iteration
            );
        }
        let bar = self.progress.then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} iter {pos}/{len} {msg} eta {eta}")
                    .expect("template"),
            );
            b.set_position(self.state.iteration);
            b
        });
        while self.state.iteration < total && !self.budget_spent() {
            let m = match self.iteration().await {
                Ok(m) => m,
                Err(e) => return Err(self.stop_with(e).await),
            };
            self.state.wall_secs = elapsed(wall0);
            if let Some(success) = m.eval_success {
                last_eval = Some((self.state.iteration, success));
            }
            if let Some(b) = &bar {
                b.set_position(self.state.iteration);
                let sampling = if self.cfg.algo.dynamic_sampling.is_some() {
                    format!(" pass {:.2} +{} extra", m.pass_rate, m.extra_collections)
                } else {
                    String::new()
                };
                b.set_message(format!(
                    "reward {:.2} success {:.2}{sampling}{} | {}",
                    m.reward_mean,
                    m.success_rate,
                    held_out(last_eval),
                    m.time_split()
                ));
            } else if self.writes() {
                // Without a terminal (a log file, CI) the same line goes to the log.
                tracing::info!(
                    "iteration {}/{total}: reward {:.2} success {:.2}{} | {}",
                    self.state.iteration,
                    m.reward_mean,
                    m.success_rate,
                    held_out(last_eval),
                    m.time_split()
                );
            }
            let last = self.state.iteration == total || self.budget_spent();
            let interval = self.cfg.checkpoint.interval;
            // Every rank stops at the same iteration, whichever was signalled.
            let stopping = stop.load(Ordering::SeqCst);
            let stopping = match &self.group {
                Some(g) => g.any(stopping)?,
                None => stopping,
            };
            if let (Some(success), Some(reward)) = (m.eval_success, m.eval_reward) {
                let lost = m.eval_env_errors.unwrap_or(0) as usize;
                self.consider_best(EvalResult { success, reward, lost })?;
            } else if last || stopping || (interval > 0 && self.state.iteration.is_multiple_of(interval)) {
                self.save_checkpoint()?;
            }
            if stopping {
                if self.writes() {
                    tracing::warn!("stopped at iteration {}: checkpoint saved", self.state.iteration);
                }
                break;
            }
            if last {
                break;
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        // A collection started for an iteration this run will not train on (a stop).
        self.settle().await?;
        self.collector.close().await;
        Ok(self.state.clone())
    }

    /// One iteration: collect → score → advantages → update → log (update and log are in
    /// `trainer/phases.rs`; what depends on the kind is the [`Algorithm`]'s).
    async fn iteration(&mut self) -> anyhow::Result<IterationMetrics> {
        let it = self.state.iteration;
        let t0 = Instant::now();

        // 1. Collect B task seeds × G rollouts (a group each); dynamic sampling collects
        //    more groups on fresh seeds until B are informative (dynamic_sampling.rs), and
        //    the rewards get their truncation, give-up and overlong corrections
        //    (rewards.rs). Each (episode, step) samples from its own stream, so the draw
        //    does not depend on batching. With max_staleness = 1 the rollouts were
        //    collected during the last update, with the weights it started from (overlap.rs).
        let sampling = self.sampling_for(it);
        self.kl.set_sampling(sampling);
        let weights = self.task_weights();
        let (collected, staleness) = self.rollouts(it, sampling, weights.as_deref()).await?;
        if weights.is_some() {
            // Before the next collection starts: it draws tasks by the tallies through here.
            curriculum::update(&mut self.state.task_tallies, &collected.task_counts);
        }
        let rollout_secs = t0.elapsed().as_secs_f64();

        // 2. Score: the kept groups with their training rewards; with kl_mode = "reward"
        //    each step's reward first loses β · KL(rollout ‖ reference) (kl.rs).
        let scoring = Instant::now();
        let beta = KlTerm::beta(&self.cfg.algo, self.state.kl_coef);
        let scored = self.kl.score(&self.cfg.algo, beta, &collected.recs)?;

        // 3. Advantages, by the algorithm (GiGPO's anchor states, PPO's critic and GAE);
        //    env_error rollouts get none.
        let (adv, astats) = self.algorithm.advantages(&self.cfg.algo, &scored)?;
        let reads_previous = self.policy.reads_previous_screenshot();
        let samples = super::update::samples(&collected.recs, &scored.index, &adv, reads_previous)?;

        // 4. Update: μ epochs of minibatches of the objective (+ KL, entropy) at this
        //    iteration's β, then the algorithm's own training and the adaptive β. With
        //    max_staleness = 1 the next iteration's collection starts now.
        let score_secs = scoring.elapsed().as_secs_f64();
        self.consistent = false;
        let switching = Instant::now();
        self.start_next(it, self.state.env_steps + collected.stats.env_steps as u64)?;
        let switch_secs = switching.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let updated = self.update(it, sampling, staleness, samples, &scored)?;
        let update_secs = t1.elapsed().as_secs_f64();
        self.state.iteration += 1;
        self.consistent = true;
        self.state.env_steps += collected.stats.env_steps as u64;

        // 5. Log: the metrics line, the evaluation when due, the plots.
        let wall_secs = self.state.wall_secs + t0.elapsed().as_secs_f64();
        let timing = Timing { rollout_secs, score_secs, switch_secs, update_secs, wall_secs };
        let m = self.metrics_of(&collected, staleness, &astats, &updated, weights.as_deref(), timing);
        self.log(m, &collected.recs).await
    }

    /// Whether `run.max_env_steps` is reached.
    fn budget_spent(&self) -> bool {
        self.cfg.run.max_env_steps.is_some_and(|b| self.state.env_steps >= b)
    }

    /// Whether the run has trained all it was asked to: its behaviour cloning, then
    /// `run.iterations` or the `run.max_env_steps` budget. (A run stopped by a signal
    /// before that is not.)
    pub fn finished(&self) -> bool {
        let cloned = self.cfg.sft.is_none() || self.state.sft_done || self.state.iteration > 0;
        cloned && (self.state.iteration >= self.cfg.run.iterations || self.budget_spent())
    }

    /// Greedy success rate and mean reward on the held-out seeds.
    pub async fn evaluate(&mut self) -> anyhow::Result<EvalResult> {
        // The next iteration's collection first: the browsers are the collector's.
        self.settle().await?;
        let jobs = eval_jobs(&self.tasks, &self.cfg.tasks, self.cfg.eval.episodes);
        evaluate(&mut self.collector, self.policy.as_mut(), jobs).await
    }

    /// The current policy, greedy, on the test split: `per_task` seeds from
    /// [`super::seeds::TEST_SEEDS`] of every task (see [`test_jobs`]). Nothing in training
    /// reads it (`best` is chosen on validation); call it after [`Trainer::run`]. The
    /// browsers are closed afterwards.
    pub async fn evaluate_test(&mut self, per_task: usize) -> anyhow::Result<EvalCounts> {
        self.settle().await?;
        let jobs = test_jobs(&self.tasks, per_task);
        let c = evaluate_counts(&mut self.collector, self.policy.as_mut(), jobs).await;
        self.collector.close().await;
        c
    }

    /// Run the rollouts with `env`'s browsers (a WebDriver URL such as a Selenium Grid,
    /// chromedriver, timeouts: the CLI's browser flags) instead of local defaults; the
    /// config's `rollout.max_steps` stays in force. Call before [`Trainer::run`]: it
    /// replaces the collector, whose browsers start at their first episode.
    pub fn set_env_config(&mut self, env: EnvConfig) {
        let env = EnvConfig { max_steps: Some(self.cfg.rollout.max_steps), ..env };
        let mut collector = Collector::new(self.cfg.rollout.envs, env);
        collector.keep_frames = self.collector.keep_frames;
        collector.progress = self.collector.progress;
        collector.batch_wait = self.collector.batch_wait;
        collector.one_state_per_call = self.collector.one_state_per_call;
        // (`group`, or the same ranks over connections of their own: see `new_in_group`)
        collector.group = self.collector.group.clone();
        self.collector = collector;
    }
}

/// The progress line's part for the last held-out evaluation: ` eval 0.40 @3` (its success
/// on the eval seeds, and the iteration it was measured after), or nothing before the first.
fn held_out(last: Option<(u64, f64)>) -> String {
    last.map(|(at, success)| format!(" eval {success:.2} @{at}")).unwrap_or_default()
}

/// The run folder for a config and an optional `--out`.
pub fn run_dir(cfg: &TrainConfig, out: Option<&Path>) -> PathBuf {
    out.map(Path::to_path_buf).unwrap_or_else(|| cfg.run_dir())
}
