//! Bringing an env to an exact mid-episode state: reset to a recorded episode's seed and
//! replay its first `t` actions, checking every screen against the recorded one.
//!
//! guirl's env is deterministic (frames drawn on request, page timers on a virtual clock),
//! so a seed and an action prefix name a state exactly. Rollout trees use this to branch
//! several rollouts from one shared state ([`crate::rollout::Job::prefix`]), and
//! `guirl play --from SET:LINE:STEP` to open a recorded episode at a step for a person.
//!
//! The screens are compared as [`super::replay`] compares them (mean absolute difference
//! ≤ [`FRAME_TOLERANCE`]): a prefix that leads elsewhere is an error naming the step, never
//! a rollout silently started from another state.

use super::replay::{mean_abs_diff, FRAME_TOLERANCE};
use super::store::TrajectorySet;
use super::trajectory::{Recorded, TrajStep};
use crate::env::{EnvError, GuiAction, GuiEnv, ScreenState, StepOutcome};
use anyhow::Context;
use image::RgbImage;

/// The first steps of a recorded episode and the screens they were taken on.
#[derive(Debug, Clone)]
pub struct Prefix {
    /// The episode's seed.
    pub seed: u64,
    /// Its first `t` steps (`t = steps.len()`, the branch point).
    pub steps: Vec<TrajStep>,
    /// The screen before each of those steps and the one before step `t`: `t + 1` images,
    /// or none (then nothing is checked).
    pub frames: Vec<std::sync::Arc<RgbImage>>,
}

/// An env brought to a prefix's state.
#[derive(Debug)]
pub struct Reached {
    /// The observation before step `t`, where the policy takes over.
    pub obs: ScreenState,
    /// Each replayed step: the observation it was taken on, and its outcome.
    pub steps: Vec<(ScreenState, StepOutcome)>,
}

impl Reached {
    /// The replayed steps as trajectory steps: `recorded`'s (its action, sampled tokens
    /// and log-probs, answer), with this replay's reward, timings and elements, marked
    /// [`TrajStep::prefix`].
    pub fn trajectory_steps(&self, recorded: &[TrajStep]) -> Vec<TrajStep> {
        recorded
            .iter()
            .zip(&self.steps)
            .map(|(rec, (seen, out))| TrajStep {
                reward: out.reward,
                status: out.info.status,
                timings: out.info.timings,
                elements: seen.elements.clone(),
                frame: None,
                prefix: true,
                ..rec.clone()
            })
            .collect()
    }
}

/// Why an env could not be brought to a prefix's state.
#[derive(Debug, thiserror::Error)]
pub enum PrefixError {
    /// The browser failed (reset or step).
    #[error(transparent)]
    Env(#[from] EnvError),
    /// A screen or the episode's course differed from the recording.
    #[error("the replayed prefix diverged at step {step}: {what}")]
    Diverged {
        /// 0-based step whose screen (or result) differed.
        step: usize,
        /// What differed.
        what: String,
    },
}

impl Prefix {
    /// The first `t` steps of `rec` (its frames, where kept, for the check). `t` must
    /// leave a step to take: `1 ≤ t < steps` (0 is a plain reset).
    pub fn of(rec: &Recorded, t: usize) -> anyhow::Result<Prefix> {
        let n = rec.trajectory.steps.len();
        anyhow::ensure!(
            t < n,
            "step {t} is not inside the episode: it has {n} step(s), so the step must be 0 to {}",
            n.saturating_sub(1)
        );
        let frames = if rec.frames.len() > t { rec.frames[..=t].to_vec() } else { Vec::new() };
        Ok(Prefix { seed: rec.trajectory.seed, steps: rec.trajectory.steps[..t].to_vec(), frames })
    }

