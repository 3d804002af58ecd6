//! The policy objectives of the GRPO family on per-token log-probs: the clipped surrogate
//! (token- or sequence-level ratio), its aggregation over tokens, the KL estimators and
//! the entropy bonus. One function, [`policy_loss`]; each piece has its formula above it.
//!
//! - **GRPO / Dr. GRPO / RLOO / REINFORCE++ / GiGPO** ([`PolicyLossKind::Token`]): PPO's
//!   clipped surrogate per token, with the advantage of the token's action.
//! - **DAPO**: the same with `clip_high > clip_low` ("clip-higher") and token-mean.
//! - **GSPO** ([`PolicyLossKind::Sequence`]): one ratio per sequence, the geometric mean of
//!   its token ratios, clipped per sequence (small ranges: the paper's 3e-4 / 4e-4). The
//!   sequence is one action by default; `segments` makes it a whole trajectory.
//! - **Dual clip** (Ye et al. 2020): for `A < 0` the surrogate is bounded below by `c·A`, so
//!   one token whose ratio exploded cannot dominate the update.
//! - **Aggregation** ([`LossAgg`]): a *sequence* is one action (the tokens of one step).
//!   It applies to the policy term; the KL and entropy terms are always token-means.
//! - **KL** ([`KlEstimator`]): Schulman's k1, k2, k3 of `KL(π ‖ π_ref)` from samples of π.
//!
//! Padding positions (`mask == 0`) may hold any value, NaN included: inputs are zeroed
//! there first, so neither the loss nor its gradient sees them.

use candle_core::{DType, Result, Tensor};
use serde::{Deserialize, Serialize};

/// Which importance ratio the surrogate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyLossKind {
    /// Per-token ratio `ρ_t = exp(logπ_t − logπ_old,t)` (GRPO, DAPO).
    Token,
    /// Per-sequence ratio `s = exp(mean_t(logπ_t − logπ_old,t))` (GSPO).
    Sequence,
}

/// How per-token losses become one number (`[algo] loss_agg`). A sequence is one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LossAgg {
    /// `Σ_{b,t} m L / Σ_{b,t} m`: every token of the minibatch weighs the same (DAPO).
    #[serde(rename = "token-mean")]
    TokenMean,
    /// `(1/B) Σ_b (Σ_t m L / Σ_t m)`: every action weighs the same (GRPO paper, GSPO).
    #[serde(rename = "seq-mean-token-mean")]
    SeqMeanTokenMean,
    /// `(1/B) Σ_b Σ_t m L`: longer actions weigh more.
    #[serde(rename = "seq-mean-token-sum")]
    SeqMeanTokenSum,
    /// `Σ_{b,t} m L / (B · N)` with a constant N (Dr. GRPO: no length bias, `loss_agg_norm`).
    #[serde(rename = "seq-mean-token-sum-norm")]
    SeqMeanTokenSumNorm,
}

impl LossAgg {
    /// Every value, as the config writes it.
    pub const NAMES: [&'static str; 4] =
        ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"];
}

/// Schulman's estimators of `KL(π ‖ π_ref)` from tokens sampled from π, with
/// `d = log r = logπ_ref − logπ` (r = π_ref/π). `E_π[k1] = E_π[k3] = KL`; k2's expectation
/// is KL to second order. k2 and k3 are ≥ 0 per sample, k1 is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KlEstimator {
    /// `k1 = −d = log(π/π_ref)`: unbiased, high variance.
    K1,
    /// `k2 = ½ d²`: low variance, biased.
    K2,
    /// `k3 = r − 1 − d = exp(d) − 1 − d`: unbiased and ≥ 0 (GRPO's).
    #[default]
    K3,
}

impl KlEstimator {
    /// The estimate for one token, `d = logπ_ref − logπ` (clamped to ±[`LOG_RATIO_CLAMP`]).
    pub fn value(self, d: f64) -> f64 {
        let d = d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
        match self {
            KlEstimator::K1 => -d,
            KlEstimator::K2 => 0.5 * d * d,
            KlEstimator::K3 => d.exp() - 1.0 - d,
        }
    }

    /// The same on a tensor of `d`.
    pub fn tensor(self, d: &Tensor) -> Result<Tensor> {
        match self {
            KlEstimator::K1 => d.neg(),
            KlEstimator::K2 => d.sqr()? * 0.5,
            KlEstimator::K3 => (d.exp()? - d)? - 1.0,
        }
    }
}

