//! Matrix products that candle's `matmul` would do in more passes, on the CPU in f32.
//!
//! A LoRA layer adds a rank-`r` product to the base layer's output: composed, that is a
//! `[N, out]` tensor written (after a zero fill), scaled in a second pass and added in a
//! third. Here the product is accumulated into the output by the `gemm` crate in one pass
//! ([`add_product`]). The skinny products (`x Aᵀ`, `g B`: `r` = 8–64 columns) run on one
//! thread ([`skinny`]): split over threads they were slower than on one.
//! Elsewhere (CUDA, bf16, views the kernels do not take) the callers compose candle's ops.

use candle_core::{CpuStorage, DType, Device, InplaceOp3, Layout, Result, Tensor};

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
        // SAFETY: the strides and sizes are the tensors' own (checked rank 2, shapes
        // checked by add_product), so every index gemm forms is inside the slices
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                d.as_mut_ptr(),
                dcs,
                drs,
                true,
                a.as_ptr(),
                acs,
                ars,
                b.as_ptr(),
                bcs,
                brs,
                1.0,
                self.beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
        Ok(())
    }
}

/// `lhs · rhs` for a product with few rows or columns (a LoRA rank's), on one thread.
/// candle's matmul elsewhere.
pub fn skinny(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    if !(cpu_f32(lhs) && cpu_f32(rhs)) || lhs.rank() != 2 || rhs.rank() != 2 {
        return lhs.matmul(rhs);
    }
    let (m, k) = lhs.dims2()?;
    let n = rhs.dim(1)?;
    let out = Tensor::zeros((m, n), DType::F32, &Device::Cpu)?;
    if rhs.dim(0)? != k || !add_product(&out, lhs, rhs, 1.0)? {
        return lhs.matmul(rhs);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_product_and_skinny_match_matmul_for_transposed_operands() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (37, 50), &dev).unwrap();
        let a = Tensor::randn(0f32, 1.0, (8, 50), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, (29, 8), &dev).unwrap();
        let h = skinny(&x, &a.t().unwrap()).unwrap();
        let want_h = x.matmul(&a.t().unwrap()).unwrap();
        let close = |p: &Tensor, q: &Tensor| {
            let d = (p - q).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            d.to_scalar::<f32>().unwrap()
        };
        assert!(close(&h, &want_h) < 1e-5);
        let y = Tensor::randn(0f32, 1.0, (37, 29), &dev).unwrap();
        let want = (&y + (h.matmul(&b.t().unwrap()).unwrap() * 0.5).unwrap()).unwrap();
        let y = y.copy().unwrap();
        assert!(add_product(&y, &h, &b.t().unwrap(), 0.5).unwrap());
        assert!(close(&y, &want) < 1e-5, "{}", close(&y, &want));
        // what it does not take, it says so (the caller composes)
        let y3 = Tensor::zeros((1, 37, 29), DType::F32, &dev).unwrap();
        assert!(!add_product(&y3, &h, &b.t().unwrap(), 1.0).unwrap());
        let wrong = Tensor::zeros((36, 29), DType::F32, &dev).unwrap();
        assert!(!add_product(&wrong, &h, &b.t().unwrap(), 1.0).unwrap());
    }
}
