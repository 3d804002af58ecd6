//! Each row's next token drawn from its logits in one kernel, with its log-probability:
//! what a decoding step otherwise does with a cast, a scale, the banned tokens' sum, a
//! log-softmax, two levels of prefix sums and a gather (about a hundred launches a step on
//! a GPU, docs/gpu.md's profile).
//!
//! A row's logits `x` become `z = x / temperature + banned` (f32); its token is the first
//! whose cumulative probability `exp(z − max)` passes `u` of the row's total (inverse-CDF
//! sampling, `u` a uniform draw in [0, 1)), or with no draws the most probable (the first
//! of equals). A token of probability 0 (a banned one) is never drawn: where rounding
//! carries the draw past the row's last token with mass, that token is taken. The
//! log-probability is `z[token] − max − ln(total)`, log-softmax's value.
//!
//! On the CPU one pass per row in index order, the sums in f64; on CUDA one block per row,
//! each warp summing a contiguous range of the vocabulary (its lanes reading 32 consecutive
//! tokens at a time, so that the loads coalesce), the ranges' prefix sums in a fixed order,
//! and the warp whose range holds the draw walking it 32 tokens at a time. The two agree
//! within rounding (a draw that falls within rounding of a boundary may take the
//! neighbouring token).

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType};
use rayon::prelude::*;

/// How the token is chosen.
#[derive(Debug, Clone, Copy)]
pub enum Pick<'a> {
    /// The most probable token (the first of equals).
    Greedy,
    /// Inverse-CDF sampling with one uniform draw in [0, 1) per row.
    Sample(&'a [f32]),
}

/// The next token of each row of `logits` `[n, V]` (f32, bf16 or f16), at `temperature`,
/// with `banned` `[V]` f32 added (0, or −∞ at tokens never drawn): the tokens `[n]` u32 and
/// `[n, 2]` f32 holding each token (as a float: exact below 2²⁴) and its log-probability.
pub fn draw(logits: &Tensor, banned: &Tensor, temperature: f64, pick: Pick) -> Result<(Tensor, Tensor)> {
    let (n, v) = logits.dims2()?;
    if banned.dims() != [v] || banned.dtype() != DType::F32 {
        candle_core::bail!(
            "decode draw: banned tokens {:?} {:?}, want [{v}] f32",
            banned.dims(),
            banned.dtype()
        );
    }
    if temperature.is_nan() || temperature <= 0.0 {
        candle_core::bail!("decode draw: temperature {temperature}, want > 0");
    }
    let dev = logits.device();
    let (u, greedy) = match pick {
        Pick::Greedy => (Tensor::zeros(n, DType::F32, dev)?, true),
        Pick::Sample(u) if u.len() == n => (Tensor::new(u, dev)?, false),
        Pick::Sample(u) => candle_core::bail!("decode draw: {} draws for {n} rows", u.len()),
    };
    let op = DrawOp { temperature: temperature as f32, greedy };
    let both = logits.contiguous()?.apply_op3_no_bwd(&banned.contiguous()?, &u, &op)?;
    let tokens = both.narrow(1, 0, 1)?.squeeze(1)?.to_dtype(DType::U32)?;
    Ok((tokens, both))
}

/// The op: the temperature and whether the draw is greedy.
pub(super) struct DrawOp {
    pub(super) temperature: f32,
    pub(super) greedy: bool,
}

/// One row: `(token, log-probability)`.
fn draw_row<T: WithDType>(x: &[T], banned: &[f32], temperature: f32, u: Option<f32>) -> (u32, f32) {
    let z = |i: usize| x[i].to_f64() as f32 / temperature + banned[i];
    let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
    for i in 0..x.len() {
        let zi = z(i);
        if zi > max {
            (max, arg) = (zi, i);
        }
    }
    // sums in f64: 151 936 terms added one by one in f32 drift by several tokens' mass
    let total: f64 = (0..x.len()).map(|i| (z(i) - max).exp() as f64).sum();
    let token = match u {
        None => arg,
        Some(u) => {
            let target = u as f64 * total;
            let (mut acc, mut last) = (0f64, arg);
            let mut found = None;
            for i in 0..x.len() {
                let p = (z(i) - max).exp() as f64;
                if p > 0.0 {
                    last = i;
                }
                acc += p;
                if acc > target {
                    found = Some(i);
                    break;
                }
            }
            found.unwrap_or(last)
        }
    };
    (token as u32, z(token) - max - total.ln() as f32)
}

fn cpu<T: WithDType>(x: &[T], v: usize, banned: &[f32], u: &[f32], op: &DrawOp) -> Vec<f32> {
    let mut out = vec![0f32; u.len() * 2];
    out.par_chunks_mut(2).enumerate().for_each(|(r, o)| {
        let pick = if op.greedy { None } else { Some(u[r]) };
        let (t, lp) = draw_row(&x[r * v..(r + 1) * v], banned, op.temperature, pick);
        (o[0], o[1]) = (t as f32, lp);
    });
    out
}

/// The contiguous data of a storage as `T`.
fn slice<'a, T: WithDType>(s: &'a [T], l: &Layout) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("decode draw: inputs must be contiguous"),
    }
}

impl CustomOp3 for DrawOp {
    fn name(&self) -> &'static str {
        "decode-draw"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        banned: &CpuStorage,
        bl: &Layout,
        u: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, v) = xl.shape().dims2()?;
        let (CpuStorage::F32(banned), CpuStorage::F32(u)) = (banned, u) else {
            candle_core::bail!("decode draw: banned tokens and draws in f32")
        };
        let (banned, u) = (slice(banned, bl)?, slice(u, ul)?);
        let out = match x {
            CpuStorage::F32(x) => cpu(slice(x, xl)?, v, banned, u, self),
            CpuStorage::BF16(x) => cpu(slice(x, xl)?, v, banned, u, self),
            CpuStorage::F16(x) => cpu(slice(x, xl)?, v, banned, u, self),
            _ => candle_core::bail!("decode draw: logits in f32, bf16 or f16"),
        };
        Ok((CpuStorage::F32(out), Shape::from((n, 2))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        banned: &candle_core::CudaStorage,
        bl: &Layout,
        u: &candle_core::CudaStorage,
        ul: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::nn::kernel::cuda::run(self, &[(x, xl), (banned, bl), (u, ul)])
    }
}

#[cfg(test)]
#[path = "draw_tests.rs"]
mod tests;
