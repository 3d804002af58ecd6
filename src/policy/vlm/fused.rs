//! Fused CPU kernels, with a one-pass backward, for the three ops that dominate a CPU
//! training step: the attention softmax, LayerNorm and GELU.
//!
//! Candle's composed versions (`ops::softmax`, `ops::layer_norm_slow`, `Tensor::gelu`) are
//! differentiable but their backward runs 5–12 full-size tensor ops each; measured on 2
//! cores, the composed softmax backward over [32, 4, 151, 151] took ~200 ms against ~25 ms
//! forward. Each op here is a `CustomOp1` whose `bwd` is one row-wise pass
//! (a `CustomOp2` of the saved input/output and the incoming gradient). Off the CPU, or
//! for other dtypes, the wrappers fall back to the composed ops, which work on any device.
//! `tests` check values and gradients against the composed ops.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, D};

/// The contiguous f32 data of a storage.
fn data<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("fused op: input must be contiguous");
    };
    match s {
        CpuStorage::F32(v) => Ok(&v[a..b]),
        _ => candle_core::bail!("fused op: f32 only"),
    }
}

/// Fill `out` row by row (`row` values each), splitting whole rows over candle's thread
/// count (`RAYON_NUM_THREADS`); `f(first_row, chunk)` fills a chunk of rows.
fn par_rows(out: &mut [f32], row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let rows = out.len() / row.max(1);
    let threads = candle_core::utils::get_num_threads().min(rows / 32).max(1);
    if threads == 1 {
        f(0, out);
        return;
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let mut chunks = out.chunks_mut(per * row).enumerate();
        let first = chunks.next();
        for (i, c) in chunks {
            let f = &f;
            s.spawn(move || f(i * per, c));
        }
        if let Some((_, c)) = first {
            f(0, c);
        }
    });
}

fn use_fused(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// Softmax over the last dimension of `scores` [B, H, Nq, N] + `mask`, where `mask`
/// (constant, no gradient) is [B, 1, 1, N] (key padding) or [Nq, N] (causal).
pub fn masked_softmax(scores: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let (b, _, nq, n) = scores.dims4()?;
    if !use_fused(scores) {
        return candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1);
    }
    let (mask_b, mask_q) = match *mask.dims() {
        [mb, 1, 1, mn] if (mb == b || mb == 1) && mn == n => (mb, 1),
        [mq, mn] if mq == nq && mn == n => (1, nq),
        _ => candle_core::bail!(
            "masked_softmax: mask {:?} does not fit scores {:?}",
            mask.dims(),
            scores.dims()
        ),
    };
    let mask = mask.flatten_all()?.to_vec1::<f32>()?;
    scores.contiguous()?.apply_op1(MaskedSoftmax { mask, mask_b, mask_q })
}

/// LayerNorm over the last dimension with gain `w` and bias `b`.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
    if use_fused(x) {
        x.contiguous()?.apply_op1(Normalize { eps })?.broadcast_mul(w)?.broadcast_add(b)
    } else {
        candle_nn::ops::layer_norm_slow(x, w, b, eps as f32)
    }
}

/// GELU, tanh approximation (as `Tensor::gelu`).
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    if use_fused(x) {
        x.contiguous()?.apply_op1(Gelu)
    } else {
        x.gelu()
    }
}

/// Runs a CPU kernel `f(a, b, out)` over two same-shaped contiguous tensors.
fn binary(a: &Tensor, b: &Tensor, op: impl CustomOp2) -> Result<Tensor> {
    a.contiguous()?.apply_op2_no_bwd(&b.contiguous()?, &op)
}

/// Softmax of `scores + mask` over the last dimension, one pass. `mask` is constant.
struct MaskedSoftmax {
    /// Mask as [Bm, Qm, N] with Bm ∈ {1, B} and Qm ∈ {1, Nq}, contiguous.
    mask: Vec<f32>,
    mask_b: usize,
    mask_q: usize,
}

