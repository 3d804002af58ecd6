//! GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training"):
//! GRPO's episode-level advantage, plus a step-level advantage that compares the actions
//! taken from the same state. The rollouts of one group start from the same task instance
//! and often pass through identical screens (the start page, a dialog, a form half
//! filled): those repeated states are *anchor states*, and the steps taken from one of
//! them form a step group, whose members are judged against each other by the return
//! that followed.
//!
//! ```text
//! A^E_i     = (R_i − mean_g R) / (std + eps)                 (GRPO; adv_std as for grpo)
//! G_{i,t}   = Σ_{k ≥ t} γ^{k−t} r_{i,k}                      (return from step t)
//! S(s)      = {(j, k) in group g : s_{j,k} = s}              (same screenshot, hashed)
//! A^S_{i,t} = (G_{i,t} − mean_{S} G) / (std_{S} G + eps)     ([algo.gigpo] step_std = false:
//!                                                             G_{i,t} − mean_S G);
//!             0 when |S| = 1
//! A_{i,t}   = A^E_i + ω · A^S_{i,t}
//! ```
//! The step std is the population std, like every std here. The state of a step is the
//! screenshot the policy saw before acting: its pixels and size, hashed
//! ([`anchor_keys`]). Within a group the instruction is the same, so the screenshot alone
//! names the state.

use super::reinforce_pp::group_returns;
use super::{differ, group_advantages, mean_std, AdvStd, AdvantageStats, StepAdvantages};
use crate::rollout::{Group, Recorded, TrainingBatch};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The state each step was taken in, `[group][trajectory][step]` like a
/// [`TrainingBatch`]; `None` where it is unknown (the step is then a group of its own).
pub type StateKeys = Vec<Vec<Vec<Option<u64>>>>;

/// Settings of the step-level part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepGroups {
    /// γ of the returns from each step.
    pub gamma: f64,
    /// ω: weight of the step advantage.
    pub omega: f64,
    /// Divide by the step group's std (true) or only subtract its mean.
    pub std: bool,
    /// Added to the std.
    pub eps: f64,
}

/// A hash of a screenshot's size and pixels (SipHash with fixed keys: the same image gives
/// the same key in every process).
pub fn screenshot_key(img: &image::RgbImage) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (img.width(), img.height()).hash(&mut h);
    img.as_raw().hash(&mut h);
    h.finish()
}

