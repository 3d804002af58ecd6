//! Each fused op against the composed, differentiable ops it replaces: same output, same
//! gradients (f32, CPU).

use super::*;
use candle_core::{Device, Var};

fn close(a: &Tensor, b: &Tensor, what: &str) {
    let d =
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let m = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(d <= 1e-5 * m.max(1.0), "{what}: max |diff| {d} (scale {m})");
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let dev = Device::Cpu;
    let n: usize = shape.iter().product();
    // a fixed pseudo-random pattern, reproducible without a global RNG
    let v: Vec<f32> =
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0) - 1.0).collect();
    Tensor::from_vec(v, shape, &dev).unwrap()
}

/// Output and the gradients of `vars` for `f` and `reference` under the loss `Σ c ⊙ out`.
fn compare(vars: &[&Var], f: impl Fn() -> Tensor, reference: impl Fn() -> Tensor, what: &str) {
    let (a, b) = (f(), reference());
    close(&a, &b, what);
    let c = randn(a.dims(), 7);
    let ga = (&a * &c).unwrap().sum_all().unwrap().backward().unwrap();
    let gb = (&b * &c).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, v) in vars.iter().enumerate() {
        close(
            ga.get(v).expect("fused gradient"),
            gb.get(v).expect("composed gradient"),
            &format!("{what}: grad {i}"),
        );
    }
}

#[test]
fn rms_norm_matches_the_composed_one_with_and_without_a_trained_weight() {
    let x = Var::from_tensor(&randn(&[2, 4, 8], 2)).unwrap();
    let w = Var::from_tensor(&(randn(&[8], 3) + 1.0).unwrap()).unwrap();
    let composed = |x: &Tensor, w: &Tensor| {
        let ms = x.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        x.broadcast_div(&(ms + 1e-6).unwrap().sqrt().unwrap()).unwrap().broadcast_mul(w).unwrap()
    };
    compare(&[&x, &w], || fused_rms_norm(&x, &w, 1e-6).unwrap(), || composed(&x, &w), "rms-norm, w trained");
    let frozen = w.as_tensor().detach();
    compare(
        &[&x],
        || fused_rms_norm(&x, &frozen, 1e-6).unwrap(),
        || composed(&x, &frozen),
        "rms-norm, w frozen",
    );
}

#[test]
fn rope_matches_the_composed_one_for_text_and_vision_shapes() {
    let composed = |x: &Tensor, c: &Tensor, s: &Tensor| {
        let h = x.dim(D::Minus1).unwrap() / 2;
        let rot = Tensor::cat(
            &[&x.narrow(D::Minus1, h, h).unwrap().neg().unwrap(), &x.narrow(D::Minus1, 0, h).unwrap()],
            D::Minus1,
        )
        .unwrap();
        (x.broadcast_mul(c).unwrap() + rot.broadcast_mul(s).unwrap()).unwrap()
    };
    let table = |rows: usize, d: usize, seed: u64| {
        let half = randn(&[rows, d / 2], seed);
        Tensor::cat(&[&half, &half], D::Minus1).unwrap()
    };
    // text: x [B, H, T, D] (a transposed view, as the decoder passes it), tables [B, 1, T, D]
    let (b, h, t, d) = (2, 3, 5, 8);
    let x = Var::from_tensor(&randn(&[b, t, h, d], 4)).unwrap();
    for tb in [b, 1] {
        let cos = table(tb * t, d, 5).reshape((tb, 1, t, d)).unwrap();
        let sin = table(tb * t, d, 6).reshape((tb, 1, t, d)).unwrap();
        let xt = || x.transpose(1, 2).unwrap();
        compare(
            &[&x],
            || fused_rope(&xt(), &cos, &sin).unwrap().expect("a text shape"),
            || composed(&xt(), &cos, &sin),
            &format!("rope, text, tables for batch {tb}"),
        );
    }
    // vision: x [N, H, D], tables [N, 1, D]
    let x = Var::from_tensor(&randn(&[6, h, d], 8)).unwrap();
    let cos = table(6, d, 9).unsqueeze(1).unwrap();
    let sin = table(6, d, 10).unsqueeze(1).unwrap();
    compare(
        &[&x],
        || fused_rope(&x, &cos, &sin).unwrap().expect("a vision shape"),
        || composed(&x, &cos, &sin),
        "rope, vision",
    );
    assert!(fused_rope(&x.unsqueeze(0).unwrap(), &cos, &sin).unwrap().is_none(), "other shapes are composed");
}

#[test]
fn lora_linear_matches_the_composed_layer_with_and_without_dropout() {
    let x = Var::from_tensor(&randn(&[6, 8], 11)).unwrap();
    let w = randn(&[5, 8], 12);
    let bias = randn(&[5], 13);
    let a = Var::from_tensor(&randn(&[3, 8], 14)).unwrap();
    let b = Var::from_tensor(&randn(&[5, 3], 15)).unwrap();
    let keep = randn(&[6, 8], 16).ge(-0.5).unwrap().to_dtype(DType::F32).unwrap();
    let mask = (keep * 1.5).unwrap();
    for m in [None, Some(mask)] {
        let composed = || {
            let xd = match &m {
                Some(m) => (x.as_tensor() * m).unwrap(),
                None => x.as_tensor().clone(),
            };
            let base = x.matmul(&w.t().unwrap()).unwrap().broadcast_add(&bias).unwrap();
            let delta = (xd.matmul(&a.t().unwrap()).unwrap().matmul(&b.t().unwrap()).unwrap() * 2.0).unwrap();
            (base + delta).unwrap()
        };
        let what = if m.is_some() { "lora-linear, dropout" } else { "lora-linear" };
        compare(
            &[&x, &a, &b],
            || lora_linear(&x, &w, Some(&bias), (&a, &b, 2.0), m.clone()).unwrap(),
            composed,
            what,
        );
    }
    // a frozen snapshot (no Var): no graph node, the same output
    let (fa, fb) = (a.as_tensor().detach(), b.as_tensor().detach());
    let y = lora_linear(&x.as_tensor().detach(), &w, None, (&fa, &fb, 2.0), None).unwrap();
    assert!(!y.track_op());
}

#[test]
fn attention_matches_the_composed_one_with_grouped_heads_and_a_causal_mask() {
    let q = Var::from_tensor(&randn(&[2, 4, 5, 8], 21)).unwrap();
    let k = Var::from_tensor(&randn(&[2, 2, 5, 8], 22)).unwrap();
    let v = Var::from_tensor(&randn(&[2, 2, 5, 8], 23)).unwrap();
    let mask = crate::policy::qwen_vl::model::nn::causal_mask(5, 5, DType::F32, &Device::Cpu).unwrap();
    let composed = || {
        let rep = |t: &Tensor| crate::policy::qwen_vl::model::nn::repeat_kv(t, 4).unwrap();
        let s = (q.matmul(&rep(&k).t().unwrap()).unwrap() * 0.3).unwrap().broadcast_add(&mask).unwrap();
        candle_nn::ops::softmax(&s, D::Minus1).unwrap().matmul(&rep(&v)).unwrap()
    };
    compare(
        &[&q, &k, &v],
        || crate::policy::qwen_vl::model::nn::attention(&q, &k, &v, Some(&mask), 0.3).unwrap(),
        composed,
        "attention",
    );
}
