//! `VlmPolicy`: a small vision-language policy in Candle that looks at the screenshot
//! and the instruction and writes an action token by token under a grammar.
//!
//! - [`config`]: sizes and the action space ([`VlmConfig`], presets tiny/small/base).
//! - [`tokens`]: the action vocabulary, coordinate bins and the decoding [`Grammar`].
//! - [`model`]: the network (conv-stem ViT + byte encoder → action decoder), built from
//!   the shared `layers` (linear layer, init scale, mask value).
//! - CPU kernels with a fused backward (softmax, LayerNorm, GELU, bias add) are in
//!   [`crate::nn::custom_ops`].
//! - [`inputs`]: states and actions → tensors ([`PreparedBatch`]); the declared inputs
//!   beside the screenshot and the instruction are [`elements`] (one token per visible
//!   element) and [`history`] (the last actions).
//! - [`old_config`]: guirl 0.1's per-feature switches, read into the new form or refused.
//! - [`speed`]: training/acting throughput measurement (used by `benches/policy_speed.rs`).
//!
//! Log-probs, in `act` and in [`VlmPolicy::log_probs`] alike, are taken on
//! `logits / temperature` with disallowed tokens masked out, so the PPO ratio of a fresh
//! rollout is exactly 1.
//!
//! Training speed: the fused kernels live in this crate, so build it optimised for
//! training (`--release`, or `opt-level` ≥ 2 for `guirl` in the dev profile); in an
//! unoptimised build they run several times slower than the rest of the step.

pub mod config;
pub mod copy;
pub mod elements;
#[cfg(test)]
mod elements_tests;
pub mod history;
pub(crate) mod init;
pub mod inputs;
pub(crate) mod layers;
#[cfg(test)]
mod memory_tests;
pub mod model;
pub mod old_config;
#[cfg(test)]
mod old_config_tests;
mod pointer;
pub mod speed;
#[cfg(test)]
mod tests;
pub mod tokens;
pub mod words;