/// The anchor-state keys of the rollouts `recs`, laid out like the batch that
/// `TrainingBatch::group` made of them (`index[g][j]`: the rollout behind member j of
/// group g). Step i's state is `frames[i]`, the screenshot before it; a branched rollout's
/// replayed steps have none.
pub fn anchor_keys(recs: &[Recorded], index: &[Vec<usize>]) -> StateKeys {
    index
        .iter()
        .map(|members| {
            members
                .iter()
                .map(|&k| {
                    let r = &recs[k];
                    // A branched rollout's replayed steps repeat another rollout's action in
                    // its state: counted there, they would pull the state's mean towards it.
                    let steps = r.trajectory.steps.iter().enumerate();
                    steps
                        .map(|(i, s)| r.frames.get(i).filter(|_| !s.prefix).map(|f| screenshot_key(f)))
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The step groups of one group: key → its members `(trajectory, step)`, over the counted
/// rollouts (`returns[i]` is `None` for the others); steps without a key are in none.
fn anchor_groups(
    returns: &[Option<Vec<f64>>],
    keys: &[Vec<Option<u64>>],
) -> HashMap<u64, Vec<(usize, usize)>> {
    let mut anchors: HashMap<u64, Vec<(usize, usize)>> = HashMap::new();
    for (i, r) in returns.iter().enumerate() {
        let Some(r) = r else { continue };
        for t in 0..r.len() {
            if let Some(Some(k)) = keys.get(i).and_then(|s| s.get(t)) {
                anchors.entry(*k).or_default().push((i, t));
            }
        }
    }
    anchors
}

/// Whether some step group of `group` (its anchor keys `[trajectory][step]`) holds returns
/// that differ: GiGPO's step part then gives it signal whatever its episode rewards.
pub fn step_groups_differ(group: &Group, keys: &[Vec<Option<u64>>], gamma: f64) -> bool {
    let returns = group_returns(group, gamma);
    anchor_groups(&returns, keys).values().any(|members| {
        let gs: Vec<f64> = members.iter().map(|&(i, t)| returns[i].as_ref().expect("counted")[t]).collect();
        differ(&gs)
    })
}

/// GiGPO's advantages (see the module docs); `None` for `env_error` rollouts, which take
/// no part in any group.
pub fn gigpo_advantages(
    batch: &TrainingBatch,
    keys: &StateKeys,
    episode_std: AdvStd,
    step: StepGroups,
) -> (StepAdvantages, AdvantageStats) {
    let (episode, mut st) = group_advantages(batch, episode_std, step.eps);
    let mut advs = Vec::new();
    let mut out: StepAdvantages = Vec::with_capacity(batch.groups.len());
    for (g, (group, ep)) in batch.groups.iter().zip(episode).enumerate() {
        // G_{i,t} of every counted rollout, and the step groups: key → [(i, t)].
        let returns = group_returns(group, step.gamma);
        let anchors = anchor_groups(&returns, keys.get(g).map_or(&[][..], Vec::as_slice));
        let mut step_adv: Vec<Vec<f64>> =
            returns.iter().map(|r| vec![0.0; r.as_ref().map_or(0, Vec::len)]).collect();
        for members in anchors.values().filter(|m| m.len() >= 2) {
            st.step_groups += 1;
            let gs: Vec<f64> = members.iter().map(|&(i, t)| returns[i].as_ref().unwrap()[t]).collect();
            if !differ(&gs) {
                continue; // exactly 0, not rounding noise
            }
            let (mean, std) = mean_std(&gs);
            for (&(i, t), x) in members.iter().zip(&gs) {
                step_adv[i][t] = if step.std { (x - mean) / (std + step.eps) } else { x - mean };
            }
        }
        let row = ep
            .iter()
            .zip(step_adv)
            .map(|(a, s)| {
                a.map(|a| {
                    let v: Vec<f64> = s.iter().map(|s| a + step.omega * s).collect();
                    advs.extend(&v);
                    v
                })
            })
            .collect();
        out.push(row);
    }
    st.all_equal_groups = super::silent_groups(&out);
    (st.adv_mean, st.adv_std) = mean_std(&advs);
    (out, st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus::{self, EnvError, Fail, Running, Success};
    use crate::rollout::{Group, Outcome, TrajStep, Trajectory};

    fn traj(rewards: &[f64], outcome: f64, status: EpisodeStatus) -> Trajectory {
        let steps = rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, Running)).collect();
        Trajectory::new(
            "t",
            0,
            steps,
            Outcome { reward: outcome, status, steps: rewards.len() as u32, error: None },
        )
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    // One group, γ = 0.5, screens A..E (keys 1..5):
    //   τ0: states [A, B, C], r = [0, 0, 1], R = 1 → G = [0.25, 0.5, 1]
    //   τ1: states [A, D],    r = [0, 0],    R = 0 → G = [0, 0]
    //   τ2: states [E, B],    r = [0, 1],    R = 1 → G = [0.5, 1]
    //   τ3: states [A],       env_error: no advantage, in no step group
    // Episode (GRPO, population std): R = {1, 0, 1}, mean 2/3, std sqrt(2)/3:
    //   A^E = [1/3, −2/3, 1/3] / (sqrt(2)/3 + eps)
    // Step groups: A = {τ0 t0: 0.25, τ1 t0: 0}: mean 0.125, std 0.125 → +1, −1 (÷ (0.125+eps));
    //              B = {τ0 t1: 0.5, τ2 t1: 1}: mean 0.75, std 0.25 → −1, +1 (÷ (0.25+eps));
    //              C, D, E singletons → 0.
    fn fixture() -> (TrainingBatch, StateKeys) {
        let batch = TrainingBatch {
            groups: vec![Group {
                task_id: "t".into(),
                seed: 0,
                id: Some(0),
                trajectories: vec![
                    traj(&[0.0, 0.0, 1.0], 1.0, Success),
                    traj(&[0.0, 0.0], 0.0, Fail),
                    traj(&[0.0, 1.0], 1.0, Success),
                    traj(&[0.0], 0.0, EnvError),
                ],
            }],
        };
        let k = |v: &[u64]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
        (batch, vec![vec![k(&[1, 2, 3]), k(&[1, 4]), k(&[5, 2]), k(&[1])]])
    }

    #[test]
    fn step_groups_of_repeated_screenshots_by_hand() {
        let (batch, keys) = fixture();
        let eps = 1e-6;
        let step = StepGroups { gamma: 0.5, omega: 1.0, std: true, eps };
        let (a, st) = gigpo_advantages(&batch, &keys, AdvStd::Group, step);
        let s = 2f64.sqrt() / 3.0 + eps;
        let e = [1.0 / 3.0 / s, -2.0 / 3.0 / s, 1.0 / 3.0 / s];
        let (sa, sb) = (0.125 / (0.125 + eps), 0.25 / (0.25 + eps));
        let want = [vec![e[0] + sa, e[0] - sb, e[0]], vec![e[1] - sa, e[1]], vec![e[2], e[2] + sb]];
        for (i, w) in want.iter().enumerate() {
            let got = a[0][i].as_ref().unwrap();
            assert_eq!(got.len(), w.len());
            for (x, y) in got.iter().zip(w) {
                assert!(close(*x, *y), "τ{i}: {got:?} vs {w:?}");
            }
        }
        assert!(a[0][3].is_none());
        assert_eq!((st.step_groups, st.counted, st.env_errors), (2, 3, 1));

        // Mean only, ω = 0.5: A = {+0.125, −0.125}, B = {−0.25, +0.25}, halved.
        let step = StepGroups { gamma: 0.5, omega: 0.5, std: false, eps };
        let (a, _) = gigpo_advantages(&batch, &keys, AdvStd::Group, step);
        assert!(close(a[0][0].as_ref().unwrap()[0], e[0] + 0.0625));
        assert!(close(a[0][0].as_ref().unwrap()[1], e[0] - 0.125));
        assert!(close(a[0][2].as_ref().unwrap()[1], e[2] + 0.125));

        // Without keys every step is alone: GRPO's episode advantage on every step.
        let (a, st) = gigpo_advantages(&batch, &vec![], AdvStd::Group, step);
        let a1 = a[0][1].as_ref().unwrap();
        assert!(a1.len() == 2 && close(a1[0], e[1]) && close(a1[1], e[1]), "{a1:?}");
        assert_eq!(st.step_groups, 0);
    }

    #[test]
    fn identical_screenshots_share_a_key() {
        let img = |v: u8| image::RgbImage::from_pixel(4, 3, image::Rgb([v, 0, 0]));
        let rec = |frames: Vec<image::RgbImage>| {
            let n = frames.len() - 1;
            let t = traj(&vec![0.0; n], 0.0, Fail);
            Recorded { trajectory: t, frames: frames.into_iter().map(Into::into).collect() }
        };
        let recs = vec![rec(vec![img(1), img(2), img(9)]), rec(vec![img(1), img(3), img(9)])];
        let keys = anchor_keys(&recs, &[vec![1, 0]]);
        // member 0 is recs[1], member 1 is recs[0]; the final frames are not steps
        assert_eq!(keys[0][0].len(), 2);
        assert_eq!(keys[0][0][0], keys[0][1][0]);
        assert_ne!(keys[0][0][1], keys[0][1][1]);
        // the same pixels at another size are another state
        let wide = image::RgbImage::from_pixel(3, 4, image::Rgb([1, 0, 0]));
        assert_ne!(screenshot_key(&wide), screenshot_key(&img(1)));
    }
}