/// Loss coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossConfig {
    /// Token- or sequence-level ratio.
    pub kind: PolicyLossKind,
    /// ε_low: the ratio is clipped below at `1 − clip_low`.
    pub clip_low: f64,
    /// ε_high: the ratio is clipped above at `1 + clip_high`.
    pub clip_high: f64,
    /// c > 1: for `A < 0` the surrogate is bounded below by `c·A` (`None`: off).
    pub dual_clip: Option<f64>,
    /// How the policy term is aggregated.
    pub agg: LossAgg,
    /// N of [`LossAgg::SeqMeanTokenSumNorm`] (≤ 0: the minibatch's padded length).
    pub agg_norm: f64,
    /// β: weight of `KL(π ‖ π_ref)` in the loss.
    pub beta: f64,
    /// Which KL estimator.
    pub kl: KlEstimator,
    /// c_ent: weight of the entropy bonus.
    pub entropy_coef: f64,
}

/// The tensors of one (mini)batch; `[B, T]` unless said otherwise. Only `logp` and
/// `entropy` should carry gradients (`old_logp` and `ref_logp` are data).
#[derive(Debug, Clone, Copy)]
pub struct LossInputs<'a> {
    /// log π(a_t | s, a_<t) under the policy being trained.
    pub logp: &'a Tensor,
    /// The same under the policy that collected the rollouts.
    pub old_logp: &'a Tensor,
    /// The same under the frozen reference policy (`None`: no KL term).
    pub ref_logp: Option<&'a Tensor>,
    /// `[B]`: each action's advantage, shared by all its tokens.
    pub adv: &'a Tensor,
    /// 1 for action tokens, 0 for padding.
    pub mask: &'a Tensor,
    /// Entropy of π at each position (`None`: no bonus).
    pub entropy: Option<&'a Tensor>,
    /// `[K, B]` 0/1 membership of the B actions in K trajectories: GSPO's ratio is then
    /// taken over each trajectory's tokens (`None`: over each action's).
    pub segments: Option<&'a Tensor>,
    /// These rows are one part of a larger minibatch (data parallel, [`crate::dist`]):
    /// the means divide by the whole minibatch's counts, so the loss, its gradient and
    /// every statistic but `tokens` are this part's share, and the parts' shares add up
    /// to the whole minibatch's values. `None`: the rows are the whole minibatch.
    pub whole: Option<Whole>,
    /// The decoupled objective's detached importance weights `min(π_prox / π_behav, cap)`
    /// (`[rollout] max_staleness = 1`, see `decoupled.rs`): each token's policy loss is
    /// multiplied by its weight. `None`: no weight (the rollouts' own policy is π_old).
    pub behaviour_weight: Option<&'a Tensor>,
}

/// The counts of a whole minibatch that its parts' means divide by (see
/// [`LossInputs::whole`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Whole {
    /// Tokens under the mask.
    pub tokens: f64,
    /// Actions with at least one token.
    pub actions: f64,
    /// The padded length T (N of `seq-mean-token-sum-norm` when `agg_norm ≤ 0`).
    pub padded_len: usize,
}

/// What the loss saw, for the metrics (all token-means over the mask unless said).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossStats {
    /// The total loss.
    pub loss: f64,
    /// The policy term `−surrogate`, aggregated.
    pub policy_loss: f64,
    /// Estimate of `KL(π ‖ π_ref)` with the configured estimator (0 without a reference).
    pub kl: f64,
    /// Mean entropy (0 without one).
    pub entropy: f64,
    /// Fraction of tokens (GSPO: actions) where the clipped branch is the minimum, so they
    /// give no policy gradient.
    pub clip_frac: f64,
    /// Fraction of tokens (GSPO: actions) held at `c·A` by the dual clip.
    #[serde(default)]
    pub dual_clip_frac: f64,
    /// Mean importance ratio (GSPO: over actions).
    pub ratio_mean: f64,
    /// k3 estimate of `KL(π_old ‖ π)` (samples from π_old: `ρ − 1 − log ρ`): how far the
    /// updates since collection have moved the policy (CleanRL's `approx_kl`).
    pub approx_kl_old: f64,
    /// Tokens under the mask.
    pub tokens: usize,
}

/// Bound on |log π − log π_old| and |log π_ref − log π| (veRL clamps both to ±20).
pub const LOG_RATIO_CLAMP: f64 = 20.0;

fn scalar(t: &Tensor) -> Result<f64> {
    t.to_dtype(DType::F64)?.to_scalar::<f64>()
}

