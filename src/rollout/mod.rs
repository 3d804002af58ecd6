//! Rollouts: the parallel collector, trajectories, the disk format, replay.

pub mod collector;
pub mod replay;
pub mod store;
pub mod trajectory;
pub mod viewer;

pub use collector::{CollectStats, Collector, Job};
pub use store::{TrajectorySet, TrajectoryWriter};
pub use trajectory::{Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
