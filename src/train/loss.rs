//! The GRPO-family policy loss on per-token log-probs.
//!
//! - **GRPO** ([`PolicyLossKind::Token`], `clip_low == clip_high`): PPO's clipped surrogate
//!   per token with the group-relative advantage of its trajectory, plus a KL penalty to a
//!   frozen reference policy.
//! - **DAPO**: the same loss with `clip_high > clip_low` ("clip-higher", room for unlikely
//!   tokens to grow) and the token-mean aggregation used here for every kind (each token
//!   of the batch weighs the same, so long answers are not down-weighted); usually with
//!   `beta = 0`. (DAPO's dynamic sampling, dropping all-equal groups, is the trainer's.)
//! - **GSPO** ([`PolicyLossKind::Sequence`]): one importance ratio per sequence, the
//!   geometric mean of the token ratios, clipped per sequence; the policy term is a mean
//!   over sequences. GSPO's clip ranges are small (the paper: 3e-4 / 4e-4).
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
    /// Per-sequence ratio `ρ = exp(mean_t(logπ_t − logπ_old,t))` (GSPO).
    Sequence,
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
    /// β: weight of `KL(π ‖ π_ref)`.
    pub beta: f64,
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
    /// `[B]`: the trajectory's advantage, shared by all its tokens.
    pub adv: &'a Tensor,
    /// 1 for action tokens, 0 for padding.
    pub mask: &'a Tensor,
    /// Entropy of π at each position (`None`: no bonus).
    pub entropy: Option<&'a Tensor>,
}

/// What the loss saw, for the metrics (all token-means over the mask unless said).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossStats {
    /// The total loss.
    pub loss: f64,
    /// The policy term `−surrogate` (GSPO: a mean over sequences).
    pub policy_loss: f64,
    /// k3 estimate of `KL(π ‖ π_ref)` (0 without a reference).
    pub kl: f64,
    /// Mean entropy (0 without one).
    pub entropy: f64,
    /// Fraction of tokens (GSPO: sequences) where the clipped branch is the minimum, so
    /// they give no policy gradient.
    pub clip_frac: f64,
    /// Mean importance ratio (GSPO: over sequences).
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

