//! `[algo]`: which algorithm, its coefficients, and the checks of their values (called
//! from [`super::config::TrainConfig::validate`], errors naming the key).

use super::advantage::{AdvStd, StepCredit};
use super::objective::{KlEstimator, LossAgg, LossConfig, PolicyLossKind};
use super::optim::{AdamWConfig, LrSchedule, LrScheduler};
use super::rewards::TrainReward;
use serde::{Deserialize, Serialize};

pub use super::algo_kind::AlgoKind;

/// Where the KL to the reference acts (`[algo] kl_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KlMode {
    /// A loss term `β · KL` on the tokens being trained (GRPO).
    #[default]
    Loss,
    /// Subtracted from each step's reward before the advantages, `r_t − β · Σ_tokens KL`,
    /// from the rollout's log-probs against the reference's (PPO / RLHF).
    Reward,
}

/// The unit of GSPO's sequence ratio (`[algo] gspo_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GspoLevel {
    /// The tokens of one action.
    #[default]
    Action,
    /// Every token of a trajectory (minibatches then hold whole trajectories).
    Trajectory,
}

/// `[algo]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlgoConfig {
    /// `grpo`, `dr_grpo`, `dapo`, `gspo`, `rloo`, `reinforce_pp`, `gigpo` or `ppo`.
    pub kind: AlgoKind,
    /// G: rollouts per task seed.
    pub group_size: usize,
    /// B: task seeds per iteration.
    pub batch_seeds: usize,
    /// ε_low (default by kind, filled in on load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip_low: Option<f64>,
    /// ε_high (default by kind, filled in on load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip_high: Option<f64>,
    /// Dual clip c > 1: for `A < 0` the surrogate is bounded below by `c·A` (off by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dual_clip: Option<f64>,
    /// GSPO's ratio over each action's tokens or each trajectory's.
    pub gspo_level: GspoLevel,
    /// Aggregation of the policy term (default by kind); a sequence is one action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_agg: Option<LossAgg>,
    /// N of `seq-mean-token-sum-norm` (default: the model's max action tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_agg_norm: Option<f64>,
    /// β: KL weight (the starting value when `kl_target` is set).
    pub beta: f64,
    /// `k1`, `k2` or `k3`.
    pub kl_estimator: KlEstimator,
    /// `loss` (GRPO) or `reward` (PPO style).
    pub kl_mode: KlMode,
    /// Adaptive β: the KL (the `kl` metric) it steers towards (off by default).
    #[serde(skip_serializing_if = "Option::is_none")]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_kl: Option<f64>,
    /// The cap on the decoupled objective's importance weight π_prox / π_behav (AReaL's
    /// decoupled PPO, with `[rollout] max_staleness = 1`): each token's loss is multiplied
    /// by `min(π_prox / π_behav, cap)`, detached (default 2.0; unused at `max_staleness = 0`).
    /// See `docs/rollout-overlap.md`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behaviour_weight_cap: Option<f64>,
    /// Samples (steps) per optimizer step.
    pub minibatch: usize,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adv_std: Option<AdvStd>,
    /// Older spelling: `false` is `adv_std = "none"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_std: Option<bool>,
    /// `episode` (every step its episode's advantage) or `discounted` (each step the
    /// discounted return from it, normalized within its group).
    pub step_credit: StepCredit,
    /// ω: weight of GiGPO's step advantage.
    pub gigpo_omega: f64,
    /// Divide GiGPO's step advantages by their step group's std (false: mean only).
    pub gigpo_step_std: bool,
    /// Added to the group std.
    pub eps: f64,
    /// γ: discount of the per-step returns (`reinforce_pp`, `gigpo`, `ppo`, `step_credit =
    /// "discounted"`; 1 = undiscounted).
    pub gamma: f64,
    /// λ of GAE (`ppo`): 0 = one-step TD, 1 = Monte-Carlo return minus V.
    pub gae_lambda: f64,
    /// The critic's own learning rate (`ppo`; constant, AdamW).
    pub value_lr: f64,
    /// PPO2's value clip c (`ppo`): the loss is `½ max((V − R)², (clip(V, V_old ± c) − R)²)`.
    /// Off by default: Andrychowicz et al. (2021, "What matters in on-policy RL") found
    /// value clipping no help and sometimes harmful.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_clip: Option<f64>,
    /// Iterations at the start in which only the critic trains (`ppo`; the policy and the
    /// adaptive β wait).
    pub critic_warmup: u64,
    /// Passes of the critic over each batch (`ppo`; default `epochs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_epochs: Option<usize>,
    /// Whiten the advantages over the batch (`ppo`; default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalize_advantages: Option<bool>,
    /// Leave out groups whose rewards are all equal (default: true for dapo and with
    /// `dynamic_sampling`, else false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_all_equal_groups: Option<bool>,
    /// DAPO's dynamic sampling: while fewer than `batch_seeds` groups are informative (their
    /// rewards not all equal), collect `batch_seeds` more groups on fresh training seeds,
    /// at most `dynamic_sampling_max_extra` times (default: true for dapo unless
    /// `drop_all_equal_groups = false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_sampling: Option<bool>,
    /// N: extra collections per iteration that dynamic sampling may make.
    pub dynamic_sampling_max_extra: usize,
    /// Success replay: per task, keep the last N successful trajectories and replay one in
    /// place of a failure into each group whose rollouts all failed (0: off; see
    /// [`super::success_replay`]).
    pub success_replay: usize,
    /// Seed the success-replay buffer from this trajectory set's successful episodes
    /// before the first iteration (scored by the starting policy): for a run that starts
    /// from a clone through `[model] init`. A run with `[sft]` seeds it from the
    /// demonstrations it clones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_replay_demos: Option<std::path::PathBuf>,
    /// Rollout trees: after each collection, K more rollouts of every group branched from
    /// one exact mid-episode state (see [`super::branch`]); `None`: flat groups only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<super::branch::BranchConfig>,
    /// DAPO's soft overlong penalty on the episode reward, by steps taken (see
    /// [`super::rewards::overlong_penalty`]; default: true for dapo).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlong_penalty: Option<bool>,
    /// L: the penalty's soft window, in steps before `rollout.max_steps` (default
    /// `ceil(max_steps / 5)`, DAPO's 4 096 of 20 480 tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlong_window: Option<u32>,
    /// Weight of the overlong penalty (at most this much is subtracted).
    pub overlong_weight: f64,
    /// What rollouts train on: `page`, the reward the task pays (partial credit and graded
    /// scores included), or `success`, 1 for a success by the task's success rule and the
    /// task's failure reward for any other ended episode (see [`super::rewards`]).
    pub reward: TrainReward,
    /// The reward a rollout that hit `rollout.max_steps` trains on, instead of the task's
    /// (usually 0). Set it to the task's failure reward (e.g. -1) where stalling until the
    /// step limit would otherwise score better than a wrong answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncation_reward: Option<f64>,
    /// The reward a rollout trains on when the agent gave up (`done()` on a task that ends
    /// by itself, such as MiniWoB++'s); default: the task's failure reward (−1 there), so
    /// quitting never pays better than a wrong answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub give_up_reward: Option<f64>,
    /// The reward any other failed rollout (a wrong answer) trains on, instead of the
    /// task's (−1 on MiniWoB++ and built-in tasks). With `gamma` < 1 set it and
    /// `truncation_reward` to 0: a negative failure reward, discounted, pays a later
    /// failure better than an earlier one, and step-level credit then teaches stalling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_reward: Option<f64>,
}

