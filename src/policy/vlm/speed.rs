//! Throughput of the VLM policy: training (forward, backward, AdamW) and acting, on
//! synthetic MiniWoB-sized states. `benches/policy_speed.rs` prints these figures.

use anyhow::{ensure, Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use image::{Rgb, RgbImage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use super::{tokens, VlmConfig, VlmPolicy};
use crate::env::{BBox, Element, Frame, GuiAction, ScreenState};
use crate::policy::{Policy, TokenScores};

/// A `w`×`h` screenshot of light grey with a `size`-pixel square of `colour` whose top-left
/// corner is at (`x`, `y`), and the given instruction.
pub fn square_state(
    w: u32,
    h: u32,
    x: u32,
    y: u32,
    size: u32,
    colour: [u8; 3],
    instruction: &str,
) -> ScreenState {
    let mut img = RgbImage::from_pixel(w, h, Rgb([235, 235, 235]));
    for py in y..(y + size).min(h) {
        for px in x..(x + size).min(w) {
            img.put_pixel(px, py, Rgb(colour));
        }
    }
    ScreenState {
        task_id: "synthetic/square".into(),
        instruction: instruction.into(),
        url: String::new(),
        step: 0,
        frame: Frame { width: w, height: h, ..Default::default() },
        elements: Vec::new(),
        screenshot: img.into(),
        history: Vec::new(),
        previous_screenshot: None,
    }
}

/// `n` MiniWoB-sized (160×210) states with a red square and a ~40-byte instruction, and
/// actions like a rollout's: mostly clicks on the square, every fourth a short `type`.
pub fn synthetic_batch(n: usize, seed: u64) -> (Vec<ScreenState>, Vec<GuiAction>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let (x, y) = (rng.gen_range(0..130), rng.gen_range(0..180));
            let mut s = square_state(
                160,
                210,
                x,
                y,
                30,
                [220, 30, 30],
                "Click on the red square, then press Submit.",
            );
            s.elements = page_elements(i, x as f32, y as f32);
            let a = if i % 4 == 3 {
                GuiAction::Type { text: "hello".into() }
            } else {
                GuiAction::Click { x: x as i32 + 15, y: y as i32 + 15 }
            };
            (s, a)
        })
        .unzip()
}

/// A page's elements for synthetic state `i` (read only by policies with the `elements`
/// input): the square, a Submit button, a filled text field, and 0–11 links, so a batch
/// pads element rows of different lengths.
fn page_elements(i: usize, x: f32, y: f32) -> Vec<Element> {
    let at = |x: f32, y: f32, w: f32, h: f32| BBox { x, y, w, h };
    let mut out = vec![
        Element {
            tag: "div".into(),
            text: "red square".into(),
            bbox: at(x, y, 30.0, 30.0),
            ..Default::default()
        },
        Element {
            tag: "button".into(),
            text: "Submit".into(),
            bbox: at(10.0, 180.0, 50.0, 20.0),
            ..Default::default()
        },
        Element {
            tag: "input".into(),
            input_type: "text".into(),
            label: "Name".into(),
            value: "hello there".into(),
            focused: i.is_multiple_of(2),
            bbox: at(70.0, 180.0, 80.0, 20.0),
            ..Default::default()
        },
    ];
    for j in 0..(i * 7) % 12 {
        let text = format!("link {j} of page {i}");
        out.push(Element {
            tag: "a".into(),
            text,
            bbox: at(10.0, 10.0 * j as f32, 60.0, 9.0),
            ..Default::default()
        });
    }
    out
}

/// Median wall times (milliseconds) and what they mean per second.
#[derive(Debug, Clone)]
pub struct SpeedReport {
    /// Training batch size.
    pub batch: usize,
    /// Trainable parameters.
    pub params: usize,
    /// Encoder tokens per sample (image + instruction).
    pub encoder_tokens: usize,
    /// Decoder positions per sample in the training batch.
    pub action_tokens: usize,
    /// Building the tensors (`VlmPolicy::prepare`).
    pub prepare_ms: f64,
    /// `score` + loss.
    pub forward_ms: f64,
    /// `loss.backward()`.
    pub backward_ms: f64,
    /// Forward + backward + AdamW step.
    pub step_ms: f64,
    /// CPU time (all threads) of one such step: on a busy machine, `step_cpu_ms / threads`
    /// estimates the wall time the step would take on idle cores.
    pub step_cpu_ms: Option<f64>,
    /// `act` on one state.
    pub act1_ms: f64,
    /// `act` on eight states.
    pub act8_ms: f64,
    /// Mean tokens written per action in the act runs.
    pub act_tokens: f64,
    /// Peak resident memory of the process after the training steps (Linux `VmHWM`).
    pub peak_rss_mb: Option<f64>,
    /// The loss of each training step, warm-up included: the weights start from the seed
    /// on the host, so CPU and CUDA runs must agree step by step (to rounding).
    pub losses: Vec<f32>,
}

/// CPU time used by the whole process so far, in milliseconds.
pub fn process_cpu_ms() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6)
    }
    #[cfg(not(unix))]
    None
}

/// The process's peak resident set size in MiB, where `/proc` has it.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

