//! The decoupled PPO objective (Hilton et al. 2022, "Batch size-invariance for policy
//! optimization"; AReaL, Fu et al. 2025) for rollouts collected by older weights
//! (`[rollout] max_staleness = 1`, see `trainer/overlap.rs`).
//!
//! Three policies take part: π_behav sampled the tokens (weights at most one update old),
//! π_prox is the policy when the update starts, π_θ the one being trained. The clip keeps
//! π_θ near π_prox (the trust region is measured from where the update starts, not from the
//! older behaviour weights), and a detached, truncated importance weight corrects for the
//! tokens having come from π_behav:
//!
//! ```text
//! ρ_t = π_θ,t / π_prox,t                       (the objective's ratio; π_old = π_prox)
//! w_t = min(π_prox,t / π_behav,t, cap)          detached; cap = [algo] behaviour_weight_cap
//! L_t = −w_t · min(ρ_t A, clip(ρ_t, 1 − ε_low, 1 + ε_high) A)
//! ```
//!
//! π_prox's log-probs are the recorded tokens scored again by the policy before the update's
//! first step ([`decouple`]). Truncating the weight (rather than dropping tokens above the cap,
//! as AReaL does) bounds the variance a token whose behaviour probability was small can add.
//! When the rollouts' weights are the update's own (lock-step training, or the first
//! iteration) nothing is rescored and no weight enters the loss.

use super::objective::LOG_RATIO_CLAMP;
use super::update::Sample;
use crate::dist::{wire, ProcessGroup};
use crate::env::ScreenState;
use crate::policy::TrainablePolicy;
use anyhow::ensure;

/// `min(exp(prox − behav), cap)` for each token's log-probs under π_prox and π_behav (the
/// log-ratio clamped to ±[`LOG_RATIO_CLAMP`]); exactly 1 where the two agree.
pub fn behaviour_weights(prox: &[f32], behav: &[f32], cap: f64) -> Vec<f32> {
    prox.iter().zip(behav).map(|(&p, &b)| log_weight(p, b).exp().min(cap) as f32).collect()
}

fn log_weight(prox: f32, behav: f32) -> f64 {
    (f64::from(prox) - f64::from(behav)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
}

/// What [`decouple`] found, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Decoupled {
    /// Token-mean of the truncated weights `min(π_prox / π_behav, cap)`.
    pub weight_mean: f64,
    /// Fraction of tokens whose weight the cap truncated.
    pub capped_frac: f64,
}

