//! Rollouts: the parallel collector, trajectories, the disk format, replay, hand play.

pub mod buffer;
pub mod collector;
pub mod job;
pub mod play;
pub mod prefix;
pub mod replay;
pub mod rerun;
pub mod rescore;
pub mod runtime;
pub mod scoring;
mod shard;
pub mod stats;
pub mod store;
pub mod trajectory;
pub mod viewer;

pub use buffer::{Group, GroupStats, TrainingBatch, TrajectoryBuffer};
pub use collector::Collector;
pub use job::{Job, UnreachableTask};
pub use prefix::Prefix;
pub use rerun::Completed;
pub use stats::CollectStats;
pub use store::{TrajectorySet, TrajectoryWriter};
pub use trajectory::{JudgeRecord, Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