/// The loss and its statistics. The loss is differentiable through `logp` and `entropy`.
///
/// ```text
/// ρ_t     = exp(logπ_t − logπ_old,t)                        (GSPO: exp(mean_t(…)) per sequence)
/// L_clip  = −Σ_t m_t · min(ρ_t A, clip(ρ_t, 1−ε_low, 1+ε_high) A) / Σ_t m_t
/// KL_t    = exp(logπ_ref,t − logπ_t) − (logπ_ref,t − logπ_t) − 1          (k3, ≥ 0)
/// L       = L_clip + β · Σ_t m_t KL_t / Σ_t m_t − c_ent · Σ_t m_t H_t / Σ_t m_t
/// ```
/// Sums run over all tokens of all sequences ("token-mean").
pub fn policy_loss(cfg: &LossConfig, x: &LossInputs) -> Result<(Tensor, LossStats)> {
    let (b, t) = x.logp.dims2()?;
    let dt = x.logp.dtype();
    let zeros = Tensor::zeros((b, t), dt, x.logp.device())?;
    let keep = x.mask.gt(0.5)?; // u8 [B, T]
    let m = keep.to_dtype(dt)?;
    let masked = |v: &Tensor| keep.where_cond(&v.to_dtype(dt)?, &zeros); // 0 on padding
    let tokens = scalar(&m.sum_all()?)?;
    let token_mean = |v: &Tensor| -> Result<Tensor> { (v * &m)?.sum_all()? / tokens.max(1.0) };
    let logp = masked(x.logp)?;
    // Log-ratios are clamped to ±LOG_RATIO_CLAMP (veRL's ±20) so that one token whose
    // log-prob collapsed cannot make exp() overflow into an infinite loss.
    let log_ratio = (&logp - masked(x.old_logp)?)?.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?;
    let adv = x.adv.to_dtype(dt)?.reshape((b, 1))?;
    let (lo, hi) = (1.0 - cfg.clip_low, 1.0 + cfg.clip_high);

    // surrogate = min(ρA, clip(ρ)A); `where` instead of `minimum` so that ties (A = 0, or ρ
    // inside the range) send the whole gradient through the unclipped branch.
    let clipped_min = |ratio: &Tensor, adv: &Tensor| -> Result<(Tensor, Tensor)> {
        let surr1 = ratio.broadcast_mul(adv)?;
        let surr2 = ratio.clamp(lo, hi)?.broadcast_mul(adv)?;
        let active = surr2.lt(&surr1)?;
        Ok((active.where_cond(&surr2, &surr1)?, active.to_dtype(dt)?))
    };
    let (policy, clip_frac, ratio_mean) = match cfg.kind {
        PolicyLossKind::Token => {
            let ratio = log_ratio.exp()?;
            let (surr, active) = clipped_min(&ratio, &adv)?;
            (token_mean(&surr.neg()?)?, token_mean(&active)?, token_mean(&ratio)?)
        }
        PolicyLossKind::Sequence => {
            let len = m.sum_keepdim(1)?; // [B, 1]
            let seq = len.gt(0.0)?.to_dtype(dt)?;
            let n_seq = scalar(&seq.sum_all()?)?.max(1.0);
            let ratio = (log_ratio.sum_keepdim(1)? / len.clamp(1.0, f64::INFINITY)?)?.exp()?;
            let (surr, active) = clipped_min(&ratio, &adv)?;
            let seq_mean = |v: &Tensor| -> Result<Tensor> { (v * &seq)?.sum_all()? / n_seq };
            (seq_mean(&surr.neg()?)?, seq_mean(&active)?, seq_mean(&ratio)?)
        }
    };
    let mut loss = policy.clone();
    let mut stats = LossStats {
        policy_loss: scalar(&policy)?,
        clip_frac: scalar(&clip_frac)?,
        ratio_mean: scalar(&ratio_mean)?,
        tokens: tokens as usize,
        ..Default::default()
    };

    // k3(p‖q) = exp(log q − log p) − (log q − log p) − 1, unbiased and ≥ 0 per sample.
    let k3 = |d: Tensor| -> Result<Tensor> { (d.exp()? - d)? - 1.0 };
    if let Some(r) = x.ref_logp {
        let d = (masked(r)? - &logp)?.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?;
        let kl = token_mean(&k3(d)?)?;
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
    stats.approx_kl_old = scalar(&token_mean(&k3(log_ratio.detach())?)?)?;
    stats.loss = scalar(&loss)?;
    Ok((loss, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    const EPS_LOW: f64 = 0.2;
    const EPS_HIGH: f64 = 0.28;

    fn cfg(kind: PolicyLossKind, beta: f64, c_ent: f64) -> LossConfig {
        LossConfig { kind, clip_low: EPS_LOW, clip_high: EPS_HIGH, beta, entropy_coef: c_ent }
    }

    fn t2(v: &[[f64; 3]; 2]) -> Tensor {
        let flat: Vec<f32> = v.iter().flatten().map(|&x| x as f32).collect();
        Tensor::from_vec(flat, (2, 3), &Device::Cpu).unwrap()
    }

    // B = 2 sequences, T = 3; the last token of sequence 1 is padding (NaN inputs there).
    // log ρ = logπ − logπ_old:
    //   seq 0 (A = +1.0): [0.0 (ρ=1), 0.3 (ρ=1.3499 > 1.28: clipped), −0.5 (ρ=0.6065 < 0.8,
    //                      A > 0: min picks ρA, not clipped)]
    //   seq 1 (A = −0.5): [−0.4 (ρ=0.6703 < 0.8, A < 0: clipped), 0.1 (ρ=1.1052: inside), pad]
    const OLD: [[f64; 3]; 2] = [[-1.0, -2.0, -0.5], [-1.5, -0.7, -1.0]];
    const D: [[f64; 3]; 2] = [[0.0, 0.3, -0.5], [-0.4, 0.1, 0.0]];
    const REF: [[f64; 3]; 2] = [[-1.2, -1.5, -1.0], [-1.0, -0.9, -1.0]];
    const ENT: [[f64; 3]; 2] = [[0.5, 1.0, 1.5], [2.0, 0.25, 9.0]];
    const ADV: [f64; 2] = [1.0, -0.5];
    const MASK: [[f64; 3]; 2] = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]];

    fn inputs() -> (Var, Tensor, Tensor, Tensor, Tensor, Var) {
        let mut logp = [[0.0; 3]; 2];
        for i in 0..2 {
            for j in 0..3 {
                logp[i][j] = OLD[i][j] + D[i][j];
            }
        }
        logp[1][2] = f64::NAN;
        let mut ent = ENT;
        ent[1][2] = f64::NAN;
        let logp = Var::from_tensor(&t2(&logp)).unwrap();
        let adv = Tensor::from_vec(ADV.iter().map(|&a| a as f32).collect(), 2, &Device::Cpu).unwrap();
        let ent = Var::from_tensor(&t2(&ent)).unwrap();
        (logp, t2(&OLD), t2(&REF), adv, t2(&MASK), ent)
    }

    /// Hand computation in f64 of every term, token by token over the 5 unmasked tokens.
    struct Hand {
        policy: f64,
        kl: f64,
        ent: f64,
        clip_frac: f64,
        ratio_mean: f64,
        /// d(loss)/d(logπ) of seq 0 token 2 (unclipped) and seq 0 token 1 (clipped),
        /// given β and c_ent.
        grad: fn(f64, (usize, usize)) -> f64,
    }

    fn hand() -> Hand {
        let toks = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)];
        let n = 5.0;
        let (mut pol, mut kl, mut ent, mut clipped, mut ratio) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(i, j) in &toks {
            let a = ADV[i];
            let rho = D[i][j].exp();
            // min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A)
            let s1 = rho * a;
            let s2 = rho.clamp(1.0 - EPS_LOW, 1.0 + EPS_HIGH) * a;
            pol -= s1.min(s2) / n;
            clipped += f64::from(u8::from(s2 < s1)) / n;
            ratio += rho / n;
            // k3: exp(ref − logp) − (ref − logp) − 1
            let d = REF[i][j] - (OLD[i][j] + D[i][j]);
            kl += (d.exp() - d - 1.0) / n;
            ent += ENT[i][j] / n;
        }
        // ∂L/∂logπ_t = (−A ρ_t [unclipped] + β (1 − exp(ref_t − logπ_t))) / N
        fn grad(beta: f64, (i, j): (usize, usize)) -> f64 {
            let rho = D[i][j].exp();
            let unclipped = (i, j) != (0, 1) && (i, j) != (1, 0);
            let pg = if unclipped { -ADV[i] * rho } else { 0.0 };
            let d = REF[i][j] - (OLD[i][j] + D[i][j]);
            (pg + beta * (1.0 - d.exp())) / 5.0
        }
        Hand { policy: pol, kl, ent, clip_frac: clipped, ratio_mean: ratio, grad }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-5 * (1.0 + b.abs())
    }

    #[test]
    fn grpo_loss_matches_hand_values() {
        let (logp, old, r, adv, mask, ent) = inputs();
        let (beta, c_ent) = (0.04, 0.01);
        let x = LossInputs {
            logp: logp.as_tensor(),
            old_logp: &old,
            ref_logp: Some(&r),
            adv: &adv,
            mask: &mask,
            entropy: Some(ent.as_tensor()),
        };
        let (loss, st) = policy_loss(&cfg(PolicyLossKind::Token, beta, c_ent), &x).unwrap();
        let h = hand();
        assert_eq!(st.tokens, 5);
        // Clipping is active on exactly 2 of the 5 tokens: (0,1) A>0 ρ>1+ε_high, (1,0) A<0 ρ<1−ε_low.
        assert!(close(st.clip_frac, 0.4) && close(h.clip_frac, 0.4));
        assert!(close(st.policy_loss, h.policy), "{} vs {}", st.policy_loss, h.policy);
        assert!(close(st.kl, h.kl) && h.kl > 0.0);
        assert!(close(st.entropy, h.ent));
        assert!(close(st.ratio_mean, h.ratio_mean));
        // KL(π_old ‖ π), k3 with samples from π_old: mean_t(ρ_t − 1 − log ρ_t)
        let kl_old: f64 = [0.0f64, 0.3, -0.5, -0.4, 0.1].iter().map(|d| d.exp() - 1.0 - d).sum::<f64>() / 5.0;
        assert!(close(st.approx_kl_old, kl_old));
        let total = h.policy + beta * h.kl - c_ent * h.ent;
        assert!(close(st.loss, total) && close(loss.to_scalar::<f32>().unwrap() as f64, total));

        let grads = loss.backward().unwrap();
        let g = grads.get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        for (i, j) in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)] {
            let want = (h.grad)(beta, (i, j));
            assert!(close(g[i][j] as f64, want), "∂L/∂logπ[{i}][{j}] = {} want {want}", g[i][j]);
        }
        // padding: no gradient, and the NaN there did not leak
        assert_eq!(g[1][2], 0.0);
        // ∂L/∂H_t = −c_ent / N on tokens, 0 on padding
        let ge = grads.get(ent.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert!(close(ge[0][0] as f64, -c_ent / 5.0) && ge[1][2] == 0.0);
    }

    #[test]
    fn without_reference_or_entropy_only_the_surrogate_remains() {
        let (logp, old, _, adv, mask, _) = inputs();
        let x = LossInputs {
            logp: logp.as_tensor(),
            old_logp: &old,
            ref_logp: None,
            adv: &adv,
            mask: &mask,
            entropy: None,
        };
        let (loss, st) = policy_loss(&cfg(PolicyLossKind::Token, 0.1, 0.1), &x).unwrap();
        assert!(close(st.loss, hand().policy) && st.kl == 0.0 && st.entropy == 0.0);
        // the clipped token (0,1) gets no gradient; (0,2) gets −A ρ / N
        let g = loss.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(g[0][1], 0.0);
        assert!(close(g[0][2] as f64, -(-0.5f64).exp() / 5.0));
    }

    #[test]
    fn ratio_one_gives_the_plain_policy_gradient() {
        // First epoch: logπ == logπ_old, ρ = 1, L = −Σ m A / N, ∂L/∂logπ_t = −A / N (no clip).
        let (_, old, _, adv, mask, _) = inputs();
        let logp = Var::from_tensor(&old).unwrap();
        let x = LossInputs {
            logp: logp.as_tensor(),
            old_logp: &old,
            ref_logp: None,
            adv: &adv,
            mask: &mask,
            entropy: None,
        };
        let (loss, st) = policy_loss(&cfg(PolicyLossKind::Token, 0.0, 0.0), &x).unwrap();
        // −(3·1.0 + 2·(−0.5)) / 5 = −0.4
        assert!(close(st.loss, -0.4) && st.clip_frac == 0.0 && close(st.ratio_mean, 1.0));
        let g = loss.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert!(close(g[0][0] as f64, -0.2) && close(g[1][1] as f64, 0.1) && g[1][2] == 0.0);
    }

    #[test]
    fn gspo_sequence_ratio() {
        let (logp, old, _, adv, mask, _) = inputs();
        let x = LossInputs {
            logp: logp.as_tensor(),
            old_logp: &old,
            ref_logp: None,
            adv: &adv,
            mask: &mask,
            entropy: None,
        };
        let c = LossConfig { clip_low: 0.05, clip_high: 0.05, ..cfg(PolicyLossKind::Sequence, 0.0, 0.0) };
        let (loss, st) = policy_loss(&c, &x).unwrap();
        // seq 0: s = exp((0 + 0.3 − 0.5)/3) = exp(−1/15) = 0.9355 < 0.95, A = +1: min(sA, 0.95A) = s
        // seq 1: s = exp((−0.4 + 0.1)/2) = exp(−0.15) = 0.8607 < 0.95, A = −0.5:
        //        min(−0.5 s, −0.5·0.95) = −0.475 (clipped)
        // L = −(s0 − 0.475) / 2
        let s0 = (-1.0f64 / 15.0).exp();
        let s1 = (-0.15f64).exp();
        assert!(close(st.policy_loss, -(s0 - 0.475) / 2.0));
        assert!(close(st.clip_frac, 0.5) && close(st.ratio_mean, (s0 + s1) / 2.0));
        // ∂L/∂logπ_0t = −(1/2) · A · s0 · (1/3) for every token of seq 0; seq 1 clipped: 0.
        let g = loss.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        for gj in &g[0] {
            assert!(close(*gj as f64, -s0 / 6.0));
        }
        assert_eq!(g[1], vec![0.0; 3]);
    }
}