pub use config::{ActionSpaceConfig, Input, Inputs, VlmConfig};
pub use inputs::PreparedBatch;
pub use model::VlmModel;
pub use tokens::{ActionVocab, Grammar};

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{VarBuilder, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

use super::{Decision, Policy, Sampling, TrainablePolicy};
use crate::env::{GuiAction, ScreenState};
pub use crate::policy::TokenScores;

/// Weights file inside a checkpoint folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Architecture file inside a checkpoint folder.
pub const CONFIG_FILE: &str = "config.json";

/// The trainable vision-language policy. See the module docs.
pub struct VlmPolicy {
    cfg: VlmConfig,
    vocab: ActionVocab,
    varmap: VarMap,
    model: VlmModel,
    device: Device,
    /// Sampling temperature (> 0); log-probs are computed on `logits / temperature`.
    pub temperature: f64,
    /// Take the most likely allowed token instead of sampling.
    pub greedy: bool,
    /// Base seed of the per-state sampling streams ([`Policy::act_keyed`]).
    seed: u64,
    /// Draws the stream keys of unkeyed [`Policy::act`] calls.
    rng: ChaCha8Rng,
}

impl VlmPolicy {
    /// A freshly initialised policy; the same `seed` gives the same weights and samples.
    pub fn new(cfg: VlmConfig, device: &Device, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let varmap = VarMap::new();
        let vb = init::seeded_var_builder(&varmap, seed, device);
        Self::build(cfg, varmap, vb, device, seed)
    }

    fn build(cfg: VlmConfig, varmap: VarMap, vb: VarBuilder, device: &Device, seed: u64) -> Result<Self> {
        let copy_positions = if cfg.copy { cfg.max_instruction_bytes } else { 0 };
        let vocab = ActionVocab::with_copy(&cfg.actions, copy_positions)?;
        let model = VlmModel::new(&cfg, vocab.size(), vb).context("building the VLM")?;
        Ok(VlmPolicy {
            cfg,
            vocab,
            varmap,
            model,
            device: device.clone(),
            temperature: 1.0,
            greedy: false,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5a3b_1e00_0001),
        })
    }

    /// The architecture.
    pub fn config(&self) -> &VlmConfig {
        &self.cfg
    }

    /// The action vocabulary (to encode/decode actions, build grammars).
    pub fn vocab(&self) -> &ActionVocab {
        &self.vocab
    }

    /// The network.
    pub fn model(&self) -> &VlmModel {
        &self.model
    }

    /// Where the weights live.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The weight store (for saving, or an optimizer that wants names).
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// Every trainable Var, sorted by name.
    pub fn vars(&self) -> Vec<Var> {
        self.named_vars().into_iter().map(|(_, v)| v).collect()
    }

    /// Every trainable Var with its name, sorted by name.
    pub fn named_vars(&self) -> Vec<(String, Var)> {
        let data = self.varmap.data().lock().expect("VarMap lock poisoned");
        let mut v: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Number of trainable parameters.
    pub fn num_params(&self) -> usize {
        self.vars().iter().map(|v| v.elem_count()).sum()
    }

    /// Re-seed the sampling generator.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5a3b_1e00_0001);
    }

    /// The generator of one sampling stream: the base seed mixed with the state's key.
    fn stream(&self, key: u64) -> ChaCha8Rng {
        crate::policy::trainable::stream_rng(self.seed ^ 0x5eed_5a3b_1e00_0001, key)
    }

    /// Coordinate bins finer than the screenshot's pixels make two bins decode to one
    /// pixel, so a sampled token would not survive decode∘encode: refuse them.
    fn check_bins(&self, w: u32, h: u32) -> Result<()> {
        let a = &self.cfg.actions;
        ensure!(
            a.x_bins as u64 <= u64::from(w) && a.y_bins as u64 <= u64::from(h),
            "the policy's coordinate bins ({} x {}) exceed the {w}x{h} screenshot: set [model] \
             x_bins <= {w} and y_bins <= {h}",
            a.x_bins,
            a.y_bins
        );
        Ok(())
    }

    /// Per-token scores of token sequences (see [`TrainablePolicy::score`]).
    pub fn score_tokens(&self, states: &[ScreenState], tokens: &[Vec<u32>]) -> Result<TokenScores> {
        ensure!(
            states.len() == tokens.len(),
            "{} states but {} token sequences: score needs one sequence per state",
            states.len(),
            tokens.len()
        );
        let sources = inputs::copy_sources(states, &self.cfg);
        self.score(&PreparedBatch {
            encoder: inputs::encoder_inputs(states, &self.cfg, &self.device)?,
            actions: inputs::action_batch(&self.vocab, tokens, &sources, &self.device)?,
        })
    }

    /// Tensors for scoring `actions` (one per state); cache it across PPO epochs.
    pub fn prepare(&self, states: &[ScreenState], actions: &[GuiAction]) -> Result<PreparedBatch> {
        let sources = inputs::copy_sources(states, &self.cfg);
        let seqs = inputs::encode_actions(&self.vocab, states, actions, &sources)?;
        Ok(PreparedBatch {
            encoder: inputs::encoder_inputs(states, &self.cfg, &self.device)?,
            actions: inputs::action_batch(&self.vocab, &seqs, &sources, &self.device)?,
        })
    }

    /// Differentiable per-token log-probs and entropies of a prepared batch.
    pub fn score(&self, batch: &PreparedBatch) -> Result<TokenScores> {
        let (enc, act) = (&batch.encoder, &batch.actions);
        let mem = self.model.encode(enc)?;
        let hidden = self.model.decode(&mem, &act.inputs)?;
        let z = ((self.model.logits(&hidden, &mem, &act.inputs)? / self.temperature)? + &act.grammar_mask)?;
        let lsm = candle_nn::ops::log_softmax(&z, D::Minus1)?;
        let logp = lsm.gather(&act.targets.unsqueeze(2)?, 2)?.squeeze(2)?;
        let entropy = (lsm.exp()? * &lsm)?.sum(D::Minus1)?.neg()?;
        Ok(TokenScores { logp: (logp * &act.mask)?, entropy: (entropy * &act.mask)?, mask: act.mask.clone() })
    }

    /// Per-token log-probs of `actions` taken in `states`, differentiable w.r.t. the Vars.
    pub fn log_probs(&self, states: &[ScreenState], actions: &[GuiAction]) -> Result<TokenScores> {
        self.score(&self.prepare(states, actions)?)
    }

    /// An independent copy of the weights (new storage), e.g. a frozen reference policy
    /// or the old policy of a PPO step. Same temperature, greedy flag and RNG state.
    pub fn frozen_copy(&self) -> Result<VlmPolicy> {
        let map = VarMap::new();
        {
            let mut data = map.data().lock().expect("VarMap lock poisoned");
            for (name, var) in self.named_vars() {
                data.insert(name, Var::from_tensor(&var.as_tensor().copy()?)?);
            }
        }
        let vb = VarBuilder::from_varmap(&map, DType::F32, &self.device);
        let mut copy = Self::build(self.cfg.clone(), map, vb, &self.device, 0)?;
        copy.temperature = self.temperature;
        copy.greedy = self.greedy;
        copy.seed = self.seed;
        copy.rng = self.rng.clone();
        Ok(copy)
    }

    /// Write `dir/model.safetensors` (weights) and `dir/config.json` (architecture).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create checkpoint folder {}", dir.display()))?;
        let weights = dir.join(WEIGHTS_FILE);
        self.varmap.save(&weights).with_context(|| format!("cannot write weights {}", weights.display()))?;
        let cfg = dir.join(CONFIG_FILE);
        std::fs::write(&cfg, serde_json::to_string_pretty(&self.cfg)?)
            .with_context(|| format!("cannot write {}", cfg.display()))
    }

    /// Read a folder written by [`VlmPolicy::save`].
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        if !dir.is_dir() {
            bail!("checkpoint folder {} does not exist", dir.display());
        }
        let cfg_path = dir.join(CONFIG_FILE);
        if !cfg_path.is_file() {
            bail!(
                "checkpoint folder {} has no {CONFIG_FILE} (the model architecture that VlmPolicy::save writes)",
                dir.display()
            );
        }
        let cfg = VlmConfig::from_file(&cfg_path)?;
        let weights = dir.join(WEIGHTS_FILE);
        if !weights.is_file() {
            bail!(
                "checkpoint folder {} has no {WEIGHTS_FILE} (the weights that VlmPolicy::save writes)",
                dir.display()
            );
        }
        let policy = Self::new(cfg, device, 0)?;
        policy.load_weights(&weights, device)?;
        Ok(policy)
    }

    /// Overwrite every weight with the tensor of the same name in a safetensors file
    /// (extra tensors are ignored; a missing one or another shape is an error).
    pub fn load_weights(&self, weights: &Path, device: &Device) -> Result<()> {
        let tensors = candle_core::safetensors::load(weights, device)
            .with_context(|| format!("cannot read weights {}", weights.display()))?;
        let vars = self.named_vars();
        let missing: Vec<&str> =
            vars.iter().map(|(n, _)| n.as_str()).filter(|n| !tensors.contains_key(*n)).collect();
        if !missing.is_empty() {
            bail!(
                "{} lacks {} tensor(s) that the architecture in {CONFIG_FILE} needs (first: {}); \
                 were the weights saved with another config?",
                weights.display(),
                missing.len(),
                missing[..missing.len().min(5)].join(", ")
            );
        }
        for (name, var) in &vars {
            let t = &tensors[name];
            ensure!(
                t.shape() == var.shape(),
                "{}: tensor {name} has shape {:?} but the architecture in {CONFIG_FILE} needs {:?}",
                weights.display(),
                t.dims(),
                var.dims()
            );
            var.set(&t.to_dtype(DType::F32)?)?;
        }
        Ok(())
    }

    /// Choose a token among the allowed ones from one row of raw logits; returns the
    /// token and its log-prob under `logits / temperature` restricted to `allowed`.
    fn choose(&self, rng: &mut ChaCha8Rng, logits: &[f32], allowed: &[u32]) -> (u32, f32) {
        let inv_t = (1.0 / self.temperature) as f32;
        let z: Vec<f64> = allowed.iter().map(|&t| f64::from(logits[t as usize] * inv_t)).collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = z.iter().map(|v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        let pick = if self.greedy {
            z.iter().position(|&v| v == max).unwrap_or(0)
        } else {
            let mut u = rng.gen::<f64>() * sum;
            let mut k = z.len() - 1;
            for (i, v) in z.iter().enumerate() {
                u -= (v - max).exp();
                if u < 0.0 {
                    k = i;
                    break;
                }
            }
            k
        };
        (allowed[pick], (z[pick] - lse) as f32)
    }
}

