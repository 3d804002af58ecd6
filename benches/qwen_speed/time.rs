//! `time`: generation, the update and one update in phases, as the comparison's table
//! reports them.

use crate::bench::{load, Bench};
use crate::inputs::{Env, GenSpec, Inputs};
use crate::stats::{median, reset_peak, rss};
use anyhow::Result;
use candle_core::{DType, Tensor};
use guirl::env::ScreenState;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// A copy of the states whose screenshots differ from every earlier copy (the top pixel row
/// is set to a value of `round`): the policy's per-screenshot vision cache misses.
fn fresh(states: &[ScreenState], round: usize) -> Vec<ScreenState> {
    states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            let c = round * 64 + i + 1;
            let w = s.screenshot.width();
            for x in 0..w {
                std::sync::Arc::make_mut(&mut s.screenshot).put_pixel(
                    x,
                    0,
                    image::Rgb([(c % 256) as u8, (c / 256 % 256) as u8, 17]),
                );
            }
            s
        })
        .collect()
}

/// `time` (see its `--help`): generation, then the update, then one update in phases; the
/// report written to `out` and printed.
pub fn time(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
    let t0 = Instant::now();
    let b = load(model, inputs, base, env)?;
    let load_s = t0.elapsed().as_secs_f64();
    let (_, rss_loaded) = rss();
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "(unset)".into());
    eprintln!("guirl: loaded in {load_s:.1}s, RSS {rss_loaded:.0} MiB, RAYON_NUM_THREADS={threads}");

    // --- generation (first, so its peak is its own)
    let ban = b.ban()?;
    let g = &inputs.gen;
    let prompts = &b.states[..g.prompts.min(b.states.len())];
    let (mut gen_times, mut first_times) = (Vec::new(), Vec::new());
    for r in 0..g.warmup + g.reps {
        let t = Instant::now();
        let mut first = 0.0;
        for s in prompts {
            let (tokens, f) = b.generate(s, g.new_tokens, 1, &ban)?;
            assert_eq!(tokens.len(), g.new_tokens);
            first += f;
        }
        env.sync()?;
        let dt = t.elapsed().as_secs_f64();
        if r >= g.warmup {
            gen_times.push(dt);
            first_times.push(first);
        }
        eprintln!("guirl generate rep {r}: {dt:.3}s (to first tokens {first:.3}s)");
    }
    // --- a group: `group` answers of the first prompt decoded together
    let mut group_times = Vec::new();
    for r in 0..if g.group > 0 { g.warmup + g.reps } else { 0 } {
        let t = Instant::now();
        let (tokens, _) = b.generate(&prompts[0], g.new_tokens, g.group, &ban)?;
        assert_eq!(tokens.len(), g.new_tokens);
        env.sync()?;
        let dt = t.elapsed().as_secs_f64();
        if r >= g.warmup {
            group_times.push(dt);
        }
        eprintln!("guirl generate a group of {} rep {r}: {dt:.3}s", g.group);
    }
    let (gen_peak, _) = rss();
    let gen_s = median(&gen_times);
    let first_s = median(&first_times);
    let new_tokens = (prompts.len() * g.new_tokens) as f64;

    // --- update
    reset_peak();
    let mut opt = b.optimizer(inputs)?;
    let seq_tokens: usize = b
        .states
        .iter()
        .zip(&b.answers)
        .map(|(s, a)| b.policy.prompt(s).map(|(ids, _)| ids.len() + a.len()))
        .sum::<Result<usize>>()?;
    let answer_tokens: usize = b.answers.iter().map(Vec::len).sum();
    let mut times = Vec::new();
    let mut round = 0;
    for r in 0..inputs.update.warmup + inputs.update.reps {
        round += 1;
        let states = fresh(&b.states, round);
        let t = Instant::now();
        let (loss, _) = b.loss(&states, &b.answers, &inputs.advantages)?;
        let grads = loss.backward()?;
        opt.step(&grads)?;
        drop(grads);
        env.sync()?;
        let dt = t.elapsed().as_secs_f64();
        if r >= inputs.update.warmup {
            times.push(dt);
        }
        eprintln!("guirl update rep {r}: {dt:.3}s loss {:.5}", loss.to_scalar::<f32>()?);
    }
    let (update_peak, _) = rss();
    let upd_s = median(&times);
    let n = b.states.len() as f64;

    // --- one update in phases: prompt building, vision, text forward, backward, optimizer
    round += 1;
    let states = fresh(&b.states, round);
    let m = b.policy.model();
    let t = Instant::now();
    let mut images = Vec::new();
    for s in &states {
        images.push(b.policy.prompt(s)?.1);
    }
    let prompt_s = t.elapsed().as_secs_f64();
    // the vision tower alone, the minibatch's screenshots in one call as the policy runs
    // the ones its cache lacks
    let t = Instant::now();
    let (px, grids) = m.processor.batch(&images, &b.device)?;
    m.encode_images(&px, &grids)?;
    env.sync()?;
    let vision_s = t.elapsed().as_secs_f64();
    // fill the policy's vision cache, then time the forward without the vision tower
    drop(b.loss(&states, &b.answers, &inputs.advantages)?);
    env.sync()?;
    // Each phase is timed twice: when its call returns (the host has queued the work) and
    // when the device has done it. On CUDA, a phase whose call returns late is bound by the
    // host issuing kernels, not by the GPU running them.
    let t = Instant::now();
    let (loss, _) = b.loss(&states, &b.answers, &inputs.advantages)?;
    let fwd_issue = t.elapsed().as_secs_f64();
    env.sync()?;
    let fwd_s = t.elapsed().as_secs_f64();
    let graph_nodes = loss.sorted_nodes().len();
    let t = Instant::now();
    let grads = loss.backward()?;
    let bwd_issue = t.elapsed().as_secs_f64();
    env.sync()?;
    let bwd_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    opt.step(&grads)?;
    let opt_issue = t.elapsed().as_secs_f64();
    env.sync()?;
    let opt_s = t.elapsed().as_secs_f64();
    drop(grads);
    let launch_us = launch_cost(env)?;
    let group_update = group_update(&b, inputs, env, &mut round)?;

    let report = json!({
        "side": "guirl",
        "threads": threads,
        "load_s": load_s,
        "rss_after_load_mib": rss_loaded,
        "update": {
            "batch": b.states.len(),
            "seq_tokens": seq_tokens,
            "answer_tokens": answer_tokens,
            "times_s": times,
            "median_s": upd_s,
            "samples_per_s": n / upd_s,
            "tokens_per_s": seq_tokens as f64 / upd_s,
            "peak_rss_mib": update_peak,
        },
        "gen": {
            "prompts": prompts.len(),
            "new_tokens": g.new_tokens,
            "times_s": gen_times,
            "median_s": gen_s,
            "tokens_per_s": new_tokens / gen_s,
            "to_first_token_s": first_s,
            "decode_tokens_per_s": (new_tokens - prompts.len() as f64) / (gen_s - first_s),
            "peak_rss_mib": gen_peak,
            "decode_rows": b.rows,
        },
        "group_gen": group_json(g, &group_times),
        "group_update": group_update,
        "phases_s": {
            "prompt_and_preprocess": prompt_s,
            "vision": vision_s,
            "text_forward": fwd_s - prompt_s,
            "backward": bwd_s,
            "optimizer": opt_s,
        },
        "phases_issued_s": { "text_forward": fwd_issue - prompt_s, "backward": bwd_issue, "optimizer": opt_issue },
        "graph_nodes": graph_nodes,
        "launch_us": launch_us,
    });
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A GRPO group's first step updated on: `group` answers (the samples', in turn) after
/// the first sample's screen, one minibatch, the policy running their one prompt once
/// ("shared"); beside it, in turns, the same minibatch with each copy's instruction ending
/// in another digit ("apart": as many tokens, one screenshot, but every prompt runs whole,
/// as all did before 2026-12-06). `null` without a group.
fn group_update(b: &Bench, inputs: &Inputs, env: &Env, round: &mut usize) -> Result<serde_json::Value> {
    let g = inputs.gen.group;
    if g < 2 {
        return Ok(serde_json::Value::Null);
    }
    let answers: Vec<Vec<u32>> = (0..g).map(|i| b.answers[i % b.answers.len()].clone()).collect();
    let adv: Vec<f32> = (0..g).map(|i| inputs.advantages[i % inputs.advantages.len()]).collect();
    let mut opt = b.optimizer(inputs)?;
    let (mut shared, mut apart) = (Vec::new(), Vec::new());
    for r in 0..inputs.update.warmup + inputs.update.reps {
        for same in [true, false] {
            *round += 1;
            // one screenshot (new each round, so each round encodes it once); the copies'
            // instructions end in one digit, the same digit or each its own
            let screen = fresh(&b.states[..1], *round).remove(0);
            let states: Vec<ScreenState> = (0..g)
                .map(|i| {
                    let mut s = screen.clone();
                    s.instruction = format!("{} #{}", s.instruction, if same { 0 } else { i % 10 });
                    s
                })
                .collect();
            let t = Instant::now();
            let (loss, _) = b.loss(&states, &answers, &adv)?;
            opt.step(&loss.backward()?)?;
            env.sync()?;
            let dt = t.elapsed().as_secs_f64();
            if r >= inputs.update.warmup {
                if same { &mut shared } else { &mut apart }.push(dt);
            }
            eprintln!(
                "guirl update of a group of {g}, {} rep {r}: {dt:.3}s",
                if same { "shared" } else { "apart" }
            );
        }
    }
    let (s, a) = (median(&shared), median(&apart));
    Ok(json!({ "group": g, "shared_times_s": shared, "apart_times_s": apart, "shared_median_s": s,
               "apart_median_s": a, "speedup": a / s }))
}

/// What one small elementwise op costs the host to issue, in microseconds: 2 000 `x + 1`
/// on a 1 024-element tensor, timed until the loop returns (on CUDA, before the sync).
fn launch_cost(env: &Env) -> Result<f64> {
    let mut x = Tensor::zeros(1024, DType::F32, &env.device)?;
    env.sync()?;
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        x = (x + 1.0)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    env.sync()?;
    anyhow::ensure!(x.max(0)?.to_scalar::<f32>()? == n as f32, "launch_cost: wrong sum");
    Ok(us)
}

/// The group generation's figures (`null` when not measured).
fn group_json(g: &GenSpec, times: &[f64]) -> serde_json::Value {
    if times.is_empty() {
        return serde_json::Value::Null;
    }
    let s = median(times);
    json!({ "group": g.group, "new_tokens": g.new_tokens, "times_s": times, "median_s": s,
            "tokens_per_s": (g.group * g.new_tokens) as f64 / s })
}
