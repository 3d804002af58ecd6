//! The launches of [`super::layer`]'s fused steps on CUDA: `layer.cu`'s entry points, one
//! module for all, each in f32 and bf16.

use super::layer::{AddRmsNorm, SplitHeads, Swiglu, SwigluHalves};
use crate::nn::kernel::{need_contiguous, one_elem, Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result, Shape, Tensor};

const LAYER: &str = include_str!("layer.cu");

/// `name`'s entry for the inputs' dtype (all one, each contiguous), over `grid` blocks of
/// `block` threads.
fn launch(
    name: &str,
    inputs: &[(Elem, &Layout)],
    (grid, block): (usize, u32),
    args: Vec<Arg>,
    (len, shape): (usize, Shape),
) -> Result<Launch> {
    let what = format!("decode {name}");
    let e = one_elem(inputs, &what)?;
    for (_, l) in inputs {
        need_contiguous(l, &format!("{what}: its inputs"))?;
    }
    Ok(Launch {
        module: "guirl_decode_layer".into(),
        defines: String::new(),
        file: LAYER,
        entry: format!("decode_{name}_{}", e.suffix()),
        grid: (grid as u32, 1, 1),
        block,
        shared: 0,
        args,
        out: (e, len, shape),
    })
}

/// The inputs in order, then the output, then `scalars`.
fn in_order(inputs: usize, scalars: impl IntoIterator<Item = Arg>) -> Vec<Arg> {
    (0..inputs).map(Arg::Input).chain([Arg::Out]).chain(scalars).collect()
}

/// Threads for one row of `n` elements: a warp multiple, at most 1 024.
fn threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 1024) as u32
}

/// Blocks of 256 threads for `len` elements (a grid-stride loop past 65 535).
fn blocks(len: usize) -> usize {
    len.div_ceil(256).clamp(1, 65_535)
}

impl Kernel for AddRmsNorm {
    /// One block per row; the inputs `x`, `d` and the norm's weight.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let (m, h) = inputs[0].1.shape().dims2()?;
        let args = in_order(inputs.len(), [Arg::I32(m as i32), Arg::I32(h as i32), Arg::F32(self.eps)]);
        launch("add_rms_norm", inputs, (m, threads(h).min(256)), args, (2 * m * h, Shape::from((2, m, h))))
    }
}

impl Kernel for Swiglu {
    /// Element-wise over blocks of 256 threads; the inputs the gate and the up projection.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let len = inputs[0].1.shape().elem_count();
        let shape = inputs[0].1.shape().clone();
        let args = in_order(inputs.len(), [Arg::I64(len as i64)]);
        launch("swiglu", inputs, (blocks(len), 256), args, (len, shape))
    }
}

impl Kernel for SwigluHalves {
    /// Element-wise over the output, blocks of 256 threads; the input gate and up side by
    /// side.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let (m, two) = inputs[0].1.shape().dims2()?;
        let (inter, len) = (two / 2, m * two / 2);
        let args = in_order(inputs.len(), [Arg::I32(inter as i32), Arg::I64(len as i64)]);
        launch("swiglu_halves", inputs, (blocks(len), 256), args, (len, Shape::from((m, inter))))
    }
}

impl Kernel for SplitHeads {
    /// The bias, then the query and key norms' weights, where the op has them.
    fn held(&self) -> Vec<Tensor> {
        let norms = self.norms.iter().flat_map(|(q, k, _)| [q.clone(), k.clone()]);
        self.bias.iter().cloned().chain(norms).collect()
    }

    /// One block per row and head, a thread per pair of elements; the inputs `x`, the
    /// rotary cosines and sines, then [`Kernel::held`]. Where the op holds no bias or norm,
    /// `x` stands in for its pointer (the kernel never reads it).
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let (b, h, hkv, d) = (self.b, self.h, self.hkv, self.d);
        if d > 2048 {
            candle_core::bail!(
                "decode split_heads on CUDA: heads of {d} elements, at most 2048: set model.decode_kernels = \"eager\""
            );
        }
        let width = (h + 2 * hkv) * d;
        // [`Kernel::held`] follows x, c and s
        let bias = if self.bias.is_some() { 3 } else { 0 };
        let norm = 3 + self.bias.is_some() as usize;
        let (wq, wk) = if self.norms.is_some() { (norm, norm + 1) } else { (0, 0) };
        let (has_bias, has_norm) = (self.bias.is_some() as i32, self.norms.is_some() as i32);
        let eps = self.norms.as_ref().map_or(0.0, |n| n.2);
        // the kernel's order: x, bias, wq, wk, c, s, out, then the scalars
        let mut args = [0, bias, wq, wk, 1, 2].map(Arg::Input).to_vec();
        args.push(Arg::Out);
        args.extend([b, h, hkv, d].map(|x| Arg::I32(x as i32)));
        args.extend([Arg::I32(has_bias), Arg::I32(has_norm), Arg::I64(width as i64), Arg::F32(eps)]);
        launch(
            "split_heads",
            inputs,
            (b * (h + 2 * hkv), threads(d / 2)),
            args,
            (b * width, Shape::from(b * width)),
        )
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    /// `layer.cu` compiles (NVRTC and ptxas need no GPU), and each of its eight entry
    /// points fits a block of 1 024 threads, the most [`super::threads`] gives, with
    /// nothing spilled.
    #[test]
    fn the_layer_kernels_compile() {
        for name in ["add_rms_norm", "swiglu", "swiglu_halves", "split_heads"] {
            for t in ["f32", "bf16"] {
                let entry = format!("decode_{name}_{t}");
                crate::nn::kernel::fit::assert_fits(
                    "guirl_decode_layer",
                    || super::LAYER.into(),
                    &entry,
                    1024,
                    0,
                );
            }
        }
    }
}
