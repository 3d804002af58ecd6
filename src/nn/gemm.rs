//! Matrix products on the CPU in f32, run the way candle's `matmul` does not.
//!
//! - **Split over threads by output columns (or rows).** candle hands a product to the
//!   `gemm` crate with its own thread split, which on two threads gained 1.0–1.5× on the
//!   Qwen-VL shapes (e.g. `[626, 3072] · [3072, 1024]`: 155 → 225 GFLOP/s, PyTorch 276; the
//!   vision MLP's down projection 136 → 209). Here each thread runs `gemm` alone on its
//!   own block of output columns ([`product`], [`add_product`]); on one thread it is the
//!   same call as candle's.
//! - **Low-rank terms accumulated in place.** A LoRA layer adds a rank-`r` product to the
//!   base layer's output: composed, that is a `[N, out]` tensor written (after a zero fill),
//!   scaled in a second pass and added in a third. [`add_product`] accumulates it into the
//!   output in one pass.
//!
//! Elsewhere (CUDA, bf16, views the kernels do not take) the callers get candle's ops.

use super::few_rows;
use candle_core::{CpuStorage, DType, Device, InplaceOp3, Layout, Result, Storage, Tensor};
use rayon::prelude::*;

/// Whether `t` is a CPU f32 tensor.
fn cpu_f32(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && matches!(t.device(), Device::Cpu)
}

/// The row and column strides of a rank-2 layout.
fn strides(l: &Layout) -> Option<(isize, isize)> {
    match l.stride() {
        [rs, cs] => Some((*rs as isize, *cs as isize)),
        _ => None,
    }
}

/// `dst += beta · lhs · rhs` in place, for `dst` `[m, n]` (a tensor the caller has just
/// made and holds alone), `lhs` `[m, k]`, `rhs` `[k, n]` (any strides). `false` where the
/// tensors are not all CPU f32 rank 2 (the caller composes it then).
pub fn add_product(dst: &Tensor, lhs: &Tensor, rhs: &Tensor, beta: f64) -> Result<bool> {
    if !(cpu_f32(dst) && cpu_f32(lhs) && cpu_f32(rhs))
        || dst.rank() != 2
        || lhs.rank() != 2
        || rhs.rank() != 2
    {
        return Ok(false);
    }
    let (m, n) = dst.dims2()?;
    let (lm, k) = lhs.dims2()?;
    let (rk, rn) = rhs.dims2()?;
    if lm != m || rk != k || rn != n || !dst.is_contiguous() {
        return Ok(false);
    }
    dst.inplace_op3(lhs, rhs, &AddProduct { beta: beta as f32 })?;
    Ok(true)
}

/// The in-place op behind [`add_product`].
struct AddProduct {
    beta: f32,
}

impl InplaceOp3 for AddProduct {
    fn name(&self) -> &'static str {
        "add-product"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        lhs: &CpuStorage,
        ll: &Layout,
        rhs: &CpuStorage,
        rl: &Layout,
    ) -> Result<()> {
        let (CpuStorage::F32(d), CpuStorage::F32(a), CpuStorage::F32(b)) = (dst, lhs, rhs) else {
            candle_core::bail!("add-product: f32 only");
        };
        let (Some((drs, dcs)), Some((ars, acs)), Some((brs, bcs))) = (strides(dl), strides(ll), strides(rl))
        else {
            candle_core::bail!("add-product: rank-2 tensors only");
        };
        let (m, n) = (dl.dims()[0], dl.dims()[1]);
        let k = ll.dims()[1];
        let d = &mut d[dl.start_offset()..];
        let (a, b) = (&a[ll.start_offset()..], &b[rl.start_offset()..]);
        // a few rows by a weight stored in rows (a LoRA B in decoding): the same kernel as
        // `product`'s, so each row's bits do not depend on the row count
        if few_rows_by_weight(m, k, (ars, acs), (brs, bcs)) {
            let p = few_rows::by_columns(a, m, b, n, k);
            for i in 0..m {
                for j in 0..n {
                    d[(i as isize * drs + j as isize * dcs) as usize] += self.beta * p[j * m + i];
                }
            }
            return Ok(());
        }
        let dst = Operand { ptr: d.as_mut_ptr(), rs: drs, cs: dcs };
        let lhs = Operand { ptr: a.as_ptr().cast_mut(), rs: ars, cs: acs };
        let rhs = Operand { ptr: b.as_ptr().cast_mut(), rs: brs, cs: bcs };
        // SAFETY: the strides and sizes are the tensors' own (checked rank 2, shapes
        // checked by add_product), so every index gemm forms is inside the slices
        unsafe { split_gemm((m, n, k), dst, true, lhs, rhs, self.beta) };
        Ok(())
    }
}

