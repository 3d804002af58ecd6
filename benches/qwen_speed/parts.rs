//! Where an update's time goes: `profile` (one decoder layer's parts alone against the
//! whole layer) and `matmul` (the decoder's linear products alone).

use crate::bench::load;
use crate::inputs::{Env, Inputs};
use crate::stats::median;
use anyhow::{Context, Result};
use candle_core::{DType, Tensor};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// One decoder layer's parts timed alone at the update's shapes (the batch, padded to its
/// longest sequence), forward and backward (`TextModel::profile_layer`), and the whole
/// layer, so the glue between the parts shows as the difference. Prints a table.
pub fn profile(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
    let b = load(model, inputs, base, env)?;
    let tokens = b
        .states
        .iter()
        .zip(&b.answers)
        .map(|(s, a)| b.policy.prompt(s).map(|(ids, _)| ids.len() + a.len()))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .max()
        .unwrap_or(1);
    let text = &b.policy.model().text;
    let layers = text.config().num_hidden_layers;
    let parts = text.profile_layer(0, b.states.len(), tokens, 5, &|| env.sync())?;
    println!(
        "one decoder layer of {layers}, batch {} x {tokens} tokens, ms per call (x calls per layer):",
        b.states.len()
    );
    println!(
        "{:<40} {:>4} {:>9} {:>9} {:>13} {:>6}",
        "part", "x", "forward", "backward", "bwd issued", "nodes"
    );
    for p in &parts {
        println!(
            "{:<40} {:>4} {:>9.3} {:>9.3} {:>13.3} {:>6}",
            p.part,
            p.per_layer,
            p.forward_s * 1e3,
            p.backward_s * 1e3,
            p.backward_issued_s * 1e3,
            p.nodes
        );
    }
    let parts_sum = |f: fn(&guirl::policy::qwen_vl::model::text::profile::PartTime) -> f64| -> f64 {
        parts.iter().filter(|p| p.part != "whole layer").map(|p| f(p) * p.per_layer as f64).sum()
    };
    println!(
        "parts x calls: forward {:.3} ms, backward {:.3} ms; times {layers} layers: backward {:.1} ms",
        parts_sum(|p| p.forward_s) * 1e3,
        parts_sum(|p| p.backward_s) * 1e3,
        parts.last().map(|p| p.backward_s).unwrap_or(0.0) * layers as f64 * 1e3
    );
    std::fs::write(
        out,
        serde_json::to_string_pretty(
            &json!({ "layers": layers, "batch": b.states.len(), "tokens": tokens, "parts": parts }),
        )?,
    )?;
    Ok(())
}

/// The decoder's linear layers in isolation, at one sample's shapes (T tokens from the
/// prepared inputs): forward `x Wᵀ`, the input gradient `g W` (all PyTorch computes for a
/// frozen weight), and the weight gradient `xᵀ g` that candle's backward also computes for
/// every frozen weight, with the zero-initialised accumulation (`or_insert` + `add`) it
/// keeps it in. Seconds for all layers, medians of 3; the script times the same in PyTorch.
pub fn matmul(model: &Path, base: &Path, out: &Path, env: &Env) -> Result<()> {
    let cfg = guirl::policy::qwen_vl::QwenVlConfig::load(model)?.text;
    let prep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("prep").join("prep.json"))?)?;
    let s0 = &prep["samples"][0];
    let t = s0["input_ids"].as_array().context("prep input_ids")?.len()
        + s0["answer"].as_array().context("answer")?.len();
    let n_ans = s0["answer"].as_array().context("answer")?.len();
    let (h, i, q, kv) = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    );
    let shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)];
    let dev = env.device.clone();
    let dt = if env.dtype == "bf16" { DType::BF16 } else { DType::F32 };
    let mut res = serde_json::Map::new();
    let mut run = |name: &str, rows: usize, shapes: &[(usize, usize)], times: usize| -> Result<()> {
        let mut tw = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..3 {
            let mut acc = [0f64; 4];
            for &(inp, o) in shapes {
                let x = Tensor::randn(0f32, 1.0, (rows, inp), &dev)?.to_dtype(dt)?;
                let w = Tensor::randn(0f32, 0.02, (o, inp), &dev)?.to_dtype(dt)?;
                let g = Tensor::randn(0f32, 1.0, (rows, o), &dev)?.to_dtype(dt)?;
                env.sync()?;
                let tm = Instant::now();
                let y = x.matmul(&w.t()?)?;
                env.sync()?;
                acc[0] += tm.elapsed().as_secs_f64();
                let tm = Instant::now();
                let dx = g.matmul(&w.t()?.t()?)?;
                env.sync()?;
                acc[1] += tm.elapsed().as_secs_f64();
                let tm = Instant::now();
                let dw = x.t()?.matmul(&g)?;
                env.sync()?;
                acc[2] += tm.elapsed().as_secs_f64();
                let tm = Instant::now();
                let sum = w.t()?.zeros_like()?.add(&dw)?;
                env.sync()?;
                acc[3] += tm.elapsed().as_secs_f64();
                drop((y, dx, dw, sum));
            }
            for k in 0..4 {
                tw[k].push(acc[k] * times as f64);
            }
        }
        let flops: f64 = shapes.iter().map(|&(a, b)| 2.0 * (rows * a * b) as f64).sum::<f64>() * times as f64;
        res.insert(
            name.into(),
            json!({
                "rows": rows, "times": times, "gflop_per_pass": flops / 1e9,
                "forward_s": median(&tw[0]), "input_grad_s": median(&tw[1]),
                "weight_grad_s": median(&tw[2]), "weight_grad_accumulate_s": median(&tw[3]),
            }),
        );
        Ok(())
    };
    run("decoder_linears", t, &shapes, cfg.num_hidden_layers)?;
    run("lm_head_at_answers", n_ans, &[(h, cfg.vocab_size)], 1)?;
    std::fs::write(out, serde_json::to_string_pretty(&serde_json::Value::Object(res.clone()))?)?;
    println!("{}", serde_json::Value::Object(res));
    Ok(())
}
