//! `[algo]`: which algorithm with its own settings ([`AlgoVariant`]), the coefficients
//! every kind shares, and DAPO's two techniques that any kind may turn on. The table as a
//! config writes it is [`super::algo_table::AlgoTable`]; the checks of the values are in
//! [`super::algo_check`]; old-form configs are recognised in [`super::algo_migrate`].

use super::advantage::options::{AdvStd, StepCredit};
use super::algo_table::AlgoTable;
pub use super::kl::KlMode;
use super::objective::{KlEstimator, LossAgg, LossConfig};
use super::optim::{AdamWConfig, LrSchedule, LrScheduler};
use super::rewards::TrainReward;
use serde::{Deserialize, Serialize};

pub use super::algo_kind::{
    AlgoKind, AlgoVariant, DynamicSampling, GigpoConfig, GspoConfig, GspoLevel, MinibatchOrder,
    OverlongPenalty, PpoConfig,
};

/// `[algo]`, read: the kind with its own settings, the shared keys, and the techniques.
/// It is read and written through [`super::algo_table::AlgoTable`], the table as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "AlgoTable", into = "AlgoTable")]
pub struct AlgoConfig {
    /// The algorithm (`kind`) with its own settings (`[algo.ppo]`, `[algo.gigpo]`,
    /// `[algo.gspo]`).
    pub variant: AlgoVariant,
    /// G: rollouts per task seed.
    pub group_size: usize,
    /// B: task seeds per iteration.
    pub batch_seeds: usize,
    /// ε_low (default by kind, filled in on load).
    pub clip_low: Option<f64>,
    /// ε_high (default by kind, filled in on load).
    pub clip_high: Option<f64>,
    /// Dual clip c > 1: for `A < 0` the surrogate is bounded below by `c·A` (off by default).
    pub dual_clip: Option<f64>,
    /// Aggregation of the policy term (default by kind); a sequence is one action.
    pub loss_agg: Option<LossAgg>,
    /// N of `seq-mean-token-sum-norm` (default: the model's max action tokens).
    pub loss_agg_norm: Option<f64>,
    /// β: KL weight (the starting value when `kl_target` is set).
    pub beta: f64,
    /// `k1`, `k2` or `k3`.
    pub kl_estimator: KlEstimator,
    /// `loss` (GRPO) or `reward` (PPO style).
    pub kl_mode: KlMode,
    /// Adaptive β: the KL (the `kl` metric) it steers towards (off by default).
    pub kl_target: Option<f64>,
    /// Horizon of the adaptive β controller, in env steps.
    pub kl_horizon: f64,
    /// Entropy bonus weight.
    pub entropy_coef: f64,
    /// μ: passes over each batch.
    pub epochs: usize,
    /// Approximate-KL early stop of the update (Stable-Baselines3's and CleanRL's
    /// `target_kl`; off by default): once a minibatch's `KL(π_old ‖ π)` estimate exceeds
    /// 1.5 × this, the iteration's remaining minibatches and epochs are skipped (see
    /// [`super::update::update`]). Not `kl_target`, which steers β towards a KL to the reference.
    pub target_kl: Option<f64>,
    /// The cap on the decoupled objective's importance weight π_prox / π_behav (AReaL's
    /// decoupled PPO, with `[rollout] max_staleness = 1`): each token's loss is multiplied
    /// by `min(π_prox / π_behav, cap)`, detached (default 2.0; unused at `max_staleness = 0`).
    /// See `docs/rollout-overlap.md`.
    pub behaviour_weight_cap: Option<f64>,
    /// Samples (steps) per optimizer step.
    pub minibatch: usize,
    /// How the samples are cut into minibatches.
    pub minibatch_order: MinibatchOrder,
    /// Peak learning rate.
    pub lr: f64,
    /// Decay after warmup.
    pub lr_schedule: LrSchedule,
    /// Warmup, in iterations.
    pub warmup: u64,
    /// Learning rate at the end of the decay.
    pub min_lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// Sampling temperature.
    pub temperature: f64,
    /// Which std divides the group-relative advantages: `group`, `batch` or `none`
    /// (default by kind: dr_grpo none, else group).
    pub adv_std: Option<AdvStd>,
    /// `episode` (every step its episode's advantage) or `discounted` (each step the
    /// discounted return from it, normalized within its group).
    pub step_credit: StepCredit,
    /// Added to the group std.
    pub eps: f64,
    /// γ: discount of the per-step returns (`reinforce_pp`, `gigpo`, `ppo`, `step_credit =
    /// "discounted"`; 1 = undiscounted).
    pub gamma: f64,
    /// Success replay: per task, keep the last N successful trajectories and replay one in
    /// place of a failure into each group whose rollouts all failed (0: off; see
    /// [`super::success_replay`]).
    pub success_replay: usize,
    /// Seed the success-replay buffer from this trajectory set's successful episodes
    /// before the first iteration (scored by the starting policy): for a run that starts
    /// from a clone through `[model] init`. A run with `[sft]` seeds it from the
    /// demonstrations it clones.
    pub success_replay_demos: Option<std::path::PathBuf>,
    /// Rollout trees: after each collection, K more rollouts of every group branched from
    /// one exact mid-episode state (see [`super::branch`]); `None`: flat groups only.
    pub branch: Option<super::branch::BranchConfig>,
    /// DAPO's dynamic sampling (`[algo.dynamic_sampling]`): all-equal groups are left out
    /// and replaced by newly collected ones; `None`: off. Always on for DAPO.
    pub dynamic_sampling: Option<DynamicSampling>,
    /// DAPO's soft overlong penalty on the episode reward (`[algo.overlong_penalty]`);
    /// `None`: off. Always on for DAPO.
    pub overlong_penalty: Option<OverlongPenalty>,
    /// What rollouts train on: `page`, the reward the task pays (partial credit and graded
    /// scores included), or `success`, 1 for a success by the task's success rule and the
    /// task's failure reward for any other ended episode (see [`super::rewards`]).
    pub reward: TrainReward,
    /// The reward a rollout that hit `rollout.max_steps` trains on, instead of the task's
    /// (usually 0). Set it to the task's failure reward (e.g. -1) where stalling until the
    /// step limit would otherwise score better than a wrong answer.
    pub truncation_reward: Option<f64>,
    /// The reward a rollout trains on when the agent gave up (`done()` on a task that ends
    /// by itself, such as MiniWoB++'s); default: the task's failure reward (−1 there), so
    /// quitting never pays better than a wrong answer.
    pub give_up_reward: Option<f64>,
    /// The reward any other failed rollout (a wrong answer) trains on, instead of the
    /// task's (−1 on MiniWoB++ and built-in tasks). With `gamma` < 1 set it and
    /// `truncation_reward` to 0: a negative failure reward, discounted, pays a later
    /// failure better than an earlier one, and step-level credit then teaches stalling.
    pub fail_reward: Option<f64>,
}

