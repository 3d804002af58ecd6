//! Which algorithm `[algo] kind` names, what each kind sets by default, and the settings
//! that belong to one kind (its sub-table) or to one technique (DAPO's two).

use super::advantage::options::AdvStd;
use super::objective::{LossAgg, PolicyLossKind};
use serde::{Deserialize, Serialize};

/// The algorithm. Its clap derive lists the kinds for `--kind` and [`AlgoKind::all`], so
/// a new kind is in both without a list kept by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum AlgoKind {
    /// GRPO: token-level clipped ratio, group-relative advantages.
    #[default]
    Grpo,
    /// Dr. GRPO (Liu et al. 2025): `A = R − mean_g R` (no std division) and the
    /// constant-normalizer aggregation `seq-mean-token-sum-norm` (no length bias).
    DrGrpo,
    /// DAPO: GRPO with clip-higher (ε_high > ε_low), token-mean, dynamic sampling (all-equal
    /// groups dropped and replaced by newly collected ones), the overlong penalty, no KL.
    Dapo,
    /// GSPO: sequence-level ratio and clipping.
    Gspo,
    /// RLOO: leave-one-out baseline `R_i − mean_{j≠i} R_j`, token-level clipped ratio.
    Rloo,
    /// REINFORCE++: discounted per-step returns (`gamma`), whitened over the batch.
    #[serde(rename = "reinforce_pp")]
    #[value(name = "reinforce_pp")]
    ReinforcePp,
    /// GiGPO (Feng et al. 2025): GRPO's episode advantage plus `ω ×` a step advantage
    /// relative to the other steps of the group taken from the same screenshot.
    Gigpo,
    /// PPO (Schulman et al. 2017): token-level clipped ratio, advantages from GAE over the
    /// per-step rewards with a learned critic.
    ///
    /// The critic is `src/train/value/`, GAE `advantage/gae.rs`.
    Ppo,
}

