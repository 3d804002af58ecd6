//! The figures of recorded trajectory sets, offline (`guirl stats`): per task or per
//! policy, the episodes, how many ended in each status, the success rate with its Wilson
//! 95 % interval, the mean reward and steps. They are the figures a bench reports
//! ([`task_stats`]), for any set: a run's, a play session's, a training run's kept
//! rollouts, a bench's task folders pooled.

use super::harness::journal::ResultRow;
use super::harness::report::{split_name, task_stats, TaskStats};
use crate::env::EpisodeStatus;
use crate::rollout::TrajectorySet;
use serde::Serialize;
use std::path::PathBuf;

/// What a row of the table gathers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// One row per task id.
    #[default]
    Task,
    /// One row per policy (as recorded: `random`, `oracle`, a checkpoint's description).
    Policy,
}

/// The statuses in the order a table lists them.
const STATUSES: [EpisodeStatus; 8] = [
    EpisodeStatus::Success,
    EpisodeStatus::Fail,
    EpisodeStatus::Truncated,
    EpisodeStatus::InvalidAction,
    EpisodeStatus::EnvError,
    EpisodeStatus::PolicyError,
    EpisodeStatus::JudgeError,
    EpisodeStatus::Running,
];

/// One row: a task's (or a policy's, or all) episodes.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStats {
    /// The task id or the policy (`[ALL]` for every episode).
    pub group: String,
    /// Episodes by final status (`success`, `fail`, ...), those with none left out; an
    /// object in JSON, in the order of the table.
    #[serde(serialize_with = "status_map")]
    pub statuses: Vec<(EpisodeStatus, usize)>,
    /// The bench's figures of these episodes: rates and means leave out the episodes the
    /// agent did not complete (`env_error`, `policy_error`, `judge_error`). Its `task`
    /// field is `group`.
    pub figures: TaskStats,
}

/// The figures of one or more trajectory sets, pooled.
#[derive(Debug, Clone, Serialize)]
pub struct SetStats {
    /// The set folders read.
    pub sets: Vec<PathBuf>,
    /// What each row gathers.
    pub by: GroupBy,
    /// One row per task or policy, sorted by name.
    pub rows: Vec<GroupStats>,
    /// Every episode.
    pub all: GroupStats,
    /// The mean of the rows' success rates (each row weighs the same); `None` with fewer
    /// than two rows, or when a row has no rate.
    pub macro_success_rate: Option<f64>,
    /// The lowest and highest seed (both included, as a bench report's `seeds: 0..49`).
    pub seeds: Option<(u64, u64)>,
    /// The policies that acted, in order of first appearance.
    pub policies: Vec<String>,
    /// Torn last lines skipped (a run killed while writing one).
    pub torn_lines: usize,
}

fn status_map<S: serde::Serializer>(statuses: &[(EpisodeStatus, usize)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(statuses.len()))?;
    for (status, n) in statuses {
        m.serialize_entry(status.as_str(), n)?;
    }
    m.end()
}