impl Default for AlgoConfig {
    fn default() -> Self {
        AlgoConfig {
            variant: AlgoVariant::Grpo,
            group_size: 8,
            batch_seeds: 8,
            clip_low: None,
            clip_high: None,
            dual_clip: None,
            loss_agg: None,
            loss_agg_norm: None,
            beta: 0.0,
            kl_estimator: KlEstimator::K3,
            kl_mode: KlMode::Loss,
            kl_target: None,
            kl_horizon: 10_000.0,
            entropy_coef: 0.0,
            epochs: 1,
            target_kl: None,
            behaviour_weight_cap: None,
            minibatch: 16,
            minibatch_order: MinibatchOrder::Shuffled,
            lr: 1e-4,
            lr_schedule: LrSchedule::Constant,
            warmup: 0,
            min_lr: 0.0,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            temperature: 1.0,
            adv_std: None,
            step_credit: StepCredit::Episode,
            eps: 1e-6,
            gamma: 1.0,
            success_replay: 0,
            success_replay_demos: None,
            branch: None,
            dynamic_sampling: None,
            overlong_penalty: None,
            reward: TrainReward::Page,
            truncation_reward: None,
            give_up_reward: None,
            fail_reward: None,
        }
    }
}

impl AlgoConfig {
    /// The default config of `kind`: its own settings at their defaults, and for DAPO its
    /// two techniques on.
    pub fn of(kind: AlgoKind) -> AlgoConfig {
        AlgoConfig::default().with_kind(kind)
    }
    /// This config with another kind (its own settings at their defaults; DAPO's
    /// techniques turned on, as loading `kind = "dapo"` does).
    pub fn with_kind(mut self, kind: AlgoKind) -> AlgoConfig {
        self.set_kind(kind);
        self
    }
    /// Switch to another kind, as [`AlgoConfig::with_kind`].
    pub fn set_kind(&mut self, kind: AlgoKind) {
        self.variant = AlgoVariant::of(kind);
        if kind.has_dapo_techniques() {
            self.dynamic_sampling.get_or_insert_with(DynamicSampling::default);
            self.overlong_penalty.get_or_insert_with(OverlongPenalty::default);
        }
    }
    /// The algorithm's name.
    pub fn kind(&self) -> AlgoKind {
        self.variant.kind()
    }
    /// PPO's own settings (`None` for the other kinds).
    pub fn ppo(&self) -> Option<&PpoConfig> {
        match &self.variant {
            AlgoVariant::Ppo(p) => Some(p),
            AlgoVariant::Grpo
            | AlgoVariant::DrGrpo
            | AlgoVariant::Dapo
            | AlgoVariant::Gspo(_)
            | AlgoVariant::Rloo
            | AlgoVariant::ReinforcePp
            | AlgoVariant::Gigpo(_) => None,
        }
    }
    /// The rewards training uses in place of the task's.
    pub fn reward_overrides(&self) -> super::rewards::RewardOverrides {
        super::rewards::RewardOverrides {
            reward: self.reward,
            truncation: self.truncation_reward,
            give_up: self.give_up_reward,
            fail: self.fail_reward,
        }
    }
    /// Whether the advantages use γ-discounted returns from each step.
    pub(crate) fn discounts_steps(&self) -> bool {
        self.gamma < 1.0 && (self.kind().credits_steps() || self.step_credit == StepCredit::Discounted)
    }
    /// ε_low, resolved.
    pub fn clip_low(&self) -> f64 {
        self.clip_low.unwrap_or(self.kind().default_clip().0)
    }
    /// ε_high, resolved.
    pub fn clip_high(&self) -> f64 {
        self.clip_high.unwrap_or(self.kind().default_clip().1)
    }
    /// The decoupled objective's importance-weight cap, resolved (default 2).
    pub fn behaviour_weight_cap(&self) -> f64 {
        self.behaviour_weight_cap.unwrap_or(2.0)
    }
    /// Whether all-equal groups are left out (dynamic sampling is on).
    pub fn drop_all_equal_groups(&self) -> bool {
        self.dynamic_sampling.is_some()
    }
    /// Extra collections dynamic sampling may make per iteration (0 when it is off).
    pub fn max_extra_collections(&self) -> usize {
        self.dynamic_sampling.map_or(0, |d| d.max_extra)
    }
    /// The aggregation, resolved.
    pub fn loss_agg(&self) -> LossAgg {
        self.loss_agg.unwrap_or(self.kind().default_loss_agg())
    }
    /// The advantages' std, resolved: Dr. GRPO's is none, the others' the group's.
    pub fn adv_std(&self) -> AdvStd {
        self.adv_std.unwrap_or(self.kind().default_adv_std())
    }
    /// The loss coefficients, with β as configured (the trainer passes its adaptive β
    /// through a copy of this config). With `kl_mode = "reward"` the loss has no KL term.
    pub fn loss_config(&self) -> LossConfig {
        LossConfig {
            kind: self.kind().policy_loss_kind(),
            clip_low: self.clip_low(),
            clip_high: self.clip_high(),
            dual_clip: self.dual_clip,
            agg: self.loss_agg(),
            agg_norm: self.loss_agg_norm.unwrap_or(0.0),
            beta: if self.kl_mode == KlMode::Loss { self.beta } else { 0.0 },
            kl: self.kl_estimator,
            entropy_coef: self.entropy_coef,
        }
    }
    /// AdamW settings (β1, β2, ε at their defaults).
    pub fn adamw_config(&self) -> AdamWConfig {
        AdamWConfig { lr: self.lr, weight_decay: self.weight_decay, ..Default::default() }
    }
    /// The learning-rate schedule over `iterations` (one value per iteration).
    pub fn lr_scheduler(&self, iterations: u64) -> LrScheduler {
        LrScheduler {
            schedule: self.lr_schedule,
            base_lr: self.lr,
            min_lr: self.min_lr,
            warmup: self.warmup,
            total: iterations,
        }
    }
    /// The policy's learning rate at iteration `it` (0-based) of `iterations`. The schedule
    /// counts the iterations that update the policy: PPO's critic warm-up iterations do not,
    /// so they must not spend the lr warm-up (the first policy step would be a full one).
    pub fn policy_lr(&self, iterations: u64, it: u64) -> f64 {
        let idle = self.critic_only_iterations();
        self.lr_scheduler(iterations.saturating_sub(idle)).lr(it.saturating_sub(idle))
    }
    /// The first iterations that train only PPO's critic (`critic_warmup`; 0 otherwise).
    pub fn critic_only_iterations(&self) -> u64 {
        self.ppo().map_or(0, |p| p.critic_warmup)
    }
}