impl Default for AlgoConfig {
    fn default() -> Self {
        AlgoConfig {
            kind: AlgoKind::Grpo,
            group_size: 8,
            batch_seeds: 8,
            clip_low: None,
            clip_high: None,
            dual_clip: None,
            gspo_level: GspoLevel::Action,
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
            lr: 1e-4,
            lr_schedule: LrSchedule::Constant,
            warmup: 0,
            min_lr: 0.0,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            temperature: 1.0,
            adv_std: None,
            scale_std: None,
            step_credit: StepCredit::Episode,
            gigpo_omega: 1.0,
            gigpo_step_std: true,
            eps: 1e-6,
            gamma: 1.0,
            gae_lambda: 0.95,
            value_lr: 1e-3,
            value_clip: None,
            critic_warmup: 0,
            value_epochs: None,
            normalize_advantages: None,
            drop_all_equal_groups: None,
            dynamic_sampling: None,
            dynamic_sampling_max_extra: 3,
            success_replay: 0,
            success_replay_demos: None,
            branch: None,
            overlong_penalty: None,
            overlong_window: None,
            overlong_weight: 1.0,
            reward: TrainReward::Page,
            truncation_reward: None,
            give_up_reward: None,
            fail_reward: None,
        }
    }
}

impl AlgoConfig {
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
    fn discounts_steps(&self) -> bool {
        self.gamma < 1.0
            && (matches!(self.kind, AlgoKind::ReinforcePp | AlgoKind::Gigpo | AlgoKind::Ppo)
                || self.step_credit == StepCredit::Discounted)
    }
    /// A warning for discounted step returns over a negative failure reward
    /// (`task_failure`: the lowest failure reward of the run's tasks), which pays a later
    /// failure better than an earlier one (see `fail_reward`); `None` when that cannot happen.
    pub fn stalling_warning(&self, task_failure: f64) -> Option<String> {
        let negative =
            self.fail_reward.unwrap_or(task_failure) < 0.0 || self.truncation_reward.is_some_and(|r| r < 0.0);
        (self.discounts_steps() && negative).then(|| {
            format!(
                "algo.gamma = {} discounts a negative failure reward: a failure put off by stalling \
                 then scores better than an early one, and step credit teaches stalling; set \
                 algo.fail_reward = 0.0 and algo.truncation_reward = 0.0 (or gamma = 1.0)",
                self.gamma
            )
        })
    }
    /// Warnings about settings that are valid but probably not what the user means (the
    /// trainer logs each once when it starts); empty when there is nothing to say.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.kl_estimator == KlEstimator::K1 && self.beta > 0.0 && self.kl_mode == KlMode::Loss {
            // ∇k1 = ∇log π, and E_π[∇log π] = Σ ∇π = 0: the term's expected gradient is zero.
            out.push(
                "algo.kl_estimator = \"k1\" as a loss term (algo.beta > 0, kl_mode = \"loss\"): \
                 k1 = log(π/π_ref) has an expected gradient of zero (E_π[∇log π] = 0), so it adds \
                 noise but does not hold the policy near the reference; use kl_estimator = \"k3\" \
                 (GRPO's) or \"k2\" (its gradient is that of KL(π‖π_ref)), or put k1 in the reward \
                 with kl_mode = \"reward\""
                    .to_string(),
            );
        }
        if self.kind == AlgoKind::Dapo && self.beta > 0.0 {
            out.push(format!(
                "algo.kind = \"dapo\" with algo.beta = {}: DAPO drops the KL term (no reference \
                 policy), so this run is not DAPO as published; set algo.beta = 0.0, or to keep a KL \
                 term use kind = \"grpo\" with clip_high = 0.28, dynamic_sampling = true and \
                 overlong_penalty = true",
                self.beta
            ));
        }
        out
    }
    /// ε_low, resolved.
    pub fn clip_low(&self) -> f64 {
        self.clip_low.unwrap_or(self.kind.default_clip().0)
    }
    /// ε_high, resolved.
    pub fn clip_high(&self) -> f64 {
        self.clip_high.unwrap_or(self.kind.default_clip().1)
    }
    /// The decoupled objective's importance-weight cap, resolved (default 2).
    pub fn behaviour_weight_cap(&self) -> f64 {
        self.behaviour_weight_cap.unwrap_or(2.0)
    }
    /// Whether all-equal groups are dropped, resolved.
    pub fn drop_all_equal_groups(&self) -> bool {
        self.drop_all_equal_groups
            .unwrap_or(self.kind == AlgoKind::Dapo || self.dynamic_sampling == Some(true))
    }
    /// Whether dynamic sampling collects more groups, resolved.
    pub fn dynamic_sampling(&self) -> bool {
        self.dynamic_sampling
            .unwrap_or(self.kind == AlgoKind::Dapo && self.drop_all_equal_groups != Some(false))
    }
    /// Extra collections dynamic sampling may make per iteration (0 when it is off).
    pub fn max_extra_collections(&self) -> usize {
        if self.dynamic_sampling() {
            self.dynamic_sampling_max_extra
        } else {
            0
        }
    }
    /// Whether the overlong penalty applies, resolved.
    pub fn overlong_penalty(&self) -> bool {
        self.overlong_penalty.unwrap_or(self.kind == AlgoKind::Dapo)
    }
    /// The overlong penalty's window under a step limit of `max_steps`, resolved.
    pub fn overlong_window(&self, max_steps: u32) -> u32 {
        self.overlong_window.unwrap_or(max_steps.div_ceil(5).max(1))
    }
    /// The aggregation, resolved.
    pub fn loss_agg(&self) -> LossAgg {
        self.loss_agg.unwrap_or(self.kind.default_loss_agg())
    }
    /// The advantages' std, resolved: `scale_std = false` means none; Dr. GRPO's is none.
    pub fn adv_std(&self) -> AdvStd {
        self.adv_std.unwrap_or(match (self.kind, self.scale_std) {
            (AlgoKind::DrGrpo, _) | (_, Some(false)) => AdvStd::None,
            _ => AdvStd::Group,
        })
    }
    /// The loss coefficients, with β as configured (the trainer passes its adaptive β
    /// through a copy of this config). With `kl_mode = "reward"` the loss has no KL term.
    pub fn loss_config(&self) -> LossConfig {
        LossConfig {
            kind: match self.kind {
                AlgoKind::Gspo => PolicyLossKind::Sequence,
                _ => PolicyLossKind::Token,
            },
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
        if self.kind == AlgoKind::Ppo {
            self.critic_warmup
        } else {
            0
        }
    }
}