impl AlgoKind {
    /// Default (ε_low, ε_high).
    pub fn default_clip(self) -> (f64, f64) {
        match self {
            AlgoKind::Dapo => (0.2, 0.28),
            AlgoKind::Gspo => (3e-4, 4e-4),
            AlgoKind::Grpo
            | AlgoKind::DrGrpo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo
            | AlgoKind::Ppo => (0.2, 0.2),
        }
    }
    /// Whether the kind's advantages are group-normalized (`adv_std` applies).
    pub fn group_normalized(self) -> bool {
        match self {
            AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Dapo | AlgoKind::Gspo | AlgoKind::Gigpo => true,
            AlgoKind::Rloo | AlgoKind::ReinforcePp | AlgoKind::Ppo => false,
        }
    }
    /// Default aggregation: GSPO's mean over sequences, Dr. GRPO's constant normalizer,
    /// token-mean for the rest.
    pub fn default_loss_agg(self) -> LossAgg {
        match self {
            AlgoKind::Gspo => LossAgg::SeqMeanTokenMean,
            AlgoKind::DrGrpo => LossAgg::SeqMeanTokenSumNorm,
            AlgoKind::Grpo
            | AlgoKind::Dapo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo
            | AlgoKind::Ppo => LossAgg::TokenMean,
        }
    }
    /// Default std of the group-relative advantages: none for Dr. GRPO, the group's for
    /// the rest.
    pub fn default_adv_std(self) -> AdvStd {
        match self {
            AlgoKind::DrGrpo => AdvStd::None,
            // (only read where group_normalized: the others have no group std)
            AlgoKind::Grpo
            | AlgoKind::Dapo
            | AlgoKind::Gspo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo
            | AlgoKind::Ppo => AdvStd::Group,
        }
    }
    /// The unit of the policy ratio: GSPO's sequence, the others' token.
    pub fn policy_loss_kind(self) -> PolicyLossKind {
        match self {
            AlgoKind::Gspo => PolicyLossKind::Sequence,
            AlgoKind::Grpo
            | AlgoKind::DrGrpo
            | AlgoKind::Dapo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo
            | AlgoKind::Ppo => PolicyLossKind::Token,
        }
    }
    /// Whether the kind's estimator credits each step with its discounted return by itself
    /// (REINFORCE++, GiGPO's step groups, PPO's GAE); the other kinds do with
    /// `step_credit = "discounted"`, which only the episode-level group-relative ones take
    /// ([`AlgoKind::takes_step_credit`]).
    pub fn credits_steps(self) -> bool {
        match self {
            AlgoKind::ReinforcePp | AlgoKind::Gigpo | AlgoKind::Ppo => true,
            AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Dapo | AlgoKind::Gspo | AlgoKind::Rloo => false,
        }
    }
    /// Whether `step_credit = "discounted"` applies: the episode-level group-relative
    /// kinds (not RLOO, whose leave-one-out baseline is per episode).
    pub fn takes_step_credit(self) -> bool {
        match self {
            AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Dapo | AlgoKind::Gspo => true,
            AlgoKind::Rloo | AlgoKind::ReinforcePp | AlgoKind::Gigpo | AlgoKind::Ppo => false,
        }
    }
    /// The fewest rollouts per task seed: PPO's critic is the baseline, so its rollouts
    /// need no group; the others compare a rollout with its group's.
    pub fn min_group_size(self) -> usize {
        match self {
            AlgoKind::Ppo => 1,
            AlgoKind::Grpo
            | AlgoKind::DrGrpo
            | AlgoKind::Dapo
            | AlgoKind::Gspo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo => 2,
        }
    }
    /// The `[algo.NAME]` tables that hold this kind's own keys (DAPO's: its two
    /// techniques, always on for it).
    pub fn own_tables(self) -> &'static [&'static str] {
        match self {
            AlgoKind::Ppo => &["ppo"],
            AlgoKind::Gigpo => &["gigpo"],
            AlgoKind::Gspo => &["gspo"],
            AlgoKind::Dapo => &["dynamic_sampling", "overlong_penalty"],
            AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Rloo | AlgoKind::ReinforcePp => &[],
        }
    }
    /// Whether DAPO's dynamic sampling and overlong penalty are always on (DAPO is GRPO
    /// with clip-higher and these two).
    pub fn has_dapo_techniques(self) -> bool {
        self == AlgoKind::Dapo
    }
}

impl AlgoKind {
    /// Every kind, in the order the enum declares them (as `kind`'s documentation lists
    /// them).
    pub fn all() -> &'static [AlgoKind] {
        <AlgoKind as clap::ValueEnum>::value_variants()
    }
    /// The name a config writes (`kind = "reinforce_pp"`).
    pub fn name(self) -> &'static str {
        match self {
            AlgoKind::Grpo => "grpo",
            AlgoKind::DrGrpo => "dr_grpo",
            AlgoKind::Dapo => "dapo",
            AlgoKind::Gspo => "gspo",
            AlgoKind::Rloo => "rloo",
            AlgoKind::ReinforcePp => "reinforce_pp",
            AlgoKind::Gigpo => "gigpo",
            AlgoKind::Ppo => "ppo",
        }
    }
    /// The kind a config names, `None` for a name that is none.
    pub fn from_name(name: &str) -> Option<AlgoKind> {
        AlgoKind::all().iter().copied().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for AlgoKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The unit of GSPO's sequence ratio (`[algo.gspo] level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GspoLevel {
    /// The tokens of one action.
    #[default]
    Action,
    /// Every token of a trajectory (minibatches then hold whole trajectories).
    Trajectory,
}

/// How an iteration's update cuts its samples into minibatches (`[algo] minibatch_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MinibatchOrder {
    /// Every sample in a random order of its own (each epoch anew).
    #[default]
    Shuffled,
    /// The samples of one group at one env step kept next to each other, those sets in a
    /// random order: a GRPO group's first steps (one screen, one prompt) mostly share a
    /// minibatch, whose pass then runs their prompt once. As many optimizer steps.
    GroupSteps,
}

