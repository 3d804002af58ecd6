//! Advantage estimators: one file each, one signature ([`estimate`] dispatches on the
//! algorithm). An estimator turns a batch of grouped rollouts into one advantage per step
//! of every trajectory it trains on; `None` marks a rollout that is not trained on (an
//! `env_error`: the browser failed, not the agent).
//!
//! - [`grpo`]: group-relative, `(R_i − mean_g R) / (std + eps)` (GRPO, DAPO, GSPO) with
//!   the std of the group, of the batch or none (Dr. GRPO); every step of a trajectory
//!   shares its episode advantage, or (`step_credit = "discounted"`) each step gets the
//!   discounted return from it, normalized within its group.
//! - [`rloo`]: leave-one-out, `R_i − mean_{j≠i} R_j` (RLOO); episode-level like GRPO.
//! - [`reinforce_pp`]: discounted returns from each step, whitened over the batch
//!   (REINFORCE++).
//! - [`gigpo`]: GRPO's episode advantage plus a step advantage within anchor-state groups
//!   (steps of one group taken from the same screenshot).
//! - [`gae`]: PPO's generalized advantage estimation from per-step rewards and a critic's
//!   values (the critic is `train::value`).

pub mod gae;
pub mod gigpo;
pub mod grpo;
pub mod options;
pub mod reinforce_pp;
pub mod rloo;
mod stats;

pub use gigpo::{anchor_keys, StateKeys};
pub use grpo::group_advantages;
pub use options::{AdvStd, StepCredit};
pub(crate) use stats::{differ, per_group, silent_groups};
pub use stats::{mean_std, AdvantageStats, StepAdvantages};

use super::config::{AlgoConfig, AlgoVariant};
use crate::rollout::{Group, Recorded, TrainingBatch};

/// The advantages of `batch` under the configured algorithm. `keys` names the state each
/// step was taken in ([`anchor_keys`]; GiGPO's step groups), `[group][trajectory][step]`
/// like the batch; missing keys make a step a group of its own.
pub fn estimate(
    algo: &AlgoConfig,
    batch: &TrainingBatch,
    keys: &StateKeys,
) -> (StepAdvantages, AdvantageStats) {
    let (episode, stats) = match &algo.variant {
        AlgoVariant::Grpo | AlgoVariant::DrGrpo | AlgoVariant::Dapo | AlgoVariant::Gspo(_) => {
            if algo.step_credit == StepCredit::Discounted {
                return grpo::discounted_group_advantages(batch, algo.gamma, algo.adv_std(), algo.eps);
            }
            group_advantages(batch, algo.adv_std(), algo.eps)
        }
        AlgoVariant::Rloo => rloo::rloo_advantages(batch),
        AlgoVariant::ReinforcePp => {
            return reinforce_pp::reinforce_pp_advantages(batch, algo.gamma, algo.eps)
        }
        AlgoVariant::Gigpo(g) => {
            let step =
                gigpo::StepGroups { gamma: algo.gamma, omega: g.omega, std: g.step_std, eps: algo.eps };
            return gigpo::gigpo_advantages(batch, keys, algo.adv_std(), step);
        }
        AlgoVariant::Ppo(ppo) => {
            // The trainer gives GAE the critic's values (`value::Critic::gae`); without
            // them V ≡ 0 and A_t is the (γλ)-discounted return from t.
            let g = gae::gae_advantages(batch, &Vec::new(), gae::GaeParams::from_algo(algo, ppo));
            return (g.adv, g.stats);
        }
    };
    // Episode-level estimators: a step inherits its episode's advantage (the
    // trajectory-level credit of GRPO and RLOO).
    let per_step = batch
        .groups
        .iter()
        .zip(episode)
        .map(|(g, row)| {
            g.trajectories.iter().zip(row).map(|(t, a)| a.map(|a| vec![a; t.steps.len()])).collect()
        })
        .collect();
    (per_step, stats)
}

/// The anchor-state keys `algo`'s estimator reads for the rollouts `recs` grouped as
/// `index` says: GiGPO's step groups ([`anchor_keys`]); none for the kinds that read none.
pub fn state_keys(algo: &AlgoConfig, recs: &[Recorded], index: &[Vec<usize>]) -> StateKeys {
    match algo.variant {
        AlgoVariant::Gigpo(_) => anchor_keys(recs, index),
        AlgoVariant::Grpo
        | AlgoVariant::DrGrpo
        | AlgoVariant::Dapo
        | AlgoVariant::Gspo(_)
        | AlgoVariant::Rloo
        | AlgoVariant::ReinforcePp
        | AlgoVariant::Ppo(_) => Vec::new(),
    }
}