impl CustomOp1 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "vlm-masked-softmax"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = data(s, l)?;
        let (_, h, nq, n) = l.shape().dims4()?;
        let (mb, mq) = (self.mask_b, self.mask_q);
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, yr) in o.chunks_mut(n).enumerate() {
                let r = r0 + i;
                let (bi, qi) = (r / (h * nq), r % nq);
                let m0 = ((if mb == 1 { 0 } else { bi }) * mq + if mq == 1 { 0 } else { qi }) * n;
                let (xr, mr) = (&x[r * n..(r + 1) * n], &self.mask[m0..m0 + n]);
                let mut max = f32::NEG_INFINITY;
                for ((y, &v), &m) in yr.iter_mut().zip(xr).zip(mr) {
                    *y = v + m;
                    max = max.max(*y);
                }
                let mut sum = 0f32;
                for y in yr.iter_mut() {
                    *y = (*y - max).exp();
                    sum += *y;
                }
                let inv = 1.0 / sum;
                yr.iter_mut().for_each(|y| *y *= inv);
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, _x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(binary(y, g, SoftmaxGrad)?))
    }
}

/// dx = y ⊙ (g − Σ g ⊙ y), row-wise.
struct SoftmaxGrad;

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "vlm-softmax-grad"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (y, g) = (data(s1, l1)?, data(s2, l2)?);
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; y.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, dr) in o.chunks_mut(n).enumerate() {
                let at = (r0 + i) * n;
                let (yr, gr) = (&y[at..at + n], &g[at..at + n]);
                let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
                for ((d, &yv), &gv) in dr.iter_mut().zip(yr).zip(gr) {
                    *d = yv * (gv - dot);
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// (x − mean) / sqrt(var + eps), row-wise (LayerNorm without gain and bias).
struct Normalize {
    eps: f64,
}

/// Mean and 1/sqrt(var + eps) of a row.
fn moments(xr: &[f32], eps: f64) -> (f32, f32) {
    let n = xr.len() as f32;
    let mean = xr.iter().sum::<f32>() / n;
    let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps as f32).sqrt())
}

impl CustomOp1 for Normalize {
    fn name(&self) -> &'static str {
        "vlm-normalize"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = data(s, l)?;
        let n = l.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, yr) in o.chunks_mut(n).enumerate() {
                let xr = &x[(r0 + i) * n..(r0 + i + 1) * n];
                let (mean, rstd) = moments(xr, self.eps);
                for (y, &v) in yr.iter_mut().zip(xr) {
                    *y = (v - mean) * rstd;
                }
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, x: &Tensor, _y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(binary(x, g, NormalizeGrad { eps: self.eps })?))
    }
}

/// dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)), row-wise, from x and g.
struct NormalizeGrad {
    eps: f64,
}

impl CustomOp2 for NormalizeGrad {
    fn name(&self) -> &'static str {
        "vlm-normalize-grad"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, g) = (data(s1, l1)?, data(s2, l2)?);
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, dr) in o.chunks_mut(n).enumerate() {
                let at = (r0 + i) * n;
                let (xr, gr) = (&x[at..at + n], &g[at..at + n]);
                let (mean, rstd) = moments(xr, self.eps);
                let (mut gm, mut gxm) = (0f32, 0f32);
                for (&xv, &gv) in xr.iter().zip(gr) {
                    gm += gv;
                    gxm += gv * (xv - mean) * rstd;
                }
                let (gm, gxm) = (gm / n as f32, gxm / n as f32);
                for ((d, &xv), &gv) in dr.iter_mut().zip(xr).zip(gr) {
                    *d = rstd * (gv - gm - (xv - mean) * rstd * gxm);
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

/// tanh through one `exp` (libm's `tanhf` is several times slower than `expf`).
fn fast_tanh(u: f32) -> f32 {
    1.0 - 2.0 / ((2.0 * u).exp() + 1.0)
}

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "vlm-gelu"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = data(s, l)?;
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, 1, |r0, o| {
            for (y, &v) in o.iter_mut().zip(&x[r0..]) {
                *y = 0.5 * v * (1.0 + fast_tanh(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v)));
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, x: &Tensor, _y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(binary(x, g, GeluGrad)?))
    }
}

