//! The guirl side of the Qwen-VL speed comparison (guirl and PyTorch side by side):
//! a LoRA GRPO-style update (`QwenVlPolicy::score`, a policy-gradient surrogate on the
//! answer tokens' log-probs, backward, guirl's `AdamW`) and greedy rollout decoding with the
//! KV cache (`QwenVl::hidden` / `step_rows`, the calls `act` makes), for single prompts
//! and for a group of answers of one prompt decoded together, on CPU in f32.
//!
//! `scripts/bench_qwen_speed.py` drives it (it writes the checkpoints and the inputs, runs
//! the PyTorch side, and prints the table); by hand:
//!
//! ```text
//! cargo bench --bench qwen_speed -- prepare --model DIR --inputs INPUTS.json --out PREP_DIR
//! RAYON_NUM_THREADS=2 cargo bench --bench qwen_speed -- time --model DIR --inputs INPUTS.json --out RESULT.json
//! cargo bench --bench qwen_speed -- matmul --model DIR --inputs INPUTS.json --out MATMUL.json
//! ```
//!
//! `--device cuda` and `--dtype bf16` (a `--features cuda` build) run the same on a GPU
//! (`benches/gpu/run.sh`); the measured runs here are CPU and f32.
//!
//! - `prepare` writes what the PyTorch side needs to compute exactly the same thing
//!   (`prep.json`: each sample's prompt ids and answer tokens as the policy builds them;
//!   `pixels.safetensors`: the patches guirl's processor made) and the values it must
//!   reproduce: per-token log-probs before and after one update, the loss, greedy tokens.
//! - `time` measures: generation first (its RSS high-water mark), then the update (the
//!   high-water mark reset before it), then one update cut into phases.
//!
//! The vision tower's output is cached per screenshot by the policy; the timed updates use
//! a fresh screenshot (one changed pixel row) every repetition, so the vision tower runs in
//! every step, as it does on the PyTorch side.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use guirl::env::{GuiAction, ScreenState};
use guirl::policy::api::prompt::{system_prompt, user_text};
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::processor::ProcessedImage;
use guirl::policy::qwen_vl::train::train_pass::PassState;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use guirl::policy::TrainablePolicy;
use guirl::train::optim::{AdamW, AdamWConfig};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Deserialize)]
struct Inputs {
    backbone: String,
    system_prompt: String,
    lora_rank: usize,
    lora_alpha: f64,
    /// A PEFT adapter folder whose values both sides start from (B non-zero).
    adapter: PathBuf,
    lr: f64,
    weight_decay: f64,
    samples: Vec<Sample>,
    /// Group-relative advantages, one per sample.
    advantages: Vec<f32>,
    update: Reps,
    gen: GenSpec,
}

#[derive(Deserialize)]
struct Sample {
    image: PathBuf,
    instruction: String,
    /// The answer, guirl action text in screenshot pixels.
    answer: String,
}

#[derive(Deserialize)]
struct Reps {
    warmup: usize,
    reps: usize,
}

#[derive(Deserialize)]
struct GenSpec {
    /// The first `prompts` samples' prompts are decoded.
    prompts: usize,
    new_tokens: usize,
    warmup: usize,
    reps: usize,
    /// Answers decoded together from the first prompt (a GRPO group's first step); 0: skip.
    #[serde(default)]
    group: usize,
}

fn arg(args: &[String], name: &str) -> Result<String> {
    let i = args.iter().position(|a| a == name).with_context(|| format!("missing {name}"))?;
    args.get(i + 1).cloned().with_context(|| format!("{name} needs a value"))
}

fn main() -> Result<()> {
    // the allocator as `guirl train` has it (the environment's MALLOC_* settings win)
    guirl::cli::tune_allocator();
    // `cargo bench` adds `--bench`; our flags take values.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mode = args.first().cloned().unwrap_or_default();
    let device = match arg(&args, "--device").unwrap_or_else(|_| "cpu".into()).as_str() {
        "cpu" => Device::Cpu,
        "cuda" => guirl::policy::device::cuda(0)
            .context("--device cuda needs a `--features cuda` build and a GPU")?,
        other => bail!("--device {other:?}: use cpu or cuda"),
    };
    let dtype = arg(&args, "--dtype").unwrap_or_else(|_| "f32".into());
    let model = PathBuf::from(arg(&args, "--model")?);
    let inputs_path = PathBuf::from(arg(&args, "--inputs")?);
    let out = PathBuf::from(arg(&args, "--out")?);
    let inputs: Inputs = serde_json::from_str(
        &std::fs::read_to_string(&inputs_path).with_context(|| format!("{}", inputs_path.display()))?,
    )?;
    let base = inputs_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let env = Env { device, dtype };
    match mode.as_str() {
        "prepare" => prepare(&model, &inputs, &base, &out, &env),
        "time" => time(&model, &inputs, &base, &out, &env),
        "matmul" => matmul(&model, &base, &out, &env),
        "profile" => profile(&model, &inputs, &base, &out, &env),
        other => bail!("mode {other:?}: use `prepare`, `time`, `matmul` or `profile`"),
    }
}

