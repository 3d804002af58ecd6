//! The CUDA kernels' own sources run on the host (`nn::kernel::host`: CUDA's threads
//! emulated, with the sanitizers), each launch as the card would get it, against the
//! CPU's ops: what a kernel computes, where it reads and writes, its launch's shape and
//! arguments, and (under ThreadSanitizer) that a block's threads share memory only behind
//! barriers. A card's memory model beyond that, math library and speed stay for the GPU
//! tests.

use super::attention::AttentionOp;
use super::draw::DrawOp;
use super::layer::{AddRmsNorm, SplitHeads, Swiglu, SwigluHalves};
use super::rows::RowsOp;
use crate::nn::kernel::host;
use candle_core::{DType, Device, Tensor};

use super::test_inputs::randn;

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// The largest difference between `got` and `want`, relative to `want`'s largest value.
fn rel_diff(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.dims(), want.dims());
    let (g, w) = (values(got), values(want));
    let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale
}

/// Rows by a weight, f32 and bf16, 1 to 16 rows, with and without a bias, over shapes
/// whose warps take 1, 2 and 4 weight rows (the last group short of its 4), shared by 1 to
/// 8 warps: the CPU's product within rounding, and a row's bits the same alone as among
/// the others.
#[test]
fn few_rows_products_on_the_host_are_the_cpus() {
    let run = |x: &Tensor, w: &Tensor, b: Option<&Tensor>| {
        let got = host::run(&RowsOp, &[x, w].into_iter().chain(b).collect::<Vec<_>>()).unwrap();
        let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let mut want = f(x).matmul(&f(w).t().unwrap()).unwrap();
        if let Some(b) = b {
            want = want.broadcast_add(&f(b)).unwrap();
        }
        let tol = if x.dtype() == DType::F32 { 1e-6 } else { 1e-2 };
        let d = rel_diff(&got, &want);
        assert!(d < tol, "{:?} by {:?} {:?}, bias {}: {d}", x.dims(), w.dims(), x.dtype(), b.is_some());
        got
    };
    // (weight rows, k, dtype, rows): weight rows a warp and warps sharing them 1 and 8,
    // 1 and 1, 1 and 8, 2 and 2, 2 and 2, 4 and 1
    for (n, k, dt, ms) in [
        (37, 64, DType::F32, &[1, 3, 16][..]),
        (70, 200, DType::BF16, &[1, 8]),
        (40, 128, DType::BF16, &[16]),
        (1031, 8, DType::F32, &[3, 11]),
        (1031, 16, DType::BF16, &[8]),
        (4099, 8, DType::BF16, &[5, 13]),
    ] {
        let w = randn(&[n, k], 1).to_dtype(dt).unwrap();
        let b = randn(&[n], 2).to_dtype(dt).unwrap();
        for (i, &m) in ms.iter().enumerate() {
            let x = randn(&[m, k], 3 + m as u64).to_dtype(dt).unwrap();
            let together = run(&x, &w, Some(&b));
            if i == 0 && n < 100 {
                run(&x, &w, None);
            }
            if i + 1 == ms.len() {
                let row = x.narrow(0, m - 1, 1).unwrap();
                let alone = run(&row, &w, Some(&b));
                assert_eq!(bits(&alone), bits(&together.narrow(0, m - 1, 1).unwrap()), "{n} × {k} {dt:?}");
            }
        }
    }
}

/// Attention of one token per row over its own first positions, f32 and bf16: grouped and
/// ungrouped heads, a head of 128 (the 2B model's), rows of length 0, 1, part and all of
/// the window, keys and values that are views of a longer buffer: the CPU's within
/// rounding, and a row's bits the same alone. The last row takes the whole window, so a
/// load past its length reads past the buffer, where the sanitizer sees it.
#[test]
fn decode_attention_on_the_host_is_the_cpus() {
    for (r, h, hkv, w, d, lens) in [
        (3, 4, 2, 16, 8, vec![5u32, 1, 16]),
        (4, 8, 2, 40, 40, vec![0, 39, 7, 40]),
        (2, 4, 2, 20, 128, vec![20, 3]),
    ] {
        for dt in [DType::F32, DType::BF16] {
            let q = randn(&[r, h, d], 1).to_dtype(dt).unwrap();
            // the cache's window is longer than the positions attended to
            let k = randn(&[r, hkv, w + 5, d], 2).to_dtype(dt).unwrap().narrow(2, 0, w).unwrap();
            let v = randn(&[r, hkv, w + 5, d], 3).to_dtype(dt).unwrap().narrow(2, 0, w).unwrap();
            let l = Tensor::new(lens.as_slice(), &Device::Cpu).unwrap();
            let scale = 1.0 / (d as f32).sqrt();
            let op = AttentionOp { lens: l.clone(), w, scale };
            let got = host::run(&op, &[&q, &k, &v]).unwrap();
            let want = super::attention(&q, &k, &v, &l, scale as f64).unwrap();
            let tol = if dt == DType::F32 { 1e-5 } else { 1e-2 };
            let diff = rel_diff(&got, &want);
            assert!(diff < tol, "{r} rows, {h}/{hkv} heads of {d}, {dt:?}: {diff}");
            let one = |t: &Tensor| t.narrow(0, r - 1, 1).unwrap();
            let op = AttentionOp { lens: one(&l), w, scale };
            let alone = host::run(&op, &[&one(&q), &one(&k), &one(&v)]).unwrap();
            assert_eq!(bits(&alone), bits(&one(&got)), "a row alone, {h}/{hkv} heads of {d}, {dt:?}");
        }
    }
}

