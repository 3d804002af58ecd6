//! What every advantage estimator shares: the batch statistics it reports, the group
//! means and deviations, and the episode-level pass over a batch's groups.

use crate::rollout::TrainingBatch;
use serde::{Deserialize, Serialize};

/// Advantages `[group][trajectory][step]`, like `batch.groups[g].trajectories[i].steps[t]`;
/// `None` for rollouts that are not trained on.
pub type StepAdvantages = Vec<Vec<Option<Vec<f64>>>>;

/// Batch-level statistics of the advantage computation (for `metrics.jsonl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AdvantageStats {
    /// Groups in the batch.
    pub groups: usize,
    /// Groups with at least one counted rollout that carry no signal: the estimator gives
    /// every member advantage 0, so no policy gradient (see [`super::carries_signal`]: for an
    /// episode-level group-relative estimator, the counted rewards are all equal; equal
    /// rewards under γ < 1, GiGPO's step part or a critic can still carry signal).
    pub all_equal_groups: usize,
    /// Groups where every rollout was an `env_error` (nothing counted).
    pub empty_groups: usize,
    /// Rollouts that got an advantage.
    pub counted: usize,
    /// `env_error` rollouts left out.
    pub env_errors: usize,
    /// Mean over non-empty groups of the group baseline `mean_g(R)`.
    pub baseline_mean: f64,
    /// Mean over counted rollouts of the relative reward `R_i − mean_g(R)` (0 up to
    /// rounding: a sanity check).
    pub relative_reward_mean: f64,
    /// Population std over counted rollouts of `R_i − mean_g(R)`.
    pub relative_reward_std: f64,
    /// Mean of the advantages over counted rollouts.
    pub adv_mean: f64,
    /// Population std of the advantages over counted rollouts (step-level estimators:
    /// over their steps).
    pub adv_std: f64,
    /// GiGPO: anchor-state step groups with at least two steps.
    #[serde(default)]
    pub step_groups: usize,
}

/// Whether any two values differ.
pub(crate) fn differ(x: &[f64]) -> bool {
    x.windows(2).any(|w| w[0] != w[1])
}

/// Groups with at least one counted rollout whose advantages are all exactly 0.
pub(crate) fn silent_groups(adv: &StepAdvantages) -> usize {
    adv.iter()
        .filter(|row| row.iter().any(Option::is_some) && row.iter().flatten().flatten().all(|&a| a == 0.0))
        .count()
}

/// Population mean and standard deviation (÷ n); `(0, 0)` for an empty slice.
pub fn mean_std(x: &[f64]) -> (f64, f64) {
    if x.is_empty() {
        return (0.0, 0.0);
    }
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Episode-level advantages `[group][trajectory]`, group by group: `formula` gets a
/// group's counted rewards (never empty) and gives the map from a rollout's reward to its
/// advantage. `env_error` rollouts get `None` and stay out of the group's rewards; the
/// batch statistics are kept here, once for every episode-level estimator.
pub(crate) fn per_group<F: Fn(f64) -> f64>(
    batch: &TrainingBatch,
    formula: impl Fn(&[f64]) -> F,
) -> (Vec<Vec<Option<f64>>>, AdvantageStats) {
    let mut st = AdvantageStats { groups: batch.groups.len(), ..Default::default() };
    let (mut baselines, mut relative, mut advs) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(batch.groups.len());
    for g in &batch.groups {
        let rewards = g.valid_rewards();
        st.env_errors += g.trajectories.len() - rewards.len();
        if rewards.is_empty() {
            st.empty_groups += 1;
            out.push(vec![None; g.trajectories.len()]);
            continue;
        }
        let mean = mean_std(&rewards).0;
        baselines.push(mean);
        // All equal: exactly 0 for everyone (the formula could leave rounding noise, which
        // AdamW would blow up into a full step).
        let equal = !differ(&rewards);
        st.all_equal_groups += usize::from(equal);
        let adv = formula(&rewards);
        let row = g
            .trajectories
            .iter()
            .map(|t| {
                (!t.outcome.status.is_infrastructure_failure()).then(|| {
                    let a = if equal { 0.0 } else { adv(t.outcome.reward) };
                    relative.push(t.outcome.reward - mean);
                    advs.push(a);
                    a
                })
            })
            .collect();
        out.push(row);
    }
    st.counted = advs.len();
    st.baseline_mean = mean_std(&baselines).0;
    (st.relative_reward_mean, st.relative_reward_std) = mean_std(&relative);
    (st.adv_mean, st.adv_std) = mean_std(&advs);
    (out, st)
}