/// `lhs · rhs` (rank 2, any strides), split over rayon's threads on the CPU in f32;
/// candle's matmul elsewhere, and wherever an operand is part of the autograd graph: the
/// product computed here is a new tensor outside the graph, so a trainable weight (a tied
/// `lm_head` over trained embeddings) would silently get no gradient through it.
pub fn product(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let graph = lhs.track_op() || rhs.track_op();
    if graph || !(cpu_f32(lhs) && cpu_f32(rhs)) || lhs.rank() != 2 || rhs.rank() != 2 {
        return lhs.matmul(rhs);
    }
    let (m, k) = lhs.dims2()?;
    let n = rhs.dim(1)?;
    if rhs.dim(0)? != k {
        return lhs.matmul(rhs); // candle's shape error
    }
    let (lhs_s, ll) = lhs.storage_and_layout();
    let (rhs_s, rl) = rhs.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(a)), Storage::Cpu(CpuStorage::F32(b))) = (&*lhs_s, &*rhs_s) else {
        candle_core::bail!("product: f32 only");
    };
    let (Some((ars, acs)), Some((brs, bcs))) = (strides(ll), strides(rl)) else {
        candle_core::bail!("product: rank-2 tensors only");
    };
    let (a, b) = (&a[ll.start_offset()..], &b[rl.start_offset()..]);
    // a few contiguous rows by a weight stored in rows (`x Wᵀ`): decoding's products
    if few_rows_by_weight(m, k, (ars, acs), (brs, bcs)) {
        let out = few_rows::by_columns(a, m, b, n, k);
        drop((lhs_s, rhs_s));
        let t = Tensor::from_vec(out, (n, m), &Device::Cpu)?;
        return if m == 1 { t.reshape((1, n)) } else { t.t()?.contiguous() };
    }
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let lhs_o = Operand { ptr: a.as_ptr().cast_mut(), rs: ars, cs: acs };
    let rhs_o = Operand { ptr: b.as_ptr().cast_mut(), rs: brs, cs: bcs };
    // SAFETY: the operands' strides and sizes are their layouts' own; `out` has room for
    // `m × n` and gemm writes every element of it without reading (`read_dst` false),
    // so it is initialised when its length is set
    let columns = few_rows_times_weight(m, rhs_o);
    unsafe {
        // written by columns (`[n, m]` in memory) where that is the fast layout
        let dst = if columns {
            Operand { ptr: out.as_mut_ptr(), rs: 1, cs: m as isize }
        } else {
            Operand { ptr: out.as_mut_ptr(), rs: n as isize, cs: 1 }
        };
        split_gemm((m, n, k), dst, false, lhs_o, rhs_o, 1.0);
        out.set_len(m * n);
    }
    drop((lhs_s, rhs_s));
    if columns {
        return Tensor::from_vec(out, (n, m), &Device::Cpu)?.t()?.contiguous();
    }
    Tensor::from_vec(out, (m, n), &Device::Cpu)
}

/// A matrix in memory: its first element and its row and column strides (in elements).
#[derive(Clone, Copy)]
struct Operand {
    ptr: *mut f32,
    rs: isize,
    cs: isize,
}

// SAFETY: the threads of `split_gemm` write disjoint blocks of `dst` and only read the inputs
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}

