use super::*;
use candle_core::Device;

use crate::nn::decode::test_inputs::randn;

fn lens(l: &[u32]) -> Tensor {
    Tensor::new(l, &Device::Cpu).unwrap()
}

/// The attention of each row over its first `lens[r]` positions, in f64 from the inputs'
/// values: the definition, written independently of the op.
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, lens: &[u32], scale: f64) -> Vec<f64> {
    let f = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
    let (q, k, v) = (f(q), f(k), f(v));
    let (r, h, d) = q.dims3().unwrap();
    let hkv = k.dim(1).unwrap();
    let mut out = vec![0.0; r * h * d];
    for row in 0..r {
        let n = lens[row] as usize;
        for head in 0..h {
            if n == 0 {
                continue;
            }
            let qv = q.get(row).unwrap().get(head).unwrap().to_vec1::<f64>().unwrap();
            let kh = head / (h / hkv);
            let kk = k.get(row).unwrap().get(kh).unwrap().to_vec2::<f64>().unwrap();
            let vv = v.get(row).unwrap().get(kh).unwrap().to_vec2::<f64>().unwrap();
            let s: Vec<f64> =
                (0..n).map(|j| qv.iter().zip(&kk[j]).map(|(a, b)| a * b).sum::<f64>() * scale).collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let tot: f64 = p.iter().sum();
            for e in 0..d {
                out[(row * h + head) * d + e] = (0..n).map(|j| p[j] * vv[j][e]).sum::<f64>() / tot;
            }
        }
    }
    out
}

fn max_diff(got: &Tensor, want: &[f64]) -> f64 {
    let got = got.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
    got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
}

/// Grouped-query shapes (2 and 4 query heads a key/value head, and none grouped), a head
/// size that is not a multiple of the 32 lanes, rows of length 0, 1, part of the window
/// and the whole window: the op is the attention over each row's own positions.
#[test]
fn each_row_attends_over_its_own_first_positions() {
    for (r, h, hkv, w, d, l) in [
        (3, 4, 2, 16, 8, vec![5u32, 16, 1]),
        (4, 8, 2, 40, 40, vec![0, 39, 7, 40]),
        (2, 3, 3, 9, 16, vec![9, 2]),
    ] {
        let (q, k, v) = (randn(&[r, h, d], 1), randn(&[r, hkv, w, d], 2), randn(&[r, hkv, w, d], 3));
        let got = attention(&q, &k, &v, &lens(&l), 0.3).unwrap();
        assert_eq!(got.dims(), [r, h, d]);
        let diff = max_diff(&got, &reference(&q, &k, &v, &l, 0.3));
        assert!(diff < 1e-5, "{r}x{h}/{hkv}x{w}x{d} {l:?}: {diff}");
        // bf16 in, one rounding out: within bf16's resolution of values below 1
        let b = |t: &Tensor| t.to_dtype(DType::BF16).unwrap();
        let got = attention(&b(&q), &b(&k), &b(&v), &lens(&l), 0.3).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let diff = max_diff(&got, &reference(&b(&q), &b(&k), &b(&v), &l, 0.3));
        assert!(diff < 8e-3, "bf16 {r}x{h}/{hkv}x{w}x{d}: {diff}");
    }
}

/// A row of length 0 (a free decoding slot) is zeros, and never reads its buffers: NaNs
/// there do not leak.
#[test]
fn a_free_row_is_zeros_and_positions_past_a_length_are_never_read() {
    let (q, k, v) = (randn(&[2, 4, 8], 1), randn(&[2, 2, 6, 8], 2), randn(&[2, 2, 6, 8], 3));
    let nan = Tensor::full(f32::NAN, (2, 2, 3, 8), &Device::Cpu).unwrap();
    let poison = |t: &Tensor| Tensor::cat(&[&t.narrow(2, 0, 3).unwrap(), &nan], 2).unwrap();
    let got = attention(&q, &poison(&k), &poison(&v), &lens(&[3, 0]), 0.5).unwrap();
    let rows = got.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
    assert!(rows.iter().all(|x| x.is_finite()), "a masked NaN leaked");
    assert!(rows[32..].iter().all(|&x| x == 0.0), "a free row is zeros");
    let want = reference(&q, &k, &v, &[3, 0], 0.5);
    assert!(max_diff(&got, &want) < 1e-5);
}