/// Every field defaults as [`AlgoConfig`]'s.
impl Default for AlgoTable {
    fn default() -> Self {
        AlgoConfig::default().into()
    }
}

/// The table that reads back as `a` (its kind's sub-table written whole).
impl From<AlgoConfig> for AlgoTable {
    fn from(a: AlgoConfig) -> AlgoTable {
        let kind = a.kind();
        let (ppo, gigpo, gspo) = a.variant.into_tables();
        AlgoTable {
            kind,
            ppo,
            gigpo,
            gspo,
            dynamic_sampling: a.dynamic_sampling,
            overlong_penalty: a.overlong_penalty,
            group_size: a.group_size,
            batch_seeds: a.batch_seeds,
            clip_low: a.clip_low,
            clip_high: a.clip_high,
            dual_clip: a.dual_clip,
            loss_agg: a.loss_agg,
            loss_agg_norm: a.loss_agg_norm,
            beta: a.beta,
            kl_estimator: a.kl_estimator,
            kl_mode: a.kl_mode,
            kl_target: a.kl_target,
            kl_horizon: a.kl_horizon,
            entropy_coef: a.entropy_coef,
            epochs: a.epochs,
            target_kl: a.target_kl,
            behaviour_weight_cap: a.behaviour_weight_cap,
            minibatch: a.minibatch,
            minibatch_order: a.minibatch_order,
            lr: a.lr,
            lr_schedule: a.lr_schedule,
            warmup: a.warmup,
            min_lr: a.min_lr,
            weight_decay: a.weight_decay,
            max_grad_norm: a.max_grad_norm,
            temperature: a.temperature,
            adv_std: a.adv_std,
            step_credit: a.step_credit,
            eps: a.eps,
            gamma: a.gamma,
            success_replay: a.success_replay,
            success_replay_demos: a.success_replay_demos,
            branch: a.branch,
            reward: a.reward,
            truncation_reward: a.truncation_reward,
            give_up_reward: a.give_up_reward,
            fail_reward: a.fail_reward,
        }
    }
}

