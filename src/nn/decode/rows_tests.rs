use super::*;
use candle_core::{Device, Var};

use crate::nn::decode::test_inputs::randn;

fn f32s(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// `x Wᵀ + b` in f64 from the inputs' values: the definition.
fn reference(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Vec<f64> {
    let (m, k) = x.dims2().unwrap();
    let n = w.dim(0).unwrap();
    let (xv, wv) = (f32s(x), f32s(w));
    let bv = b.map(f32s);
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|e| xv[i * k + e] as f64 * wv[j * k + e] as f64).sum();
            out[i * n + j] = dot + bv.as_ref().map_or(0.0, |b| b[j] as f64);
        }
    }
    out
}

/// One to eight rows, with and without a bias, a `k` that is no multiple of the kernels'
/// lanes: the product is the definition within f32 rounding, and on the CPU the same bits
/// as the unfused product with the bias added after it.
#[test]
fn a_few_rows_by_a_weight_are_the_product_plus_the_bias() {
    let (n, k) = (37, 100);
    let (w, b) = (randn(&[n, k], 1), randn(&[n], 2));
    for m in 1..=max_rows(&Device::Cpu) {
        let x = randn(&[m, k], 10 + m as u64);
        for bias in [None, Some(&b)] {
            let got = product(&x, &w, bias).unwrap();
            assert_eq!(got.dims(), [m, n]);
            let want = reference(&x, &w, bias);
            let diff = f32s(&got).iter().zip(&want).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max);
            assert!(diff < 1e-4, "{m} rows, bias {}: off by {diff}", bias.is_some());
            let mut unfused = crate::nn::gemm::product(&x, &w.t().unwrap()).unwrap();
            if let Some(b) = bias {
                unfused = unfused.broadcast_add(b).unwrap();
            }
            assert_eq!(f32s(&got), f32s(&unfused), "{m} rows: the unfused product's bits");
        }
    }
}

/// A row's result is the same bits alone and among seven others, at either place.
#[test]
fn a_rows_bits_do_not_depend_on_the_other_rows() {
    let (n, k) = (64, 256);
    let (w, b) = (randn(&[n, k], 3), randn(&[n], 4));
    let most = max_rows(&Device::Cpu);
    let x = randn(&[most, k], 5);
    let all = product(&x, &w, Some(&b)).unwrap();
    for r in [0, 5, most - 1] {
        let alone = product(&x.narrow(0, r, 1).unwrap().contiguous().unwrap(), &w, Some(&b)).unwrap();
        assert_eq!(f32s(&alone), f32s(&all.get(r).unwrap()), "row {r}");
    }
}

/// What the op does not take is refused by [`takes`], and [`product`] says what it wants.
#[test]
fn what_the_kernel_cannot_take_falls_back() {
    let (x, w, b) = (randn(&[2, 16], 1), randn(&[8, 16], 2), randn(&[8], 3));
    assert!(takes(&x, &w, Some(&b)));
    let nine = randn(&[max_rows(&Device::Cpu) + 1, 16], 4);
    let var = Var::from_tensor(&w).unwrap();
    let refused = [
        ("too many rows", takes(&nine, &w, None)),
        ("no rows", takes(&randn(&[0, 16], 4), &w, None)),
        ("the weight transposed", takes(&x, &randn(&[16, 8], 5).t().unwrap(), None)),
        ("a weight in the graph", takes(&x, var.as_tensor(), None)),
        (
            "bf16 on the CPU",
            takes(&x.to_dtype(DType::BF16).unwrap(), &w.to_dtype(DType::BF16).unwrap(), None),
        ),
        ("dtypes mixed", takes(&x, &w.to_dtype(DType::BF16).unwrap(), None)),
        ("a misshapen bias", takes(&x, &w, Some(&randn(&[7], 6)))),
        ("k differs", takes(&randn(&[2, 15], 7), &w, None)),
    ];
    for (what, took) in refused {
        assert!(!took, "{what} was taken");
    }
    let err = product(&nine, &w, None).unwrap_err().to_string();
    assert!(err.contains("at most 8 contiguous rows"), "{err}");
}

/// The fused kernels run up to 16 rows unpadded on CUDA in f32 and bf16 alone; elsewhere
/// candle's products decide ([`gemm::invariant_rows`]: 8 for f32 on the CPU).
#[test]
fn steps_run_unpadded_up_to_the_rows_every_product_rounds_alike() {
    assert_eq!(cuda_invariant_rows(true, DType::BF16), Some(MAX_ROWS));
    assert_eq!(cuda_invariant_rows(true, DType::F32), Some(MAX_ROWS));
    assert_eq!(cuda_invariant_rows(true, DType::F16), None);
    assert_eq!(cuda_invariant_rows(false, DType::F32), None);
    assert_eq!(invariant_rows(&Device::Cpu, DType::F32), few_rows::MAX_ROWS);
    assert_eq!(invariant_rows(&Device::Cpu, DType::BF16), 1);
}

/// A product the kernel does not take runs on exactly the padded rows (copies of the first
/// row after the real ones), and the real rows' results come back; from that many rows on,
/// and on the CPU, it runs on the rows as they are.
#[test]
fn a_product_the_kernel_does_not_take_runs_on_padded_rows() {
    let (x, w) = (randn(&[3, 16], 1), randn(&[5, 16], 2));
    let want = x.matmul(&w.t().unwrap()).unwrap();
    let seen = std::cell::Cell::new(0);
    let f = |y: &Tensor| {
        seen.set(y.dim(0)?);
        y.matmul(&w.t()?)
    };
    let got = gemm::on_rows(&x, MAX_ROWS, f).unwrap();
    assert_eq!(seen.get(), MAX_ROWS);
    assert_eq!(f32s(&got), f32s(&want));
    for (rows, m) in [(3, 3), (2, 3)] {
        gemm::on_rows(&x, rows, f).unwrap();
        assert_eq!(seen.get(), m, "{rows} rows");
    }
    fallback(&x, f).unwrap();
    assert_eq!(seen.get(), 3, "on the CPU the rows as they are");
    let pad = |y: &Tensor| {
        let first = y.get(0)?.to_vec1::<f32>()?;
        for r in 3..y.dim(0)? {
            assert_eq!(y.get(r)?.to_vec1::<f32>()?, first, "padding row {r}");
        }
        Ok(y.clone())
    };
    gemm::on_rows(&x, 8, pad).unwrap();
}
