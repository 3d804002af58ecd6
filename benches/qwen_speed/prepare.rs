//! `prepare`: what the PyTorch side needs to compute exactly what guirl computes, and the
//! values it must reproduce.

use crate::bench::load;
use crate::inputs::{Env, Inputs};
use crate::stats::rss;
use anyhow::Result;
use candle_core::{Device, Tensor};
use guirl::policy::TrainablePolicy;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// Each row of `t` cut to its length in `lens` (the answers' log-probs without padding).
fn rows(t: &Tensor, lens: &[usize]) -> Result<Vec<Vec<f32>>> {
    let all = t.to_vec2::<f32>()?;
    Ok(all.into_iter().zip(lens).map(|(r, &n)| r[..n].to_vec()).collect())
}

/// `prepare` (see its `--help`): the samples' prompts and patches, and one update's values
/// for the PyTorch side to reproduce, into the folder `out`.
pub fn prepare(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let b = load(model, inputs, base, env)?;
    let mut samples = Vec::new();
    let mut pixels: HashMap<String, Tensor> = HashMap::new();
    let m = b.policy.model();
    for (i, (s, ans)) in b.states.iter().zip(&b.answers).enumerate() {
        let (ids, img) = b.policy.prompt(s)?;
        let (px, grids) = m.processor.batch(std::slice::from_ref(&img), &b.device)?;
        pixels.insert(format!("pixel_values.{i}"), px.to_device(&Device::Cpu)?);
        samples.push(json!({"input_ids": ids, "grid": grids[0], "answer": ans}));
    }
    candle_core::safetensors::save(&pixels, out.join("pixels.safetensors"))?;
    // one update from the adapter's values: log-probs before and after it
    let lens: Vec<usize> = b.answers.iter().map(Vec::len).collect();
    let mut opt = b.optimizer(inputs)?;
    let mut mem = vec![("loaded", rss().1)];
    let (loss, lp0) = b.loss(&b.states, &b.answers, &inputs.advantages)?;
    let loss0 = loss.to_scalar::<f32>()?;
    mem.push(("forward graph built", rss().1));
    let grads = loss.backward()?;
    mem.push(("after backward (graph and gradient store alive)", rss().1));
    let grad_norm: f64 = opt
        .vars()
        .iter()
        .filter_map(|v| grads.get(v.as_tensor()))
        .map(|g| g.sqr().and_then(|s| s.sum_all()).and_then(|s| s.to_scalar::<f32>()).map(|x| x as f64))
        .sum::<candle_core::Result<f64>>()?
        .sqrt();
    opt.step(&grads)?;
    drop(grads);
    drop(loss);
    mem.push(("after the step, gradients dropped", rss().1));
    let (loss1, lp1) = b.loss(&b.states, &b.answers, &inputs.advantages)?;
    let ban = b.ban()?;
    let gen: Vec<Vec<u32>> = b.states[..inputs.gen.prompts.min(b.states.len())]
        .iter()
        .map(|s| b.generate(s, inputs.gen.new_tokens, 1, &ban).map(|(t, _)| t))
        .collect::<Result<_>>()?;
    let report = json!({
        "samples": samples,
        "loss0": loss0,
        "loss1": loss1.to_scalar::<f32>()?,
        "grad_norm": grad_norm,
        "logp0": rows(&lp0, &lens)?,
        "logp1": rows(&lp1, &lens)?,
        "gen_tokens": gen,
        "rss_mib": mem.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "peak_rss_mib": rss().0,
        "trainable_params": b.policy.trainable_vars().iter().map(|(_, v)| v.elem_count()).sum::<usize>(),
    });
    std::fs::write(out.join("prep.json"), serde_json::to_string(&report)?)?;
    println!("wrote {}", out.display());
    Ok(())
}