/// Whether the estimator `algo` configures can give a counted member of `group` a non-zero
/// advantage. A group without signal trains nothing: DAPO's dynamic sampling drops it and
/// the `all_equal_groups` metric counts it. Equal final rewards are not the test: with a
/// baseline from outside the group, discounted returns (γ < 1: equal rewards reached at
/// different lengths differ), or GiGPO's step groups, such a group still carries signal.
///
/// ```text
/// ppo, reinforce_pp            any counted rollout (the critic's V(s) / the batch's mean
///                              return is the baseline, not the group)
/// step_credit = "discounted"   ≥ 2 counted rollouts whose returns G_{i,t} (every step
///                              pooled) are not all equal; one rollout gets 0
/// gigpo                        counted rewards not all equal, or ω > 0 and some step
///                              group's returns G_{i,t} not all equal
/// the rest (episode-level)     counted rewards not all equal
/// ```
/// The estimators give exactly 0 to every member of a group without signal. `keys`: the
/// group's anchor-state keys `[trajectory][step]` (GiGPO only; may be empty).
pub fn carries_signal(algo: &AlgoConfig, group: &Group, keys: &[Vec<Option<u64>>]) -> bool {
    let rewards = group.valid_rewards();
    if rewards.is_empty() {
        return false;
    }
    match &algo.variant {
        AlgoVariant::Ppo(_) | AlgoVariant::ReinforcePp => true,
        AlgoVariant::Gigpo(g) => {
            differ(&rewards) || (g.omega > 0.0 && gigpo::step_groups_differ(group, keys, algo.gamma))
        }
        AlgoVariant::Grpo
        | AlgoVariant::DrGrpo
        | AlgoVariant::Dapo
        | AlgoVariant::Gspo(_)
        | AlgoVariant::Rloo => match algo.step_credit {
            StepCredit::Discounted => {
                let pooled: Vec<f64> =
                    reinforce_pp::group_returns(group, algo.gamma).into_iter().flatten().flatten().collect();
                rewards.len() >= 2 && differ(&pooled)
            }
            StepCredit::Episode => differ(&rewards),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus::{self, Fail, Running, Success};
    use crate::rollout::{Group, Outcome, TrajStep, Trajectory};
    use crate::train::config::AlgoKind;

    fn one_step(reward: f64, status: EpisodeStatus) -> Trajectory {
        let steps = vec![TrajStep::new("click(1, 1)", reward, Running)];
        Trajectory::new("t", 0, steps, Outcome { reward, status, steps: 1, error: None })
    }

    #[test]
    fn the_kind_picks_the_estimator() {
        // R = {1, 0, 0}: mean 1/3, population std sqrt(2)/3.
        let batch = TrainingBatch {
            groups: vec![Group {
                task_id: "t".into(),
                seed: 0,
                id: None,
                trajectories: vec![one_step(1.0, Success), one_step(0.0, Fail), one_step(0.0, Fail)],
            }],
        };
        let first = |kind: AlgoKind| {
            let algo = AlgoConfig { eps: 1e-6, ..AlgoConfig::of(kind) };
            let (a, _) = estimate(&algo, &batch, &Vec::new());
            a[0].iter().map(|x| x.as_ref().unwrap()[0]).collect::<Vec<f64>>()
        };
        // Dr. GRPO: A = R − mean, no std.
        let dr = first(AlgoKind::DrGrpo);
        assert!((dr[0] - 2.0 / 3.0).abs() < 1e-12 && (dr[1] + 1.0 / 3.0).abs() < 1e-12, "{dr:?}");
        // GRPO: ÷ (sqrt(2)/3 + eps).
        let g = first(AlgoKind::Grpo);
        assert!((g[0] - (2.0 / 3.0) / (2f64.sqrt() / 3.0 + 1e-6)).abs() < 1e-12, "{g:?}");
        // GiGPO without anchor keys is GRPO; RLOO: 1 − 0 = 1, 0 − 1/2 = −1/2.
        assert_eq!(first(AlgoKind::Gigpo), g);
        assert_eq!(first(AlgoKind::Rloo), vec![1.0, -0.5, -0.5]);
    }
}
