//! The estimators' shared `[algo]` options, apart from the estimators: the config reads
//! them without depending on the estimators, which depend on the config.

use serde::{Deserialize, Serialize};

/// Which standard deviation divides group-relative advantages (`[algo] adv_std`).
///
/// Every std here is the population std (÷ n), not Bessel's (÷ n − 1): the rollouts of a
/// group are the whole population being ranked, not a sample whose spread is estimated,
/// and with ÷ n the advantages of every non-constant group have mean 0 and std exactly 1
/// whatever G is (with G = 2 and rewards {0, 1}: ±1, where Bessel gives ±0.707). TRL and
/// veRL use `torch.std` (Bessel): their advantages are `sqrt((G−1)/G)` times these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvStd {
    /// The group's std of its rewards (GRPO).
    Group,
    /// The batch's std of the group-centered rewards `R_i − mean_g R` (every counted
    /// rollout of the batch): one scale for all groups, so a nearly constant group is
    /// not blown up to unit scale.
    Batch,
    /// No division (Dr. GRPO): `A = R − mean_g R`.
    None,
}

impl AdvStd {
    /// The config's spelling.
    pub fn name(self) -> &'static str {
        match self {
            AdvStd::Group => "group",
            AdvStd::Batch => "batch",
            AdvStd::None => "none",
        }
    }
}

/// How the group-relative estimators credit the steps of a trajectory (`[algo] step_credit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepCredit {
    /// Every step gets its episode's advantage.
    #[default]
    Episode,
    /// Each step gets the discounted return from it, `G_t = Σ_{k≥t} γ^{k−t} r_k`, normalized
    /// within its group (see [`super::grpo::discounted_group_advantages`]).
    Discounted,
}
