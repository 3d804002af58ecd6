//! A judge's verdict on one episode: what its votes said, and what the cache keeps.

use serde::{Deserialize, Serialize};

/// What the judge's votes said of one episode (what the cache keeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Votes saying SUCCESS.
    pub success_votes: u32,
    /// Votes asked.
    pub votes: u32,
    /// Each vote's answer.
    pub reasoning: Vec<String>,
}

impl Verdict {
    /// The fraction of votes saying SUCCESS: the episode's score.
    pub fn fraction(&self) -> f64 {
        self.success_votes as f64 / self.votes.max(1) as f64
    }

    /// Whether the votes reach `threshold`.
    pub fn success(&self, threshold: f64) -> bool {
        self.fraction() >= threshold
    }
}
