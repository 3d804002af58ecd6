//! `[algo]` as a config writes it: the keys every kind shares, each kind's sub-table and
//! DAPO's two technique tables, all optional. It is what serde reads (unknown keys refused)
//! and writes; [`super::algo_config::AlgoConfig`] is what it means, converted from it with
//! `TryFrom` (a sub-table of another kind than `kind` is refused there). The fields are
//! documented on `AlgoConfig` and in docs/reference/config.md.

use super::advantage::options::{AdvStd, StepCredit};
use super::algo_kind::{
    AlgoKind, DynamicSampling, GigpoConfig, GspoConfig, MinibatchOrder, OverlongPenalty, PpoConfig,
};
use super::kl::KlMode;
use super::objective::{KlEstimator, LossAgg};
use super::optim::LrSchedule;
use super::rewards::TrainReward;
use serde::{Deserialize, Serialize};

/// The `[algo]` table as written (see the module docs). Its `None`s are keys left out
/// (TOML writes no `None`, so no field needs `skip_serializing_if`, and every field is
/// written in order, which the config reference test's tracing relies on); every field has
/// the default of `AlgoConfig`'s field of the same name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlgoTable {
    /// `kind`.
    pub kind: AlgoKind,
    /// `group_size`.
    pub group_size: usize,
    /// `batch_seeds`.
    pub batch_seeds: usize,
    /// `clip_low`.
    pub clip_low: Option<f64>,
    /// `clip_high`.
    pub clip_high: Option<f64>,
    /// `dual_clip`.
    pub dual_clip: Option<f64>,
    /// `loss_agg`.
    pub loss_agg: Option<LossAgg>,
    /// `loss_agg_norm`.
    pub loss_agg_norm: Option<f64>,
    /// `beta`.
    pub beta: f64,
    /// `kl_estimator`.
    pub kl_estimator: KlEstimator,
    /// `kl_mode`.
    pub kl_mode: KlMode,
    /// `kl_target`.
    pub kl_target: Option<f64>,
    /// `kl_horizon`.
    pub kl_horizon: f64,
    /// `entropy_coef`.
    pub entropy_coef: f64,
    /// `epochs`.
    pub epochs: usize,
    /// `target_kl`.
    pub target_kl: Option<f64>,
    /// `behaviour_weight_cap`.
    pub behaviour_weight_cap: Option<f64>,
    /// `minibatch`.
    pub minibatch: usize,
    /// `minibatch_order`.
    pub minibatch_order: MinibatchOrder,
    /// `lr`.
    pub lr: f64,
    /// `lr_schedule`.
    pub lr_schedule: LrSchedule,
    /// `warmup`.
    pub warmup: u64,
    /// `min_lr`.
    pub min_lr: f64,
    /// `weight_decay`.
    pub weight_decay: f64,
    /// `max_grad_norm`.
    pub max_grad_norm: f64,
    /// `temperature`.
    pub temperature: f64,
    /// `adv_std`.
    pub adv_std: Option<AdvStd>,
    /// `step_credit`.
    pub step_credit: StepCredit,
    /// `eps`.
    pub eps: f64,
    /// `gamma`.
    pub gamma: f64,
    /// `success_replay`.
    pub success_replay: usize,
    /// `success_replay_demos`.
    pub success_replay_demos: Option<std::path::PathBuf>,
    /// `branch`.
    pub branch: Option<super::branch::BranchConfig>,
    /// `dynamic_sampling`.
    pub dynamic_sampling: Option<DynamicSampling>,
    /// `overlong_penalty`.
    pub overlong_penalty: Option<OverlongPenalty>,
    /// `reward`.
    pub reward: TrainReward,
    /// `truncation_reward`.
    pub truncation_reward: Option<f64>,
    /// `give_up_reward`.
    pub give_up_reward: Option<f64>,
    /// `fail_reward`.
    pub fail_reward: Option<f64>,
    /// `[algo.ppo]`: only with `kind = "ppo"`.
    pub ppo: Option<PpoConfig>,
    /// `[algo.gigpo]`: only with `kind = "gigpo"`.
    pub gigpo: Option<GigpoConfig>,
    /// `[algo.gspo]`: only with `kind = "gspo"`.
    pub gspo: Option<GspoConfig>,
}
