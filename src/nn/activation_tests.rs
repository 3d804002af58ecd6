use super::*;
use candle_core::{Device, Var};

/// Largest difference from `reference`, relative to the value, with an absolute floor
/// for values near zero (where a few ulps of a large input are a large relative error).
fn max_rel(a: &[f32], reference: &[f32], floor: f32) -> f32 {
    assert_eq!(a.len(), reference.len());
    a.iter().zip(reference).map(|(x, y)| (x - y).abs() / y.abs().max(floor)).fold(0.0, f32::max)
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn f64(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F64).unwrap()
}

/// More than one rayon chunk with a ragged tail, spread over where the activations bend,
/// with a few extremes.
fn input() -> Tensor {
    let n = CHUNK * 2 + 37;
    let mut v = normal(1, 6.0, n).to_vec1::<f32>().unwrap();
    v[..6].copy_from_slice(&[-200.0, -90.0, 0.0, 1e-8, 90.0, 200.0]);
    Tensor::from_vec(v, n, &Device::Cpu).unwrap()
}

/// Normal values with standard deviation `std` and this shape, drawn from `seed`: fixed
/// inputs, so a tolerance that holds holds on every run.
fn normal(seed: u64, std: f32, shape: impl Into<candle_core::Shape>) -> Tensor {
    use rand::{Rng, SeedableRng};
    let shape = shape.into();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let v: Vec<f32> = (0..shape.elem_count())
        .map(|_| {
            // Box–Muller
            let (u1, u2): (f32, f32) = (rng.gen_range(f32::EPSILON..1.0), rng.gen());
            std * (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

#[test]
fn exp_is_within_two_ulp_of_libm_over_the_f32_range() {
    let mut worst = 0f32;
    let mut x = -87.0f32;
    while x < 88.0 {
        let (got, want) = (kernels::exp(x), x.exp());
        worst = worst.max((got - want).abs() / want);
        x += 0.000_37;
    }
    assert!(worst < 2.5e-7, "relative error {worst}");
    assert_eq!(kernels::exp(0.0), 1.0);
    assert!(kernels::exp(-1000.0) >= 0.0 && kernels::exp(-1000.0) < 1e-37);
    assert!(kernels::exp(1000.0).is_finite(), "clamped, not infinite");
}

#[test]
fn silu_and_gelu_match_candles_ops_computed_in_f64() {
    let x = normal(2, 4.0, (3, 1000, 11));
    let want = values(&f64(&x).silu().unwrap());
    assert!(max_rel(&values(&silu(&x).unwrap()), &want, 1e-3) < 1e-6);
    let want = values(&f64(&x).gelu().unwrap());
    assert!(max_rel(&values(&gelu_tanh(&x).unwrap()), &want, 1e-3) < 3e-6);
    // candle's own f32 `gelu` is further off (1 + tanh u cancels for negative inputs)
    assert!(max_rel(&values(&x.gelu().unwrap()), &want, 1e-3) > 1e-5);
    // a strided view gives the same as its contiguous copy
    let t = x.transpose(1, 2).unwrap();
    assert_eq!(values(&gelu_tanh(&t).unwrap()), values(&gelu_tanh(&t.contiguous().unwrap()).unwrap()));
}

#[test]
fn swiglu_forward_and_gradients_match_the_composed_ops_in_f64() {
    let (n, m) = (61, 700); // 42 700 elements: two rayon chunks and a tail
    let a = Var::from_tensor(&(normal(3, 3.0, (n, m)))).unwrap();
    let b = Var::from_tensor(&normal(4, 1.0, (n, m))).unwrap();
    let c = normal(5, 1.0, (n, m));
    let (a64, b64) = (Var::from_tensor(&f64(&a)).unwrap(), Var::from_tensor(&f64(&b)).unwrap());
    let composed = (a64.silu().unwrap() * b64.as_tensor()).unwrap();
    let fused = swiglu(&a, &b).unwrap();
    assert!(max_rel(&values(&fused), &values(&composed), 1e-3) < 1e-6);
    let gc = (composed * f64(&c)).unwrap().sum_all().unwrap().backward().unwrap();
    let gf = (fused * &c).unwrap().sum_all().unwrap().backward().unwrap();
    for (v, v64) in [(&a, &a64), (&b, &b64)] {
        // ∂gate's factor 1 + gate (1 − σ) crosses zero: an absolute floor near there
        let (x, y) = (values(gf.get(v).unwrap()), values(gc.get(v64).unwrap()));
        assert!(max_rel(&x, &y, 0.05) < 3e-6, "{}", max_rel(&x, &y, 0.05));
    }
    // the composed fallback (what CUDA and bf16 run) gives the same gradients
    let (dg, du) = swiglu_grads(&f64(&a), &f64(&b), &f64(&c)).unwrap();
    assert!(max_rel(&values(&dg), &values(gf.get(&a).unwrap()), 0.05) < 3e-6);
    assert!(max_rel(&values(&du), &values(gf.get(&b).unwrap()), 0.05) < 3e-6);
}
#[test]
fn swiglu_with_only_one_input_trained_gives_only_that_gradient() {
    let a = Var::from_tensor(&normal(6, 1.0, (4, 9))).unwrap();
    let b = normal(7, 1.0, (4, 9));
    let g = swiglu(&a, &b).unwrap().sum_all().unwrap().backward().unwrap();
    assert!(g.get(&a).is_some());
    assert!(g.get(&b).is_none());
}

#[test]
fn extremes_stay_finite() {
    let x = input();
    for y in [silu(&x).unwrap(), gelu_tanh(&x).unwrap(), swiglu(&x, &x).unwrap()] {
        assert!(values(&y).iter().all(|v| v.is_finite()));
    }
}

/// `softmax(x · scale + mask)` composed from candle's ops in f64.
fn softmax_f64(x: &Tensor, scale: f64, mask: Option<&Tensor>) -> Tensor {
    let mut y = (f64(x) * scale).unwrap();
    if let Some(m) = mask {
        y = y.broadcast_add(&f64(m)).unwrap();
    }
    candle_nn::ops::softmax_last_dim(&y).unwrap()
}

#[test]
fn scaled_softmax_matches_f64_with_and_without_a_causal_mask() {
    let dev = Device::Cpu;
    // [B, H, T, S] with T < S (cached keys) and rows longer than the kernel's lanes
    let (t, s) = (7, 45);
    let x = normal(8, 3.0, (2, 3, t, s));
    let mask = crate::policy::qwen_vl::model::nn::causal_mask(t, s, DType::F32, &dev).unwrap();
    for m in [None, Some(&mask)] {
        let got = values(&scaled_softmax(&x, 0.125, m).unwrap());
        let want = values(&softmax_f64(&x, 0.125, m));
        assert!(max_rel(&got, &want, 1e-6) < 1e-6, "{}", max_rel(&got, &want, 1e-6));
    }
    // masked keys get exactly zero; each row sums to one
    let rows = scaled_softmax(&x, 0.125, Some(&mask)).unwrap().reshape((2 * 3 * t, s)).unwrap();
    for (r, row) in rows.to_vec2::<f32>().unwrap().iter().enumerate() {
        let seen = s - t + r % t; // the last key query r may see
        assert!(row[seen + 1..].iter().all(|&v| v == 0.0), "row {r}: {row:?}");
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
    // grouped query heads: the mask's rows repeat down the score rows
    let grouped = normal(9, 3.0, (2, 1, 3 * t, s));
    let got = values(&scaled_softmax(&grouped, 0.125, Some(&mask)).unwrap());
    let want = values(&softmax_f64(&grouped, 0.125, Some(&mask.repeat((3, 1)).unwrap())));
    assert!(max_rel(&got, &want, 1e-6) < 1e-6);
    // a mask of the wrong shape is an error, not a silent broadcast
    let wrong = Tensor::zeros((t, s + 1), DType::F32, &dev).unwrap();
    assert!(scaled_softmax(&x, 1.0, Some(&wrong)).is_err());
}

#[test]
fn softmax_grad_matches_f64() {
    let x = normal(10, 2.0, (3, 5, 70));
    let p = scaled_softmax(&x, 1.0, None).unwrap();
    let dp = normal(11, 1.0, (3, 5, 70));
    let got = values(&softmax_grad(&p, &dp, 0.3).unwrap());
    let (pf, dpf) = (f64(&p), f64(&dp));
    let dot = (&dpf * &pf).unwrap().sum_keepdim(candle_core::D::Minus1).unwrap();
    let want = ((pf * dpf.broadcast_sub(&dot).unwrap()).unwrap() * 0.3).unwrap();
    assert!(max_rel(&got, &values(&want), 1e-3) < 1e-5, "{}", max_rel(&got, &values(&want), 1e-3));
}
