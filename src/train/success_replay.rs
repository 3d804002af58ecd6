//! Success replay (`[algo] success_replay = N`): per task, the last N successful
//! trajectories, replayed into groups whose rollouts all failed (ARPO's per-task replay
//! buffer, Lu et al. 2025; MobileRL's positive replay).
//!
//! On a sparse task most early groups fail in every rollout: their rewards are equal, so
//! GRPO-family estimators give them no advantage and the iteration's env steps teach
//! nothing. With a success of the same task in place of one failure, the group has a
//! winner again: the replayed trajectory gets a positive advantage and the failures a
//! negative one.
//!
//! - **What is kept.** A rollout that ended in `success` with its screenshots and the
//!   per-token log-probs it was sampled with, newest last, at most N per task; or an
//!   oracle demonstration of the run's `[sft]` (its action tokens encoded and scored by the
//!   policy when the buffer is seeded, after cloning).
//! - **Where it goes.** In each group (same task and seed) whose counted rollouts all
//!   failed (`env_error` and the other infrastructure ends are not counted), a success of
//!   the task, drawn at random, replaces the last failure. It keeps its own seed,
//!   instruction and screenshots and joins the group by its id: the group's baseline then
//!   mixes two instances of the task, as in ARPO.
//! - **Off-policy correction.** A replayed step trains with the log-probs stored when it
//!   was sampled as π_old, so its importance ratio π_θ / π_old is clipped by the
//!   objective's `clip_low` / `clip_high` as for fresh rollouts; with a positive
//!   advantage the clip stops the push once the policy already favours the replayed
//!   actions by more than 1 + ε. This is the correction ARPO and DART-GUI use.
//! - **Counting.** Replayed trajectories cost no env steps and are left out of the rollout
//!   metrics (success rate, episode length); `replayed` counts them per iteration. They
//!   make the group informative, so dynamic sampling keeps it.
//! - **Kept across a resume.** The buffer is saved in each checkpoint
//!   (`success_replay/`, a trajectory set with its screenshots) and read back.

use crate::env::EpisodeStatus;
use crate::env::GuiAction;
use crate::policy::TrainablePolicy;
use crate::rollout::{Recorded, TrainingBatch, TrajectorySet, TrajectoryWriter};
use anyhow::Context;
use rand::Rng;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

/// The folder of a checkpoint that holds the buffer.
pub const DIR: &str = "success_replay";

/// Per task, the last `cap` successful trajectories.
#[derive(Debug, Clone, Default)]
pub struct SuccessReplay {
    cap: usize,
    by_task: BTreeMap<String, VecDeque<Recorded>>,
}

impl SuccessReplay {
    /// An empty buffer of `cap` trajectories per task (0: off).
    pub fn new(cap: usize) -> SuccessReplay {
        SuccessReplay { cap, by_task: BTreeMap::new() }
    }

    /// Whether replay is on.
    pub fn is_on(&self) -> bool {
        self.cap > 0
    }

    /// Trajectories held, over all tasks.
    pub fn len(&self) -> usize {
        self.by_task.values().map(VecDeque::len).sum()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Trajectories held for `task`.
    pub fn for_task(&self, task: &str) -> usize {
        self.by_task.get(task).map_or(0, VecDeque::len)
    }

    /// Keep the replayable successes among `recs`, oldest evicted first. Replayable: it
    /// ended in `success`, took at least one step, and every step has its screenshot, its
    /// token ids and their log-probs.
    pub fn remember<'a>(&mut self, recs: impl IntoIterator<Item = &'a Recorded>) {
        if !self.is_on() {
            return;
        }
        for r in recs {
            if !replayable(r) {
                continue;
            }
            let q = self.by_task.entry(r.trajectory.task_id.clone()).or_default();
            q.push_back(r.clone());
            while q.len() > self.cap {
                q.pop_front();
            }
        }
    }

