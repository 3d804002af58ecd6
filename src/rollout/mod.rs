//! Rollouts: running episodes with a policy, the trajectory type, and the runner that
//! spreads episodes over several browsers.

pub mod runner;
pub mod store;
pub mod trajectory;

pub use runner::{run_episode, run_episodes, RunOptions};
pub use store::{TrajectorySet, TrajectoryWriter};
pub use trajectory::{Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
