//! Tests of the parent module (kept apart to keep the module short).
use super::*;
use candle_core::{Device, Var};

const EPS_LOW: f64 = 0.2;
const EPS_HIGH: f64 = 0.28;

fn cfg(kind: PolicyLossKind, beta: f64, c_ent: f64) -> LossConfig {
    LossConfig {
        kind,
        clip_low: EPS_LOW,
        clip_high: EPS_HIGH,
        dual_clip: None,
        agg: match kind {
            PolicyLossKind::Token => LossAgg::TokenMean,
            PolicyLossKind::Sequence => LossAgg::SeqMeanTokenMean,
        },
        agg_norm: 0.0,
        beta,
        kl: KlEstimator::K3,
        entropy_coef: c_ent,
    }
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
        segments: None,
        whole: None,
        behaviour_weight: None,
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
        segments: None,
        whole: None,
        behaviour_weight: None,
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
        segments: None,
        whole: None,
        behaviour_weight: None,
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
        segments: None,
        whole: None,
        behaviour_weight: None,
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

const TOKS: [(usize, usize); 5] = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)];

fn no_ref<'a>(logp: &'a Var, old: &'a Tensor, adv: &'a Tensor, mask: &'a Tensor) -> LossInputs<'a> {
    LossInputs {
        logp: logp.as_tensor(),
        old_logp: old,
        ref_logp: None,
        adv,
        mask,
        entropy: None,
        segments: None,
        whole: None,
        behaviour_weight: None,
    }
}

fn grad(loss: &Tensor, v: &Var) -> Vec<Vec<f32>> {
    loss.backward().unwrap().get(v.as_tensor()).unwrap().to_vec2::<f32>().unwrap()
}

#[test]
fn dual_clip_bounds_negative_advantages_below() {
    // c = 1.1. Token (1,1): A = −0.5, ρ = e^0.1 = 1.105171 inside [0.8, 1.28], so
    // min(ρA, clip(ρ)A) = −0.552585 < c·A = −0.55: the dual clip holds it at −0.55
    // (no gradient). Token (1,0): surr = clip(0.6703)·A = 0.8·(−0.5) = −0.4 > −0.55: kept.
    // A > 0 tokens are untouched. Per token (token-mean over 5):
    //   L = −[1, 1.28, e^−0.5, −0.4, −0.55] / 5
    let (logp, old, _, adv, mask, _) = inputs();
    let c = LossConfig { dual_clip: Some(1.1), ..cfg(PolicyLossKind::Token, 0.0, 0.0) };
    let (loss, st) = policy_loss(&c, &no_ref(&logp, &old, &adv, &mask)).unwrap();
    let want = -(1.0 + 1.28 + (-0.5f64).exp() - 0.4 - 0.55) / 5.0;
    assert!(close(st.policy_loss, want), "{} vs {want}", st.policy_loss);
    // (0,1) and (1,0) on the clipped branch, (1,1) on the dual clip.
    assert!(close(st.clip_frac, 0.4) && close(st.dual_clip_frac, 0.2), "{st:?}");
    let g = grad(&loss, &logp);
    assert_eq!((g[1][1], g[1][0], g[0][1]), (0.0, 0.0, 0.0));
    // unclipped A > 0 tokens: ∂L/∂logπ = −A ρ / 5
    assert!(close(g[0][2] as f64, -(-0.5f64).exp() / 5.0) && close(g[0][0] as f64, -0.2));
    // Without the dual clip token (1,1) is −ρA: the loss differs by exactly that.
    let (_, plain) =
        policy_loss(&cfg(PolicyLossKind::Token, 0.0, 0.0), &no_ref(&logp, &old, &adv, &mask)).unwrap();
    assert!(close(plain.policy_loss - st.policy_loss, (0.5 * 0.1f64.exp() - 0.55) / 5.0));
}