impl Policy for VlmPolicy {
    fn name(&self) -> String {
        let c = &self.cfg;
        format!(
            "vlm(d{} enc{} dec{} {}x{})",
            c.d_model, c.encoder_layers, c.decoder_layers, c.image_width, c.image_height
        )
    }

    fn info(&self) -> serde_json::Value {
        serde_json::json!({ "name": self.name(), "device": crate::policy::device::name_of(&self.device) })
    }

    fn act(&mut self, states: &[ScreenState]) -> Result<Vec<Decision>> {
        let keys: Vec<u64> = states.iter().map(|_| self.rng.gen()).collect();
        self.act_keyed(states, &keys)
    }

    /// Encode the batch once, then one decoder pass per token position for the whole
    /// batch, sampling each state's next token among those its grammar allows, from the
    /// state's own stream.
    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> Result<Vec<Decision>> {
        ensure!(keys.len() == states.len(), "{} keys for {} states", keys.len(), states.len());
        ensure!(self.temperature > 0.0, "VlmPolicy temperature must be positive, it is {}", self.temperature);
        if states.is_empty() {
            return Ok(Vec::new());
        }
        for s in states {
            let (w, h) = s.screenshot.dimensions();
            self.check_bins(w, h)?;
        }
        let b = states.len();
        let mut rngs: Vec<ChaCha8Rng> = keys.iter().map(|&k| self.stream(k)).collect();
        let enc = inputs::encoder_inputs(states, &self.cfg, &self.device)?;
        let mem = self.model.encode(&enc)?;
        let vocab = self.vocab.clone();
        let sources = inputs::copy_sources(states, &self.cfg);
        let mut grammars: Vec<Grammar> = sources.iter().map(|src| vocab.grammar_in(src.as_ref())).collect();
        let mut toks: Vec<Vec<u32>> = vec![Vec::new(); b];
        let mut lps: Vec<Vec<f32>> = vec![Vec::new(); b];
        for t in 0..vocab.max_tokens() {
            if grammars.iter().all(Grammar::is_complete) {
                break;
            }
            let mut input = Vec::with_capacity(b * (t + 1));
            for seq in &toks {
                input.push(tokens::BOS);
                input.extend((0..t).map(|j| seq.get(j).copied().unwrap_or(tokens::END)));
            }
            let input = Tensor::from_vec(input, (b, t + 1), &self.device)?;
            let last = self.model.decode(&mem, &input)?.narrow(1, t, 1)?;
            let logits = self
                .model
                .logits(&last, &mem, &input.narrow(1, t, 1)?)?
                .squeeze(1)?
                .to_dtype(DType::F32)?
                .to_vec2::<f32>()?;
            for i in 0..b {
                if grammars[i].is_complete() {
                    continue;
                }
                let (tok, lp) = self.choose(&mut rngs[i], &logits[i], &grammars[i].allowed());
                grammars[i].advance(tok)?;
                toks[i].push(tok);
                lps[i].push(lp);
            }
        }
        states
            .iter()
            .zip(toks.iter().zip(lps))
            .zip(&sources)
            .map(|((s, (seq, token_logprobs)), src)| {
                let (w, h) = s.screenshot.dimensions();
                let action = vocab.decode_in(seq, w, h, src.as_ref())?;
                Ok(Decision {
                    action,
                    logprob: token_logprobs.iter().sum(),
                    token_logprobs,
                    tokens: seq.clone(),
                    answer: None,
                    failure: None,
                })
            })
            .collect()
    }
}