struct Env {
    device: Device,
    dtype: String,
}

impl Env {
    /// Wait for the device's queued work (timings on CUDA).
    fn sync(&self) -> Result<()> {
        Ok(self.device.synchronize()?)
    }
}

struct Bench {
    policy: QwenVlPolicy,
    /// The policy's `decode_rows`.
    rows: usize,
    system: String,
    states: Vec<ScreenState>,
    answers: Vec<Vec<u32>>,
    device: Device,
}

fn load(model: &Path, inputs: &Inputs, base: &Path, env: &Env) -> Result<Bench> {
    let device = env.device.clone();
    let tmp = std::env::temp_dir().join(format!("qwen_speed_prompt_{}.md", std::process::id()));
    std::fs::write(&tmp, &inputs.system_prompt)?;
    let mut s = QwenPolicySettings::new(&inputs.backbone, model.to_str().context("model path")?);
    s.prompt = Some(tmp.clone());
    s.lora_rank = inputs.lora_rank;
    s.lora_alpha = inputs.lora_alpha;
    s.dtype = env.dtype.clone();
    let mut policy = QwenVlPolicy::new(s.clone(), &device, 0)?;
    let rows = s.decode_rows_on(&device, policy.model().invariant_rows());
    std::fs::remove_file(&tmp).ok();
    // start from the same adapter values as the PyTorch side
    policy.load(&base.join(&inputs.adapter))?;
    let mut states = Vec::new();
    let mut answers = Vec::new();
    for s in &inputs.samples {
        let path = base.join(&s.image);
        let img = image::open(&path).with_context(|| format!("{}", path.display()))?.to_rgb8();
        let state = ScreenState {
            task_id: "bench".into(),
            instruction: s.instruction.clone(),
            url: String::new(),
            step: 0,
            frame: Default::default(),
            elements: vec![],
            screenshot: img.into(),
            history: vec![],
            previous_screenshot: None,
        };
        let action: GuiAction = s.answer.parse().map_err(|e| anyhow::anyhow!("{}: {e}", s.answer))?;
        answers.push(policy.encode(&state, &action)?);
        states.push(state);
    }
    Ok(Bench { policy, rows, system: inputs.system_prompt.clone(), states, answers, device })
}