/// Whether `[m, k] · rhs` with these strides is [`few_rows`]' case: at most
/// [`few_rows::MAX_ROWS`] contiguous rows by a weight stored in rows, read transposed.
fn few_rows_by_weight(m: usize, k: usize, lhs: (isize, isize), rhs: (isize, isize)) -> bool {
    (1..=few_rows::MAX_ROWS).contains(&m) && lhs == (k as isize, 1) && rhs == (1, k as isize)
}

/// The most rows a product on `device` in `dtype` can have with each row's result the same
/// bits whatever the row count, for decoding's products (contiguous rows by a weight
/// stored in rows, outside the autograd graph): [`few_rows::MAX_ROWS`] for f32 on the CPU,
/// where [`product`] and [`add_product`] run them through [`few_rows`]; 1 elsewhere (the
/// `gemm` crate and cuBLAS choose their blocking, and so the rounding, by the row count).
pub fn invariant_rows(device: &Device, dtype: DType) -> usize {
    if device.is_cpu() && dtype == DType::F32 {
        few_rows::MAX_ROWS
    } else {
        1
    }
}

/// The rows a decoding step of `live` answers runs when answers advance in chunks of `rows`
/// and each must get the same bits whatever shares its chunk: `rows` (the chunk padded with
/// copies), or `live` alone where no count up to `invariant` changes the products' rounding
/// (the step's [`invariant_rows`], or the fused kernels' `nn::decode::rows::invariant_rows`)
/// and a chunk of `rows` fits, so padding would only cost.
pub fn padded_rows(live: usize, rows: usize, invariant: usize) -> usize {
    if rows <= invariant {
        live
    } else {
        rows
    }
}

/// `f` on `x`'s rows padded to `rows` with copies of its first (a decoding step's padding
/// rows, [`padded_rows`]), its first `m` rows kept; on `x` as it is from `rows` rows on.
pub fn on_rows(x: &Tensor, rows: usize, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let m = x.dim(0)?;
    if m == 0 || m >= rows {
        return f(x);
    }
    let first = x.narrow(0, 0, 1)?;
    let copies = first.broadcast_as([&[rows - m][..], &x.dims()[1..]].concat())?.contiguous()?;
    f(&Tensor::cat(&[x, &copies], 0)?)?.narrow(0, 0, m)
}

/// Rows of the left operand up to which a product by a transposed weight runs transposed.
const FEW_ROWS: usize = 256;

/// Whether `[m, k] · rhs` is a few rows times a weight stored in rows and read transposed
/// (`x Wᵀ`: unit row stride), as in decoding. Written into a row-major `[m, n]`, the `gemm`
/// crate takes about 5 ms whatever `m` from 2 to 16 on `[·, 1024] · [1024, 3072]`, and
/// 0.6 ms written by columns and then transposed (a copy of `m × n`, small next to the
/// weight); 255 ms against 53–66 ms for Qwen's LM head (`[·, 1024] · [1024, 151 936]`;
/// 2 threads). The gap narrows with the rows (1.9× at 64, 1.0–1.2× at 512), so more rows
/// keep the row-major layout. One row stays as it is: `gemm` takes it as a matrix-vector
/// product, as fast either way.
fn few_rows_times_weight(m: usize, rhs: Operand) -> bool {
    (2..=FEW_ROWS).contains(&m) && rhs.rs == 1 && rhs.cs != 1
}

impl Operand {
    /// The block that starts at `(row, col)`.
    fn at(self, row: usize, col: usize) -> Operand {
        let off = row as isize * self.rs + col as isize * self.cs;
        // SAFETY (of the callers): `(row, col)` is inside the matrix
        Operand { ptr: self.ptr.wrapping_offset(off), ..self }
    }
}

/// Products smaller than this many multiply-adds run on one thread.
const SPLIT_WORK: usize = 1 << 20;