/// `[algo.gspo]`: GSPO's own keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GspoConfig {
    /// The sequence ratio over each action's tokens or each trajectory's.
    pub level: GspoLevel,
}

/// `[algo.gigpo]`: GiGPO's own keys.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GigpoConfig {
    /// ω: weight of the step advantage (steps of a group taken from the same screenshot).
    pub omega: f64,
    /// Divide the step advantages by their step group's std (false: mean only).
    pub step_std: bool,
}

impl Default for GigpoConfig {
    fn default() -> Self {
        GigpoConfig { omega: 1.0, step_std: true }
    }
}

/// `[algo.ppo]`: PPO's own keys, those of its critic and of GAE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// λ of GAE: 0 = one-step TD, 1 = Monte-Carlo return minus V.
    pub gae_lambda: f64,
    /// The critic's own learning rate (constant, AdamW).
    pub value_lr: f64,
    /// PPO2's value clip c: the loss is `½ max((V − R)², (clip(V, V_old ± c) − R)²)`. Off
    /// by default: Andrychowicz et al. (2021, "What matters in on-policy RL") found value
    /// clipping no help and sometimes harmful.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_clip: Option<f64>,
    /// Iterations at the start in which only the critic trains (the policy and the
    /// adaptive β wait).
    pub critic_warmup: u64,
    /// Passes of the critic over each batch (default: `[algo] epochs`, which it follows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_epochs: Option<usize>,
    /// Whiten the advantages over the batch.
    pub normalize_advantages: bool,
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            gae_lambda: 0.95,
            value_lr: 1e-3,
            value_clip: None,
            critic_warmup: 0,
            value_epochs: None,
            normalize_advantages: true,
        }
    }
}

/// The algorithm with the settings only it has: `[algo] kind` and, for the kinds that
/// have any, their sub-table. Code that needs PPO's λ takes it from [`AlgoVariant::Ppo`].
#[derive(Debug, Clone, PartialEq)]
pub enum AlgoVariant {
    /// GRPO.
    Grpo,
    /// Dr. GRPO.
    DrGrpo,
    /// DAPO (its dynamic sampling and overlong penalty are `[algo]`'s, always on for it).
    Dapo,
    /// GSPO, `[algo.gspo]`.
    Gspo(GspoConfig),
    /// RLOO.
    Rloo,
    /// REINFORCE++.
    ReinforcePp,
    /// GiGPO, `[algo.gigpo]`.
    Gigpo(GigpoConfig),
    /// PPO, `[algo.ppo]`.
    Ppo(PpoConfig),
}