#[test]
fn each_aggregation_by_hand() {
    // Per-token losses l = −min(ρA, clip(ρ)A) (ε 0.2 / 0.28), rows of 3 and 2 tokens:
    //   row 0 (A = 1):    [−1, −1.28, −e^−0.5]
    //   row 1 (A = −0.5): [0.4, 0.5 e^0.1]
    let l0 = [-1.0, -1.28, -(-0.5f64).exp()];
    let l1 = [0.4, 0.5 * 0.1f64.exp()];
    let (s0, s1): (f64, f64) = (l0.iter().sum(), l1.iter().sum());
    let (logp, old, _, adv, mask, _) = inputs();
    for (agg, norm, want) in [
        (LossAgg::TokenMean, 0.0, (s0 + s1) / 5.0), // Σ l / Σ m
        (LossAgg::SeqMeanTokenMean, 0.0, (s0 / 3.0 + s1 / 2.0) / 2.0), // mean of row means
        (LossAgg::SeqMeanTokenSum, 0.0, (s0 + s1) / 2.0), // Σ l / B
        (LossAgg::SeqMeanTokenSumNorm, 4.0, (s0 + s1) / (2.0 * 4.0)), // Σ l / (B · N)
        (LossAgg::SeqMeanTokenSumNorm, 0.0, (s0 + s1) / (2.0 * 3.0)), // N = padded T = 3
    ] {
        let c = LossConfig { agg, agg_norm: norm, ..cfg(PolicyLossKind::Token, 0.0, 0.0) };
        let (loss, st) = policy_loss(&c, &no_ref(&logp, &old, &adv, &mask)).unwrap();
        assert!(close(st.policy_loss, want), "{agg:?}: {} vs {want}", st.policy_loss);
        // the gradient of an unclipped token, (0,2): −A ρ times the token's weight
        let w = match agg {
            LossAgg::TokenMean => 1.0 / 5.0,
            LossAgg::SeqMeanTokenMean => 1.0 / (2.0 * 3.0),
            LossAgg::SeqMeanTokenSum => 1.0 / 2.0,
            LossAgg::SeqMeanTokenSumNorm => 1.0 / (2.0 * if norm > 0.0 { norm } else { 3.0 }),
        };
        let g = grad(&loss, &logp);
        assert!(close(g[0][2] as f64, -(-0.5f64).exp() * w), "{agg:?}: {}", g[0][2]);
        assert_eq!(g[1][2], 0.0);
    }
}

#[test]
fn kl_estimators_by_hand() {
    // d = logπ_ref − logπ per token; k1 = −d, k2 = d²/2, k3 = e^d − 1 − d; token-means over 5.
    // ∂(β·mean k)/∂logπ_t = β/5 · (k1: 1, k2: −d, k3: 1 − e^d)   (∂d/∂logπ = −1)
    let (logp, old, r, adv, mask, _) = inputs();
    let d: Vec<f64> = TOKS.iter().map(|&(i, j)| REF[i][j] - (OLD[i][j] + D[i][j])).collect();
    let beta = 0.5;
    type F = fn(f64) -> f64;
    let table: [(KlEstimator, F, F); 3] = [
        (KlEstimator::K1, |d| -d, |_| 1.0),
        (KlEstimator::K2, |d| 0.5 * d * d, |d| -d),
        (KlEstimator::K3, |d| d.exp() - 1.0 - d, |d| 1.0 - d.exp()),
    ];
    for (k, f, df) in table {
        let want: f64 = d.iter().map(|&x| f(x)).sum::<f64>() / 5.0;
        for &x in &d {
            assert!(close(k.value(x), f(x)));
        }
        let x = LossInputs { ref_logp: Some(&r), ..no_ref(&logp, &old, &adv, &mask) };
        // ratio 1 would hide nothing here, but set the policy term aside: A = 0.
        let zero = adv.zeros_like().unwrap();
        let x = LossInputs { adv: &zero, ..x };
        let c = LossConfig { kl: k, ..cfg(PolicyLossKind::Token, beta, 0.0) };
        let (loss, st) = policy_loss(&c, &x).unwrap();
        assert!(close(st.kl, want), "{k:?}: {} vs {want}", st.kl);
        assert!(close(st.loss, beta * want));
        let g = grad(&loss, &logp);
        for (n, &(i, j)) in TOKS.iter().enumerate() {
            assert!(close(g[i][j] as f64, beta * df(d[n]) / 5.0), "{k:?} [{i}][{j}]");
        }
        assert_eq!(g[1][2], 0.0);
    }
    // Clamped like the ratio: a collapsed log-prob gives a finite k3.
    assert!(KlEstimator::K3.value(100.0).is_finite());
    assert_eq!(KlEstimator::K1.value(-100.0), LOG_RATIO_CLAMP);
}