/// A row's bits do not depend on the other rows: their queries, caches and lengths.
#[test]
fn a_rows_bits_do_not_depend_on_the_other_rows() {
    let (r, h, hkv, w, d) = (4, 4, 2, 24, 16);
    let (q, k, v) = (randn(&[r, h, d], 1), randn(&[r, hkv, w, d], 2), randn(&[r, hkv, w, d], 3));
    let row = |t: &Tensor| t.narrow(0, 1, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let together = attention(&q, &k, &v, &lens(&[3, 17, 24, 0]), 0.25).unwrap();
    let swap = |t: &Tensor, seed| {
        let mut dims = t.dims().to_vec();
        dims[0] = 1;
        Tensor::cat(&[&randn(&dims, seed), &t.narrow(0, 1, 1).unwrap(), &randn(&dims, seed + 1)], 0).unwrap()
    };
    let others = attention(&swap(&q, 10), &swap(&k, 20), &swap(&v, 30), &lens(&[24, 17, 1]), 0.25).unwrap();
    let alone = attention(
        &q.narrow(0, 1, 1).unwrap(),
        &k.narrow(0, 1, 1).unwrap(),
        &v.narrow(0, 1, 1).unwrap(),
        &lens(&[17]),
        0.25,
    )
    .unwrap();
    assert_eq!(row(&together), row(&others));
    assert_eq!(row(&together), alone.flatten_all().unwrap().to_vec1::<f32>().unwrap());
}

/// Views of longer buffers (a cache's first positions, queries out of a transpose) are
/// read through their strides, as the same values made contiguous.
#[test]
fn views_are_read_through_their_strides() {
    let (q, k, v) = (randn(&[2, 3, 4, 8], 1), randn(&[2, 2, 32, 8], 2), randn(&[2, 2, 32, 8], 3));
    // queries [R, H, D] as a view: the third of four tokens' heads
    let qv = q.transpose(1, 2).unwrap().get_on_dim(2, 2).unwrap();
    assert!(!qv.is_contiguous(), "the queries are a strided view");
    let (kv, vv) = (k.narrow(2, 0, 10).unwrap(), v.narrow(2, 0, 10).unwrap());
    let l = lens(&[10, 4]);
    let got = attention(&qv, &kv, &vv, &l, 0.4).unwrap();
    let c = |t: &Tensor| t.contiguous().unwrap();
    let want = attention(&c(&qv), &c(&kv), &c(&vv), &l, 0.4).unwrap();
    assert_eq!(
        got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        want.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
}

#[test]
fn wrong_shapes_and_lengths_are_errors_that_say_what() {
    let (q, k, v) = (randn(&[2, 3, 8], 1), randn(&[2, 2, 6, 8], 2), randn(&[2, 2, 6, 8], 3));
    let err = attention(&q, &k, &v, &lens(&[1, 1]), 1.0).unwrap_err().to_string();
    assert!(err.contains("3 query heads do not group over 2"), "{err}");
    let q = randn(&[2, 4, 8], 1);
    let err = attention(&q, &k, &v, &lens(&[1, 7]), 1.0).unwrap_err().to_string();
    assert!(err.contains("row 1 attends to 7 positions of a cache of 6"), "{err}");
    let err = attention(&q, &k, &v, &lens(&[1]), 1.0).unwrap_err().to_string();
    assert!(err.contains("want [2] u32"), "{err}");
    let err = attention(&q, &k.narrow(3, 0, 4).unwrap(), &v, &lens(&[1, 1]), 1.0).unwrap_err().to_string();
    assert!(err.contains("want [R, H, D]"), "{err}");
}
