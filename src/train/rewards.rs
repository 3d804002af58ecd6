//! Training rewards: the task's episode reward, with two corrections a config can set so
//! that ending an episode without an answer never pays better than a wrong answer, and
//! DAPO's overlong penalty.
//!
//! - `[algo] reward`: `"page"` (the default) trains on the reward the task pays, partial
//!   credit, graded scores and shaping included; `"success"` on whether the episode
//!   succeeded by the task's success rule (`tasks::success`): 1 for a success, the task's
//!   failure reward for any other ended episode (a wrong or partial answer), so that
//!   ticking four of five boxes pays what a wrong answer pays. Truncated rollouts keep
//!   the task's reward, and the corrections below apply after it.
//! - `[algo] truncation_reward`: a rollout that hit the step limit trains on this reward
//!   instead of the task's (usually 0).
//! - `[algo] give_up_reward`: a rollout that ended with the agent's `done()` on a task that
//!   ends by itself (MiniWoB++, built-in) trains on this reward; by default the task's
//!   failure reward (−1 there), since `done()` there means "I give up".
//! - `[algo] fail_reward`: any other failed rollout (a wrong answer) trains on this reward
//!   instead of the task's. With γ < 1 a negative failure reward pays a later failure
//!   better than an earlier one (the return from step t is −γ^(T−t)), so the step-level
//!   estimators learn to put failure off, by stalling until the step limit; failures and
//!   truncations at 0 remove that.
//! - `[algo.overlong_penalty]`: a rollout that ran into the last `window` steps before
//!   `rollout.max_steps` loses up to `weight` ([`overlong_penalty`]; on by
//!   default for `dapo`).
//!
//! Each correction changes the episode reward (`outcome.reward`); step-level estimators
//! see the change on the last step. Success rates and evaluation are by status and the
//! task's own reward; only training sees these corrections.

use crate::env::{EpisodeStatus, GuiAction};
use crate::rollout::{Recorded, Trajectory};
use crate::tasks::Task;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Whether `t` ended because the agent gave up: its last action is `done()`, the episode
/// failed, and its task does not score `done()` itself.
pub fn gave_up(t: &Trajectory, task: &dyn Task) -> bool {
    !task.rewards_on_done()
        && t.outcome.status == EpisodeStatus::Fail
        && t.steps.last().is_some_and(|s| GuiAction::parse(&s.action).is_ok_and(|a| a == GuiAction::Done))
}

/// What a rollout trains on (`[algo] reward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainReward {
    /// The reward the task pays (MiniWoB++'s partial credit and graded scores included).
    #[default]
    Page,
    /// 1 for a success by the task's success rule, the task's failure reward for any other
    /// ended episode.
    Success,
}

/// The training rewards a config sets in place of the task's (`None`: the task's own).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RewardOverrides {
    /// The page's reward or binary success.
    pub reward: TrainReward,
    /// For a rollout that hit the step limit.
    pub truncation: Option<f64>,
    /// For a rollout whose agent gave up (default: the task's failure reward).
    pub give_up: Option<f64>,
    /// For any other failed rollout.
    pub fail: Option<f64>,
}

/// Apply the reward source (page or success), then the truncation, give-up and failure
/// rewards, to freshly collected rollouts; returns how many rollouts gave up.
pub fn shape(recs: &mut [Recorded], tasks: &[Arc<dyn Task>], set: RewardOverrides) -> usize {
    let mut give_ups = 0;
    for rec in recs {
        let t = &mut rec.trajectory;
        if set.reward == TrainReward::Success {
            match t.outcome.status {
                EpisodeStatus::Success => t.outcome.reward = 1.0,
                EpisodeStatus::Fail => {
                    if let Some(task) = tasks.iter().find(|k| k.id() == t.task_id) {
                        t.outcome.reward = task.failure_reward();
                    }
                }
                _ => {}
            }
        }
        match t.outcome.status {
            EpisodeStatus::Truncated => {
                if let Some(r) = set.truncation {
                    t.outcome.reward = r;
                }
            }
            EpisodeStatus::Fail => {
                let task = tasks.iter().find(|k| k.id() == t.task_id);
                if let Some(task) = task.filter(|task| gave_up(t, task.as_ref())) {
                    give_ups += 1;
                    t.outcome.reward = set.give_up.unwrap_or(task.failure_reward());
                } else if let Some(r) = set.fail {
                    t.outcome.reward = r;
                }
            }
            _ => {}
        }
    }
    give_ups
}

// DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), counted in env steps:
//
//                ⎧ 0                        T ≤ T_max − L
//    R_len(T) =  ⎨ ((T_max − L) − T) / L    T_max − L < T ≤ T_max
//                ⎩ −1                       truncated at T_max
//
// DAPO scores a response of |y| tokens against the generation limit L_max with a soft
// window of L_cache tokens before it, and a response cut off at the limit gets −1. An
// agent's response is its trajectory: |y| becomes T, the env steps it took; L_max becomes
// T_max = rollout.max_steps, where the env truncates the episode (DAPO's cut-off response);
// L_cache becomes L = overlong_window steps. The penalty falls linearly from 0 at
// T = T_max − L to −1 at T = T_max, so an episode that ends on the last allowed step scores
// −1 like a truncated one (as DAPO's |y| = L_max does). It is added, times
// `overlong_weight`, to the episode reward whatever the outcome, successes included: DAPO
// applies it to every response by length alone.
/// DAPO's length penalty `R_len` (formula above) of a trajectory of `steps` env steps
/// under a step limit `max_steps` and a soft window of `window` steps (≥ 1); `truncated`:
/// the env cut the episode at the limit. In `[−1, 0]`.
pub fn overlong_penalty(steps: u32, truncated: bool, max_steps: u32, window: u32) -> f64 {
    let window = window.max(1);
    let free = max_steps.saturating_sub(window);
    if truncated {
        -1.0
    } else if steps <= free {
        0.0
    } else {
        ((free as f64 - steps as f64) / window as f64).max(-1.0)
    }
}

