//! Decoding a chunk of answers with one attention per layer for the whole chunk
//! (`decode_window`): every answer's keys and values sit in its slot of the chunk's
//! `[R, Hkv, W, D]` buffers ([`WindowChunk`]). Eager attention (`decode_kernels`) runs
//! over the whole window with each row's unwritten positions masked: every product and
//! reduction has the same shape whoever shares the chunk (`R` rows, `W` positions), so a
//! row's result depends on its own slot alone, and an answer is the same to the last bit
//! alone or beside others. It is not the same bits as attention over the answer's own
//! length ([`TextModel::decode`]): the softmax and the value product reduce over `W`
//! positions, the masked ones adding zeros. Fused attention
//! ([`crate::nn::decode::attention`]) reads each row's own length alone, in one kernel.

use super::step::Step;
use super::TextModel;
use crate::nn::decode;
use crate::nn::fused::{group_heads, RopeHalves};
use crate::policy::qwen_vl::model::graph::StepGraph;
use crate::policy::qwen_vl::model::slots::{Attend, WindowChunk};
use anyhow::{bail, Result};
use candle_core::{DType, Tensor};

impl TextModel {
    /// Final hidden states `[R, H]` of one new token for each of the chunk's `R` rows (`ids`,
    /// rotary tables `cos`/`sin` `[R, D]`): row `r` is written into its slot at the slot's
    /// length and attends to what the slot holds. Free rows compute too (any token does);
    /// their outputs are to be ignored. The inputs are first written into the chunk's
    /// buffers, and the step reads them there (captured as a CUDA graph with
    /// `decode_graph`); a captured step's output is the chunk's buffer, valid until its next
    /// step.
    pub fn decode_window(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        chunk: &mut WindowChunk,
    ) -> Result<Tensor> {
        let r = chunk.rows();
        if ids.dim(0)? != r || chunk.layers() != self.layers.len() {
            bail!(
                "a decoding chunk of {r} rows and {} layers fed {} tokens for a model of {} layers",
                chunk.layers(),
                ids.dim(0)?,
                self.layers.len()
            );
        }
        chunk.prepare(ids, cos, sin)?;
        let mut graph = std::mem::replace(&mut chunk.graph, StepGraph::Off);
        let y = graph.step(ids.device(), || self.window_body(chunk));
        chunk.graph = graph;
        let y = y?;
        chunk.advance();
        Ok(y)
    }

    /// The step itself, over the inputs the chunk's buffers hold: the embedding of its
    /// tokens, every layer with its keys and values written into the chunk's windows, the
    /// final norm.
    fn window_body(&self, chunk: &WindowChunk) -> Result<Tensor> {
        let r = chunk.rows();
        let inputs = chunk.inputs()?;
        let (h, hd) = (self.cfg.hidden_size, self.cfg.head_dim);
        let x = self.embed(&inputs.tokens.unsqueeze(1)?)?.reshape((r, h))?;
        let rope = RopeHalves::new(
            &inputs.cos.reshape((r, 1, 1, hd))?,
            &inputs.sin.reshape((r, 1, 1, hd))?,
            x.dtype(),
        )?;
        let scale = (hd as f64).powf(-0.5);
        let (mut x, mut y) = self.first_norm(x)?;
        let kernels = chunk.kernels();
        for (i, layer) in self.layers.iter().enumerate() {
            let step = Step { dims: self.dims(), layer, rope: &rope, kernels, next: self.norm_after(i) };
            let (q, k, v) = step.project(&y, r)?;
            let (keys, values) = chunk.write(i, &inputs.at, &k, &v)?;
            let a = match &inputs.attend {
                Attend::Mask(mask) => window_attention(&q, &keys, &values, mask, scale)?,
                Attend::Lens(lens) => {
                    decode::attention(&q.squeeze(2)?, &keys, &values, lens, scale)?.reshape((r, ()))?
                }
            };
            (x, y) = step.finish(&x, &a)?;
        }
        Ok(y)
    }
}

/// Attention of queries `q` `[R, H, 1, D]` over whole windows `k`/`v` `[R, Hkv, W, D]` with
/// an additive `mask` `[R, 1, 1, W]` (f32, 0 or −∞): `[R, H · D]`. The softmax is f32, as
/// transformers' eager attention.
fn window_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    let (r, h, _, d) = q.dims4()?;
    let scores = group_heads(q, k.dim(1)?)?.matmul(&k.t()?)?; // [R, Hkv, H / Hkv, W]
    let scores = (scores.to_dtype(DType::F32)? * scale)?.broadcast_add(mask)?;
    let p = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(v.dtype())?;
    Ok(p.matmul(v)?.reshape((r, h * d))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::qwen_vl::model::nn::attention;
    use candle_core::Device;

    fn randn(dims: &[usize], seed: u64) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = dims.iter().product();
        let data: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        Tensor::from_vec(data, dims, &Device::Cpu).unwrap()
    }

    /// Over the window with the rest masked, each row's attention is the attention over its
    /// own first positions (within rounding), and a row's bits do not depend on the others.
    #[test]
    fn the_masked_window_attends_to_each_rows_own_positions() {
        let (r, h, hkv, w, d) = (3, 4, 2, 16, 8);
        let lens = [5usize, 16, 1];
        let q = randn(&[r, h, 1, d], 1);
        let k = randn(&[r, hkv, w, d], 2);
        let v = randn(&[r, hkv, w, d], 3);
        let mask: Vec<f32> = lens
            .iter()
            .flat_map(|&n| (0..w).map(move |j| if j < n { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask = Tensor::from_vec(mask, (r, 1, 1, w), &Device::Cpu).unwrap();
        let got = window_attention(&q, &k, &v, &mask, 0.3).unwrap();
        for (i, &n) in lens.iter().enumerate() {
            let row = |t: &Tensor| t.narrow(0, i, 1).unwrap();
            let want = attention(
                &row(&q),
                &row(&k).narrow(2, 0, n).unwrap(),
                &row(&v).narrow(2, 0, n).unwrap(),
                None,
                0.3,
            )
            .unwrap()
            .reshape((1, h * d))
            .unwrap();
            let diff =
                (row(&got) - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff < 1e-5, "row {i}: {diff}");
        }
        // row 0 beside other rows (other values, other lengths) keeps its bits
        let with_other_rows = |t: &Tensor, seed| {
            let mut dims = t.dims().to_vec();
            dims[0] = r - 1;
            Tensor::cat(&[&t.narrow(0, 0, 1).unwrap(), &randn(&dims, seed)], 0).unwrap()
        };
        let mask2: Vec<f32> = [5usize, 9, 3]
            .iter()
            .flat_map(|&n| (0..w).map(move |j| if j < n { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask2 = Tensor::from_vec(mask2, (r, 1, 1, w), &Device::Cpu).unwrap();
        let got2 = window_attention(
            &with_other_rows(&q, 7),
            &with_other_rows(&k, 8),
            &with_other_rows(&v, 9),
            &mask2,
            0.3,
        )
        .unwrap();
        let bits = |t: &Tensor| t.narrow(0, 0, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(bits(&got), bits(&got2));
    }
}