impl AlgoConfig {
    /// Check every `[algo]` value (`iterations`: `run.iterations`); each bad one is passed
    /// to `check` as `(false, message naming the key)`.
    pub(crate) fn check(&self, iterations: u64, check: &mut dyn FnMut(bool, String)) {
        let a = self;
        let (lo, hi) = (a.clip_low(), a.clip_high());
        // PPO's critic is the baseline: its rollouts need no group.
        let min_group = if a.kind == AlgoKind::Ppo { 1 } else { 2 };
        check(
            a.group_size >= min_group,
            format!("algo.group_size must be at least {min_group}, got {}", a.group_size),
        );
        check(a.batch_seeds >= 1, "algo.batch_seeds must be at least 1".into());
        check(lo > 0.0 && lo < 1.0, format!("algo.clip_low must be in (0, 1), got {lo}"));
        check(hi > 0.0 && hi.is_finite(), format!("algo.clip_high must be > 0, got {hi}"));
        check(a.beta >= 0.0 && a.beta.is_finite(), format!("algo.beta must be >= 0, got {}", a.beta));
        check(
            a.entropy_coef >= 0.0 && a.entropy_coef.is_finite(),
            format!("algo.entropy_coef must be >= 0, got {}", a.entropy_coef),
        );
        check(a.epochs >= 1, "algo.epochs must be at least 1".into());
        check(a.minibatch >= 1, "algo.minibatch must be at least 1".into());
        check(a.lr > 0.0 && a.lr <= 1.0, format!("algo.lr must be in (0, 1], got {}", a.lr));
        check(
            a.min_lr >= 0.0 && a.min_lr <= a.lr,
            format!("algo.min_lr must be in [0, algo.lr], got {}", a.min_lr),
        );
        check(
            a.warmup <= iterations,
            format!("algo.warmup ({}) must not exceed run.iterations ({})", a.warmup, iterations),
        );
        check(
            a.weight_decay >= 0.0 && a.weight_decay < 1.0,
            format!("algo.weight_decay must be in [0, 1), got {}", a.weight_decay),
        );
        check(
            a.max_grad_norm > 0.0 && !a.max_grad_norm.is_nan(),
            format!("algo.max_grad_norm must be > 0, got {}", a.max_grad_norm),
        );
        check(
            a.temperature > 0.0 && a.temperature.is_finite(),
            format!("algo.temperature must be > 0, got {}", a.temperature),
        );
        check(a.eps > 0.0 && a.eps < 1.0, format!("algo.eps must be in (0, 1), got {}", a.eps));
        check((0.0..=1.0).contains(&a.gamma), format!("algo.gamma must be in [0, 1], got {}", a.gamma));
        if let Some(c) = a.dual_clip {
            check(
                c > 1.0 && c.is_finite(),
                format!("algo.dual_clip must be > 1 (negative advantages are bounded below by c·A), got {c}"),
            );
        }
        check(
            a.gspo_level == GspoLevel::Action || a.kind == AlgoKind::Gspo,
            "algo.gspo_level = \"trajectory\" applies to kind = \"gspo\" only".into(),
        );
        if let Some(n) = a.loss_agg_norm {
            check(n > 0.0 && n.is_finite(), format!("algo.loss_agg_norm must be > 0, got {n}"));
        }
        if let Some(k) = a.kl_target {
            check(k > 0.0 && k.is_finite(), format!("algo.kl_target must be > 0, got {k}"));
            check(a.beta > 0.0, "algo.kl_target needs algo.beta > 0 (the coefficient it starts from)".into());
        }
        if let Some(k) = a.target_kl {
            check(
                k > 0.0 && k.is_finite(),
                format!(
                    "algo.target_kl must be > 0 (the approximate KL(π_old ‖ π) at which an \
                     iteration's update stops early; leave it out for no early stop), got {k}"
                ),
            );
        }
        if let Some(c) = a.behaviour_weight_cap {
            check(
                c >= 1.0 && c.is_finite(),
                format!(
                    "algo.behaviour_weight_cap must be at least 1 (a cap below 1 would down-weight \
                     tokens whose behaviour and proximal policies agree), got {c}"
                ),
            );
        }
        check(
            a.kl_horizon > 0.0 && a.kl_horizon.is_finite(),
            format!("algo.kl_horizon must be > 0, got {}", a.kl_horizon),
        );
        if !a.kind.group_normalized() {
            check(
                a.adv_std.is_none() && a.scale_std != Some(false),
                "algo.adv_std (and scale_std) apply to grpo, dr_grpo, dapo, gspo and gigpo only".into(),
            );
        }
        if let (Some(false), Some(std)) = (a.scale_std, a.adv_std) {
            check(
                std == AdvStd::None,
                format!(
                    "algo.scale_std = false contradicts algo.adv_std = {:?}: set adv_std alone",
                    std.name()
                ),
            );
        }
        check(
            a.step_credit == StepCredit::Episode
                || matches!(a.kind, AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Dapo | AlgoKind::Gspo),
            "algo.step_credit = \"discounted\" applies to grpo, dr_grpo, dapo and gspo \
             (reinforce_pp and gigpo credit steps already; rloo is episode-level)"
                .into(),
        );
        check(
            a.gigpo_omega >= 0.0 && a.gigpo_omega.is_finite(),
            format!("algo.gigpo_omega must be >= 0, got {}", a.gigpo_omega),
        );
        if let Some(r) = a.give_up_reward {
            check(r.is_finite(), format!("algo.give_up_reward must be a finite number, got {r}"));
        }
        check(
            !(a.dynamic_sampling == Some(true) && a.drop_all_equal_groups == Some(false)),
            "algo.dynamic_sampling = true needs algo.drop_all_equal_groups = true (it replaces the \
             groups it drops); leave drop_all_equal_groups out, or set dynamic_sampling = false"
                .into(),
        );
        check(
            a.dynamic_sampling_max_extra <= 100,
            format!(
                "algo.dynamic_sampling_max_extra must be at most 100 (each is a full collection of \
                 batch_seeds groups), got {}",
                a.dynamic_sampling_max_extra
            ),
        );
        check(
            a.success_replay <= 1000,
            format!(
                "algo.success_replay must be at most 1000 trajectories per task (each is held in \
                 memory with its screenshots), got {}",
                a.success_replay
            ),
        );
        check(
            a.success_replay_demos.is_none() || a.success_replay > 0,
            "algo.success_replay_demos seeds the success replay buffer, which is off: set \
             algo.success_replay = N (successes kept per task) too"
                .into(),
        );
        if let Some(b) = &a.branch {
            b.check(check);
        }
        check(
            a.overlong_weight >= 0.0 && a.overlong_weight.is_finite(),
            format!("algo.overlong_weight must be >= 0, got {}", a.overlong_weight),
        );
        if let Some(r) = a.truncation_reward {
            check(r.is_finite(), format!("algo.truncation_reward must be a finite number, got {r}"));
        }
        if let Some(r) = a.fail_reward {
            check(r.is_finite(), format!("algo.fail_reward must be a finite number, got {r}"));
        }
        super::value::check_options(a, iterations, check);
    }
}