/// `dst = (read_dst ? dst : 0) + beta · lhs · rhs` for `dst` `[m, n]`, `lhs` `[m, k]`, `rhs`
/// `[k, n]`: one `gemm` call per thread on its block of output columns (of rows where the
/// output is taller than wide), each on one thread.
///
/// # Safety
/// The three operands must address `m × n`, `m × k` and `k × n` valid elements through
/// their strides, and `dst` must not overlap the inputs.
unsafe fn split_gemm(
    (m, n, k): (usize, usize, usize),
    dst: Operand,
    read_dst: bool,
    lhs: Operand,
    rhs: Operand,
    beta: f32,
) {
    let run = |(m, n): (usize, usize), d: Operand, l: Operand, r: Operand| {
        // SAFETY: each block is inside the operands (the caller's promise, and the split
        // below keeps blocks inside `m × n`); blocks of `dst` do not overlap
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                d.ptr,
                d.cs,
                d.rs,
                read_dst,
                l.ptr,
                l.cs,
                l.rs,
                r.ptr,
                r.cs,
                r.rs,
                1.0,
                beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    };
    let threads = rayon::current_num_threads();
    if threads == 1 || m * n * k < SPLIT_WORK || m == 0 || n == 0 {
        run((m, n), dst, lhs, rhs);
        return;
    }
    if n >= m {
        // blocks of whole 16-column panels, so no thread gets a ragged microkernel edge
        let step = n.div_ceil(threads).div_ceil(16) * 16;
        (0..n).step_by(step).collect::<Vec<_>>().into_par_iter().for_each(|c| {
            run((m, step.min(n - c)), dst.at(0, c), lhs, rhs.at(0, c));
        });
    } else {
        let step = m.div_ceil(threads).div_ceil(8) * 8;
        (0..m).step_by(step).collect::<Vec<_>>().into_par_iter().for_each(|r| {
            run((step.min(m - r), n), dst.at(r, 0), lhs.at(r, 0), rhs);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest absolute difference between two tensors of one shape.
    fn max_diff(p: &Tensor, q: &Tensor) -> f32 {
        let d = (p - q).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        d.to_scalar::<f32>().unwrap()
    }

    #[test]
    fn add_product_and_product_match_matmul_for_transposed_operands() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (37, 50), &dev).unwrap();
        let a = Tensor::randn(0f32, 1.0, (8, 50), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, (29, 8), &dev).unwrap();
        let h = product(&x, &a.t().unwrap()).unwrap();
        let want_h = x.matmul(&a.t().unwrap()).unwrap();
        assert!(max_diff(&h, &want_h) < 1e-5);
        let y = Tensor::randn(0f32, 1.0, (37, 29), &dev).unwrap();
        let want = (&y + (h.matmul(&b.t().unwrap()).unwrap() * 0.5).unwrap()).unwrap();
        let y = y.copy().unwrap();
        assert!(add_product(&y, &h, &b.t().unwrap(), 0.5).unwrap());
        assert!(max_diff(&y, &want) < 1e-5, "{}", max_diff(&y, &want));
        // what it does not take, it says so (the caller composes)
        let y3 = Tensor::zeros((1, 37, 29), DType::F32, &dev).unwrap();
        assert!(!add_product(&y3, &h, &b.t().unwrap(), 1.0).unwrap());
        let wrong = Tensor::zeros((36, 29), DType::F32, &dev).unwrap();
        assert!(!add_product(&wrong, &h, &b.t().unwrap(), 1.0).unwrap());
    }

    /// A few rows' low-rank term (a LoRA B in decoding) runs `few_rows`: equal to the
    /// composed sum within rounding, and each row the same bits whatever rows share the
    /// call, so a decoding step of up to eight rows needs no padding on the CPU in f32.
    #[test]
    fn a_few_rows_low_rank_term_rounds_each_row_as_alone() {
        let dev = Device::Cpu;
        let h = Tensor::randn(0f32, 1.0, (8, 16), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, (300, 16), &dev).unwrap();
        let y0 = Tensor::randn(0f32, 1.0, (8, 300), &dev).unwrap();
        let all = y0.copy().unwrap();
        assert!(add_product(&all, &h, &b.t().unwrap(), 0.25).unwrap());
        let want = (&y0 + (h.matmul(&b.t().unwrap()).unwrap() * 0.25).unwrap()).unwrap();
        assert!(max_diff(&all, &want) < 1e-5);
        for m in 1..=8 {
            let part = y0.narrow(0, 0, m).unwrap().copy().unwrap();
            assert!(add_product(&part, &h.narrow(0, 0, m).unwrap(), &b.t().unwrap(), 0.25).unwrap());
            let got = part.to_vec2::<f32>().unwrap();
            assert_eq!(got[..], all.narrow(0, 0, m).unwrap().to_vec2::<f32>().unwrap()[..], "{m} rows");
        }
        let cpu = |rows| padded_rows(2, rows, invariant_rows(&dev, DType::F32));
        assert_eq!((cpu(2), cpu(8), cpu(9)), (2, 2, 9));
        assert_eq!(padded_rows(2, 3, invariant_rows(&dev, DType::BF16)), 3);
    }

    /// Products large enough to be split, wide and tall, on a pool of three threads (blocks
    /// that do not divide the output evenly), equal candle's matmul.
    #[test]
    fn split_products_match_matmul() {
        let dev = Device::Cpu;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            for (m, k, n) in [(70, 300, 333), (333, 300, 70)] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
                let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
                assert!(m * n * k >= SPLIT_WORK);
                let want = x.matmul(&w.t().unwrap()).unwrap();
                let got = product(&x, &w.t().unwrap()).unwrap();
                assert_eq!(got.dims(), &[m, n]);
                assert!(max_diff(&got, &want) < 1e-3, "{m}x{k}x{n}: {}", max_diff(&got, &want));
                // accumulated into an existing output
                let y = Tensor::randn(0f32, 1.0, (m, n), &dev).unwrap();
                let acc = y.copy().unwrap();
                assert!(add_product(&acc, &x, &w.t().unwrap(), -0.5).unwrap());
                let want = (&y - (want * 0.5).unwrap()).unwrap();
                assert!(max_diff(&acc, &want) < 1e-3);
            }
        });
    }

    /// A few rows by a transposed weight (decoding's products) run transposed, on one
    /// thread and split, from views that start inside their storage, and equal matmul.
    #[test]
    fn few_rows_by_a_transposed_weight_equal_matmul() {
        let dev = Device::Cpu;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let w_all = Tensor::randn(0f32, 1.0, (2100, 301), &dev).unwrap();
        let w = w_all.narrow(0, 7, 2000).unwrap().narrow(1, 1, 300).unwrap();
        for m in [1, 2, 8, FEW_ROWS, FEW_ROWS + 1] {
            let x_all = Tensor::randn(0f32, 1.0, (m + 3, 300), &dev).unwrap();
            let x = x_all.narrow(0, 3, m).unwrap();
            // a weight read transposed (unit row stride): the layout the fast path takes
            assert_eq!(w.t().unwrap().stride(), &[1, 301]);
            let want = x.contiguous().unwrap().matmul(&w.contiguous().unwrap().t().unwrap()).unwrap();
            for got in [
                product(&x, &w.t().unwrap()).unwrap(),
                pool.install(|| product(&x, &w.t().unwrap()).unwrap()),
            ] {
                assert_eq!(got.dims(), &[m, 2000]);
                assert!(max_diff(&got, &want) < 1e-3, "{m} rows");
            }
        }
    }

    /// A product with a trainable operand stays in the graph: its gradient arrives.
    #[test]
    fn a_trainable_operand_keeps_its_gradient() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (4, 6), &dev).unwrap();
        let w = candle_core::Var::randn(0f32, 1.0, (5, 6), &dev).unwrap();
        let y = product(&x, &w.as_tensor().t().unwrap()).unwrap();
        let grads = y.sum_all().unwrap().backward().unwrap();
        let g = grads.get(w.as_tensor()).expect("the weight's gradient");
        // ∂Σ(x Wᵀ)/∂W = 1ᵀ x for every row of W
        let want = x.sum_keepdim(0).unwrap().broadcast_as((5, 6)).unwrap();
        assert!(max_diff(g, &want) < 1e-5);
    }
}
