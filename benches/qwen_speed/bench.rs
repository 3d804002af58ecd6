//! The policy as the bench loads it (the inputs' adapter, their samples) and the calls the
//! modes time: the prompt the policy builds, GRPO's surrogate loss, greedy decoding with
//! the KV cache.

use crate::inputs::{Env, Inputs};
use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor, D};
use guirl::env::{GuiAction, ScreenState};
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::train::train_pass::PassState;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use guirl::policy::TrainablePolicy;
use guirl::train::optim::{AdamW, AdamWConfig};
use std::path::Path;
use std::time::Instant;

/// The policy with the inputs' adapter loaded, and the inputs' samples as it sees them.
pub struct Bench {
    pub policy: QwenVlPolicy,
    /// The rows a group of answers decodes in (`decode_rows`, else the group's size).
    pub rows: usize,
    /// The samples' screens.
    pub states: Vec<ScreenState>,
    /// The samples' answers as the policy's tokens.
    pub answers: Vec<Vec<u32>>,
    pub device: Device,
}

/// The policy of `model` as the inputs set it up, from the inputs' adapter, with their samples
/// (paths in the inputs are relative to `base`).
pub fn load(model: &Path, inputs: &Inputs, base: &Path, env: &Env) -> Result<Bench> {
    let device = env.device.clone();
    let tmp = std::env::temp_dir().join(format!("qwen_speed_prompt_{}.md", std::process::id()));
    std::fs::write(&tmp, &inputs.system_prompt)?;
    let mut s = QwenPolicySettings::new(&inputs.backbone, model.to_str().context("model path")?);
    s.prompt = Some(tmp.clone());
    s.lora_rank = inputs.lora_rank;
    s.lora_alpha = inputs.lora_alpha;
    s.dtype = env.dtype.clone();
    let mut policy = QwenVlPolicy::new(s.clone(), &device, 0)?;
    // a group's answers in one chunk, as a collector with as many envs decodes them (a whole
    // call would pad them to 32 rows on a GPU; runs 6-8 decoded 8 rows)
    let rows = s.decode_rows_for(inputs.gen.group.max(1));
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
    Ok(Bench { policy, rows, states, answers, device })
}

impl Bench {
    /// GRPO's clipped surrogate at ratio 1 (the first epoch):
    /// `L = −Σ_t mask·exp(logp − sg(logp))·A / Σ mask` (its gradient is `−A ∇logp`).
    pub fn loss(
        &self,
        states: &[ScreenState],
        answers: &[Vec<u32>],
        adv: &[f32],
    ) -> Result<(Tensor, Tensor)> {
        let s = self.policy.score(states, answers)?;
        let ratio = (&s.logp - s.logp.detach())?.exp()?;
        let adv = Tensor::new(adv, &self.device)?.unsqueeze(1)?;
        let total = (ratio.broadcast_mul(&adv)? * &s.mask)?.sum_all()?;
        let loss = (total.neg()? / s.mask.sum_all()?.to_scalar::<f32>()? as f64)?;
        Ok((loss, s.logp))
    }

    /// Greedy decoding of `n` tokens for each of `group` answers after `state`'s prompt, as
    /// the policy decodes a group (the prompt run once with a KV cache, the answers advancing
    /// together in one chunk of as many rows, vision placeholders banned) except that end-of-turn
    /// is banned too, so every answer has exactly `n` tokens (PyTorch: `min_new_tokens = n`).
    /// Returns the first answer's tokens and the time to the first token (vision + prefill).
    /// Runs in a no-grad pass, as the policy's decoding does: the adapters (Vars) are read
    /// detached, so no autograd graph is built or kept.
    pub fn generate(
        &self,
        state: &ScreenState,
        n: usize,
        group: usize,
        ban: &Tensor,
    ) -> Result<(Vec<u32>, f64)> {
        let t0 = Instant::now();
        let m = self.policy.model();
        let _no_graph = m.text.pass().enter(PassState { no_grad: true, ..PassState::default() });
        let rows = self.rows;
        let (ids, img) = self.policy.prompt(state)?;
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

    /// A vocabulary-sized row of 0 with −∞ at the vision placeholders and end-of-turn: what
    /// `generate` adds to the logits.
    pub fn ban(&self) -> Result<Tensor> {
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

    /// guirl's AdamW over the adapters, with the inputs' learning rate and weight decay.
    pub fn optimizer(&self, inputs: &Inputs) -> Result<AdamW> {
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
