//! Where a decoder layer's training time goes: each of its parts timed alone at the model's
//! real shapes, forward and backward, on the model's device (the GPU speed bench's
//! breakdown, `benches/qwen_speed/parts.rs`, mode `profile`). The parts' sum set against the whole
//! layer shows what the glue between them (reshapes, transposes, residual adds, and
//! candle's zero-filled gradient sums) costs.

use super::{activation, apply_rope, attention, causal_mask, TextModel};
use anyhow::Result;
use candle_core::{DType, Module, Tensor, Var};
use std::time::Instant;

/// One part's times, medians over the repetitions, in seconds for one call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartTime {
    /// The part (`q_proj`, `attention`, `layer`, ...).
    pub part: String,
    /// Calls per decoder layer.
    pub per_layer: usize,
    /// Forward, until the device is done.
    pub forward_s: f64,
    /// Backward, until the device is done (the loss's own backward subtracted).
    pub backward_s: f64,
    /// Backward, until `backward()` returned: the host's share (kernels issued).
    pub backward_issued_s: f64,
    /// Graph nodes the backward walks (the loss's included).
    pub nodes: usize,
}

impl TextModel {
    /// Time decoder layer `layer`'s parts and the whole layer on `batch` sequences of `tokens`
    /// tokens with random inputs, `reps` repetitions after one warm-up. Adapters as
    /// attached (a LoRA model: the LoRA linears). `sync` waits for the device.
    pub fn profile_layer(
        &self,
        layer: usize,
        batch: usize,
        tokens: usize,
        reps: usize,
        sync: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<PartTime>> {
        let l = &self.layers[layer];
        let d = self.dims();
        let (h, dev, dt) = (self.cfg.hidden_size, self.embed.device().clone(), self.dtype);
        let var = |dims: &[usize]| -> Result<Var> {
            Ok(Var::from_tensor(&Tensor::randn(0f32, 1.0, dims, &dev)?.to_dtype(dt)?)?)
        };
        let (b, t, hd) = (batch, tokens, d.head_dim);
        let inter = self.cfg.intermediate_size;
        let mask = causal_mask(t, t, dt, &dev)?;
        let table = || -> Result<Tensor> { Ok(Tensor::randn(0f32, 0.5, (b, 1, t, hd), &dev)?.to_dtype(dt)?) };
        let (cos, sin) = (table()?, table()?);
        let time =
            |part: &str, per_layer: usize, inputs: &[&[usize]], f: &dyn Fn(&[Var]) -> Result<Tensor>| {
                time_part(
                    part,
                    per_layer,
                    reps,
                    sync,
                    &inputs.iter().map(|s| var(s)).collect::<Result<Vec<_>>>()?,
                    f,
                )
            };
        let bth = [b, t, h];
        let mut out = vec![
            time("loss alone (subtracted from the rest)", 0, &[&bth], &|v| Ok(v[0].as_tensor().clone()))?,
            time("rms_norm (input, post)", 2, &[&bth], &|v| Ok(l.input_norm.forward(v[0].as_tensor())?))?,
            time("q_proj", 1, &[&bth], &|v| lin(&l.q, v))?,
            time("k_proj", 1, &[&bth], &|v| lin(&l.k, v))?,
            time("v_proj", 1, &[&bth], &|v| lin(&l.v, v))?,
            time("o_proj", 1, &[&[b, t, d.heads * hd]], &|v| lin(&l.o, v))?,
            time("gate_proj", 1, &[&bth], &|v| lin(&l.gate, v))?,
            time("up_proj", 1, &[&bth], &|v| lin(&l.up, v))?,
            time("down_proj", 1, &[&[b, t, inter]], &|v| lin(&l.down, v))?,
            time("swiglu", 1, &[&[b, t, inter], &[b, t, inter]], &|v| {
                Ok(activation::swiglu(v[0].as_tensor(), v[1].as_tensor())?)
            })?,
            time("rope (q, k)", 2, &[&[b, d.heads, t, hd]], &|v| {
                Ok(apply_rope(v[0].as_tensor(), &cos, &sin)?)
            })?,
            time(
                "attention",
                1,
                &[&[b, d.heads, t, hd], &[b, d.kv_heads, t, hd], &[b, d.kv_heads, t, hd]],
                &|v| {
                    let scale = (hd as f64).powf(-0.5);
                    Ok(attention(v[0].as_tensor(), v[1].as_tensor(), v[2].as_tensor(), Some(&mask), scale)?)
                },
            )?,
        ];
        if let Some(qn) = &l.q_norm {
            out.push(time("q/k rms_norm (per head)", 2, &[&[b, t, d.heads, hd]], &|v| {
                Ok(qn.forward(v[0].as_tensor())?)
            })?);
        }
        out.push(time("whole layer", 1, &[&bth], &|v| {
            super::layer_forward(d, l, v[0].as_tensor(), &cos, &sin, Some(&mask), super::Past::None)
        })?);
        let loss = (out[0].forward_s, out[0].backward_s, out[0].backward_issued_s);
        for p in out.iter_mut().skip(1) {
            p.forward_s -= loss.0;
            p.backward_s -= loss.1;
            p.backward_issued_s -= loss.2;
        }
        Ok(out)
    }
}

fn lin(l: &super::Linear, v: &[Var]) -> Result<Tensor> {
    Ok(l.forward(v[0].as_tensor())?)
}

/// Times `f` over fresh inputs: forward, then the backward of `Σ f(v) ⊙ r` (a fixed random
/// `r`, so the gradient is not uniform).
fn time_part(
    part: &str,
    per_layer: usize,
    reps: usize,
    sync: &dyn Fn() -> Result<()>,
    inputs: &[Var],
    f: &dyn Fn(&[Var]) -> Result<Tensor>,
) -> Result<PartTime> {
    let (mut fw, mut bw, mut bi) = (Vec::new(), Vec::new(), Vec::new());
    let mut nodes = 0;
    let mut r: Option<Tensor> = None;
    for rep in 0..reps + 1 {
        sync()?;
        let t0 = Instant::now();
        let y = f(inputs)?;
        sync()?;
        let fwd = t0.elapsed().as_secs_f64();
        let r = match &r {
            Some(r) => r.clone(),
            None => r.insert(Tensor::randn(0f32, 1.0, y.shape(), y.device())?.to_dtype(y.dtype())?).clone(),
        };
        let loss = (y * r)?.to_dtype(DType::F32)?.sum_all()?;
        nodes = loss.sorted_nodes().len();
        sync()?;
        let t0 = Instant::now();
        let grads = loss.backward()?;
        let issued = t0.elapsed().as_secs_f64();
        sync()?;
        let bwd = t0.elapsed().as_secs_f64();
        drop(grads);
        if rep > 0 {
            fw.push(fwd);
            bw.push(bwd);
            bi.push(issued);
        }
    }
    Ok(PartTime {
        part: part.into(),
        per_layer,
        forward_s: median(fw),
        backward_s: median(bw),
        backward_issued_s: median(bi),
        nodes,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