impl SpeedReport {
    /// A few lines of figures.
    pub fn to_text(&self) -> String {
        let sps = |ms: f64| self.batch as f64 * 1000.0 / ms;
        format!(
            "params {} | encoder tokens {} | action tokens {} | batch {}\n\
             prepare            {:8.1} ms  ({:7.1} samples/s)\n\
             forward            {:8.1} ms  ({:7.1} samples/s)\n\
             backward           {:8.1} ms  ({:7.1} samples/s)\n\
             fwd+bwd+AdamW      {:8.1} ms  ({:7.1} samples/s; {} CPU ms)\n\
             act batch 1        {:8.1} ms\n\
             act batch 8        {:8.1} ms  ({:.1} tokens/action)\n\
             peak RSS           {}\n\
             losses             {}",
            self.params,
            self.encoder_tokens,
            self.action_tokens,
            self.batch,
            self.prepare_ms,
            sps(self.prepare_ms),
            self.forward_ms,
            sps(self.forward_ms),
            self.backward_ms,
            sps(self.backward_ms),
            self.step_ms,
            sps(self.step_ms),
            self.step_cpu_ms.map_or("?".into(), |c| format!("{c:.0}")),
            self.act1_ms,
            self.act8_ms,
            self.act_tokens,
            self.peak_rss_mb.map_or("unknown".into(), |m| format!("{m:.0} MiB")),
            self.losses.iter().map(|l| format!("{l:.6}")).collect::<Vec<_>>().join(" "),
        )
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The optimizer of the timed steps: candle's AdamW defaults (β 0.9/0.999, ε 1e-8,
/// weight decay 0.01) at lr 1e-4.
pub fn adamw_params() -> ParamsAdamW {
    ParamsAdamW { lr: 1e-4, ..Default::default() }
}

/// Advantages of the synthetic batch, [batch, 1]: +1, −1, +1, … .
pub fn advantages(batch: usize, device: &Device) -> Result<Tensor> {
    let adv: Vec<f32> = (0..batch).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
    Ok(Tensor::from_vec(adv, (batch, 1), device)?)
}

/// −mean(A · Σ log π) − 0.01 · mean entropy, means over real tokens: the shape of a
/// policy-gradient loss, `(−Σ(logp · A) − 0.01 · Σ entropy) / Σ mask`.
pub fn pg_loss(s: &TokenScores, adv: &Tensor) -> Result<Tensor> {
    let n = s.mask.sum_all()?;
    let pg = s.logp.broadcast_mul(adv)?.sum_all()?.neg()?;
    Ok(((pg - (s.entropy.sum_all()? * 0.01)?)?.broadcast_div(&n))?)
}

/// Time `steps` training steps (after `warmup` more) of a policy-gradient-shaped loss on a
/// synthetic batch, and `act` on 1 and 8 states.
pub fn measure(
    cfg: &VlmConfig,
    batch: usize,
    warmup: usize,
    steps: usize,
    device: &Device,
) -> Result<SpeedReport> {
    let mut policy = VlmPolicy::new(cfg.clone(), device, 0)?;
    let (states, actions) = synthetic_batch(batch, 1);
    let mut opt = AdamW::new(policy.vars(), adamw_params())?;
    let adv = advantages(batch, device)?;
    let (mut prep, mut fwd, mut bwd, mut step, mut cpu) = (vec![], vec![], vec![], vec![], vec![]);
    let mut shape = (0, 0);
    let mut losses = Vec::new();
    for i in 0..warmup + steps {
        let t0 = Instant::now();
        let prepared = policy.prepare(&states, &actions)?;
        let t1 = Instant::now();
        let c1 = process_cpu_ms();
        let loss = pg_loss(&policy.score(&prepared)?, &adv)?;
        losses.push(loss.to_scalar::<f32>()?);
        let t2 = Instant::now();
        let grads = loss.backward()?;
        let t3 = Instant::now();
        opt.step(&grads)?;
        let t4 = Instant::now();
        let c4 = process_cpu_ms();
        shape = (prepared.encoder.key_mask.dim(3)?, prepared.actions.inputs.dim(1)?);
        if i >= warmup {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1000.0;
            prep.push(ms(t0, t1));
            fwd.push(ms(t1, t2));
            bwd.push(ms(t2, t3));
            step.push(ms(t1, t4));
            if let (Some(a), Some(b)) = (c1, c4) {
                cpu.push(b - a);
            }
        }
    }
    let peak_rss_mb = peak_rss_mb();
    let (mut a1, mut a8, mut toks, mut acts) = (vec![], vec![], 0usize, 0usize);
    for i in 0..warmup + steps {
        for (n, out) in [(1, &mut a1), (8, &mut a8)] {
            let t0 = Instant::now();
            let d = policy.act(&states[..n.min(batch)])?;
            if i >= warmup {
                out.push((Instant::now() - t0).as_secs_f64() * 1000.0);
                toks += d.iter().map(|d| d.token_logprobs.len()).sum::<usize>();
                acts += d.len();
            }
        }
    }
    Ok(SpeedReport {
        batch,
        params: policy.num_params(),
        encoder_tokens: shape.0,
        action_tokens: shape.1,
        prepare_ms: median(prep),
        forward_ms: median(fwd),
        backward_ms: median(bwd),
        step_ms: median(step),
        step_cpu_ms: (!cpu.is_empty()).then(|| median(cpu)),
        act1_ms: median(a1),
        act8_ms: median(a8),
        act_tokens: toks as f64 / acts.max(1) as f64,
        peak_rss_mb,
        losses,
    })
}

/// Write what a re-implementation of the training step needs to reproduce it
/// (`scripts/small_policy_torch.py` is the PyTorch one) into `dir`:
///
/// - `config.json`: the architecture ([`VlmConfig`]);
/// - `weights.safetensors`: the freshly seeded policy (`VlmPolicy::new(cfg, device, 0)`, as
///   [`measure`] makes it), under guirl's Var names;
/// - `batch.safetensors`: [`VlmPolicy::prepare`] of [`synthetic_batch`]`(batch, 1)`, everything
///   `score` reads (`images`, `text`, `key_mask`, `inputs`, `targets`, `grammar_mask`, `mask`),
///   and `advantages` ([`advantages`]);
/// - `reference.json`: the first step of [`measure`]'s loss ([`pg_loss`]): the loss, the
///   global gradient norm (and each Var's), and the loss after one AdamW step
///   ([`adamw_params`]), with the optimizer's settings and the token layout (`x0`, `vocab`).
///
/// Only configs without the optional input features (word buckets, copy, and inputs other
/// than pixels) are covered: those add inputs the export does not write.
pub fn export(cfg: &VlmConfig, batch: usize, device: &Device, dir: &Path) -> Result<serde_json::Value> {
    let policy = VlmPolicy::new(cfg.clone(), device, 0)?;
    let (states, actions) = synthetic_batch(batch, 1);
    let prepared = policy.prepare(&states, &actions)?;
    let enc = &prepared.encoder;
    ensure!(
        enc.words.is_none()
            && enc.history.is_none()
            && enc.elements.is_none()
            && enc.pieces.is_none()
            && !cfg.inputs.previous_frame,
        "export covers configs without word_buckets, copy and inputs other than pixels"
    );
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let host = |t: &Tensor| t.to_device(&Device::Cpu);
    let mut weights = HashMap::new();
    for (name, var) in policy.named_vars() {
        weights.insert(name, host(var.as_tensor())?);
    }
    candle_core::safetensors::save(&weights, dir.join("weights.safetensors"))?;
    let adv = advantages(batch, device)?;
    let act = &prepared.actions;
    let mut tensors = HashMap::new();
    for (name, t) in [
        ("images", &enc.images),
        ("text", &enc.text),
        ("key_mask", &enc.key_mask),
        ("inputs", &act.inputs),
        ("targets", &act.targets),
        ("grammar_mask", &act.grammar_mask),
        ("mask", &act.mask),
        ("advantages", &adv),
    ] {
        tensors.insert(name.to_string(), host(t)?);
    }
    candle_core::safetensors::save(&tensors, dir.join("batch.safetensors"))?;
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(cfg)?)?;

    let params = adamw_params();
    let mut opt = AdamW::new(policy.vars(), adamw_params())?;
    let scores = policy.score(&prepared)?;
    let loss = pg_loss(&scores, &adv)?;
    let grads = loss.backward()?;
    let mut grad_norms = serde_json::Map::new();
    let mut sq = 0f64;
    for (name, var) in policy.named_vars() {
        let g = grads.get(var.as_tensor()).with_context(|| format!("no gradient for {name}"))?;
        let s = f64::from(g.sqr()?.sum_all()?.to_scalar::<f32>()?);
        sq += s;
        grad_norms.insert(name, s.sqrt().into());
    }
    opt.step(&grads)?;
    let after = pg_loss(&policy.score(&prepared)?, &adv)?;
    let scalar = |t: &Tensor| -> Result<f64> { Ok(f64::from(t.to_scalar::<f32>()?)) };
    let reference = serde_json::json!({
        "what": "guirl VlmPolicy, first training step of speed::measure's loss on speed::synthetic_batch(batch, 1)",
        "device": format!("{device:?}"),
        "batch": batch,
        "policy_seed": 0,
        "batch_seed": 1,
        "params": policy.num_params(),
        "temperature": policy.temperature,
        "vocab": policy.vocab().size(),
        "x0": tokens::X0,
        "entropy_coef": 0.01,
        "adamw": {
            "lr": params.lr,
            "beta1": params.beta1,
            "beta2": params.beta2,
            "eps": params.eps,
            "weight_decay": params.weight_decay,
        },
        "tokens": scalar(&scores.mask.sum_all()?)?,
        "logp_sum": scalar(&scores.logp.sum_all()?)?,
        "entropy_sum": scalar(&scores.entropy.sum_all()?)?,
        "loss": scalar(&loss)?,
        "grad_norm": sq.sqrt(),
        "loss_after_step": scalar(&after)?,
        "grad_norms": grad_norms,
    });
    std::fs::write(dir.join("reference.json"), serde_json::to_string_pretty(&reference)?)?;
    Ok(reference)
}
