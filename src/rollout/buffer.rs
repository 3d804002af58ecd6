//! `TrajectoryBuffer`: finished trajectories kept in GRPO groups (rollouts of the same
//! task and seed), with a capacity, oldest-first eviction and group statistics.

use super::store::{TrajectorySet, TrajectoryWriter};
use super::trajectory::{Recorded, Trajectory};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;
use std::collections::VecDeque;
use std::path::Path;

/// Rollouts of one task instance (same task, same seed).
#[derive(Debug, Clone)]
pub struct Group {
    /// Task id.
    pub task_id: String,
    /// Seed.
    pub seed: u64,
    /// Group id given by the collector, if any.
    pub id: Option<u64>,
    /// The rollouts.
    pub trajectories: Vec<Trajectory>,
}

/// Statistics of one group. `env_error` rollouts are infrastructure failures: they are
/// counted but left out of the reward statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupStats {
    /// Rollouts in the group.
    pub size: usize,
    /// Rollouts that ended as `env_error`.
    pub env_errors: usize,
    /// Mean reward over the other rollouts.
    pub reward_mean: f64,
    /// Population standard deviation of those rewards.
    pub reward_std: f64,
    /// All counted rewards are equal (such a group carries no GRPO signal).
    pub all_equal: bool,
}

impl Group {
    /// Rewards of the rollouts that count (not `env_error`).
    pub fn valid_rewards(&self) -> Vec<f64> {
        self.trajectories
            .iter()
            .filter(|t| !t.outcome.status.is_infrastructure_failure())
            .map(|t| t.outcome.reward)
            .collect()
    }

    /// The group's statistics.
    pub fn stats(&self) -> GroupStats {
        let r = self.valid_rewards();
        let n = r.len().max(1) as f64;
        let mean = r.iter().sum::<f64>() / n;
        let var = r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        GroupStats {
            size: self.trajectories.len(),
            env_errors: self.trajectories.len() - r.len(),
            reward_mean: mean,
            reward_std: var.sqrt(),
            all_equal: r.windows(2).all(|w| w[0] == w[1]),
        }
    }

    /// A group holding one trajectory.
    fn first(t: Trajectory) -> Group {
        Group { task_id: t.task_id.clone(), seed: t.seed, id: t.group, trajectories: vec![t] }
    }

    fn matches(&self, t: &Trajectory) -> bool {
        match (self.id, t.group) {
            (Some(a), Some(b)) => a == b,
            _ => self.task_id == t.task_id && self.seed == t.seed,
        }
    }
}

/// A batch for the trainer: whole groups.
#[derive(Debug, Clone, Default)]
pub struct TrainingBatch {
    /// The groups in the batch.
    pub groups: Vec<Group>,
}

impl TrainingBatch {
    /// Group trajectories the way [`TrajectoryBuffer::add_trajectory`] does (same group id,
    /// or same task and seed), groups in order of first appearance. Also returns, for each
    /// group member, the index of the trajectory in the input.
    pub fn group<'a>(
        trajectories: impl IntoIterator<Item = &'a Trajectory>,
    ) -> (TrainingBatch, Vec<Vec<usize>>) {
        let mut batch = TrainingBatch::default();
        let mut index: Vec<Vec<usize>> = Vec::new();
        for (i, t) in trajectories.into_iter().enumerate() {
            match batch.groups.iter().position(|g| g.matches(t)) {
                Some(g) => {
                    batch.groups[g].trajectories.push(t.clone());
                    index[g].push(i);
                }
                None => {
                    batch.groups.push(Group::first(t.clone()));
                    index.push(vec![i]);
                }
            }
        }
        (batch, index)
    }

    /// All trajectories of the batch.
    pub fn trajectories(&self) -> impl Iterator<Item = &Trajectory> {
        self.groups.iter().flat_map(|g| g.trajectories.iter())
    }
    /// Number of trajectories.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.trajectories.len()).sum()
    }
    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Buffer-wide statistics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BufferStats {
    /// Groups held.
    pub groups: usize,
    /// Trajectories held.
    pub trajectories: usize,
    /// Groups whose counted rewards are all equal.
    pub all_equal_groups: usize,
    /// `env_error` rollouts held.
    pub env_errors: usize,
    /// Mean reward over counted rollouts.
    pub reward_mean: f64,
}

/// Trajectories in groups, at most `capacity` of them; the oldest groups go first.
#[derive(Debug)]
pub struct TrajectoryBuffer {
    capacity: usize,
    groups: VecDeque<Group>,
    len: usize,
    rng: rand_chacha::ChaCha8Rng,
}