#[test]
fn gspo_ratio_over_a_whole_trajectory() {
    // Both actions belong to one trajectory (S = [[1, 1]]): one ratio over its 5 tokens,
    //   s = exp((0 + 0.3 − 0.5 − 0.4 + 0.1) / 5) = exp(−0.1) = 0.904837, ε = 0.05.
    // Row 0 (A = 1): min(s, 0.95) = s, unclipped. Row 1 (A = −0.5): min(−0.5 s, −0.475)
    // = −0.475, clipped. Seq-mean-token-mean: L = −(s − 0.475) / 2.
    // ∂L/∂logπ_t = −(1/2)·A_0·s·(1/5) = −s/10 for all 5 tokens, row 1's included.
    let (logp, old, _, adv, mask, _) = inputs();
    let seg = Tensor::new(&[[1f32, 1.0]], &Device::Cpu).unwrap();
    let x = LossInputs { segments: Some(&seg), ..no_ref(&logp, &old, &adv, &mask) };
    let c = LossConfig { clip_low: 0.05, clip_high: 0.05, ..cfg(PolicyLossKind::Sequence, 0.0, 0.0) };
    let (loss, st) = policy_loss(&c, &x).unwrap();
    let s = (-0.1f64).exp();
    assert!(close(st.policy_loss, -(s - 0.475) / 2.0), "{}", st.policy_loss);
    assert!(close(st.clip_frac, 0.5) && close(st.ratio_mean, s));
    let g = grad(&loss, &logp);
    for &(i, j) in &TOKS {
        assert!(close(g[i][j] as f64, -s / 10.0), "[{i}][{j}] {}", g[i][j]);
    }
    assert_eq!(g[1][2], 0.0);
    // Two one-action trajectories (S = I) are the action-level ratio.
    let eye = Tensor::new(&[[1f32, 0.0], [0.0, 1.0]], &Device::Cpu).unwrap();
    let x = LossInputs { segments: Some(&eye), ..no_ref(&logp, &old, &adv, &mask) };
    let (_, per_traj) = policy_loss(&c, &x).unwrap();
    let (_, per_action) = policy_loss(&c, &no_ref(&logp, &old, &adv, &mask)).unwrap();
    assert!(close(per_traj.policy_loss, per_action.policy_loss));
}

