//! What a finished cell of a learning benchmark records (its `cell.json`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One finished cell: a clone, an algorithm from a clone with one training seed, or the
/// more-cloning baseline of a clone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// The plan's task name.
    pub task: String,
    /// The algorithm, [`super::CLONE`] or [`super::MORE_SFT`].
    pub algo: String,
    /// The training seed (`run.seed`); the clone's seed for the clone and the baseline.
    pub seed: u64,
    /// The clone this cell belongs to, by its seed, when the plan lists `clone_seeds`
    /// (`None`: the task's one clone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_seed: Option<u64>,
    /// Validation success against RL env steps, the starting policy's at 0 first.
    pub curve: Vec<(u64, f64)>,
    /// Validation success at the end.
    pub final_success: f64,
    /// Env steps of RL (0 for the clone and the baseline: see `sft`).
    pub env_steps: u64,
    /// Wall-clock of the run, seconds (the clone's: demonstrations and cloning).
    pub wall_secs: f64,
    /// The final policy on the test split (absent in cells of older benchmarks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestResult>,
    /// Behaviour cloning's figures (the clone and the baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sft: Option<SftFigures>,
}

/// A cell's final policy, greedy, on the test split.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TestResult {
    /// Successful episodes.
    pub successes: usize,
    /// Episodes (`per_task` × tasks).
    pub episodes: usize,
    /// Every task ran seeds `first_seed..first_seed + per_task`.
    pub first_seed: u64,
    /// See `first_seed`.
    pub per_task: usize,
    /// The seeds of the successful episodes, by task id (absent in cells of older
    /// benchmarks): two cells compare episode by episode on the same seeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub won: Option<BTreeMap<String, Vec<u64>>>,
}

impl TestResult {
    /// The success rate.
    pub fn rate(&self) -> f64 {
        self.successes as f64 / self.episodes.max(1) as f64
    }

    /// Episodes this cell won and `other` lost, and the reverse, on the seeds both ran;
    /// `None` unless both recorded their episodes on the same seeds.
    pub fn discordant(&self, other: &TestResult) -> Option<(usize, usize)> {
        let (a, b) = (self.won.as_ref()?, other.won.as_ref()?);
        if (self.first_seed, self.per_task) != (other.first_seed, other.per_task) {
            return None;
        }
        let set = |w: &BTreeMap<String, Vec<u64>>| -> BTreeSet<(String, u64)> {
            w.iter().flat_map(|(t, s)| s.iter().map(move |&x| (t.clone(), x))).collect()
        };
        let (a, b) = (set(a), set(b));
        Some((a.difference(&b).count(), b.difference(&a).count()))
    }
}

/// What a cell's behaviour cloning did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SftFigures {
    /// Epochs this cell trained (the baseline's: the extra ones).
    pub epochs: usize,
    /// Epochs its starting policy had already had (the baseline's: the clone's).
    #[serde(default)]
    pub start_epoch: usize,
    /// Mean seconds of one of its epochs (from its `sft.jsonl`).
    pub secs_per_epoch: Option<f64>,
    /// Demonstration episodes, and the env steps they took.
    pub demo_episodes: usize,
    /// See `demo_episodes`.
    pub demo_env_steps: u64,
    /// How the baseline's extra epochs were chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}
