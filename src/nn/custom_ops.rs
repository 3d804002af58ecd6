//! Fused CPU kernels, each with a one-pass backward, for the ops that dominate a CPU
//! training step: the attention softmax (with its mask and scale), LayerNorm, GELU and
//! the bias add of every linear layer.
//!
//! Candle's composed versions (`ops::softmax`, `ops::layer_norm_slow`, `Tensor::gelu`,
//! `broadcast_add`) are differentiable but slow on CPU: their backward runs 5–12 full-size
//! tensor ops each (the composed softmax backward over [32, 4, 151, 151] took ~200 ms
//! against ~25 ms forward on 2 cores), and the gradient of a broadcast bias or LayerNorm
//! gain is a sum over leading dimensions, which candle's CPU reduce does element by
//! element with a div/mod each. Each op here is a custom op whose `bwd` calls row-wise
//! kernels (custom ops without backward). Off the CPU, or for other dtypes, the wrappers
//! fall back to the composed ops, which work on any device. `tests` check values and
//! gradients against the composed ops.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, D};

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

/// Length of the last dimension.
fn last_dim(l: &Layout) -> usize {
    l.dims().last().copied().unwrap_or(1)
}

/// Fill `out` row by row (`row` values each), splitting whole rows over candle's thread
/// count (`RAYON_NUM_THREADS`); `f(first_row, chunk)` fills a chunk of rows.
fn par_rows(out: &mut [f32], row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let rows = out.len() / row.max(1);
    let threads = candle_core::utils::get_num_threads().min(rows * row / 16384).max(1);
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

thread_local! {
    static ENABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Use the fused kernels (the default) or candle's composed ops, for graphs built on this
/// thread from now on; tests use it to run the GPU code path on the CPU.
pub fn set_enabled_on_this_thread(enabled: bool) {
    ENABLED.with(|e| e.set(enabled));
}

fn use_fused(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32 && ENABLED.with(|e| e.get())
}

/// Softmax over the last dimension of `scale · scores + mask`, for `scores` [B, H, Nq, N]
/// and a constant (no gradient) `mask` [B, 1, 1, N] (key padding) or [Nq, N] (causal).
pub fn masked_softmax(scores: &Tensor, scale: f64, mask: &Tensor) -> Result<Tensor> {
    let (b, _, nq, n) = scores.dims4()?;
    if !use_fused(scores) {
        return candle_nn::ops::softmax(&(scores * scale)?.broadcast_add(mask)?, D::Minus1);
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
    scores.contiguous()?.apply_op1(MaskedSoftmax { mask, mask_b, mask_q, scale: scale as f32 })
}

/// LayerNorm over the last dimension with gain `w` and bias `b` (both `[C]`).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
    if use_fused(x) {
        x.contiguous()?.apply_op3(w, b, LayerNorm { eps: eps as f32 })
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

/// `x + b`, with `b` `[C]` added to every row of `x` `[.., C]`.
pub fn bias_add(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    if use_fused(x) {
        x.contiguous()?.apply_op2(b, BiasAdd)
    } else {
        x.broadcast_add(b)
    }
}

/// Runs a CPU kernel over two contiguous tensors.
fn binary(a: &Tensor, b: &Tensor, op: impl CustomOp2) -> Result<Tensor> {
    a.contiguous()?.apply_op2_no_bwd(&b.contiguous()?, &op)
}

/// Column sums of `g` viewed as [rows, C]: the gradient of a vector broadcast over rows.
fn col_sum(g: &Tensor) -> Result<Tensor> {
    g.contiguous()?.apply_op1_no_bwd(&ColSum)
}

struct ColSum;

impl CustomOp1 for ColSum {
    fn name(&self) -> &'static str {
        "vlm-col-sum"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (g, c) = (data(s, l)?, last_dim(l));
        let mut out = vec![0f32; c];
        for row in g.chunks(c) {
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        }
        Ok((CpuStorage::F32(out), Shape::from(c)))
    }
}

struct BiasAdd;

impl CustomOp2 for BiasAdd {
    fn name(&self) -> &'static str {
        "vlm-bias-add"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, b, c) = (data(s1, l1)?, data(s2, l2)?, last_dim(l1));
        if b.len() != c {
            candle_core::bail!("bias_add: bias of {} for rows of {c}", b.len());
        }
        let mut out = x.to_vec();
        par_rows(&mut out, c, |_, o| {
            for row in o.chunks_mut(c) {
                row.iter_mut().zip(b).for_each(|(y, v)| *y += v);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
    fn bwd(
        &self,
        _x: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(g.clone()), Some(col_sum(g)?)))
    }
}

/// Softmax of `scale · scores + mask` over the last dimension. The mask is constant.
struct MaskedSoftmax {
    /// Mask as [Bm, Qm, N] with Bm ∈ {1, B} and Qm ∈ {1, Nq}, contiguous.
    mask: Vec<f32>,
    mask_b: usize,
    mask_q: usize,
    scale: f32,
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
                    *y = self.scale * v + m;
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
        Ok(Some(binary(y, g, SoftmaxGrad { scale: self.scale })?))
    }
}

/// dx = scale · y ⊙ (g − Σ g ⊙ y), row-wise.
struct SoftmaxGrad {
    scale: f32,
}

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
        let (y, g, n) = (data(s1, l1)?, data(s2, l2)?, last_dim(l1));
        let mut out = vec![0f32; y.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, dr) in o.chunks_mut(n).enumerate() {
                let at = (r0 + i) * n;
                let (yr, gr) = (&y[at..at + n], &g[at..at + n]);
                let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
                for ((d, &yv), &gv) in dr.iter_mut().zip(yr).zip(gr) {
                    *d = self.scale * yv * (gv - dot);
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Mean and 1/sqrt(var + eps) of a row.
fn moments(xr: &[f32], eps: f32) -> (f32, f32) {
    let n = xr.len() as f32;
    let mean = xr.iter().sum::<f32>() / n;
    let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// y = (x − mean) / sqrt(var + eps) ⊙ w + b, row-wise.
struct LayerNorm {
    eps: f32,
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "vlm-layer-norm"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, b, n) = (data(s1, l1)?, data(s2, l2)?, data(s3, l3)?, last_dim(l1));
        if w.len() != n || b.len() != n {
            candle_core::bail!("layer_norm: gain/bias of {}/{} for rows of {n}", w.len(), b.len());
        }
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, yr) in o.chunks_mut(n).enumerate() {
                let xr = &x[(r0 + i) * n..(r0 + i + 1) * n];
                let (mean, rstd) = moments(xr, self.eps);
                for (((y, &v), &wv), &bv) in yr.iter_mut().zip(xr).zip(w).zip(b) {
                    *y = (v - mean) * rstd * wv + bv;
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = g.contiguous()?;
        let dx = x.apply_op3_no_bwd(&g, w, &LayerNormGradX { eps: self.eps })?;
        let dwb = x.apply_op2_no_bwd(&g, &LayerNormGradWB { eps: self.eps })?;
        Ok((Some(dx), Some(dwb.get(0)?), Some(dwb.get(1)?)))
    }
}

/// dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)) with ĝ = g ⊙ w, row-wise.
struct LayerNormGradX {
    eps: f32,
}

impl CustomOp3 for LayerNormGradX {
    fn name(&self) -> &'static str {
        "vlm-layer-norm-grad-x"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, g, w, n) = (data(s1, l1)?, data(s2, l2)?, data(s3, l3)?, last_dim(l1));
        let mut out = vec![0f32; x.len()];
        par_rows(&mut out, n, |r0, o| {
            for (i, dr) in o.chunks_mut(n).enumerate() {
                let at = (r0 + i) * n;
                let (xr, gr) = (&x[at..at + n], &g[at..at + n]);
                let (mean, rstd) = moments(xr, self.eps);
                let (mut gm, mut gxm) = (0f32, 0f32);
                for ((&xv, &gv), &wv) in xr.iter().zip(gr).zip(w) {
                    gm += gv * wv;
                    gxm += gv * wv * (xv - mean) * rstd;
                }
                let (gm, gxm) = (gm / n as f32, gxm / n as f32);
                for (((d, &xv), &gv), &wv) in dr.iter_mut().zip(xr).zip(gr).zip(w) {
                    *d = rstd * (gv * wv - gm - (xv - mean) * rstd * gxm);
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// [Σ_rows g ⊙ x̂, Σ_rows g]: the gain and bias gradients, as a [2, C] tensor.
struct LayerNormGradWB {
    eps: f32,
}

impl CustomOp2 for LayerNormGradWB {
    fn name(&self) -> &'static str {
        "vlm-layer-norm-grad-wb"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, g, n) = (data(s1, l1)?, data(s2, l2)?, last_dim(l1));
        let mut out = vec![0f32; 2 * n];
        let (dw, db) = out.split_at_mut(n);
        for (xr, gr) in x.chunks(n).zip(g.chunks(n)) {
            let (mean, rstd) = moments(xr, self.eps);
            for (((w, b), &xv), &gv) in dw.iter_mut().zip(db.iter_mut()).zip(xr).zip(gr) {
                *w += gv * (xv - mean) * rstd;
                *b += gv;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((2, n))))
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
#[path = "custom_ops_tests.rs"]
mod tests;