/// The draw over vocabularies the block's threads split unevenly (Qwen-VL's own among
/// them), some tokens banned, sampled and greedy, f32 and bf16 logits: the CPU's tokens,
/// its log-probs within rounding.
#[test]
fn decode_draw_on_the_host_is_the_cpus() {
    for (n, v) in [(3, 3001), (2, 151_936)] {
        let ban: Vec<f32> = (0..v).map(|i| if i % 7 == 0 { f32::NEG_INFINITY } else { 0.0 }).collect();
        let banned = Tensor::new(ban.as_slice(), &Device::Cpu).unwrap();
        let u = &[0.1f32, 0.55, 0.93][..n];
        for dt in [DType::F32, DType::BF16] {
            let x = (randn(&[n, v], 5) * 4.0).unwrap().to_dtype(dt).unwrap();
            for greedy in [false, true] {
                let pick = if greedy { super::draw::Pick::Greedy } else { super::draw::Pick::Sample(u) };
                let (_, want) = super::draw(&x, &banned, 0.8, pick).unwrap();
                let draws = if greedy {
                    Tensor::zeros(n, DType::F32, &Device::Cpu).unwrap()
                } else {
                    Tensor::new(u, &Device::Cpu).unwrap()
                };
                let got = host::run(&DrawOp { temperature: 0.8, greedy }, &[&x, &banned, &draws]).unwrap();
                let (g, w) = (got.to_vec2::<f32>().unwrap(), want.to_vec2::<f32>().unwrap());
                for (a, b) in g.iter().zip(&w) {
                    assert_eq!(a[0], b[0], "token of {v}, {dt:?}, greedy {greedy}");
                    assert!((a[1] - b[1]).abs() < 1e-4, "log-prob {} against {}, {v} {dt:?}", a[1], b[1]);
                }
            }
        }
    }
}

/// Draws at the ends of [0, 1), with the vocabulary's tail banned, and a row whose mass is
/// one token's: the CPU's tokens and log-probs.
#[test]
fn extreme_draws_on_the_host_are_the_cpus() {
    let v = 5000;
    let tail: Vec<f32> =
        (0..v).map(|i| if i >= 4000 || i % 5 == 0 { f32::NEG_INFINITY } else { 0.0 }).collect();
    let mut one = vec![f32::NEG_INFINITY; v];
    one[2047] = 0.0;
    let x = randn(&[3, v], 9);
    for ban in [tail, one] {
        let banned = Tensor::new(ban.as_slice(), &Device::Cpu).unwrap();
        let u = [0.0f32, 1.0 - f32::EPSILON, 0.999_999_9];
        let (_, want) = super::draw(&x, &banned, 1.0, super::draw::Pick::Sample(&u)).unwrap();
        let draws = Tensor::new(&u, &Device::Cpu).unwrap();
        let got = host::run(&DrawOp { temperature: 1.0, greedy: false }, &[&x, &banned, &draws]).unwrap();
        let (g, w) = (got.to_vec2::<f32>().unwrap(), want.to_vec2::<f32>().unwrap());
        for (r, (a, b)) in g.iter().zip(&w).enumerate() {
            assert_eq!(a[0], b[0], "u = {}: token", u[r]);
            assert!((a[1] - b[1]).abs() < 1e-4, "u = {}: log-prob {} against {}", u[r], a[1], b[1]);
        }
    }
}

