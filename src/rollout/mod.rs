//! Rollouts: the parallel collector, trajectories, the disk format, replay.

pub mod buffer;
pub mod collector;
pub mod replay;
pub mod store;
pub mod trajectory;
pub mod viewer;

pub use buffer::{Group, GroupStats, TrainingBatch, TrajectoryBuffer};
pub use collector::{CollectStats, Collector, Job};
pub use store::{TrajectorySet, TrajectoryWriter};
pub use trajectory::{Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