    /// In each group of `recs` (by group id, else task and seed) whose counted rollouts all
    /// failed, put a success of its task in place of the last failure. Returns how many
    /// were replayed.
    pub fn fill(&self, recs: &mut [Recorded], rng: &mut impl Rng) -> usize {
        if self.is_empty() {
            return 0;
        }
        // Groups as training forms them (by group id, else task and seed).
        let (_, groups) = TrainingBatch::group(recs.iter().map(|r| &r.trajectory));
        let mut replayed = 0;
        for members in groups {
            let counted: Vec<usize> = members
                .into_iter()
                .filter(|&i| !recs[i].trajectory.outcome.status.is_infrastructure_failure())
                .collect();
            let Some(&last) = counted.last() else { continue };
            if counted.iter().any(|&i| recs[i].trajectory.outcome.status == EpisodeStatus::Success) {
                continue;
            }
            let Some(pool) = self.by_task.get(&recs[last].trajectory.task_id).filter(|q| !q.is_empty())
            else {
                continue;
            };
            let mut copy = pool[rng.gen_range(0..pool.len())].clone();
            // It joins the failing group: by id where the collector gave one, else by seed.
            let place = &recs[last].trajectory;
            copy.trajectory.group = place.group;
            if place.group.is_none() {
                copy.trajectory.seed = place.seed;
            }
            recs[last] = copy;
            replayed += 1;
        }
        replayed
    }

    /// Seed the buffer with the successful episodes of a demonstration set: each step's
    /// action encoded by `policy` and scored by it (so a replayed demonstration starts at
    /// ratio 1). Episodes a step of which has no screenshot or cannot be written by the
    /// policy are left out. Returns how many were kept.
    pub fn seed_from_demos(
        &mut self,
        policy: &dyn TrainablePolicy,
        set: &TrajectorySet,
    ) -> anyhow::Result<usize> {
        if !self.is_on() {
            return Ok(0);
        }
        let previous = policy.reads_previous_screenshot();
        let mut kept = 0;
        for st in super::sft::demo_order(set) {
            let t = &st.trajectory;
            if t.outcome.status != EpisodeStatus::Success || t.steps.is_empty() {
                continue;
            }
            let Some(mut rec) = load_recorded(set, t)? else { continue };
            let states: Vec<_> = (0..t.steps.len()).filter_map(|i| rec.state_at(i, previous)).collect();
            if states.len() != t.steps.len() {
                continue;
            }
            let tokens: Option<Vec<Vec<u32>>> = t
                .steps
                .iter()
                .zip(&states)
                .map(|(s, state)| {
                    GuiAction::parse(&s.action).ok().and_then(|a| policy.encode(state, &a).ok())
                })
                .collect();
            let Some(tokens) = tokens.filter(|t| t.iter().all(|x| !x.is_empty())) else { continue };
            let scores = policy.score(&states, &tokens)?;
            let logp = scores.logp.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?;
            for ((step, toks), row) in rec.trajectory.steps.iter_mut().zip(tokens).zip(logp) {
                step.token_logprobs = row[..toks.len()].to_vec();
                step.tokens = toks;
            }
            self.remember(std::iter::once(&rec));
            kept += 1;
        }
        Ok(kept)
    }

    /// Write the buffer into checkpoint folder `dir` (as `success_replay/`).
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut w = TrajectoryWriter::open(&dir.join(DIR))?;
        for r in self.by_task.values().flatten() {
            w.append(r)?;
        }
        Ok(())
    }

    /// The buffer saved in checkpoint folder `dir`, if any (empty if none), kept to `cap`.
    pub fn load(cap: usize, dir: &Path) -> anyhow::Result<SuccessReplay> {
        let mut out = SuccessReplay::new(cap);
        let folder = dir.join(DIR);
        if cap == 0 || !folder.is_dir() {
            return Ok(out);
        }
        let set = TrajectorySet::read(&folder)
            .with_context(|| format!("reading the success replay buffer {}", folder.display()))?;
        for st in &set.trajectories {
            if let Some(rec) = load_recorded(&set, &st.trajectory)? {
                out.remember(std::iter::once(&rec));
            }
        }
        Ok(out)
    }
}

/// Whether `r` can be replayed: a success with a screenshot, tokens and log-probs per step.
fn replayable(r: &Recorded) -> bool {
    let steps = &r.trajectory.steps;
    r.trajectory.outcome.status == EpisodeStatus::Success
        && !steps.is_empty()
        && r.frames.len() >= steps.len()
        && steps.iter().all(|s| !s.tokens.is_empty() && s.tokens.len() == s.token_logprobs.len())
}