impl TrainablePolicy for VlmPolicy {
    fn reads_previous_screenshot(&self) -> bool {
        self.cfg.inputs.previous_frame
    }
    fn sampling(&self) -> Sampling {
        Sampling { temperature: self.temperature, greedy: self.greedy, seed: self.seed }
    }

    fn set_sampling(&mut self, s: Sampling) {
        self.temperature = s.temperature;
        self.greedy = s.greedy;
        self.set_seed(s.seed);
    }

    fn encode(&self, state: &ScreenState, action: &GuiAction) -> Result<Vec<u32>> {
        let (w, h) = state.screenshot.dimensions();
        self.check_bins(w, h)?;
        let src = inputs::copy_sources(std::slice::from_ref(state), &self.cfg).pop().flatten();
        self.vocab.encode_in(action, w, h, src.as_ref())
    }

    fn prompt_tokens(&self, state: &ScreenState) -> Result<usize> {
        // the encoder's sequence less its padding and empty slots, which the key mask hides
        let enc = inputs::encoder_inputs(std::slice::from_ref(state), &self.cfg, &Device::Cpu)?;
        Ok(enc.key_mask.flatten_all()?.to_vec1::<f32>()?.iter().filter(|&&m| m == 0.0).count())
    }

    fn score(&self, states: &[ScreenState], tokens: &[Vec<u32>]) -> Result<TokenScores> {
        self.score_tokens(states, tokens)
    }

    fn trainable_vars(&self) -> Vec<(String, Var)> {
        self.named_vars()
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn save(&self, dir: &Path) -> Result<()> {
        VlmPolicy::save(self, dir)
    }

    fn load(&mut self, dir: &Path) -> Result<()> {
        let cfg = VlmConfig::from_file(&dir.join(CONFIG_FILE))?;
        ensure!(
            cfg == self.cfg,
            "{} holds another architecture than this policy's; train it with the config it was made with",
            dir.display()
        );
        self.load_weights(&dir.join(WEIGHTS_FILE), &self.device.clone())
    }

    fn reference(&self) -> Result<Box<dyn TrainablePolicy>> {
        Ok(Box::new(self.frozen_copy()?))
    }

    fn describe(&self) -> String {
        format!("{} {} parameters", self.name(), self.num_params())
    }

    fn token_text(&self, token: u32) -> String {
        self.vocab.token_name(token)
    }
}
