//! The small building blocks shared by the network's parts (encoder, decoder, pointer
//! head, input parts): the init scale, the mask value, learned tables and the linear layer.

use crate::nn::custom_ops as fused;
use candle_core::{Module, Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// Standard deviation of every weight at init (GPT-2 style).
pub(crate) const INIT_STD: f64 = 0.02;
/// Additive mask value for blocked attention keys and disallowed tokens: finite, so that
/// `0 · mask` and `p · log p` stay 0 rather than NaN.
pub const NEG: f32 = -1e9;

/// A learned table of `n` vectors of width `d` (embeddings and positions).
pub(crate) fn table(vb: &VarBuilder, name: &str, n: usize, d: usize) -> Result<Tensor> {
    vb.get_with_hints((n, d), name, Init::Randn { mean: 0.0, stdev: INIT_STD })
}

/// A linear layer over the last dimension: `x Wᵀ + b` (bias added by [`fused::bias_add`]).
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

/// A linear layer with a N(0, `std`) weight [d_out, d_in] and a zero bias.
pub(crate) fn linear(vb: VarBuilder, d_in: usize, d_out: usize, bias: bool, std: f64) -> Result<Linear> {
    let weight = vb.get_with_hints((d_out, d_in), "weight", Init::Randn { mean: 0.0, stdev: std })?;
    let bias = if bias { Some(vb.get_with_hints(d_out, "bias", Init::Const(0.0))?) } else { None };
    Ok(Linear { weight, bias })
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // One 2-D matmul over all rows (a batched matmul is much slower on CPU).
        let dims = x.dims();
        let (rows, d_in) = (dims[..dims.len() - 1].iter().product::<usize>(), dims[dims.len() - 1]);
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("non-scalar input") = self.weight.dim(0)?;
        let y = x.reshape((rows, d_in))?.matmul(&self.weight.t()?)?;
        let y = match &self.bias {
            Some(b) => fused::bias_add(&y, b)?,
            None => y,
        };
        y.reshape(out_dims)
    }
}