/// A stored trajectory with its screenshots back in memory; `None` if a step's is missing.
fn load_recorded(set: &TrajectorySet, t: &crate::rollout::Trajectory) -> anyhow::Result<Option<Recorded>> {
    let mut frames = Vec::with_capacity(t.steps.len() + 1);
    for s in &t.steps {
        let Some(name) = &s.frame else { return Ok(None) };
        frames.push(set.load_frame(name)?.into());
    }
    if let Some(name) = &t.final_frame {
        frames.push(set.load_frame(name)?.into());
    }
    Ok(Some(Recorded { trajectory: t.clone(), frames }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::speed::square_state;
    use crate::policy::vlm::{VlmConfig, VlmPolicy};
    use crate::rollout::{Outcome, TrajStep, Trajectory};
    use rand::SeedableRng;

    /// A one-click rollout of `task` in group `group` with its tokens and log-probs;
    /// `x` tells rollouts apart.
    fn rollout(task: &str, group: Option<u64>, seed: u64, status: EpisodeStatus, x: u32) -> Recorded {
        let state = square_state(160, 210, 20, 30, 30, [220, 30, 30], "Click the square");
        let mut step = TrajStep::new(format!("click({x}, 45)"), 0.0, status);
        step.tokens = vec![1, 2, x];
        step.token_logprobs = vec![-0.5, -0.25, -0.125];
        let reward = if status == EpisodeStatus::Success { 1.0 } else { 0.0 };
        let outcome = Outcome { reward, status, steps: 1, error: None };
        let mut t = Trajectory::new(task, seed, vec![step], outcome);
        t.group = group;
        Recorded { trajectory: t, frames: vec![state.screenshot.clone(), state.screenshot] }
    }

    fn actions(recs: &[Recorded]) -> Vec<String> {
        recs.iter().map(|r| r.trajectory.steps[0].action.clone()).collect()
    }

    #[test]
    fn only_replayable_successes_are_kept_and_the_oldest_go_first() {
        let mut b = SuccessReplay::new(2);
        let mut untokenised = rollout("a", Some(0), 0, EpisodeStatus::Success, 9);
        untokenised.trajectory.steps[0].tokens.clear();
        let mut no_frames = rollout("a", Some(0), 0, EpisodeStatus::Success, 8);
        no_frames.frames.clear();
        b.remember(&[
            rollout("a", Some(0), 0, EpisodeStatus::Success, 1),
            rollout("a", Some(0), 0, EpisodeStatus::Fail, 2),
            rollout("a", Some(1), 1, EpisodeStatus::EnvError, 3),
            untokenised,
            no_frames,
            rollout("a", Some(1), 1, EpisodeStatus::Success, 4),
            rollout("a", Some(2), 2, EpisodeStatus::Success, 5),
            rollout("b", Some(3), 3, EpisodeStatus::Success, 6),
        ]);
        assert_eq!((b.for_task("a"), b.for_task("b"), b.len()), (2, 1, 3));
        let kept: Vec<String> = b.by_task["a"].iter().map(|r| r.trajectory.steps[0].action.clone()).collect();
        assert_eq!(kept, ["click(4, 45)", "click(5, 45)"], "the newest two");
        // off: nothing is kept, nothing replayed
        let mut off = SuccessReplay::new(0);
        off.remember(&[rollout("a", Some(0), 0, EpisodeStatus::Success, 1)]);
        assert!(off.is_empty() && !off.is_on());
    }

    #[test]
    fn all_failed_groups_get_a_success_in_place_of_their_last_failure() {
        let mut b = SuccessReplay::new(4);
        b.remember(&[rollout("a", Some(90), 7, EpisodeStatus::Success, 1)]);
        use EpisodeStatus::*;
        let mut recs = vec![
            // group 0: all failed, the last one an env error (not counted, not replaced)
            rollout("a", Some(0), 10, Fail, 20),
            rollout("a", Some(0), 10, Truncated, 21),
            rollout("a", Some(0), 10, EnvError, 22),
            // group 1: one success, untouched
            rollout("a", Some(1), 11, Fail, 30),
            rollout("a", Some(1), 11, Success, 31),
            // group 2: only infrastructure failures, untouched
            rollout("a", Some(2), 12, EnvError, 40),
            // group 3: all failed, but a task with nothing to replay
            rollout("b", Some(3), 13, Fail, 50),
            rollout("b", Some(3), 13, Fail, 51),
            // no group ids: grouped by task and seed
            rollout("a", None, 14, Fail, 60),
            rollout("a", None, 14, Fail, 61),
        ];
        let before = actions(&recs);
        let n = b.fill(&mut recs, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
        assert_eq!(n, 2);
        let after = actions(&recs);
        let changed: Vec<usize> = (0..recs.len()).filter(|&i| before[i] != after[i]).collect();
        assert_eq!(changed, [1, 9], "{after:?}");
        // the copy joins its group: by id, or (without ids) by seed
        assert_eq!((recs[1].trajectory.group, recs[1].trajectory.seed), (Some(0), 7));
        assert_eq!((recs[9].trajectory.group, recs[9].trajectory.seed), (None, 14));
        assert_eq!(recs[1].trajectory.outcome.status, Success);
        assert_eq!(recs[1].trajectory.steps[0].token_logprobs, [-0.5, -0.25, -0.125], "stored log-probs");
        let (batch, _) = TrainingBatch::group(recs.iter().map(|r| &r.trajectory));
        assert_eq!(batch.groups.len(), 5, "no group split or added");
        assert!(!batch.groups[0].stats().all_equal, "group 0 now carries signal");
        // an empty buffer replays nothing
        let mut recs2 = vec![rollout("a", Some(0), 10, Fail, 20)];
        assert_eq!(SuccessReplay::new(4).fill(&mut recs2, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0)), 0);
    }

    #[test]
    fn the_buffer_survives_a_checkpoint_with_its_screenshots_and_log_probs() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = SuccessReplay::new(3);
        b.remember(&[
            rollout("a", Some(0), 0, EpisodeStatus::Success, 1),
            rollout("b", Some(1), 1, EpisodeStatus::Success, 2),
        ]);
        b.save(dir.path()).unwrap();
        let back = SuccessReplay::load(3, dir.path()).unwrap();
        assert_eq!((back.for_task("a"), back.for_task("b")), (1, 1));
        let (x, y) = (&b.by_task["a"][0], &back.by_task["a"][0]);
        assert_eq!(x.frames, y.frames);
        assert_eq!(x.trajectory.steps[0].tokens, y.trajectory.steps[0].tokens);
        assert_eq!(x.trajectory.steps[0].token_logprobs, y.trajectory.steps[0].token_logprobs);
        // a smaller cap on resume keeps the newest; a checkpoint without a buffer gives none
        assert_eq!(SuccessReplay::load(3, tempfile::tempdir().unwrap().path()).unwrap().len(), 0);
        assert_eq!(SuccessReplay::load(0, dir.path()).unwrap().len(), 0);
    }

    #[test]
    fn demonstrations_are_encoded_and_scored_by_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let state = square_state(160, 210, 20, 30, 30, [220, 30, 30], "Click the square");
        let mut w = TrajectoryWriter::open(&dir.path().join("demos")).unwrap();
        for (status, action) in
            [(EpisodeStatus::Success, "click(35, 45)"), (EpisodeStatus::Fail, "click(5, 5)")]
        {
            let outcome = Outcome { reward: 1.0, status, steps: 1, error: None };
            let mut t = Trajectory::new("builtin/demo", 0, vec![TrajStep::new(action, 0.0, status)], outcome);
            t.instruction = state.instruction.clone();
            let shots = vec![state.screenshot.clone(), state.screenshot.clone()];
            w.append(&Recorded { trajectory: t, frames: shots }).unwrap();
        }
        let set = TrajectorySet::read(&dir.path().join("demos")).unwrap();
        let p = VlmPolicy::new(VlmConfig::tiny(), &candle_core::Device::Cpu, 0).unwrap();
        let mut b = SuccessReplay::new(2);
        assert_eq!(b.seed_from_demos(&p, &set).unwrap(), 1, "the failed demonstration is left out");
        let kept = &b.by_task["builtin/demo"][0];
        let step = &kept.trajectory.steps[0];
        let state = kept.state_at(0, false).unwrap();
        let want = TrainablePolicy::encode(&p, &state, &GuiAction::parse("click(35, 45)").unwrap()).unwrap();
        assert_eq!(step.tokens, want);
        let scores = TrainablePolicy::score(&p, &[state], &[want]).unwrap().logp.to_vec2::<f32>().unwrap();
        assert_eq!(step.token_logprobs, scores[0][..step.tokens.len()]);
        assert!(step.token_logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
    }
}