/// Aggregate per-token losses `l` (`[B, T]`, 0 on padding) over the mask `m` (see [`LossAgg`];
/// B counts the actions with at least one token; with `whole`, the counts are the whole
/// minibatch's).
///
/// ```text
/// token-mean               Σ_{b,t} m l / Σ m
/// seq-mean-token-mean      (1/B) Σ_b Σ_t m l / Σ_t m
/// seq-mean-token-sum       (1/B) Σ_{b,t} m l
/// seq-mean-token-sum-norm  Σ_{b,t} m l / (B · N)
/// ```
pub fn aggregate(agg: LossAgg, l: &Tensor, m: &Tensor, norm: f64, whole: Option<Whole>) -> Result<Tensor> {
    let len = m.sum_keepdim(1)?; // [B, 1]
    let n_seq = match whole {
        Some(w) => w.actions.max(1.0),
        None => scalar(&len.gt(0.0)?.to_dtype(DType::F64)?.sum_all()?)?.max(1.0),
    };
    let sum = (l * m)?.sum_all()?;
    match agg {
        LossAgg::TokenMean => match whole {
            Some(w) => sum / w.tokens.max(1.0),
            None => sum / scalar(&m.sum_all()?)?.max(1.0),
        },
        LossAgg::SeqMeanTokenMean => {
            ((l * m)?.sum_keepdim(1)? / len.clamp(1.0, f64::INFINITY)?)?.sum_all()? / n_seq
        }
        LossAgg::SeqMeanTokenSum => sum / n_seq,
        LossAgg::SeqMeanTokenSumNorm => {
            let padded = whole.map_or(l.dim(1)?, |w| w.padded_len);
            let norm = if norm > 0.0 { norm } else { padded as f64 };
            sum / (n_seq * norm)
        }
    }
}

