//! Training rewards: the task's episode reward, with two corrections a config can set so
//! that ending an episode without an answer never pays better than a wrong answer.
//!
//! - `[algo] truncation_reward`: a rollout that hit the step limit trains on this reward
//!   instead of the task's (usually 0).
//! - `[algo] give_up_reward`: a rollout that ended with the agent's `done()` on a task that
//!   ends by itself (MiniWoB++, built-in) trains on this reward; by default the task's
//!   failure reward (−1 there), since `done()` there means "I give up".
//!
//! Success rates and evaluation are by status and the task's own reward; only training
//! sees these corrections.

use crate::env::{EpisodeStatus, GuiAction};
use crate::rollout::{Recorded, Trajectory};
use crate::tasks::Task;
use std::sync::Arc;

/// Whether `t` ended because the agent gave up: its last action is `done()`, the episode
/// failed, and its task does not score `done()` itself.
pub fn gave_up(t: &Trajectory, task: &dyn Task) -> bool {
    !task.rewards_on_done()
        && t.outcome.status == EpisodeStatus::Fail
        && t.steps.last().is_some_and(|s| GuiAction::parse(&s.action).is_ok_and(|a| a == GuiAction::Done))
}

/// Apply the truncation and give-up rewards to freshly collected rollouts; returns how
/// many rollouts gave up.
pub fn shape(
    recs: &mut [Recorded],
    tasks: &[Arc<dyn Task>],
    truncation_reward: Option<f64>,
    give_up_reward: Option<f64>,
) -> usize {
    let mut give_ups = 0;
    for rec in recs {
        let t = &mut rec.trajectory;
        if t.outcome.status == EpisodeStatus::Truncated {
            if let Some(r) = truncation_reward {
                t.outcome.reward = r;
            }
            continue;
        }
        let Some(task) = tasks.iter().find(|k| k.id() == t.task_id) else { continue };
        if gave_up(t, task.as_ref()) {
            give_ups += 1;
            t.outcome.reward = give_up_reward.unwrap_or(task.failure_reward());
        }
    }
    give_ups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Outcome, TrajStep};

    fn rec(task: &str, last_action: &str, status: EpisodeStatus, reward: f64) -> Recorded {
        let step = TrajStep::new(last_action, reward, status);
        let outcome = Outcome { reward, status, steps: 1, error: None };
        Recorded { trajectory: Trajectory::new(task, 0, vec![step], outcome), frames: vec![] }
    }

    fn rewards(r: &[Recorded]) -> Vec<f64> {
        r.iter().map(|r| r.trajectory.outcome.reward).collect()
    }

    #[test]
    fn giving_up_scores_the_tasks_failure_and_truncation_its_own_reward() {
        let miniwob = crate::tasks::load_task("miniwob/click-test").unwrap();
        let website = crate::tasks::load_task("fixtures/tasks/two-buttons.toml").unwrap();
        let (m, w) = (miniwob.id().to_string(), website.id().to_string());
        let tasks = vec![miniwob, website];
        let fresh = || {
            vec![
                rec(&m, "done()", EpisodeStatus::Fail, 0.0), // gave up: the env paid 0
                rec(&m, "click(1, 2)", EpisodeStatus::Fail, -1.0), // a wrong answer
                rec(&m, "click(1, 2)", EpisodeStatus::Truncated, 0.0), // hit the step limit
                rec(&m, "click(1, 2)", EpisodeStatus::Success, 0.8),
                rec(&w, "done()", EpisodeStatus::Fail, 0.0), // the website task scores done() itself
            ]
        };
        // Defaults: a give-up scores MiniWoB++'s failure reward (−1), like a wrong answer.
        let mut r = fresh();
        assert_eq!(shape(&mut r, &tasks, None, None), 1);
        assert_eq!(rewards(&r), [-1.0, -1.0, 0.0, 0.8, 0.0]);
        // Both corrections configured.
        let mut r = fresh();
        assert_eq!(shape(&mut r, &tasks, Some(-0.5), Some(-2.0)), 1);
        assert_eq!(rewards(&r), [-2.0, -1.0, -0.5, 0.8, 0.0]);
    }
}