/// A sub-table of another kind than `kind` is refused, naming the kind it belongs to; DAPO
/// gets its two techniques at their defaults where the table leaves them out.
impl TryFrom<AlgoTable> for AlgoConfig {
    type Error = String;
    fn try_from(t: AlgoTable) -> Result<AlgoConfig, String> {
        let kind = t.kind;
        let variant = AlgoVariant::from_tables(kind, t.ppo, t.gigpo, t.gspo)?;
        // DAPO is GRPO with clip-higher and these two: `kind = "dapo"` always has them.
        let dapo = kind.has_dapo_techniques();
        Ok(AlgoConfig {
            variant,
            dynamic_sampling: t.dynamic_sampling.or(dapo.then(DynamicSampling::default)),
            overlong_penalty: t.overlong_penalty.or(dapo.then(OverlongPenalty::default)),
            group_size: t.group_size,
            batch_seeds: t.batch_seeds,
            clip_low: t.clip_low,
            clip_high: t.clip_high,
            dual_clip: t.dual_clip,
            loss_agg: t.loss_agg,
            loss_agg_norm: t.loss_agg_norm,
            beta: t.beta,
            kl_estimator: t.kl_estimator,
            kl_mode: t.kl_mode,
            kl_target: t.kl_target,
            kl_horizon: t.kl_horizon,
            entropy_coef: t.entropy_coef,
            epochs: t.epochs,
            target_kl: t.target_kl,
            behaviour_weight_cap: t.behaviour_weight_cap,
            minibatch: t.minibatch,
            minibatch_order: t.minibatch_order,
            lr: t.lr,
            lr_schedule: t.lr_schedule,
            warmup: t.warmup,
            min_lr: t.min_lr,
            weight_decay: t.weight_decay,
            max_grad_norm: t.max_grad_norm,
            temperature: t.temperature,
            adv_std: t.adv_std,
            step_credit: t.step_credit,
            eps: t.eps,
            gamma: t.gamma,
            success_replay: t.success_replay,
            success_replay_demos: t.success_replay_demos,
            branch: t.branch,
            reward: t.reward,
            truncation_reward: t.truncation_reward,
            give_up_reward: t.give_up_reward,
            fail_reward: t.fail_reward,
        })
    }
}