/// dx = g · d/dx gelu(x).
struct GeluGrad;

impl CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "vlm-gelu-grad"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, g) = (data(s1, l1)?, data(s2, l2)?);
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, 1, |r0, o| {
            for ((d, &v), &gv) in o.iter_mut().zip(&x[r0..]).zip(&g[r0..]) {
                let t = fast_tanh(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v));
                let dt = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
                *d = gv * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dt);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Value and input gradient of `Σ f(x) ⊙ r` (a fixed random projection).
    fn value_and_grad(x: &Var, r: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> (Tensor, Tensor) {
        let y = f(x.as_tensor()).unwrap();
        let grads = (&y * r).unwrap().sum_all().unwrap().backward().unwrap();
        (y, grads.get(x.as_tensor()).unwrap().clone())
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap()
    }

    fn check(
        name: &str,
        x: &Var,
        fused: impl Fn(&Tensor) -> Result<Tensor>,
        composed: impl Fn(&Tensor) -> Result<Tensor>,
    ) {
        let r = Tensor::randn(0f32, 1.0, fused(x.as_tensor()).unwrap().shape(), &Device::Cpu).unwrap();
        let (yf, gf) = value_and_grad(x, &r, fused);
        let (yc, gc) = value_and_grad(x, &r, composed);
        assert!(max_diff(&yf, &yc) < 1e-5, "{name}: values differ by {}", max_diff(&yf, &yc));
        assert!(max_diff(&gf, &gc) < 2e-5, "{name}: gradients differ by {}", max_diff(&gf, &gc));
    }

    #[test]
    fn layer_norm_and_gelu_match_the_composed_ops() {
        let dev = Device::Cpu;
        // Enough rows to use several threads.
        let x = Var::randn(0f32, 2.0, (3, 70, 24), &dev).unwrap();
        let w = Tensor::randn(1f32, 0.1, 24, &dev).unwrap();
        let b = Tensor::randn(0f32, 0.1, 24, &dev).unwrap();
        check(
            "layer_norm",
            &x,
            |x| layer_norm(x, &w, &b, 1e-5),
            |x| candle_nn::ops::layer_norm_slow(x, &w, &b, 1e-5),
        );
        check(
            "layer_norm of a transpose",
            &x,
            |x| layer_norm(&x.transpose(0, 1)?, &w, &b, 1e-5),
            |x| candle_nn::ops::layer_norm_slow(&x.transpose(0, 1)?, &w, &b, 1e-5),
        );
        check("gelu", &x, gelu, |x| x.gelu());
    }

    #[test]
    fn masked_softmax_matches_the_composed_op() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 2.0, (3, 2, 20, 20), &dev).unwrap();
        let mut keys = vec![0f32; 3 * 20];
        keys[20 + 15..40].fill(NEG_MASK);
        keys[59] = NEG_MASK;
        let key_mask = Tensor::from_vec(keys, (3, 1, 1, 20), &dev).unwrap();
        let shared = key_mask.narrow(0, 1, 1).unwrap().contiguous().unwrap();
        let causal: Vec<f32> = (0..400).map(|i| if i % 20 > i / 20 { NEG_MASK } else { 0.0 }).collect();
        let causal = Tensor::from_vec(causal, (20, 20), &dev).unwrap();
        for (name, mask) in [("key mask", key_mask), ("shared key mask", shared), ("causal mask", causal)] {
            // A transposed (non-contiguous) view of the scores, as attention's may be.
            check(
                name,
                &x,
                |x| masked_softmax(&x.transpose(2, 3)?, &mask),
                |x| candle_nn::ops::softmax(&x.transpose(2, 3)?.broadcast_add(&mask)?, D::Minus1),
            );
        }
    }

    const NEG_MASK: f32 = -1e9;
}