/// The loss and its statistics. The loss is differentiable through `logp` and `entropy`.
///
/// ```text
/// ρ_t     = exp(logπ_t − logπ_old,t)         GSPO: s = exp(Σ_t m_t log ρ_t / Σ_t m_t) over
///                                             the action (or trajectory), for all its tokens
/// surr_t  = min(ρ_t A, clip(ρ_t, 1−ε_low, 1+ε_high) A)
///           dual clip c (A < 0 only): surr_t = max(surr_t, c·A)
/// L_pol   = aggregate(−w_t · surr)            w_t = min(π_old,t / π_behav,t, cap), detached, with
///                                             `behaviour_weight` (decoupled PPO); else 1
///                                             (token-mean, seq-mean-token-mean, …)
/// KL_t    = k(logπ_ref,t − logπ_t)            (k1, k2 or k3)
/// L       = L_pol + β · Σ m KL / Σ m − c_ent · Σ m H / Σ m
/// ```
pub fn policy_loss(cfg: &LossConfig, x: &LossInputs) -> Result<(Tensor, LossStats)> {
    let (b, t) = x.logp.dims2()?;
    let dt = x.logp.dtype();
    let zeros = Tensor::zeros((b, t), dt, x.logp.device())?;
    let keep = x.mask.gt(0.5)?; // u8 [B, T]
    let m = keep.to_dtype(dt)?;
    let masked = |v: &Tensor| keep.where_cond(&v.to_dtype(dt)?, &zeros); // 0 on padding
    let tokens = scalar(&m.sum_all()?)?;
    let denominator = x.whole.map_or(tokens, |w| w.tokens);
    let token_mean = |v: &Tensor| -> Result<Tensor> { (v * &m)?.sum_all()? / denominator.max(1.0) };
    let logp = masked(x.logp)?;
    // Log-ratios are clamped to ±LOG_RATIO_CLAMP (veRL's ±20) so that one token whose
    // log-prob collapsed cannot make exp() overflow into an infinite loss.
    let log_ratio = (&logp - masked(x.old_logp)?)?.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?;
    let adv = x.adv.to_dtype(dt)?.reshape((b, 1))?;
    let (lo, hi) = (1.0 - cfg.clip_low, 1.0 + cfg.clip_high);

    // surr = min(ρA, clip(ρ)A); `where` instead of `minimum` so that ties (A = 0, or ρ
    // inside the range) send the whole gradient through the unclipped branch. The dual
    // clip then holds surr at c·A where A < 0 and surr < c·A (no gradient there).
    // Returns surr and the 0/1 indicators of the clipped and dual-clipped branches.
    let surrogate = |ratio: &Tensor| -> Result<(Tensor, Tensor, Tensor)> {
        let surr1 = ratio.broadcast_mul(&adv)?;
        let surr2 = ratio.clamp(lo, hi)?.broadcast_mul(&adv)?;
        let active = surr2.lt(&surr1)?;
        let surr = active.where_cond(&surr2, &surr1)?;
        let mut dual = surr.zeros_like()?;
        let surr = match cfg.dual_clip {
            Some(c) => {
                let ca = (&adv * c)?.broadcast_as(surr.shape())?.contiguous()?;
                let neg = adv.lt(0.0)?.to_dtype(dt)?.broadcast_as(surr.shape())?;
                dual = (surr.lt(&ca)?.to_dtype(dt)? * neg)?;
                dual.gt(0.5)?.where_cond(&ca, &surr)?
            }
            None => surr,
        };
        let clipped = ((active.to_dtype(dt)? - &dual)?.relu())?;
        Ok((surr, clipped, dual))
    };
    let (per_token, clip_frac, dual_frac, ratio_mean) = match cfg.kind {
        PolicyLossKind::Token => {
            let ratio = log_ratio.exp()?;
            let (surr, clipped, dual) = surrogate(&ratio)?;
            (surr.neg()?, token_mean(&clipped)?, token_mean(&dual)?, token_mean(&ratio)?)
        }
        PolicyLossKind::Sequence => {
            // s = exp(Σ m log ρ / Σ m) over each action, or over each trajectory:
            // with membership S [K, B], sums per trajectory are S·(row sums), and
            // S^T·s gives every action its trajectory's ratio.
            let len = m.sum_keepdim(1)?; // [B, 1]
            let sum = log_ratio.sum_keepdim(1)?;
            let ratio = match x.segments {
                None => (sum / len.clamp(1.0, f64::INFINITY)?)?.exp()?,
                Some(s) => {
                    let s = s.to_dtype(dt)?;
                    let seg_len = s.matmul(&len)?.clamp(1.0, f64::INFINITY)?;
                    let seg = (s.matmul(&sum)? / seg_len)?.exp()?; // [K, 1]
                    s.t()?.matmul(&seg)? // [B, 1]
                }
            };
            let (surr, clipped, dual) = surrogate(&ratio)?;
            let seq = len.gt(0.0)?.to_dtype(dt)?;
            let n_seq = match x.whole {
                Some(w) => w.actions.max(1.0),
                None => scalar(&seq.sum_all()?)?.max(1.0),
            };
            let seq_mean = |v: &Tensor| -> Result<Tensor> { (v * &seq)?.sum_all()? / n_seq };
            let per_token = surr.neg()?.broadcast_as((b, t))?.contiguous()?;
            (per_token, seq_mean(&clipped)?, seq_mean(&dual)?, seq_mean(&ratio)?)
        }
    };
    // Decoupled PPO: the behaviour policy's tokens, re-weighted to the proximal policy's.
    let per_token = match x.behaviour_weight {
        Some(w) => (per_token * masked(&w.detach())?)?,
        None => per_token,
    };
    let policy = aggregate(cfg.agg, &per_token, &m, cfg.agg_norm, x.whole)?;
    let mut loss = policy.clone();
    let mut stats = LossStats {
        policy_loss: scalar(&policy)?,
        clip_frac: scalar(&clip_frac)?,
        dual_clip_frac: scalar(&dual_frac)?,
        ratio_mean: scalar(&ratio_mean)?,
        tokens: tokens as usize,
        ..Default::default()
    };

    if let Some(r) = x.ref_logp {
        // d = log(π_ref/π), clamped; KL_t = k(d): k1 = −d, k2 = ½d², k3 = e^d − 1 − d.
        let d = (masked(r)? - &logp)?.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?;
        let kl = token_mean(&cfg.kl.tensor(&d)?)?;
        stats.kl = scalar(&kl)?;
        if cfg.beta != 0.0 {
            loss = (loss + (kl * cfg.beta)?)?;
        }
    }
    if let Some(h) = x.entropy {
        let ent = token_mean(&masked(h)?)?;
        stats.entropy = scalar(&ent)?;
        if cfg.entropy_coef != 0.0 {
            loss = (loss - (ent * cfg.entropy_coef)?)?;
        }
    }
    // KL(π_old ‖ π) with samples from π_old: k3 of d = log(π/π_old).
    stats.approx_kl_old = scalar(&token_mean(&KlEstimator::K3.tensor(&log_ratio.detach())?)?)?;
    stats.loss = scalar(&loss)?;
    Ok((loss, stats))
}

#[cfg(test)]
#[path = "objective_tests.rs"]
mod tests;