impl TrajectoryBuffer {
    /// An empty buffer holding up to `capacity` trajectories; `seed` drives sampling.
    pub fn new(capacity: usize, seed: u64) -> TrajectoryBuffer {
        TrajectoryBuffer {
            capacity: capacity.max(1),
            groups: VecDeque::new(),
            len: 0,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Trajectories held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The groups, oldest first.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter()
    }

    /// Add a trajectory to its group (the newest group of the same id, or task and seed),
    /// then evict whole groups, oldest first, while over capacity. The group being
    /// filled is never evicted.
    pub fn add_trajectory(&mut self, t: Trajectory) {
        match self.groups.iter_mut().rev().find(|g| g.matches(&t)) {
            Some(g) => g.trajectories.push(t),
            None => self.groups.push_back(Group::first(t)),
        }
        self.len += 1;
        while self.len > self.capacity && self.groups.len() > 1 {
            let g = self.groups.pop_front().expect("non-empty");
            self.len -= g.trajectories.len();
        }
    }

    /// Whole groups, sampled at random without replacement, until at least `n`
    /// trajectories (or everything held).
    pub fn sample_batch(&mut self, n: usize) -> TrainingBatch {
        let mut idx: Vec<usize> = (0..self.groups.len()).collect();
        idx.shuffle(&mut self.rng);
        let mut batch = TrainingBatch::default();
        for i in idx {
            if batch.len() >= n {
                break;
            }
            batch.groups.push(self.groups[i].clone());
        }
        batch
    }

    /// Statistics over everything held.
    pub fn stats(&self) -> BufferStats {
        let mut s = BufferStats { groups: self.groups.len(), trajectories: self.len, ..Default::default() };
        let mut rewards = Vec::new();
        for g in &self.groups {
            let gs = g.stats();
            s.all_equal_groups += usize::from(gs.all_equal);
            s.env_errors += gs.env_errors;
            rewards.extend(g.valid_rewards());
        }
        s.reward_mean = rewards.iter().sum::<f64>() / rewards.len().max(1) as f64;
        s
    }

    /// Load every trajectory of a set folder (frames stay on disk).
    pub fn load(dir: &Path, capacity: usize, seed: u64) -> anyhow::Result<TrajectoryBuffer> {
        let set = TrajectorySet::read(dir)?;
        let mut b = TrajectoryBuffer::new(capacity, seed);
        for st in set.trajectories {
            b.add_trajectory(st.trajectory);
        }
        Ok(b)
    }

    /// Append everything held to a set folder (trajectory lines only; frames referenced
    /// by name must already be in that folder, as when the buffer was loaded from it).
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let mut w = TrajectoryWriter::open(dir)?;
        for g in &self.groups {
            for t in &g.trajectories {
                w.append_line(t)?;
            }
        }
        Ok(())
    }

    /// Add a freshly recorded episode (its frames are not kept).
    pub fn add_recorded(&mut self, r: &Recorded) {
        self.add_trajectory(r.trajectory.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::trajectory::{Outcome, FORMAT_VERSION};

    fn traj(task: &str, seed: u64, group: Option<u64>, reward: f64, status: EpisodeStatus) -> Trajectory {
        Trajectory {
            version: FORMAT_VERSION,
            task_id: task.into(),
            task_digest: None,
            seed,
            instruction: String::new(),
            frame: Default::default(),
            max_steps: None,
            rules: Default::default(),
            policy: "test".into(),
            group,
            steps: vec![],
            final_frame: None,
            outcome: Outcome { reward, status, steps: 1, error: None },
            judge: None,
        }
    }

    #[test]
    fn groups_stats_and_env_error_exclusion() {
        let mut b = TrajectoryBuffer::new(100, 0);
        for (r, s) in
            [(1.0, EpisodeStatus::Success), (0.0, EpisodeStatus::Fail), (0.0, EpisodeStatus::EnvError)]
        {
            b.add_trajectory(traj("t", 1, Some(7), r, s));
        }
        b.add_trajectory(traj("t", 2, Some(8), 1.0, EpisodeStatus::Success));
        b.add_trajectory(traj("t", 2, Some(8), 1.0, EpisodeStatus::Success));
        let gs: Vec<GroupStats> = b.groups().map(|g| g.stats()).collect();
        assert_eq!(gs.len(), 2);
        // Group 7: rewards {1, 0} counted (the env_error one is not): mean 0.5, std 0.5.
        assert_eq!(
            gs[0],
            GroupStats { size: 3, env_errors: 1, reward_mean: 0.5, reward_std: 0.5, all_equal: false }
        );
        assert!(gs[1].all_equal && gs[1].reward_std == 0.0);
        let s = b.stats();
        assert_eq!((s.groups, s.trajectories, s.all_equal_groups, s.env_errors), (2, 5, 1, 1));
    }

    #[test]
    fn eviction_is_oldest_first_and_whole_groups() {
        let mut b = TrajectoryBuffer::new(4, 0);
        for g in 0..3 {
            for _ in 0..2 {
                b.add_trajectory(traj("t", g, Some(g), 0.0, EpisodeStatus::Fail));
            }
        }
        assert_eq!(b.len(), 4);
        let seeds: Vec<u64> = b.groups().map(|g| g.seed).collect();
        assert_eq!(seeds, vec![1, 2]);
    }

    #[test]
    fn sampling_keeps_groups_whole() {
        let mut b = TrajectoryBuffer::new(100, 3);
        for g in 0..10 {
            for _ in 0..4 {
                b.add_trajectory(traj("t", g, Some(g), g as f64, EpisodeStatus::Fail));
            }
        }
        let batch = b.sample_batch(10);
        assert_eq!(batch.len(), 12, "three whole groups of 4 cover 10");
        assert!(batch
            .groups
            .iter()
            .all(|g| g.trajectories.len() == 4 && g.trajectories.iter().all(|t| t.seed == g.seed)));
        assert_eq!(b.sample_batch(1000).len(), 40);
    }

    #[test]
    fn save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = TrajectoryBuffer::new(100, 0);
        b.add_trajectory(traj("t", 1, Some(1), 1.0, EpisodeStatus::Success));
        b.add_trajectory(traj("t", 1, Some(1), 0.0, EpisodeStatus::Fail));
        b.save(dir.path()).unwrap();
        let l = TrajectoryBuffer::load(dir.path(), 100, 0).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l.groups().next().unwrap().trajectories, b.groups().next().unwrap().trajectories);
    }
}