impl AlgoVariant {
    /// The kind, for code that needs only the name.
    pub fn kind(&self) -> AlgoKind {
        match self {
            AlgoVariant::Grpo => AlgoKind::Grpo,
            AlgoVariant::DrGrpo => AlgoKind::DrGrpo,
            AlgoVariant::Dapo => AlgoKind::Dapo,
            AlgoVariant::Gspo(_) => AlgoKind::Gspo,
            AlgoVariant::Rloo => AlgoKind::Rloo,
            AlgoVariant::ReinforcePp => AlgoKind::ReinforcePp,
            AlgoVariant::Gigpo(_) => AlgoKind::Gigpo,
            AlgoVariant::Ppo(_) => AlgoKind::Ppo,
        }
    }
    /// `kind` with its own sub-table where the config has one (its defaults where not);
    /// a sub-table of another kind is refused, naming the kind it belongs to.
    pub fn from_tables(
        kind: AlgoKind,
        ppo: Option<PpoConfig>,
        gigpo: Option<GigpoConfig>,
        gspo: Option<GspoConfig>,
    ) -> Result<AlgoVariant, String> {
        let tables = [
            (AlgoKind::Ppo, "PPO", ppo.is_some()),
            (AlgoKind::Gigpo, "GiGPO", gigpo.is_some()),
            (AlgoKind::Gspo, "GSPO", gspo.is_some()),
        ];
        for (owner, title, present) in tables {
            if present && kind != owner {
                return Err(format!(
                    "[algo.{owner}] holds {title}'s own keys, but algo.kind = \"{kind}\": to train {title} set \
                     kind = \"{owner}\"; to train {kind} remove the [algo.{owner}] table"
                ));
            }
        }
        Ok(match kind {
            AlgoKind::Ppo => AlgoVariant::Ppo(ppo.unwrap_or_default()),
            AlgoKind::Gigpo => AlgoVariant::Gigpo(gigpo.unwrap_or_default()),
            AlgoKind::Gspo => AlgoVariant::Gspo(gspo.unwrap_or_default()),
            AlgoKind::Grpo | AlgoKind::DrGrpo | AlgoKind::Dapo | AlgoKind::Rloo | AlgoKind::ReinforcePp => {
                AlgoVariant::of(kind)
            }
        })
    }
    /// The kind's own sub-table, as the config writes it: `(ppo, gigpo, gspo)`, the one of
    /// this kind set.
    pub fn into_tables(self) -> (Option<PpoConfig>, Option<GigpoConfig>, Option<GspoConfig>) {
        match self {
            AlgoVariant::Ppo(p) => (Some(p), None, None),
            AlgoVariant::Gigpo(g) => (None, Some(g), None),
            AlgoVariant::Gspo(g) => (None, None, Some(g)),
            AlgoVariant::Grpo
            | AlgoVariant::DrGrpo
            | AlgoVariant::Dapo
            | AlgoVariant::Rloo
            | AlgoVariant::ReinforcePp => (None, None, None),
        }
    }
    /// `kind` with its own settings at their defaults.
    pub fn of(kind: AlgoKind) -> AlgoVariant {
        match kind {
            AlgoKind::Grpo => AlgoVariant::Grpo,
            AlgoKind::DrGrpo => AlgoVariant::DrGrpo,
            AlgoKind::Dapo => AlgoVariant::Dapo,
            AlgoKind::Gspo => AlgoVariant::Gspo(GspoConfig::default()),
            AlgoKind::Rloo => AlgoVariant::Rloo,
            AlgoKind::ReinforcePp => AlgoVariant::ReinforcePp,
            AlgoKind::Gigpo => AlgoVariant::Gigpo(GigpoConfig::default()),
            AlgoKind::Ppo => AlgoVariant::Ppo(PpoConfig::default()),
        }
    }
}

/// `[algo.dynamic_sampling]`: DAPO's dynamic sampling. Its presence turns it on (DAPO
/// always has it): groups whose rewards are all equal carry no gradient and are left out;
/// while fewer than `batch_seeds` groups are left, `batch_seeds` more are collected on
/// fresh training seeds, at most `max_extra` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DynamicSampling {
    /// N: extra collections per iteration at most (0: leave the all-equal groups out and
    /// collect nothing more).
    pub max_extra: usize,
}

impl Default for DynamicSampling {
    fn default() -> Self {
        DynamicSampling { max_extra: 3 }
    }
}

/// `[algo.overlong_penalty]`: DAPO's soft overlong penalty on the episode reward, by
/// steps taken (see `rewards::overlong_penalty`). Its presence turns it on (DAPO
/// always has it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverlongPenalty {
    /// L: the soft window, in steps before `rollout.max_steps` (default `ceil(max_steps /
    /// 5)`, DAPO's 4 096 of 20 480 tokens; filled in on load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// The most the penalty takes off the episode reward.
    pub weight: f64,
}

impl Default for OverlongPenalty {
    fn default() -> Self {
        OverlongPenalty { window: None, weight: 1.0 }
    }
}

impl OverlongPenalty {
    /// The window under a step limit of `max_steps`, resolved.
    pub fn window(&self, max_steps: u32) -> u32 {
        self.window.unwrap_or(max_steps.div_ceil(5).max(1))
    }
}
