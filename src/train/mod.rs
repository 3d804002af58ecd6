//! Training: the GRPO-family math and everything around the update step.
//!
//! - [`config`]: `TrainConfig`, the `guirl train` TOML file, validated with key names.
//! - [`trainer`]: the iteration loop only; [`update`]: its μ epochs of minibatch steps;
//!   [`rewards`]: truncation / give-up corrections; [`sft`]: behaviour cloning;
//!   [`demos`]: oracle demonstrations; [`eval`]: held-out evaluation and `best`.
//! - [`advantage`]: advantage estimators, one file each (GRPO, Dr. GRPO) from a `TrainingBatch`.
//! - [`loss`]: the clipped surrogate (GRPO / DAPO token-level, GSPO sequence-level) with
//!   the k3 KL penalty and an entropy bonus, on tensors.
//! - [`optim`]: AdamW with savable state, gradient-norm clipping, learning-rate schedules.
//! - [`metrics`]: one JSON line per iteration in `metrics.jsonl`; [`plots`] draws them.
//! - [`checkpoint`]: atomic checkpoints and the `latest` / `best` links;
//!   [`run_folder`]: one run per folder, resumes with the run's own config.

pub mod advantage;
pub mod checkpoint;
pub mod config;
pub mod demos;
pub mod eval;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod plots;
pub mod rewards;
pub mod run_folder;
pub mod seeds;
pub mod sft;
pub mod trainer;
pub mod update;

pub use advantage::{group_advantages, AdvantageStats};
pub use config::TrainConfig;
pub use loss::{policy_loss, LossConfig, LossInputs, LossStats, PolicyLossKind};
pub use metrics::{IterationMetrics, MetricsWriter};
pub use optim::{clip_grad_norm, AdamW, AdamWConfig, LrSchedule, LrScheduler};