/// The layer's fused steps, f32 and bf16, widths not a multiple of a warp and the 2B
/// model's: the residual sum with its norm, SwiGLU (two inputs, and halves of one), and
/// the split into heads with and without a bias and per-head norms, against the CPU's.
#[test]
fn the_layer_steps_on_the_host_are_the_cpus() {
    for dt in [DType::F32, DType::BF16] {
        let tol = if dt == DType::F32 { 1e-5 } else { 1e-2 };
        let t = |dims: &[usize], seed| randn(dims, seed).to_dtype(dt).unwrap();
        for h in [200, 2048] {
            let (x, d, w) = (t(&[3, h], 1), t(&[3, h], 2), t(&[h], 3));
            let got = host::run(&AddRmsNorm { eps: 1e-6 }, &[&x, &d, &w]).unwrap();
            let (sum, norm) = super::layer::add_rms_norm(&x, &d, &w, 1e-6).unwrap();
            let diff = rel_diff(&got, &Tensor::stack(&[sum, norm], 0).unwrap());
            assert!(diff < tol, "add_rms_norm {h} {dt:?}: {diff}");
        }

        let (g, u) = (t(&[3, 300], 4), t(&[3, 300], 5));
        let want = crate::nn::activation::swiglu(&g, &u).unwrap();
        assert!(rel_diff(&host::run(&Swiglu, &[&g, &u]).unwrap(), &want) < tol, "swiglu {dt:?}");
        let gu = Tensor::cat(&[&g, &u], 1).unwrap();
        assert!(rel_diff(&host::run(&SwigluHalves, &[&gu]).unwrap(), &want) < tol, "swiglu_halves {dt:?}");

        // (rows, of rows in the product, query heads, key/value heads, head size): the 2B
        // model's last
        for (b, m, h, hkv, hd) in [(2, 3, 4, 2, 64), (2, 2, 16, 8, 128)] {
            let width = (h + 2 * hkv) * hd;
            let (qkv, cos, sin) = (t(&[m, width], 6), t(&[b, hd / 2], 7), t(&[b, hd / 2], 8));
            let (bias, wq, wk) = (t(&[width], 9), t(&[hd], 10), t(&[hd], 11));
            for (with_bias, with_norms) in [(false, false), (true, false), (false, true), (true, true)] {
                let inputs = super::layer::HeadsIn {
                    heads: (h, hkv, hd),
                    bias: with_bias.then_some(&bias),
                    norms: with_norms.then_some((&wq, &wk, 1e-6)),
                    tables: (&cos, &sin),
                };
                let (q, k, v) = super::layer::split_heads(&qkv, b, inputs).unwrap();
                let flat = |a: &Tensor| a.flatten_all().unwrap();
                let want = Tensor::cat(&[flat(&q), flat(&k), flat(&v)], 0).unwrap();
                let op = SplitHeads {
                    b,
                    h,
                    hkv,
                    d: hd,
                    bias: with_bias.then(|| bias.clone()),
                    norms: with_norms.then(|| (wq.clone(), wk.clone(), 1e-6)),
                };
                let got = host::run(&op, &[&qkv, &cos, &sin]).unwrap();
                let diff = rel_diff(&got, &want);
                assert!(
                    diff < tol,
                    "split_heads {h}/{hkv} of {hd} {dt:?}, bias {with_bias}, norms {with_norms}: {diff}"
                );
            }
        }
    }
}

/// Every kernel under ThreadSanitizer, at shapes where several warps share a block's
/// memory (the products' warp parts, the norms' and the draw's sums, the attention's
/// scores): no two threads touch it without a barrier between, and the output is the
/// bounds-checked run's, bit for bit. So is the output with the blocks run last first: no
/// block reads what another writes, and no two write one output.
#[test]
fn the_kernels_share_a_blocks_memory_behind_barriers() {
    fn same<K: crate::nn::kernel::Kernel>(what: &str, op: &K, args: &[&Tensor]) {
        let raced = host::run_for_races(op, args).unwrap_or_else(|e| panic!("{what}: {e}"));
        let plain = bits(&host::run(op, args).unwrap());
        assert_eq!(bits(&raced), plain, "{what}");
        let reversed = host::run_blocks_reversed(op, args).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(bits(&reversed), plain, "{what}, blocks last first");
    }
    // products: 8 warps sharing a weight row, and 2 sharing groups of 2 rows
    for (n, k, dt, m) in [(37, 64, DType::F32, 3), (1031, 16, DType::BF16, 8)] {
        let (x, w, b) = (randn(&[m, k], 3), randn(&[n, k], 1), randn(&[n], 2));
        let (x, w, b) = (x.to_dtype(dt).unwrap(), w.to_dtype(dt).unwrap(), b.to_dtype(dt).unwrap());
        same(&format!("rows {n} × {k}"), &RowsOp, &[&x, &w, &b]);
    }
    let (q, k, v) = (randn(&[3, 4, 8], 1), randn(&[3, 2, 16, 8], 2), randn(&[3, 2, 16, 8], 3));
    let lens = Tensor::new(&[5u32, 1, 16], &Device::Cpu).unwrap();
    let op = AttentionOp { lens, w: 16, scale: 0.35 };
    same("attention", &op, &[&q, &k, &v]);
    let x = randn(&[2, 3001], 5);
    let banned = Tensor::zeros(3001, DType::F32, &Device::Cpu).unwrap();
    let draws = Tensor::new(&[0.1f32, 0.93], &Device::Cpu).unwrap();
    same("draw", &DrawOp { temperature: 0.8, greedy: false }, &[&x, &banned, &draws]);
    let (x, d, w) = (randn(&[2, 200], 1), randn(&[2, 200], 2), randn(&[200], 3));
    same("add_rms_norm", &AddRmsNorm { eps: 1e-6 }, &[&x, &d, &w]);
    let (qkv, cos, sin) = (randn(&[2, 8 * 64], 6), randn(&[2, 32], 7), randn(&[2, 32], 8));
    let (wq, wk) = (randn(&[64], 10), randn(&[64], 11));
    let op = SplitHeads { b: 2, h: 4, hkv: 2, d: 64, bias: None, norms: Some((wq, wk, 1e-6)) };
    same("split_heads", &op, &[&qkv, &cos, &sin]);
    let (g, u) = (randn(&[2, 300], 4), randn(&[2, 300], 5));
    same("swiglu", &Swiglu, &[&g, &u]);
}
