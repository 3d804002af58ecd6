//! guirl's own kernels (`guirl::nn::decode`, `guirl::nn::dropout`) on the test device against
//! candle's ops or the CPU: the checks `benches/gpu/run.sh` runs on CUDA (section 2).
use crate::common::qwen::*;
use candle_core::{DType, Device, Tensor, D};
use guirl::policy::qwen_vl::DecodeKernels;

/// The fused decoding attention (`guirl::nn::decode::attention`) on the test device, at
/// Qwen3-VL 2B's head shape (16 query heads over 8 key/value heads of 128): each row is the
/// attention over its own first positions that candle's ops compute in f32 on the CPU from
/// the same inputs (within the dtype's rounding), a free row is zeros, and a row's bits do
/// not depend on the other rows. `benches/gpu/run.sh` runs it on CUDA, the kernel's check.
#[test]
fn fused_decode_attention_on_the_test_device_is_each_rows_own_attention() {
    use guirl::nn::decode;
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (r, h, hkv, w, d) = (5usize, 16usize, 8usize, 300usize, 128usize);
    let scale = (d as f64).powf(-0.5);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut randn = |dims: &[usize]| {
        let n = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
        // rounded to the dtype under test first, so both sides read the same values
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap()
    };
    let (q, k, v) = (randn(&[r, h, d]), randn(&[r, hkv, w, d]), randn(&[r, hkv, w, d]));
    let on = |t: &Tensor| t.to_dtype(dt).unwrap().to_device(&dev).unwrap();
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, lens: &[u32]| {
        let lens = Tensor::new(lens, &dev).unwrap();
        let out = decode::attention(&on(q), &on(k), &on(v), &lens, scale).unwrap();
        out.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap()
    };
    let lens = [1u32, 0, 77, 300, 150];
    let got = run(&q, &k, &v, &lens);
    let g = h / hkv;
    for (row, &n) in lens.iter().enumerate() {
        let out = got.get(row).unwrap();
        if n == 0 {
            assert_eq!(out.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0, "a free row");
            continue;
        }
        for head in 0..h {
            let qv = q.get(row).unwrap().narrow(0, head, 1).unwrap(); // [1, D]
            let kk = k.get(row).unwrap().get(head / g).unwrap().narrow(0, 0, n as usize).unwrap();
            let vv = v.get(row).unwrap().get(head / g).unwrap().narrow(0, 0, n as usize).unwrap();
            let s = (qv.matmul(&kk.t().unwrap()).unwrap() * scale).unwrap();
            let p = candle_nn::ops::softmax_last_dim(&s).unwrap();
            let want = p.matmul(&vv).unwrap().squeeze(0).unwrap();
            let diff = (out.get(head).unwrap() - want).unwrap().abs().unwrap().max_all().unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            let bound = if dt == DType::F32 { 1e-5 } else { 8e-3 };
            assert!(diff <= bound, "{dt:?} on {dev:?}: row {row} (length {n}) head {head} differs by {diff}");
        }
    }
    // row 3 beside other rows (other values, other lengths) keeps its bits
    let mix = |t: &Tensor, u: &Tensor| {
        Tensor::cat(
            &[&u.narrow(0, 0, 3).unwrap(), &t.narrow(0, 3, 1).unwrap(), &u.narrow(0, 4, 1).unwrap()],
            0,
        )
        .unwrap()
    };
    let (q2, k2, v2) = (randn(&[r, h, d]), randn(&[r, hkv, w, d]), randn(&[r, hkv, w, d]));
    let other = run(&mix(&q, &q2), &mix(&k, &k2), &mix(&v, &v2), &[300, 12, 0, 300, 1]);
    let bits = |t: &Tensor| t.get(3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(bits(&got), bits(&other), "{dt:?} on {dev:?}: row 3 depends on the other rows");
}

/// The fused draw (`guirl::nn::decode::draw`) on the test device draws what the CPU's draws
/// with the same uniforms (the same token, or its neighbour where the draw falls within
/// rounding of a boundary), with the same log-probability, never a banned token, the
/// greedy token exactly, and tokens at the frequencies of their probabilities. A
/// vocabulary of Qwen-VL's size, logits in the dtype under test. `benches/gpu/run.sh`
/// runs it on CUDA, the kernel's check.
#[test]
fn fused_draw_on_the_test_device_is_the_cpus_draw() {
    use guirl::nn::decode::draw::{draw, Pick};
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (n, v) = (6usize, 151_936usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let x: Vec<f32> = (0..n * v).map(|_| rng.gen_range(-6.0..6.0)).collect();
    let x = Tensor::from_vec(x, (n, v), &Device::Cpu).unwrap().to_dtype(dt).unwrap();
    let banned: Vec<f32> = (0..v).map(|i| if i % 5 == 2 { f32::NEG_INFINITY } else { 0.0 }).collect();
    let banned = Tensor::new(banned, &Device::Cpu).unwrap();
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    let read = |(tok, both): (Tensor, Tensor)| {
        let lp: Vec<f32> =
            both.to_device(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap().iter().map(|r| r[1]).collect();
        (tok.to_device(&Device::Cpu).unwrap().to_vec1::<u32>().unwrap(), lp)
    };
    // the row's probabilities in f64, to say how far apart two tokens are in the CDF
    let z = (x.to_dtype(DType::F32).unwrap() / 1.3).unwrap().broadcast_add(&banned).unwrap();
    let lps = candle_nn::ops::log_softmax(&z, D::Minus1).unwrap().to_vec2::<f32>().unwrap();
    for _ in 0..10 {
        let u: Vec<f32> = (0..n).map(|_| rng.gen()).collect();
        let (want, want_lp) = read(draw(&x, &banned, 1.3, Pick::Sample(&u)).unwrap());
        let (got, got_lp) = read(draw(&on(&x), &on(&banned), 1.3, Pick::Sample(&u)).unwrap());
        for r in 0..n {
            let (a, b) = (got[r] as usize, want[r] as usize);
            assert!(a < v && a % 5 != 2, "{dt:?} on {dev:?}: drew {a}, banned or past the end");
            let between: f64 = lps[r][a.min(b)..a.max(b)].iter().map(|l| (*l as f64).exp()).sum();
            assert!(a == b || between < 1e-4, "{dt:?} on {dev:?}: drew {a}, the CPU {b} (u {})", u[r]);
            assert!((got_lp[r] - lps[r][a]).abs() < 1e-4, "{dt:?} on {dev:?}: log-prob {} of {a}", got_lp[r]);
            if a == b {
                assert!((got_lp[r] - want_lp[r]).abs() < 1e-4);
            }
        }
    }
    let greedy = |t: &Tensor, b: &Tensor| read(draw(t, b, 1.3, Pick::Greedy).unwrap()).0;
    assert_eq!(greedy(&on(&x), &on(&banned)), greedy(&x, &banned), "{dt:?} on {dev:?}: greedy");
    // three tokens with mass 0.2, 0.3 and 0.5, far apart
    let mut y = vec![-1e4f32; v];
    for (t, p) in [(10, 0.2f32), (75_000, 0.3), (v - 1, 0.5)] {
        y[t] = p.ln();
    }
    let y = Tensor::from_vec(y, (1, v), &Device::Cpu).unwrap();
    let free = Tensor::zeros(v, DType::F32, &Device::Cpu).unwrap();
    let mut counts = std::collections::HashMap::new();
    for k in 0..200 {
        let u = [(k as f32 + 0.5) / 200.0];
        *counts.entry(read(draw(&on(&y), &on(&free), 1.0, Pick::Sample(&u)).unwrap()).0[0]).or_insert(0) += 1;
    }
    assert_eq!(
        (counts[&10], counts[&75_000], counts[&(v as u32 - 1)]),
        (40, 60, 100),
        "{dt:?} on {dev:?}: {counts:?}"
    );
}

/// LoRA dropout's keyed masks (`guirl::nn::dropout`) drawn on the test device are the
/// CPU's, bit for bit, over more elements than one launch's grid covers in a pass.
/// `benches/gpu/run.sh` runs it on CUDA, the kernel's check.
#[test]
fn fused_dropout_mask_on_the_test_device_is_the_cpus() {
    use guirl::nn::dropout::keyed_mask;
    let dev = device();
    let shape = candle_core::Shape::from((8, 340, 6_144));
    for (key, id, p) in [(11u64, 3u64, 0.05), (12, 3, 0.3)] {
        let cpu = keyed_mask(key, id, p, &shape, &Device::Cpu).unwrap();
        let got = keyed_mask(key, id, p, &shape, &dev).unwrap().to_device(&Device::Cpu).unwrap();
        let differ = cpu.ne(&got).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
        assert_eq!(
            differ.to_scalar::<f32>().unwrap(),
            0.0,
            "on {dev:?}, p {p}: elements differ from the CPU's"
        );
    }
}

/// The fused layer steps (`guirl::nn::decode::layer`) on the test device, at Qwen3-VL 2B's
/// widths (hidden 2 048, heads of 128, MLP 6 144): the residual sum with its RMSNorm, a
/// head's RMSNorm with its rotation, SwiGLU (of two products or one product's halves) and
/// the split of one q/k/v product into heads each equal the CPU's result in f32 from the
/// same inputs (within the dtype's rounding), and a row's bits do not depend on the other
/// rows. `benches/gpu/run.sh` runs it on CUDA, the kernels' check.
#[test]
fn fused_layer_steps_on_the_test_device_are_candles_ops() {
    use guirl::nn::decode::layer::{add_rms_norm, norm_rope, split_heads, swiglu, swiglu_halves, HeadsIn};
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (m, h, heads, d, inter) = (5usize, 2048usize, 16usize, 128usize, 6144usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut randn = |dims: &[usize]| {
        let n = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap()
    };
    let on = |t: &Tensor| t.to_dtype(dt).unwrap().to_device(&dev).unwrap();
    let back = |t: &Tensor| t.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap();
    let bound = if dt == DType::F32 { 1e-5 } else { 3e-2 };
    let close = |got: &Tensor, want: &Tensor, what: &str| {
        let scale = want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let diff = (back(got) - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff / scale <= bound, "{dt:?} on {dev:?}: {what} differs by {diff} (of {scale})");
    };
    let row_bits =
        |t: &Tensor, r: usize| back(t).get(r).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();

    let (x, delta, w) = (randn(&[m, h]), randn(&[m, h]), randn(&[h]));
    let (sum, normed) = add_rms_norm(&on(&x), &on(&delta), &on(&w), 1e-6).unwrap();
    let want_sum = (&x + &delta).unwrap();
    close(&sum, &want_sum, "the residual sum");
    close(&normed, &candle_nn::ops::rms_norm(&back(&sum), &w, 1e-6).unwrap(), "the sum's RMSNorm");
    let (_, one) =
        add_rms_norm(&on(&x.narrow(0, 3, 1).unwrap()), &on(&delta.narrow(0, 3, 1).unwrap()), &on(&w), 1e-6)
            .unwrap();
    assert_eq!(row_bits(&normed, 3), row_bits(&one, 0), "{dt:?} on {dev:?}: add_rms_norm's row 3 alone");

    let (q, wq, angles) = (randn(&[m, heads, d]), randn(&[d]), randn(&[m, d / 2]));
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    let got = norm_rope(&on(&q), &on(&wq), 1e-6, &on(&cos), &on(&sin)).unwrap();
    let want = candle_nn::rotary_emb::rope(
        &candle_nn::ops::rms_norm(&q, &wq, 1e-6).unwrap().reshape((m, heads, 1, d)).unwrap(),
        &cos.reshape((m, 1, d / 2)).unwrap(),
        &sin.reshape((m, 1, d / 2)).unwrap(),
    )
    .unwrap()
    .reshape((m, heads, d))
    .unwrap();
    close(&got, &want, "the heads' norm and rotation");
    let row = |t: &Tensor| on(&t.narrow(0, 2, 1).unwrap());
    let one = norm_rope(&row(&q), &on(&wq), 1e-6, &row(&cos), &row(&sin)).unwrap();
    assert_eq!(row_bits(&got, 2), row_bits(&one, 0), "{dt:?} on {dev:?}: norm_rope's row 2 alone");

    let (g, u) = (randn(&[m, inter]), randn(&[m, inter]));
    close(&swiglu(&on(&g), &on(&u)).unwrap(), &(g.silu().unwrap() * &u).unwrap(), "SwiGLU");
    let gu = Tensor::cat(&[&g, &u], 1).unwrap();
    close(
        &swiglu_halves(&on(&gu)).unwrap(),
        &(g.silu().unwrap() * &u).unwrap(),
        "SwiGLU of one product's halves",
    );

    // one q/k/v product (16 + 2 × 8 heads of 128) split into heads: against the CPU's split
    // in f32 (its own test checks it against the separate products' path)
    let hkv = heads / 2;
    let (qkv, bias, wk) = (randn(&[m, (heads + 2 * hkv) * d]), randn(&[(heads + 2 * hkv) * d]), randn(&[d]));
    let split = |t: &dyn Fn(&Tensor) -> Tensor, rows: usize| {
        let (qkv, bias, wq, wk, c, s) = (t(&qkv), t(&bias), t(&wq), t(&wk), t(&cos), t(&sin));
        let (c, s) = (c.narrow(0, 0, rows).unwrap(), s.narrow(0, 0, rows).unwrap());
        let inputs = HeadsIn {
            heads: (heads, hkv, d),
            bias: Some(&bias),
            norms: Some((&wq, &wk, 1e-6)),
            tables: (&c, &s),
        };
        split_heads(&qkv, rows, inputs).unwrap()
    };
    let (q, k, v) = split(&|t| on(t), m - 1);
    let (cq, ck, cv) = split(&|t| t.clone(), m - 1);
    close(&q, &cq, "the split's queries");
    close(&k, &ck, "the split's keys");
    close(&v, &cv, "the split's values");
    let (q1, _, _) = split(&|t| on(t), 1);
    assert_eq!(row_bits(&q, 0), row_bits(&q1, 0), "{dt:?} on {dev:?}: split_heads' row 0 alone");
}

/// The fused products of a few rows (`guirl::nn::decode::rows`) on the test device, at
/// Qwen3-VL 2B's widths (q/k/v merged 4 096 × 2 048 with a bias, down 2 048 × 6 144, an
/// odd 37 × 64), 1 to as many rows as the device takes (16 on CUDA, 8 on the CPU): each
/// equals the product and bias the CPU computes in f32 from the same inputs (within the
/// dtype's rounding), and a row's bits are the same alone, among the others and at another
/// place. `benches/gpu/run.sh` runs it on CUDA, the kernel's check.
#[test]
fn fused_rows_product_on_the_test_device_is_the_cpus_product() {
    use guirl::nn::decode::rows::{max_rows, product, takes};
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut randn = |dims: &[usize]| {
        let n = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap()
    };
    let on = |t: &Tensor| t.to_dtype(dt).unwrap().to_device(&dev).unwrap();
    let back = |t: &Tensor| t.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap();
    let bound = if dt == DType::F32 { 1e-5 } else { 1e-2 };
    let row_bits =
        |t: &Tensor, r: usize| back(t).get(r).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let most = max_rows(&dev);
    for (n, k, with_bias) in [(4096usize, 2048usize, true), (2048, 6144, false), (37, 64, true)] {
        let (w, b, x) = (randn(&[n, k]), randn(&[n]), randn(&[most, k]));
        let bias = with_bias.then(|| on(&b));
        let (wd, xd) = (on(&w), on(&x));
        for m in 1..=most {
            let xm = xd.narrow(0, 0, m).unwrap().contiguous().unwrap();
            if !takes(&xm, &wd, bias.as_ref()) {
                // bf16 on a CPU runs candle's product: the kernel is f32 there
                assert!(
                    dev.is_cpu() && dt == DType::BF16,
                    "{dt:?} on {dev:?}: {m} rows by {n} × {k} not taken"
                );
                return;
            }
            let got = product(&xm, &wd, bias.as_ref()).unwrap();
            let mut want = x.narrow(0, 0, m).unwrap().matmul(&w.t().unwrap()).unwrap();
            if with_bias {
                want = want.broadcast_add(&b).unwrap();
            }
            let scale = want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let diff =
                (back(&got) - &want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(
                diff / scale <= bound,
                "{dt:?} on {dev:?}: {m} rows by {n} × {k} differ by {diff} (of {scale})"
            );
            if m == most {
                for r in [0, 3, most - 1] {
                    let alone =
                        product(&xd.narrow(0, r, 1).unwrap().contiguous().unwrap(), &wd, bias.as_ref())
                            .unwrap();
                    assert_eq!(
                        row_bits(&got, r),
                        row_bits(&alone, 0),
                        "{dt:?} on {dev:?}: row {r} of {n} × {k} alone"
                    );
                }
            }
        }
    }
}

/// Decoding steps captured as CUDA graphs (`decode_graph`) give, on the test device, the
/// answers uncaptured steps give, bit for bit: tokens and log-probs of answers that join a
/// decode in flight and leave as they end (a chunk's graph replays with rows freed and
/// taken), with eager and fused kernels. On a CPU the setting is refused, naming the key.
#[test]
fn decoded_with_captured_steps_on_the_test_device_are_the_uncaptured_answers() {
    use guirl::policy::qwen_vl::{DecodeLora, DecodeWindow, QwenVlPolicy};
    use guirl::policy::{Decision, Policy, Sampling, TrainablePolicy};
    let device = device();
    let tmp = tempfile::tempdir().unwrap();
    let base = {
        let mut s = settings_in_test_dtype(tmp.path());
        (s.decode_window, s.decode_lora) = (Some(DecodeWindow::Auto), Some(DecodeLora::Merged));
        (s.max_new_tokens, s.decode_rows) = (10, Some(2));
        s
    };
    if !device.is_cuda() {
        let mut s = base;
        s.decode_graph = true;
        let e = QwenVlPolicy::new(s, &device, 0).err().expect("refused on a CPU").to_string();
        assert!(e.contains("model.decode_graph") && e.contains("CUDA device"), "{e}");
        return;
    }
    let states = [
        crate::common::synthetic_state(0, &[]),
        crate::common::synthetic_state(1, &["click(10, 20)"]),
        crate::common::synthetic_state(0, &[]),
        crate::common::synthetic_state(2, &["click(10, 20)", "key(Enter)"]),
        crate::common::synthetic_state(0, &[]),
    ];
    // the step before which each state joins: two at once, one three steps in, two later
    let joins = [0usize, 0, 3, 9, 14];
    let decode = |kernels: DecodeKernels, graph: bool| -> Vec<Decision> {
        let mut s = base.clone();
        (s.decode_kernels, s.decode_graph) = (Some(kernels), graph);
        let mut p = QwenVlPolicy::new(s, &device, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 5 });
        let mut dec = p.step_decoder(states.len()).expect("Qwen-VL decodes token by token");
        let keys: Vec<u64> = (30..35).collect();
        decode_joining(dec.as_mut(), &states, &keys, &joins, &format!("{kernels:?}, graph {graph}"))
    };
    for kernels in [DecodeKernels::Eager, DecodeKernels::Fused] {
        let (plain, captured) = (decode(kernels, false), decode(kernels, true));
        for (i, (a, b)) in plain.iter().zip(&captured).enumerate() {
            assert_eq!(bits(a), bits(b), "{kernels:?}: state {i} decoded with captured steps differs");
        }
    }
}

/// Answers decoded together on the test device are bit for bit those decoded alone, at the
/// device's default rows for a whole call, with attention per answer: eager and fused
/// kernels, adapters merged and separate. On CUDA eager steps pad to 32 rows, and fused
/// ones run up to 16 live rows as they are, where a product the fused kernel does not
/// take (a separate adapter's) runs padded to 16 rows; on a CPU, in f32, up to 8 rows run
/// as they are.
#[test]
fn decoded_together_on_the_test_device_are_bit_for_bit_those_decoded_alone() {
    use guirl::policy::qwen_vl::{DecodeLora, DecodeWindow, QwenVlPolicy};
    use guirl::policy::{Policy, Sampling, TrainablePolicy};
    let device = device();
    let tmp = tempfile::tempdir().unwrap();
    let states = [
        crate::common::synthetic_state(0, &[]),
        crate::common::synthetic_state(1, &["click(10, 20)"]),
        crate::common::synthetic_state(0, &[]),
        crate::common::synthetic_state(2, &["click(10, 20)", "key(Enter)"]),
        crate::common::synthetic_state(3, &[]),
    ];
    let keys: Vec<u64> = (40..45).collect();
    for kernels in [DecodeKernels::Eager, DecodeKernels::Fused] {
        for lora in [DecodeLora::Merged, DecodeLora::Separate] {
            let mut s = settings_in_test_dtype(tmp.path());
            (s.decode_window, s.decode_lora, s.decode_kernels) =
                (Some(DecodeWindow::Off), Some(lora), Some(kernels));
            s.max_new_tokens = 8;
            let mut p = QwenVlPolicy::new(s, &device, 0).unwrap();
            perturb_b(&p);
            p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 9 });
            let together: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
            assert!(together.iter().all(|(t, _)| !t.is_empty()), "{kernels:?} {lora:?}: an empty answer");
            for i in [0, 3, 4] {
                let alone = p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap();
                assert_eq!(bits(&alone[0]), together[i], "{kernels:?} {lora:?}: state {i} alone differs");
            }
        }
    }
}

/// The tiny Qwen3-VL policy's settings (`policy_settings`) in the test dtype.
fn settings_in_test_dtype(dir: &std::path::Path) -> guirl::policy::qwen_vl::QwenPolicySettings {
    let mut s = policy_settings("qwen3_vl", dir);
    s.dtype = if dtype() == DType::BF16 { "bf16" } else { "f32" }.into();
    s
}