fn group_stats(name: &str, rows: &[&ResultRow]) -> GroupStats {
    let statuses = STATUSES
        .iter()
        .map(|&s| (s, rows.iter().filter(|r| r.status == s).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    GroupStats { group: name.to_string(), statuses, figures: task_stats(name, rows, rows) }
}

impl SetStats {
    /// The figures of `sets`, pooled, a row per task or per policy.
    pub fn of(sets: &[TrajectorySet], by: GroupBy) -> SetStats {
        let mut rows: Vec<(String, ResultRow)> = Vec::new();
        let mut policies: Vec<String> = Vec::new();
        for set in sets {
            let dir = set.dir.display().to_string();
            for (i, st) in set.trajectories.iter().enumerate() {
                let t = &st.trajectory;
                if !policies.contains(&t.policy) {
                    policies.push(t.policy.clone());
                }
                let key = match by {
                    GroupBy::Task => t.task_id.clone(),
                    GroupBy::Policy => t.policy.clone(),
                };
                rows.push((key, ResultRow::of(t, 0, &dir, i)));
            }
        }
        let mut order: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        order.sort_unstable();
        order.dedup();
        let groups: Vec<GroupStats> = order
            .iter()
            .map(|k| group_stats(k, &rows.iter().filter(|(g, _)| g == k).map(|(_, r)| r).collect::<Vec<_>>()))
            .collect();
        let rates: Vec<Option<f64>> = groups.iter().map(|g| g.figures.success_rate).collect();
        let macro_success_rate = (rates.len() > 1 && rates.iter().all(Option::is_some))
            .then(|| rates.iter().flatten().sum::<f64>() / rates.len() as f64);
        let seeds = rows.iter().map(|(_, r)| r.seed).min().zip(rows.iter().map(|(_, r)| r.seed).max());
        SetStats {
            sets: sets.iter().map(|s| s.dir.clone()).collect(),
            by,
            all: group_stats("[ALL]", &rows.iter().map(|(_, r)| r).collect::<Vec<_>>()),
            rows: groups,
            macro_success_rate,
            seeds,
            policies,
            torn_lines: sets.iter().filter(|s| s.torn_line.is_some()).count(),
        }
    }

    /// The figures as a Markdown table with a line above (the episodes, policies and
    /// seeds) and one below (the mean of the rates, what the rates leave out).
    pub fn table(&self) -> String {
        let n = self.all.figures.episodes;
        let mut s = format!(
            "{n} episode{} from {} set{}; polic{} {}",
            if n == 1 { "" } else { "s" },
            self.sets.len(),
            if self.sets.len() == 1 { "" } else { "s" },
            if self.policies.len() == 1 { "y" } else { "ies" },
            if self.policies.is_empty() { "none".to_string() } else { self.policies.join(", ") },
        );
        match self.seeds {
            Some((lo, hi)) if lo == hi => s.push_str(&format!("; seed {lo} ({})", split_name(lo, 1))),
            Some((lo, hi)) => s.push_str(&format!("; seeds {lo}..{hi} ({})", split_name(lo, hi - lo + 1))),
            None => {}
        }
        s.push_str("\n\n");
        let by = match self.by {
            GroupBy::Task => "task",
            GroupBy::Policy => "policy",
        };
        use super::markdown::Align::{Left, Right};
        let header = [
            (by, Left),
            ("episodes", Right),
            ("success", Right),
            ("95 % CI", Left),
            ("reward ± s.e.", Left),
            ("steps", Right),
            ("statuses", Left),
        ];
        let mut cells = Vec::new();
        for g in self.rows.iter().chain(std::iter::once(&self.all)) {
            let f = &g.figures;
            let statuses: Vec<String> =
                g.statuses.iter().map(|(st, k)| format!("{} {k}", st.as_str())).collect();
            let (rate, ci, reward, steps) = match (f.success_rate, f.mean_reward) {
                (Some(rate), Some(reward)) => (
                    format!("{rate:.3}"),
                    format!("[{:.3}, {:.3}]", f.success_ci95.0, f.success_ci95.1),
                    format!("{reward:.3} ± {:.3}", f.reward_se),
                    format!("{:.2}", f.mean_steps),
                ),
                _ => ("n/a".into(), String::new(), String::new(), String::new()),
            };
            cells.push(vec![
                g.group.clone(),
                f.episodes.to_string(),
                rate,
                ci,
                reward,
                steps,
                statuses.join(", "),
            ]);
        }
        s.push_str(&super::markdown::table(&header, &cells));
        if let Some(m) = self.macro_success_rate {
            s.push_str(&format!("\nMean of the per-{by} success rates: {m:.3}."));
        }
        // the episodes the agent did not complete
        let left_out = self.all.figures.episodes - self.all.figures.completed;
        if left_out > 0 {
            s.push_str(&format!(
                "\n{left_out} episode{} the agent did not complete (env, policy or judge errors) {} left out of \
                 the rates and means.",
                if left_out == 1 { "" } else { "s" },
                if left_out == 1 { "is" } else { "are" }
            ));
        }
        if self.torn_lines > 0 {
            s.push_str(&format!(
                "\n{} set{} had a torn last line (a run killed while writing it), not counted.",
                self.torn_lines,
                if self.torn_lines == 1 { "" } else { "s" }
            ));
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::store::StoredTrajectory;
    use crate::rollout::{Outcome, Trajectory};

    fn episode(task: &str, policy: &str, seed: u64, status: EpisodeStatus, reward: f64) -> StoredTrajectory {
        let outcome = Outcome { reward, status, steps: 2, error: None };
        let mut trajectory = Trajectory::new(task, seed, Vec::new(), outcome);
        trajectory.policy = policy.into();
        StoredTrajectory { line: 0, trajectory }
    }

    fn set(episodes: Vec<StoredTrajectory>) -> TrajectorySet {
        TrajectorySet { dir: "runs/x".into(), trajectories: episodes, torn_line: None }
    }

    #[test]
    fn rows_by_task_and_by_policy() {
        use EpisodeStatus::*;
        let s = set(vec![
            episode("b", "random", 7, EnvError, 0.0),
            episode("a", "random", 5, Success, 1.0),
            episode("a", "oracle", 6, Fail, -1.0),
            episode("b", "random", 8, Truncated, 0.0),
            episode("a", "random", 9, Success, 1.0),
        ]);
        let st = SetStats::of(std::slice::from_ref(&s), GroupBy::Task);
        assert_eq!(st.rows.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let a = &st.rows[0];
        assert_eq!(a.statuses, [(Success, 2), (Fail, 1)]);
        assert_eq!((a.figures.episodes, a.figures.successes), (3, 2));
        assert_eq!(a.figures.success_rate, Some(2.0 / 3.0));
        // the env error is counted, not rated
        let b = &st.rows[1];
        assert_eq!((b.figures.episodes, b.figures.completed, b.figures.success_rate), (2, 1, Some(0.0)));
        assert_eq!(st.macro_success_rate, Some((2.0 / 3.0 + 0.0) / 2.0));
        assert_eq!(st.all.figures.episodes, 5);
        assert_eq!(st.seeds, Some((5, 9)));
        assert_eq!(st.policies, ["random", "oracle"]);
        let table = st.table();
        assert!(table.starts_with("5 episodes from 1 set; policies random, oracle; seeds 5..9"), "{table}");
        let flat = table.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("| a | 3 | 0.667 |") && flat.contains("success 2, fail 1 |"), "{table}");
        assert!(table.contains("1 episode the agent did not complete"), "{table}");
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["rows"][0]["statuses"], serde_json::json!({"success": 2, "fail": 1}));
        assert_eq!(json["rows"][0]["figures"]["successes"], 2);
        let by_policy = SetStats::of(&[s], GroupBy::Policy);
        // rows by name, not by first appearance
        assert_eq!(by_policy.rows.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(), ["oracle", "random"]);
        assert_eq!(by_policy.rows[1].figures.episodes, 4);
        assert!(by_policy.table().contains("| policy | episodes |"), "{}", by_policy.table());
    }

    #[test]
    fn a_row_with_nothing_completed_has_no_rate() {
        let s = set(vec![episode("a", "api", 1, EpisodeStatus::PolicyError, 0.0)]);
        let st = SetStats::of(&[s], GroupBy::Task);
        assert_eq!(st.rows[0].figures.success_rate, None);
        assert_eq!(st.macro_success_rate, None);
        let flat = st.table().split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("| a | 1 | n/a |"), "{}", st.table());
    }
}