#[test]
fn parts_of_a_minibatch_with_its_counts_add_up_to_the_whole() {
    // 5 actions of 1 to 4 tokens, split as data parallel splits them: rows 0..2 and 2..5,
    // each part padded only to its own longest action.
    let lens = [4usize, 1, 3, 2, 4];
    let (b, t) = (5, 4);
    let val = |i: usize, j: usize, k: f32| ((i * 7 + j * 3) as f32 * 0.37 + k).sin() * 0.6 - 1.0;
    let grid = |k: f32| -> Vec<f32> { (0..b * t).map(|n| val(n / t, n % t, k)).collect() };
    let mask: Vec<f32> = (0..b * t).map(|n| f32::from(u8::from(n % t < lens[n / t]))).collect();
    let adv = [1.0f32, -0.5, 0.8, -1.2, 0.3];
    let dev = Device::Cpu;
    let rows = |v: &[f32], r: std::ops::Range<usize>, w: usize| -> Tensor {
        let flat: Vec<f32> = r.clone().flat_map(|i| v[i * t..i * t + w].to_vec()).collect();
        Tensor::from_vec(flat, (r.len(), w), &dev).unwrap()
    };
    let (logp, old, refp, ent) =
        (grid(0.0), grid(0.2), grid(-0.3), grid(1.0).iter().map(|x| x.abs()).collect::<Vec<_>>());
    // Returns the loss's statistics and ∂L/∂logπ, laid out [5, 4].
    let run =
        |c: &LossConfig, r: std::ops::Range<usize>, whole: Option<Whole>| -> (LossStats, Vec<Vec<f32>>) {
            let w = r.clone().map(|i| lens[i]).max().unwrap();
            let lp = Var::from_tensor(&rows(&logp, r.clone(), w)).unwrap();
            let (o, rf, m, e) = (
                rows(&old, r.clone(), w),
                rows(&refp, r.clone(), w),
                rows(&mask, r.clone(), w),
                rows(&ent, r.clone(), w),
            );
            let a = Tensor::new(&adv[r.clone()], &dev).unwrap();
            let x = LossInputs {
                logp: lp.as_tensor(),
                old_logp: &o,
                ref_logp: Some(&rf),
                adv: &a,
                mask: &m,
                entropy: Some(&e),
                segments: None,
                whole,
                behaviour_weight: None,
            };
            let (loss, st) = policy_loss(c, &x).unwrap();
            let g = loss.backward().unwrap().get(lp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
            let mut full = vec![vec![0f32; t]; b];
            for (k, i) in r.enumerate() {
                full[i][..w].copy_from_slice(&g[k]);
            }
            (st, full)
        };
    let whole = Whole { tokens: lens.iter().sum::<usize>() as f64, actions: 5.0, padded_len: t };
    for kind in [PolicyLossKind::Token, PolicyLossKind::Sequence] {
        for agg in [
            LossAgg::TokenMean,
            LossAgg::SeqMeanTokenMean,
            LossAgg::SeqMeanTokenSum,
            LossAgg::SeqMeanTokenSumNorm,
        ] {
            let c = LossConfig { agg, dual_clip: Some(3.0), ..cfg(kind, 0.04, 0.01) };
            let (all, g_all) = run(&c, 0..5, None);
            let (p0, g0) = run(&c, 0..2, Some(whole));
            let (p1, g1) = run(&c, 2..5, Some(whole));
            let sum = |f: fn(&LossStats) -> f64| f(&p0) + f(&p1);
            for (name, f) in [
                ("loss", (|s: &LossStats| s.loss) as fn(&LossStats) -> f64),
                ("policy_loss", |s| s.policy_loss),
                ("kl", |s| s.kl),
                ("entropy", |s| s.entropy),
                ("clip_frac", |s| s.clip_frac),
                ("dual_clip_frac", |s| s.dual_clip_frac),
                ("ratio_mean", |s| s.ratio_mean),
                ("approx_kl_old", |s| s.approx_kl_old),
            ] {
                assert!(
                    close(sum(f), f(&all)),
                    "{kind:?} {agg:?} {name}: {} + {} vs {}",
                    f(&p0),
                    f(&p1),
                    f(&all)
                );
            }
            assert_eq!(p0.tokens + p1.tokens, all.tokens);
            for i in 0..b {
                for j in 0..t {
                    let g = g0[i][j] + g1[i][j];
                    assert!(
                        close(g as f64, g_all[i][j] as f64),
                        "{kind:?} {agg:?} ∂L/∂logπ[{i}][{j}]: {g} vs {}",
                        g_all[i][j]
                    );
                }
            }
        }
    }
}
