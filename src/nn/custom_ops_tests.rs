//! Tests of `fused.rs`.

use super::*;
use candle_core::{Device, Var};

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap()
}

/// `fused` and `composed` (functions of the Vars) give the same values and the same
/// gradient of `Σ f ⊙ r` (a fixed random projection) for every Var.
fn check(
    name: &str,
    vars: &[&Var],
    fused: impl Fn() -> Result<Tensor>,
    composed: impl Fn() -> Result<Tensor>,
) {
    let (yf, yc) = (fused().unwrap(), composed().unwrap());
    assert!(max_diff(&yf, &yc) < 1e-5, "{name}: values differ by {}", max_diff(&yf, &yc));
    let r = Tensor::randn(0f32, 1.0, yf.shape(), &Device::Cpu).unwrap();
    let gf = (&yf * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let gc = (&yc * &r).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, v) in vars.iter().enumerate() {
        let (a, b) = (gf.get(v.as_tensor()).unwrap(), gc.get(v.as_tensor()).unwrap());
        // Relative to the gradient's size: gain/bias gradients sum thousands of rows.
        let size: f32 = b.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
        let tol = 2e-5 * (1.0 + size);
        assert!(
            max_diff(a, b) < tol,
            "{name}: gradient of input {i} differs by {} (size {size})",
            max_diff(a, b)
        );
    }
}

#[test]
fn layer_norm_gelu_and_bias_add_match_the_composed_ops() {
    let dev = Device::Cpu;
    // Enough rows to use several threads; transposed views are not contiguous.
    let x = Var::randn(0f32, 2.0, (3, 700, 24), &dev).unwrap();
    let w = Var::randn(1f32, 0.1, 24, &dev).unwrap();
    let b = Var::randn(0f32, 0.1, 24, &dev).unwrap();
    let (xt, wt, bt) = (x.as_tensor(), w.as_tensor(), b.as_tensor());
    check(
        "layer_norm",
        &[&x, &w, &b],
        || layer_norm(xt, wt, bt, 1e-5),
        || candle_nn::ops::layer_norm_slow(xt, wt, bt, 1e-5),
    );
    check(
        "layer_norm of a transpose",
        &[&x, &w, &b],
        || layer_norm(&xt.transpose(0, 1)?, wt, bt, 1e-5),
        || candle_nn::ops::layer_norm_slow(&xt.transpose(0, 1)?, wt, bt, 1e-5),
    );
    check("gelu", &[&x], || gelu(xt), || xt.gelu());
    check(
        "bias_add",
        &[&x, &b],
        || bias_add(&xt.transpose(0, 1)?, bt),
        || xt.transpose(0, 1)?.broadcast_add(bt),
    );
}

#[test]
fn masked_softmax_matches_the_composed_op() {
    let dev = Device::Cpu;
    let x = Var::randn(0f32, 2.0, (3, 4, 40, 40), &dev).unwrap();
    let mut keys = vec![0f32; 3 * 40];
    keys[40 + 25..80].fill(NEG_MASK);
    keys[119] = NEG_MASK;
    let key_mask = Tensor::from_vec(keys, (3, 1, 1, 40), &dev).unwrap();
    let shared = key_mask.narrow(0, 1, 1).unwrap().contiguous().unwrap();
    let causal: Vec<f32> = (0..1600).map(|i| if i % 40 > i / 40 { NEG_MASK } else { 0.0 }).collect();
    let causal = Tensor::from_vec(causal, (40, 40), &dev).unwrap();
    let xt = x.as_tensor();
    for (name, mask) in [("key mask", key_mask), ("shared key mask", shared), ("causal mask", causal)] {
        // A transposed (non-contiguous) view of the scores.
        check(
            name,
            &[&x],
            || masked_softmax(&xt.transpose(2, 3)?, 0.3, &mask),
            || candle_nn::ops::softmax(&(xt.transpose(2, 3)? * 0.3)?.broadcast_add(&mask)?, D::Minus1),
        );
    }
}

const NEG_MASK: f32 = -1e9;