/// Make `samples` (collected by older weights) train against `policy` as π_prox: each
/// sample's recorded log-probs (π_behav) give its `behaviour_weight`, and its `old_logp`
/// becomes the policy's own log-probs of the same tokens, scored `chunk` samples at a time
/// at the policy's current sampling temperature, a group's samples of one env step in the
/// same chunk where they fit (a GRPO group's first steps share one prompt, which a Qwen-VL
/// policy then runs once). Call before the update's first step.
///
/// In a data-parallel run (`group`) every rank holds every sample and the same weights;
/// each scores its contiguous share of the chunks and the ranks exchange the log-probs, so
/// the rescoring gets faster with the ranks, and every rank ends with the bits one process
/// scoring all the chunks gets.
pub fn decouple(
    policy: &dyn TrainablePolicy,
    samples: &mut [Sample],
    chunk: usize,
    cap: f64,
    group: Option<&ProcessGroup>,
) -> anyhow::Result<Decoupled> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&k| samples[k].group_step());
    let parts: Vec<&[usize]> = order.chunks(chunk.max(1)).collect();
    let score = |part: &[usize]| -> anyhow::Result<Vec<Vec<f32>>> {
        let states: Vec<ScreenState> = part.iter().map(|&k| samples[k].state.clone()).collect();
        let tokens: Vec<Vec<u32>> = part.iter().map(|&k| samples[k].tokens.clone()).collect();
        let logp =
            policy.score(&states, &tokens)?.logp.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?;
        for (&k, row) in part.iter().zip(&logp) {
            let s = &samples[k];
            ensure!(
                row.len() >= s.tokens.len() && s.old_logp.len() == s.tokens.len(),
                "rescoring a rollout's {} tokens gave {} log-probs ({} recorded)",
                s.tokens.len(),
                row.len(),
                s.old_logp.len()
            );
        }
        Ok(part.iter().zip(logp).map(|(&k, row)| row[..samples[k].tokens.len()].to_vec()).collect())
    };
    let scored: Vec<Vec<Vec<f32>>> = match group {
        None => parts.iter().map(|p| score(p)).collect::<anyhow::Result<_>>()?,
        Some(g) => {
            let share = g.share(parts.len());
            let mine = parts[share].iter().map(|p| score(p)).collect::<anyhow::Result<Vec<_>>>();
            // every row of this rank's chunks, in order; each row's length is its sample's
            let bytes =
                mine.map(|m| wire::join(&m.iter().flatten().map(|r| wire::f32_bytes(r)).collect::<Vec<_>>()));
            let all = g.all_gather(bytes.map_err(|e| format!("{e:#}")))?;
            let mut rows = Vec::new();
            for b in &all {
                for r in wire::split(b)? {
                    let mut row = vec![0f32; r.len() / 4];
                    wire::read_f32(&r, &mut row)?;
                    rows.push(row);
                }
            }
            ensure!(
                rows.len() == samples.len(),
                "the ranks' rescoring gave {} rows for {} samples",
                rows.len(),
                samples.len()
            );
            let mut rows = rows.into_iter();
            parts.iter().map(|p| p.iter().filter_map(|_| rows.next()).collect()).collect()
        }
    };
    let (mut sum, mut capped, mut n) = (0.0, 0usize, 0usize);
    for (part, logp) in parts.iter().zip(scored) {
        for (&k, prox) in part.iter().zip(logp) {
            let s = &mut samples[k];
            ensure!(
                prox.len() == s.tokens.len(),
                "a rank's rescoring gave {} log-probs for a rollout's {} tokens",
                prox.len(),
                s.tokens.len()
            );
            let w = behaviour_weights(&prox, &s.old_logp, cap);
            sum += w.iter().map(|&x| f64::from(x)).sum::<f64>();
            capped += prox.iter().zip(&s.old_logp).filter(|(&p, &b)| log_weight(p, b).exp() > cap).count();
            n += w.len();
            s.old_logp = prox;
            s.behaviour_weight = Some(w);
        }
    }
    let n = n.max(1) as f64;
    Ok(Decoupled { weight_mean: sum / n, capped_frac: capped as f64 / n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::{VlmConfig, VlmPolicy};
    use crate::train::objective::{
        policy_loss, KlEstimator, LossAgg, LossConfig, LossInputs, PolicyLossKind,
    };
    use candle_core::{Device, Tensor};

    #[test]
    fn the_weight_is_exactly_one_when_behaviour_is_prox_and_capped_above() {
        let lp = [-0.3f32, -2.5, -0.0, -17.0];
        assert_eq!(behaviour_weights(&lp, &lp, 2.0), vec![1.0; 4]);
        // prox − behav = ln 1.5 (inside), ln 3 (above the cap of 2), −1 (below 1: kept)
        let behav = [-1.0f32, -1.0, -1.0];
        let prox = [-1.0 + 1.5f32.ln(), -1.0 + 3f32.ln(), -2.0];
        let w = behaviour_weights(&prox, &behav, 2.0);
        assert!((w[0] - 1.5).abs() < 1e-6, "{w:?}");
        assert_eq!(w[1], 2.0, "capped");
        assert!((w[2] - (-1f32).exp()).abs() < 1e-7, "{w:?}");
        // an extreme log-ratio is clamped before exp: finite
        assert!(behaviour_weights(&[0.0], &[-500.0], f64::MAX)[0].is_finite());
    }

    /// Samples of the real tiny policy: its own sampled tokens and recorded log-probs.
    fn rollout(p: &mut VlmPolicy, n: usize) -> Vec<Sample> {
        crate::train::update::tests::rollout_with(p, n, 5, 2)
    }

    #[test]
    fn decoupling_rescores_prox_and_weights_the_behaviour_tokens() {
        let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 4).unwrap();
        let mut samples = rollout(&mut p, 4);
        // groups 1, 0, 1, 0: rescored in the order 1, 3, 0, 2, each sample its own rows
        for (k, s) in samples.iter_mut().enumerate() {
            s.group = 1 - k % 2;
        }
        // The behaviour policy is the current one: the weights are 1 up to the rounding of
        // one-state sampling against a batched rescoring.
        let recorded: Vec<Vec<f32>> = samples.iter().map(|s| s.old_logp.clone()).collect();
        let d = decouple(&p, &mut samples, 4, 2.0, None).unwrap();
        assert!((d.weight_mean - 1.0).abs() < 1e-4 && d.capped_frac == 0.0, "{d:?}");
        // Rescored again, π_prox is what it was: every weight exactly 1.
        let prox: Vec<Vec<f32>> = samples.iter().map(|s| s.old_logp.clone()).collect();
        for (s, r) in samples.iter_mut().zip(&recorded) {
            assert_eq!(s.behaviour_weight.as_ref().unwrap(), &behaviour_weights(&s.old_logp, r, 2.0));
        }
        let d = decouple(&p, &mut samples, 4, 2.0, None).unwrap();
        assert_eq!(d, Decoupled { weight_mean: 1.0, capped_frac: 0.0 });
        // Behaviour log-probs 1 nat lower than π_prox's: every weight e > 2, so capped.
        for (s, pr) in samples.iter_mut().zip(&prox) {
            s.old_logp = pr.iter().map(|x| x - 1.0).collect();
        }
        let d = decouple(&p, &mut samples, 3, 2.0, None).unwrap();
        assert_eq!(d, Decoupled { weight_mean: 2.0, capped_frac: 1.0 });
        assert!(samples.iter().all(|s| s.behaviour_weight.as_ref().unwrap().iter().all(|&w| w == 2.0)));
        assert_eq!(samples.iter().map(|s| s.old_logp.clone()).collect::<Vec<_>>(), prox);
    }

    /// Data parallel, each rank rescores its share of the chunks and every rank gets all of
    /// them: with the same weights on both ranks, the bits one process gets; with other
    /// weights on each rank (which a run never has), each share is its own rank's scores,
    /// which shows the work was split.
    #[test]
    fn ranks_share_the_rescoring_and_agree() {
        let policy = |seed| VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, seed).unwrap();
        let (mut a, b) = (policy(4), policy(5));
        let samples = rollout(&mut a, 6);
        let alone = |p: &VlmPolicy| {
            let mut s = samples.clone();
            let d = decouple(p, &mut s, 2, 2.0, None).unwrap();
            (d, s.into_iter().map(|s| (s.old_logp, s.behaviour_weight)).collect::<Vec<_>>())
        };
        let (by_a, by_b) = (alone(&a), alone(&b));
        let on_two = |seeds: [u64; 2]| {
            let samples = samples.clone();
            crate::dist::tests::on_ranks(
                2,
                |_| "decouple".into(),
                move |g| {
                    let mut s = samples.clone();
                    let d = decouple(&policy(seeds[g.rank()]), &mut s, 2, 2.0, Some(&g)).unwrap();
                    (d, s.into_iter().map(|s| (s.old_logp, s.behaviour_weight)).collect::<Vec<_>>())
                },
            )
            .into_iter()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>()
        };
        for r in on_two([4, 4]) {
            assert_eq!(r, by_a, "same weights: one process's bits");
        }
        // 6 samples in chunks of 2, ordered by (group, step): rank 0 scores the first chunk,
        // rank 1 the other two
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.sort_by_key(|&k| samples[k].group_step());
        let ranks = on_two([4, 5]);
        assert_eq!(ranks[0].1, ranks[1].1, "both ranks hold every score");
        for (i, &k) in order.iter().enumerate() {
            let want = if i < 2 { &by_a.1[k] } else { &by_b.1[k] };
            assert_eq!(&ranks[0].1[k], want, "sample {k}, chunk {}", i / 2);
        }
        assert_ne!(by_a.1, by_b.1, "the two policies score differently");
    }

    #[test]
    fn the_weight_scales_each_tokens_loss_and_ones_change_nothing() {
        let dev = Device::Cpu;
        let t = |v: &[f32]| Tensor::from_vec(v.to_vec(), (2, 2), &dev).unwrap();
        let logp = candle_core::Var::from_tensor(&t(&[-1.0, -0.5, -0.7, -2.0])).unwrap();
        let old = t(&[-1.1, -0.5, -0.6, -2.0]);
        let adv = Tensor::from_vec(vec![1.0f32, -0.5], 2, &dev).unwrap();
        let mask = t(&[1.0, 1.0, 1.0, 0.0]);
        let cfg = LossConfig {
            kind: PolicyLossKind::Token,
            clip_low: 0.2,
            clip_high: 0.2,
            dual_clip: None,
            agg: LossAgg::TokenMean,
            agg_norm: 0.0,
            beta: 0.0,
            kl: KlEstimator::K3,
            entropy_coef: 0.0,
        };
        let run = |w: Option<&Tensor>| {
            let x = LossInputs {
                logp: logp.as_tensor(),
                old_logp: &old,
                ref_logp: None,
                adv: &adv,
                mask: &mask,
                entropy: None,
                segments: None,
                whole: None,
                behaviour_weight: w,
            };
            let (loss, st) = policy_loss(&cfg, &x).unwrap();
            let g = loss.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
            (st.policy_loss, g)
        };
        let (l0, g0) = run(None);
        assert_eq!(run(Some(&t(&[1.0; 4]))), (l0, g0.clone()), "weights of 1 change no bit");
        // Weights 2 on token (0, 0) and 0.5 on (1, 0): their gradients scale by as much.
        let (_, g) = run(Some(&t(&[2.0, 1.0, 0.5, 7.0])));
        let close = |a: f32, b: f32| (a - b).abs() < 1e-7;
        assert!(close(g[0][0], 2.0 * g0[0][0]) && close(g[0][1], g0[0][1]), "{g:?} vs {g0:?}");
        assert!(close(g[1][0], 0.5 * g0[1][0]) && g[1][1] == 0.0 && g0[0][0] != 0.0, "{g:?}");
    }
}