impl Bench {
    /// The prompt ids and processed screenshot the policy builds for `state` (its
    /// `prompt()` is private; this is the same sequence of public calls).
    fn prompt(&self, state: &ScreenState) -> Result<(Vec<u32>, ProcessedImage)> {
        let m = self.policy.model();
        let img = m.processor.process(&state.screenshot);
        let (w, h) = state.screenshot.dimensions();
        let system = system_prompt(&self.system, &self.policy.coords().describe(w, h));
        let user = user_text(state, &[], false);
        let messages = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user}]},
        ]);
        let rendered = m.chat.render(&messages, true)?;
        let ids = m.chat.encode_prompt(&rendered, &[img.tokens(m.config.vision.spatial_merge_size)])?;
        Ok((ids, img))
    }

    /// GRPO's clipped surrogate at ratio 1 (the first epoch):
    /// `L = −Σ_t mask·exp(logp − sg(logp))·A / Σ mask` (its gradient is `−A ∇logp`).
    fn loss(&self, states: &[ScreenState], answers: &[Vec<u32>], adv: &[f32]) -> Result<(Tensor, Tensor)> {
        let s = self.policy.score(states, answers)?;
        let ratio = (&s.logp - s.logp.detach())?.exp()?;
        let adv = Tensor::new(adv, &self.device)?.unsqueeze(1)?;
        let total = (ratio.broadcast_mul(&adv)? * &s.mask)?.sum_all()?;
        let loss = (total.neg()? / s.mask.sum_all()?.to_scalar::<f32>()? as f64)?;
        Ok((loss, s.logp))
    }

    /// Greedy decoding of `n` tokens for each of `group` answers after `state`'s prompt, as
    /// `act` does it (the prompt run once with a KV cache, the answers advancing together
    /// in chunks of `decode_rows` rows, vision placeholders banned) except that end-of-turn
    /// is banned too, so every answer has exactly `n` tokens (PyTorch: `min_new_tokens = n`).
    /// Returns the first answer's tokens and the time to the first token (vision + prefill).
    /// Runs in a no-grad pass, as the policy's decoding does: the adapters (Vars) are read
    /// detached, so no autograd graph is built or kept.
    fn generate(&self, state: &ScreenState, n: usize, group: usize, ban: &Tensor) -> Result<(Vec<u32>, f64)> {
        let t0 = Instant::now();
        let m = self.policy.model();
        let _no_graph = m.text.pass().enter(PassState { no_grad: true, ..PassState::default() });
        let rows = self.rows;
        let (ids, img) = self.prompt(state)?;
        let (px, grids) = m.processor.batch(std::slice::from_ref(&img), &self.device)?;
        let vision = m.encode_images(&px, &grids)?;
        let prompt = m.prompt(ids, &grids)?;
        let len = prompt.ids.len();
        let mut cache = KvCache::default();
        let h = m.hidden(&prompt, Some(&vision), Some(&mut cache))?;
        let first_logits = m.logits(&h.get(len - 1)?.unsqueeze(0)?)?.squeeze(0)?;
        let mut logits = vec![first_logits; group];
        let mut caches = vec![cache; group];
        let mut first = 0.0;
        let mut tokens: Vec<Vec<u32>> = vec![Vec::with_capacity(n); group];
        loop {
            for (l, t) in logits.iter().zip(tokens.iter_mut()) {
                let lp =
                    candle_nn::ops::log_softmax(&l.to_dtype(DType::F32)?.broadcast_add(ban)?, D::Minus1)?
                        .to_vec1::<f32>()?;
                t.push(argmax(&lp));
            }
            if first == 0.0 {
                first = t0.elapsed().as_secs_f64();
            }
            if tokens[0].len() >= n {
                break;
            }
            let pos = (len + tokens[0].len() - 1) as i64 + prompt.delta;
            for start in (0..group).step_by(rows) {
                let end = (start + rows).min(group);
                let toks: Vec<u32> = tokens[start..end].iter().map(|t| *t.last().expect("a token")).collect();
                let mut refs: Vec<&mut KvCache> = caches[start..end].iter_mut().collect();
                let h = m.step_rows(&toks, &vec![pos; end - start], &mut refs, rows)?;
                let out = m.logits_rows(&h, rows, guirl::policy::qwen_vl::DecodeKernels::Eager)?;
                for (r, l) in logits[start..end].iter_mut().enumerate() {
                    *l = out.get(r)?;
                }
            }
        }
        Ok((tokens.swap_remove(0), first))
    }

    fn ban(&self) -> Result<Tensor> {
        let c = &self.policy.model().config;
        let mut ban = vec![0f32; c.text.vocab_size];
        let eos = c.eos_token_id.or_else(|| self.policy.model().chat.token_id("<|im_end|>"));
        for t in [
            Some(c.image_token_id),
            Some(c.video_token_id),
            Some(c.vision_start_token_id),
            Some(c.vision_end_token_id),
            eos,
        ]
        .into_iter()
        .flatten()
        {
            ban[t as usize] = f32::NEG_INFINITY;
        }
        Ok(Tensor::new(ban, &self.device)?)
    }

    fn optimizer(&self, inputs: &Inputs) -> Result<AdamW> {
        let cfg = AdamWConfig { lr: inputs.lr, weight_decay: inputs.weight_decay, ..Default::default() };
        Ok(AdamW::new(self.policy.trainable_vars(), cfg)?)
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn rows(t: &Tensor, lens: &[usize]) -> Result<Vec<Vec<f32>>> {
    let all = t.to_vec2::<f32>()?;
    Ok(all.into_iter().zip(lens).map(|(r, &n)| r[..n].to_vec()).collect())
}

fn prepare(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let b = load(model, inputs, base, env)?;
    let mut samples = Vec::new();
    let mut pixels: HashMap<String, Tensor> = HashMap::new();
    let m = b.policy.model();
    for (i, (s, ans)) in b.states.iter().zip(&b.answers).enumerate() {
        let (ids, img) = b.prompt(s)?;
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

/// `VmHWM` (peak resident set) and `VmRSS` in MiB.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / 1024.0
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Reset the peak-RSS counter to the current RSS (Linux `clear_refs` 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").ok();
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

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

fn time(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
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
        .map(|(s, a)| b.prompt(s).map(|(ids, _)| ids.len() + a.len()))
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
        images.push(b.prompt(s)?.1);
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

/// One decoder layer's parts timed alone at the update's shapes (the batch, padded to its
/// longest sequence), forward and backward (`TextModel::profile_layer`), and the whole
/// layer, so the glue between the parts shows as the difference. Prints a table.
fn profile(model: &Path, inputs: &Inputs, base: &Path, out: &Path, env: &Env) -> Result<()> {
    let b = load(model, inputs, base, env)?;
    let tokens = b
        .states
        .iter()
        .zip(&b.answers)
        .map(|(s, a)| b.prompt(s).map(|(ids, _)| ids.len() + a.len()))
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
fn matmul(model: &Path, base: &Path, out: &Path, env: &Env) -> Result<()> {
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
