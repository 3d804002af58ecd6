//! Training: the GRPO-family math and everything around the update step.
//!
//! - [`config`]: `TrainConfig`, the `guirl train` TOML file, validated with key names.
//!   Its `[algo]`: [`algo_config`] (`AlgoConfig`: the kind as an [`algo_kind::AlgoVariant`]
//!   carrying its own settings, the shared keys, DAPO's techniques), [`algo_table`] (the
//!   table as written), [`algo_check`] (value checks and warnings), [`algo_migrate`] (the
//!   old flat form refused with its new form, or migrated on resume). Its `[model]`:
//!   [`model`] (`ModelConfig`: the kind as a [`model::ModelVariant`] carrying its own
//!   settings, and `init`), [`model_kind`] (the kinds, the small policy's keys),
//!   [`model_table`] (the table as written), [`model_migrate`] (the old `backbone = ...`
//!   form refused with its new form, or migrated on resume). [`example_config`]: the
//!   documented example (`guirl train --example-config`).
//! - [`trainer`]: the iteration loop only (collect → score → advantages → update → log);
//!   [`algorithm`]: what depends on the kind, one implementation per family with its own
//!   state (PPO's critic and warm-up, GiGPO's anchor states), and the KL to the
//!   reference; [`update`]: its μ epochs of minibatch steps;
//!   [`dynamic_sampling`]: collecting an iteration's groups (DAPO's dynamic sampling);
//!   [`rewards`]: truncation / give-up corrections and DAPO's overlong penalty;
//!   [`sft`]: behaviour cloning; [`demos`]: oracle demonstrations; [`eval`]: held-out
//!   evaluation and `best`.
//! - Around the collection: [`curriculum`]: which task each group trains on (`[tasks]
//!   sampling`); [`branch`]: rollout trees, more rollouts from a mid-episode state of a
//!   group; [`success_replay`]: past successes replayed into groups that all failed;
//!   [`seeds`]: the seeds of the trainer's random draws.
//! - [`advantage`]: advantage estimators, one file each (GRPO / Dr. GRPO, RLOO,
//!   REINFORCE++, GiGPO, GAE) from a `TrainingBatch`.
//! - [`value`]: PPO's critic (a value network over the screenshot and instruction, its
//!   clipped loss, its own optimizer); GAE is [`advantage::gae`].
//! - [`objective`]: the clipped surrogate (token-level, GSPO sequence-level, dual clip),
//!   its aggregation, the k1 / k2 / k3 KL estimators and the entropy bonus, on tensors;
//!   [`kl`]: the KL in the reward and the adaptive KL coefficient; [`decoupled`]: the
//!   decoupled PPO objective for rollouts of older weights (`max_staleness = 1`).
//! - [`optim`]: AdamW with savable state, gradient-norm clipping, learning-rate schedules.
//! - [`metrics`]: one JSON line per iteration in `metrics.jsonl`; [`plots`] draws them;
//!   [`tensorboard`] writes them (and a few screenshots) as TensorBoard event files;
//!   [`phase_table`]: where an iteration's time went, printed at the end and in `phases.md`.
//! - [`checkpoint`]: atomic checkpoints and the `latest` / `best` links;
//!   [`run_folder`]: one run per folder, resumes with the run's own config.
//! - [`reward_model`]: training the learned reward model (`guirl train-reward`).

pub mod advantage;
pub mod algo_check;
pub mod algo_config;
pub mod algo_kind;
pub mod algo_migrate;
pub mod algo_table;
pub mod algorithm;
pub mod branch;
pub mod checkpoint;
pub mod config;
mod config_errors;
pub mod curriculum;
pub mod decoupled;
pub mod demos;
pub mod dynamic_sampling;
pub mod eval;
pub mod example_config;
pub mod kl;
pub mod metrics;
pub mod model;
pub mod model_kind;
pub mod model_migrate;
pub mod model_table;
pub mod objective;
pub mod optim;
pub mod phase_table;
pub mod plots;
pub mod reward_model;
pub mod rewards;
pub mod run_folder;
pub mod seeds;
pub mod sft;
pub mod success_replay;
pub mod tensorboard;
pub mod trainer;
pub mod update;
pub mod value;

pub use advantage::{group_advantages, AdvantageStats};
pub use config::TrainConfig;
pub use metrics::{IterationMetrics, MetricsWriter};
pub use objective::{policy_loss, KlEstimator, LossAgg, LossConfig, LossInputs, LossStats, PolicyLossKind};
pub use optim::{clip_grad_norm, AdamW, AdamWConfig, LrSchedule, LrScheduler};