    /// The prefix of line `line` (1-based, as `guirl view` and replay reports number them)
    /// of a recorded set, up to step `t`, with its stored frames.
    pub fn from_set(set: &TrajectorySet, line: usize, t: usize) -> anyhow::Result<(String, Prefix)> {
        let st = set.trajectories.iter().find(|s| s.line == line).with_context(|| {
            let lines: Vec<usize> = set.trajectories.iter().map(|s| s.line).collect();
            format!(
                "{} has no trajectory on line {line} (its lines: {})",
                set.dir.display(),
                summarize(&lines)
            )
        })?;
        let traj = &st.trajectory;
        let mut frames = Vec::new();
        let names = traj.steps.iter().map(|s| s.frame.clone()).chain([traj.final_frame.clone()]);
        for name in names.take(t + 1) {
            match name {
                Some(n) => frames.push(set.load_frame(&n)?.into()),
                None => {
                    frames.clear();
                    break;
                }
            }
        }
        let rec = Recorded { trajectory: traj.clone(), frames };
        let prefix = Prefix::of(&rec, t).with_context(|| format!("{}:{line}", set.dir.display()))?;
        Ok((traj.task_id.clone(), prefix))
    }

    /// The branch point: steps replayed before the policy takes over.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the prefix is empty (a plain reset).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Reset `env` to the prefix's seed and replay its steps, checking each screen. A
    /// screen that differs from the recorded one, a step whose status differs, or an
    /// episode that ends inside the prefix is [`PrefixError::Diverged`].
    pub async fn replay(&self, env: &mut GuiEnv) -> Result<Reached, PrefixError> {
        let (mut obs, _) = env.reset(self.seed).await?;
        let mut steps = Vec::with_capacity(self.steps.len());
        for (i, step) in self.steps.iter().enumerate() {
            self.check(i, &obs)?;
            let out = match GuiAction::parse(&step.action) {
                Ok(a) => env.step(&a).await?,
                Err(_) => env.step_text(&step.action).await?,
            };
            let what = if out.terminated || out.truncated {
                format!("the episode ended ({}) inside the prefix", out.info.status)
            } else if out.info.status != step.status {
                format!("status {} instead of {}", out.info.status, step.status)
            } else {
                let next = out.obs.clone();
                steps.push((std::mem::replace(&mut obs, next), out));
                continue;
            };
            return Err(PrefixError::Diverged { step: i, what });
        }
        self.check(self.steps.len(), &obs)?;
        Ok(Reached { obs, steps })
    }

    fn check(&self, i: usize, obs: &ScreenState) -> Result<(), PrefixError> {
        let Some(want) = self.frames.get(i) else { return Ok(()) };
        let d = mean_abs_diff(want, &obs.screenshot);
        if d > FRAME_TOLERANCE {
            return Err(PrefixError::Diverged {
                step: i,
                what: format!("the screen before step {i} differs from the recording (mean abs diff {d:.2})"),
            });
        }
        Ok(())
    }
}

/// `1-4, 7` for a sorted list of line numbers.
fn summarize(lines: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j + 1 < lines.len() && lines[j + 1] == lines[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { lines[i].to_string() } else { format!("{}-{}", lines[i], lines[j]) });
        i = j + 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::{Outcome, Trajectory};

    fn rec(n: usize, frames: usize) -> Recorded {
        let steps =
            (0..n).map(|i| TrajStep::new(format!("click({i}, 1)"), 0.0, EpisodeStatus::Running)).collect();
        let outcome = Outcome { reward: 0.0, status: EpisodeStatus::Fail, steps: n as u32, error: None };
        let frames =
            (0..frames).map(|i| RgbImage::from_pixel(2, 2, image::Rgb([i as u8; 3])).into()).collect();
        Recorded { trajectory: Trajectory::new("t", 9, steps, outcome), frames }
    }

    #[test]
    fn a_prefix_takes_the_first_steps_and_their_screens() {
        let p = Prefix::of(&rec(4, 5), 2).unwrap();
        assert_eq!((p.seed, p.len(), p.frames.len()), (9, 2, 3));
        assert_eq!(p.steps[1].action, "click(1, 1)");
        assert_eq!(p.frames[2].get_pixel(0, 0).0, [2; 3], "the screen before step t is the last");
        assert!(Prefix::of(&rec(4, 0), 3).unwrap().frames.is_empty(), "no frames kept: nothing to check");
    }

    #[test]
    fn a_branch_point_outside_the_episode_says_which_steps_exist() {
        let e = Prefix::of(&rec(3, 4), 3).unwrap_err().to_string();
        assert!(e.contains("has 3 step(s)") && e.contains("0 to 2"), "{e}");
    }

    #[test]
    fn line_lists_are_summarized_as_ranges() {
        assert_eq!(summarize(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
        assert_eq!(summarize(&[]), "none");
    }
}