/// Add `weight · R_len` ([`overlong_penalty`]) to each rollout's episode reward (`env_error`
/// and `policy_error` rollouts left alone); returns how many were penalized and the sum of
/// what they lost.
pub fn penalize_overlong(recs: &mut [Recorded], max_steps: u32, window: u32, weight: f64) -> (usize, f64) {
    let (mut n, mut sum) = (0, 0.0);
    for rec in recs {
        let o = &mut rec.trajectory.outcome;
        if o.status.is_infrastructure_failure() {
            continue;
        }
        let p = weight * overlong_penalty(o.steps, o.status == EpisodeStatus::Truncated, max_steps, window);
        if p != 0.0 {
            o.reward += p;
            n += 1;
            sum += p;
        }
    }
    (n, sum)
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
        assert_eq!(shape(&mut r, &tasks, RewardOverrides::default()), 1);
        assert_eq!(rewards(&r), [-1.0, -1.0, 0.0, 0.8, 0.0]);
        // Truncation and give-up configured: a wrong answer keeps the task's reward.
        let mut r = fresh();
        let set =
            RewardOverrides { truncation: Some(-0.5), give_up: Some(-2.0), fail: None, ..Default::default() };
        assert_eq!(shape(&mut r, &tasks, set), 1);
        assert_eq!(rewards(&r), [-2.0, -1.0, -0.5, 0.8, 0.0]);
        // All three: the website task's done() is a failure of its own, not a give-up, so
        // it takes fail_reward like the wrong answer; a success keeps the task's reward.
        let mut r = fresh();
        let set = RewardOverrides {
            truncation: Some(0.0),
            give_up: Some(-2.0),
            fail: Some(0.1),
            ..Default::default()
        };
        assert_eq!(shape(&mut r, &tasks, set), 1);
        assert_eq!(rewards(&r), [-2.0, 0.1, 0.0, 0.8, 0.1]);
    }

    #[test]
    fn success_rewards_pay_one_for_a_success_and_a_failure_for_a_partial_answer() {
        let miniwob = crate::tasks::load_task("miniwob/click-checkboxes").unwrap();
        let website = crate::tasks::load_task("fixtures/tasks/two-buttons.toml").unwrap();
        let (m, w) = (miniwob.id().to_string(), website.id().to_string());
        let tasks = vec![miniwob, website];
        let fresh = || {
            vec![
                rec(&m, "click(1, 2)", EpisodeStatus::Fail, 0.6), // four of five boxes: the page pays 0.6
                rec(&m, "click(1, 2)", EpisodeStatus::Success, 0.9), // time-decayed full credit
                rec(&m, "click(1, 2)", EpisodeStatus::Truncated, 0.0),
                rec(&m, "done()", EpisodeStatus::Fail, 0.0), // gave up
                rec(&w, "done()", EpisodeStatus::Fail, 0.4), // a numeric check under its threshold
            ]
        };
        let page = RewardOverrides::default();
        assert_eq!(page.reward, TrainReward::Page);
        let mut r = fresh();
        shape(&mut r, &tasks, page);
        assert_eq!(rewards(&r), [0.6, 0.9, 0.0, -1.0, 0.4], "the page's rewards, give-up aside");
        let success = RewardOverrides { reward: TrainReward::Success, ..Default::default() };
        let mut r = fresh();
        assert_eq!(shape(&mut r, &tasks, success), 1);
        assert_eq!(rewards(&r), [-1.0, 1.0, 0.0, -1.0, 0.0], "MiniWoB++ fails at −1, a website spec at 0");
        // fail_reward still replaces a wrong answer's reward afterwards.
        let mut r = fresh();
        shape(&mut r, &tasks, RewardOverrides { fail: Some(0.0), ..success });
        assert_eq!(rewards(&r), [0.0, 1.0, 0.0, -1.0, 0.0]);
    }

    #[test]
    fn overlong_penalty_by_hand() {
        // T_max = 10, L = 4: free up to T_max − L = 6 steps, then ((10 − 4) − T) / 4.
        let p = |t, truncated| overlong_penalty(t, truncated, 10, 4);
        assert_eq!(p(1, false), 0.0);
        assert_eq!(p(6, false), 0.0); // the window's edge: still free
        assert_eq!(p(7, false), -0.25); // (6 − 7) / 4
        assert_eq!(p(8, false), -0.5); // (6 − 8) / 4
        assert_eq!(p(9, false), -0.75); // (6 − 9) / 4
        assert_eq!(p(10, false), -1.0); // ended on the last allowed step: (6 − 10) / 4
        assert_eq!(p(10, true), -1.0); // truncated at the limit
        assert_eq!(p(3, true), -1.0); // truncated is −1 whatever T (a shorter task limit)
                                      // Beyond the limit (cannot happen in the env, but the penalty stays at −1).
        assert_eq!(p(14, false), -1.0);
        // L = T_max: the window covers every step, (0 − T) / T_max.
        assert_eq!(overlong_penalty(1, false, 4, 4), -0.25);
        // L = 1: only the last step is penalized.
        assert_eq!(overlong_penalty(2, false, 3, 1), 0.0);
        assert_eq!(overlong_penalty(3, false, 3, 1), -1.0);
    }

    #[test]
    fn overlong_penalty_is_weighted_and_leaves_env_errors_alone() {
        let long = |status, steps, reward| {
            let mut r = rec("t", "click(1, 2)", status, reward);
            r.trajectory.outcome.steps = steps;
            r
        };
        let mut r = vec![
            long(EpisodeStatus::Success, 9, 1.0), // inside: 0.5 · (6 − 9) / 4 = −0.375
            long(EpisodeStatus::Fail, 2, -1.0),   // short: no penalty
            long(EpisodeStatus::Truncated, 10, 0.0), // truncated: 0.5 · −1
            long(EpisodeStatus::EnvError, 10, 0.0), // the browser's fault: untouched
        ];
        let (n, sum) = penalize_overlong(&mut r, 10, 4, 0.5);
        assert_eq!(rewards(&r), [0.625, -1.0, -0.5, 0.0]);
        assert_eq!((n, sum), (2, -0.875));
    }
}
