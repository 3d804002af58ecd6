//! What counts as a success, task by task.
//!
//! A task page pays a reward; whether the episode *succeeded* is a separate question. MiniWoB++
//! pages pay fractions for partly right answers (`click-checkboxes` pays (right − wrong) /
//! boxes), small positive rewards for wrong ones (`find-greatest` pays 0.1 for any card but
//! the greatest), and continuous scores for graded tasks (`circle-center` pays for any click
//! inside the circle), so "reward > 0" is not "solved". Each MiniWoB++ task has a row here,
//! read from its page's `core.endEpisode(...)` calls (docs/success-audit.md lists them):
//! its [`RewardClass`] and the [`SuccessRule`] that says what the task means.
//!
//! A wrong answer is never a success and a partial one is a success only where the task
//! says so (none does); graded tasks state their threshold and why. A task without a row
//! (a page added later) gets [`SuccessRule::FullCredit`]. Rules read the raw reward, before
//! MiniWoB++'s time decay. The reward itself is not changed: the env still reports what
//! the page pays, and training uses it unless `[algo] reward = "success"`.

mod audit;
mod binary;
mod scored;
#[cfg(test)]
mod tests;

pub use audit::{miniwob_audit, miniwob_row, miniwob_rule};
use serde::Serialize;

/// Slack under a threshold that float sums of the page's terms may fall short by
/// (`-1 + 9 × 0.2` is 0.7999999999999998); far below the smallest step of any task's score.
pub const EPS: f64 = 1e-6;

/// When an ended episode counts as a success, from its raw reward.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuccessRule {
    /// Only the page's full reward: `raw_reward ≥ 1 − EPS`.
    FullCredit,
    /// A graded score at or above this value: `raw_reward ≥ t − EPS`.
    AtLeast(f64),
}

impl SuccessRule {
    /// The smallest raw reward that is a success.
    pub fn min_raw_reward(self) -> f64 {
        match self {
            SuccessRule::FullCredit => 1.0 - EPS,
            SuccessRule::AtLeast(t) => t - EPS,
        }
    }

    /// Whether an episode that ended with `raw_reward` succeeded.
    pub fn is_success(self, raw_reward: f64) -> bool {
        raw_reward >= self.min_raw_reward()
    }

    /// The rule as the audit writes it.
    pub fn describe(self) -> String {
        match self {
            SuccessRule::FullCredit => "full credit (raw ≥ 1)".into(),
            SuccessRule::AtLeast(t) => format!("raw ≥ {t}"),
        }
    }
}

/// How a task's page pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardClass {
    /// 1 for the right answer, −1 (or nothing) for anything else.
    Binary,
    /// Fractions for partly right answers (some boxes ticked, some numbers in order).
    PartialCredit,
    /// A score of closeness (an angle, a distance, a colour, a time), continuous or in bands.
    Graded,
    /// Rewards other than ±1 for wrong answers, to shape learning (a small positive one for
    /// a wrong card, −0.5 for a draw).
    Shaping,
}

impl RewardClass {
    /// Every class, in the audit's order.
    pub const ALL: [RewardClass; 4] =
        [RewardClass::Binary, RewardClass::PartialCredit, RewardClass::Graded, RewardClass::Shaping];

    /// The class as the audit names it.
    pub fn name(self) -> &'static str {
        match self {
            RewardClass::Binary => "binary",
            RewardClass::PartialCredit => "partial credit",
            RewardClass::Graded => "graded",
            RewardClass::Shaping => "reward shaping",
        }
    }
}

/// One task's row of the audit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskAudit {
    /// The MiniWoB++ task name (`click-checkboxes`).
    pub task: &'static str,
    /// How the page pays.
    pub class: RewardClass,
    /// When an episode counts as a success.
    pub rule: SuccessRule,
    /// Why the rule (for a threshold: what it means in the task's own units).
    pub why: &'static str,
    /// What the page pays, in short.
    pub pays: &'static str,
    /// The page's `core.endEpisode(...)` expression, in short.
    pub evidence: &'static str,
    /// A raw reward the page pays for a wrong or partial answer that the old rule,
    /// `raw_reward > 0`, counted as a success (`None`: the old rule was right here).
    pub false_success: Option<f64>,
}
