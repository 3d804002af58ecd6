use super::*;

fn randn(dims: &[usize], seed: u64) -> Tensor {
    crate::nn::decode::test_inputs::uniform(dims, seed, 2.0)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn bits(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// Largest difference relative to the reference's largest magnitude.
fn rel_diff(got: &Tensor, want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
    values(got).iter().zip(want).fold(0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

/// RMSNorm of a vector in f64: the definition.
fn rms_norm_ref(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let r = (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v / r * w).collect()
}

#[test]
fn add_rms_norm_is_the_sum_then_its_norm() {
    let (m, h) = (3, 96);
    let (x, d, w) = (randn(&[m, h], 1), randn(&[m, h], 2), randn(&[h], 3));
    for dtype in [DType::F32, DType::BF16] {
        let t = |a: &Tensor| a.to_dtype(dtype).unwrap();
        let (sum, normed) = add_rms_norm(&t(&x), &t(&d), &t(&w), 1e-6).unwrap();
        assert_eq!((sum.dims(), normed.dims(), normed.dtype()), (&[m, h][..], &[m, h][..], dtype));
        // the sum is the dtype's sum, to the bit
        assert_eq!(bits(&sum), bits(&(t(&x) + t(&d)).unwrap()), "{dtype:?}");
        // the norm is of that rounded sum
        let (s, wv) = (values(&sum), values(&t(&w)));
        let want: Vec<f64> = s.chunks(h).flat_map(|row| rms_norm_ref(row, &wv, 1e-6)).collect();
        let tol = if dtype == DType::F32 { 1e-6 } else { 1e-2 };
        assert!(rel_diff(&normed, &want) < tol, "{dtype:?}: {}", rel_diff(&normed, &want));
        // candle's kernel on the sum gives the same within one rounding
        let candle = candle_nn::ops::rms_norm(&sum, &t(&w), 1e-6).unwrap();
        assert!(rel_diff(&normed, &values(&candle)) < tol, "{dtype:?} against candle");
    }
}

#[test]
fn norm_rope_is_the_heads_norm_then_the_rotation() {
    let (r, n, d) = (2, 3, 16);
    let half = d / 2;
    let (x, w) = (randn(&[r, n, d], 4), randn(&[d], 5));
    let angles = randn(&[r, half], 6);
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    for dtype in [DType::F32, DType::BF16] {
        let t = |a: &Tensor| a.to_dtype(dtype).unwrap();
        let got = norm_rope(&t(&x), &t(&w), 1e-6, &t(&cos), &t(&sin)).unwrap();
        assert_eq!((got.dims(), got.dtype()), (&[r, n, d][..], dtype));
        let (xv, wv, cv, sv) = (values(&t(&x)), values(&t(&w)), values(&t(&cos)), values(&t(&sin)));
        let mut want = vec![0f64; r * n * d];
        for i in 0..r * n {
            let y = rms_norm_ref(&xv[i * d..(i + 1) * d], &wv, 1e-6);
            let row = i / n;
            for e in 0..half {
                let (c, s) = (cv[row * half + e], sv[row * half + e]);
                want[i * d + e] = y[e] * c - y[e + half] * s;
                want[i * d + e + half] = y[e + half] * c + y[e] * s;
            }
        }
        let tol = if dtype == DType::F32 { 1e-6 } else { 2e-2 };
        assert!(rel_diff(&got, &want) < tol, "{dtype:?}: {}", rel_diff(&got, &want));
    }
}

/// The ops the fused ones replace, composed as a decoding step runs them: candle's
/// RMSNorm, then its rope, from the same tables.
#[test]
fn norm_rope_agrees_with_candles_norm_and_rope() {
    let (r, n, d) = (3, 4, 32);
    let (x, w) = (randn(&[r, n, d], 7), randn(&[d], 8));
    let angles = randn(&[r, d / 2], 9);
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    let normed = candle_nn::ops::rms_norm(&x, &w, 1e-6).unwrap();
    let want = candle_nn::rotary_emb::rope(
        &normed.reshape((r, n, 1, d)).unwrap(),
        &cos.reshape((r, 1, d / 2)).unwrap(),
        &sin.reshape((r, 1, d / 2)).unwrap(),
    )
    .unwrap();
    let got = norm_rope(&x, &w, 1e-6, &cos, &sin).unwrap();
    assert!(rel_diff(&got, &values(&want)) < 1e-6);
}

#[test]
fn a_rows_bits_do_not_depend_on_the_other_rows() {
    let (h, d) = (64, 16);
    let (x, dl, w) = (randn(&[4, h], 10), randn(&[4, h], 11), randn(&[h], 12));
    let (_, all) = add_rms_norm(&x, &dl, &w, 1e-6).unwrap();
    let (_, one) = add_rms_norm(&x.narrow(0, 2, 1).unwrap(), &dl.narrow(0, 2, 1).unwrap(), &w, 1e-6).unwrap();
    assert_eq!(bits(&all.narrow(0, 2, 1).unwrap()), bits(&one));
    let (q, wq, ang) = (randn(&[4, 2, d], 13), randn(&[d], 14), randn(&[4, d / 2], 15));
    let (c, s) = (ang.cos().unwrap(), ang.sin().unwrap());
    let all = norm_rope(&q, &wq, 1e-6, &c, &s).unwrap();
    let row = |t: &Tensor| t.narrow(0, 1, 1).unwrap();
    let one = norm_rope(&row(&q), &wq, 1e-6, &row(&c), &row(&s)).unwrap();
    assert_eq!(bits(&row(&all)), bits(&one));
}

/// SiLU(g) · u in f64 from the inputs' values: the definition.
fn swiglu_ref(g: &Tensor, u: &Tensor) -> Vec<f64> {
    values(g).iter().zip(values(u)).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect()
}

#[test]
fn swiglu_is_silu_of_the_gate_times_up() {
    let (g, u) = (randn(&[3, 40], 16), randn(&[3, 40], 17));
    assert!(rel_diff(&swiglu(&g, &u).unwrap(), &swiglu_ref(&g, &u)) < 1e-6);
}

#[test]
fn wrong_shapes_are_errors_that_say_what() {
    let e = add_rms_norm(&randn(&[2, 8], 1), &randn(&[2, 9], 2), &randn(&[8], 3), 1e-6).unwrap_err();
    assert!(e.to_string().contains("want two [M, H] and [H]"), "{e}");
    let e = norm_rope(&randn(&[2, 3, 8], 1), &randn(&[8], 2), 1e-6, &randn(&[2, 8], 3), &randn(&[2, 4], 4))
        .unwrap_err();
    assert!(e.to_string().contains("want [R, n, D], [D] and two [R, D/2]"), "{e}");
    let bf = randn(&[2, 8], 5).to_dtype(DType::BF16).unwrap();
    let e = add_rms_norm(&randn(&[2, 8], 1), &bf, &randn(&[8], 3), 1e-6).unwrap_err();
    assert!(e.to_string().contains("want one dtype"), "{e}");
}

/// The split of one q/k/v product: each part as the separate products' path computes it
/// (bias added and rounded, normed per head and rounded, rotated), for the queries and
/// keys, and the values with their bias; with and without bias and norms, f32 and bf16.
#[test]
fn split_heads_is_each_parts_bias_norm_and_rotation() {
    let (m, b, h, hkv, d) = (4, 3, 4, 2, 16);
    let width = (h + 2 * hkv) * d;
    let (qkv, bias, wq, wk) = (randn(&[m, width], 20), randn(&[width], 21), randn(&[d], 22), randn(&[d], 23));
    let angles = randn(&[b, d / 2], 24);
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    for dtype in [DType::F32, DType::BF16] {
        let t = |a: &Tensor| a.to_dtype(dtype).unwrap();
        for (with_bias, with_norms) in [(false, false), (true, false), (false, true), (true, true)] {
            let (bias_t, wq_t, wk_t, cos_t, sin_t) =
                (with_bias.then(|| t(&bias)), t(&wq), t(&wk), t(&cos), t(&sin));
            let inputs = HeadsIn {
                heads: (h, hkv, d),
                bias: bias_t.as_ref(),
                norms: with_norms.then_some((&wq_t, &wk_t, 1e-6)),
                tables: (&cos_t, &sin_t),
            };
            let (q, k, v) = split_heads(&t(&qkv), b, inputs).unwrap();
            assert_eq!((q.dims(), k.dims(), v.dims()), (&[b, h, d][..], &[b, hkv, d][..], &[b, hkv, d][..]));
            // the unfused path: the product's part (+ bias), then norm_rope or candle's rope
            let part = |at: usize, n: usize| {
                let x = t(&qkv).narrow(0, 0, b).unwrap().narrow(1, at * d, n * d).unwrap();
                let x = match with_bias {
                    true => x.broadcast_add(&t(&bias).narrow(0, at * d, n * d).unwrap()).unwrap(),
                    false => x,
                };
                x.reshape((b, n, d)).unwrap()
            };
            let rotated = |x: Tensor, w: &Tensor| match with_norms {
                true => norm_rope(&x, w, 1e-6, &t(&cos), &t(&sin)).unwrap(),
                false => candle_nn::rotary_emb::rope(
                    &x.unsqueeze(2).unwrap().contiguous().unwrap(),
                    &t(&cos).unsqueeze(1).unwrap(),
                    &t(&sin).unsqueeze(1).unwrap(),
                )
                .unwrap()
                .squeeze(2)
                .unwrap(),
            };
            let tol = if dtype == DType::F32 { 1e-6 } else { 2e-2 };
            let what = format!("{dtype:?}, bias {with_bias}, norms {with_norms}");
            assert!(rel_diff(&q, &values(&rotated(part(0, h), &wq_t))) < tol, "queries, {what}");
            assert!(rel_diff(&k, &values(&rotated(part(h, hkv), &wk_t))) < tol, "keys, {what}");
            assert_eq!(bits(&v), bits(&part(h + hkv, hkv)), "values, {what}");
        }
    }
}

#[test]
fn swiglu_halves_is_swiglu_of_the_two_halves() {
    let gu = randn(&[3, 40], 25);
    let want = swiglu_ref(&gu.narrow(1, 0, 20).unwrap(), &gu.narrow(1, 20, 20).unwrap());
    assert!(rel_diff(&swiglu_halves(&gu).unwrap(), &want) < 1e-6);
    let e = swiglu_halves(&randn(&[2, 7], 26)).unwrap_err();
    assert!(e.to_string().contains("want an even count"), "{e}");
}

#[test]
fn split_heads_refuses_shapes_that_do_not_fit() {
    let (cos, sin) = (randn(&[2, 4], 1), randn(&[2, 4], 2));
    let inputs = |bias| HeadsIn { heads: (2, 1, 8), bias, norms: None, tables: (&cos, &sin) };
    // 3 heads' worth of columns where 2 + 2 × 1 heads need 32
    let e = split_heads(&randn(&[2, 24], 3), 2, inputs(None)).unwrap_err();
    assert!(e.to_string().contains("want [M ≥ b, (H + 2 Hkv) · D]"), "{e}");
    // more rows asked than the product has
    let e = split_heads(&randn(&[1, 32], 3), 2, inputs(None)).unwrap_err();
    assert!(e.to_string().contains("2 rows of [1, 32]"), "{e}");
    let bias = randn(&[31], 4);
    let e = split_heads(&randn(&[2, 32], 3), 2, inputs(Some(&bias))).unwrap_err();
    assert!(e.to_string().contains("a bias of"), "{e}");
}
