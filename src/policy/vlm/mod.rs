//! `VlmPolicy`: a small vision-language policy in Candle that looks at the screenshot
//! and the instruction and writes an action token by token under a grammar.
//!
//! - [`config`]: sizes and the action space ([`VlmConfig`], presets tiny/small/base).
//! - [`tokens`]: the action vocabulary, coordinate bins and the decoding [`Grammar`].
//! - [`model`]: the network (conv-stem ViT + byte encoder → action decoder).
//! - [`fused`]: CPU kernels with a fused backward (softmax, LayerNorm, GELU, bias add).
//! - [`inputs`]: states and actions → tensors ([`PreparedBatch`]).
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
pub mod fused;
mod init;
pub mod inputs;
pub mod model;
mod pointer;
pub mod speed;
#[cfg(test)]
mod tests;
pub mod tokens;

pub use config::{ActionSpaceConfig, VlmConfig};
pub use inputs::PreparedBatch;
pub use model::VlmModel;
pub use tokens::{ActionVocab, Grammar};

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{VarBuilder, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

use super::{Decision, Policy};
use crate::env::{GuiAction, ScreenState};

/// Weights file inside a checkpoint folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Architecture file inside a checkpoint folder.
pub const CONFIG_FILE: &str = "config.json";

/// Per-token scores of given actions; all [B, T], zero on padding.
#[derive(Debug, Clone)]
pub struct TokenScores {
    /// log π(token | state, earlier tokens), on temperature-scaled, grammar-masked logits.
    pub logp: Tensor,
    /// 1 for real tokens, 0 for padding.
    pub mask: Tensor,
    /// Entropy of the (scaled, masked) next-token distribution at each position.
    pub entropy: Tensor,
}

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
        let vocab = ActionVocab::new(&cfg.actions)?;
        let model = VlmModel::new(&cfg, vocab.size(), vb).context("building the VLM")?;
        Ok(VlmPolicy {
            cfg,
            vocab,
            varmap,
            model,
            device: device.clone(),
            temperature: 1.0,
            greedy: false,
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
        self.rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5a3b_1e00_0001);
    }

    /// Tensors for scoring `actions` (one per state); cache it across PPO epochs.
    pub fn prepare(&self, states: &[ScreenState], actions: &[GuiAction]) -> Result<PreparedBatch> {
        let seqs = inputs::encode_actions(&self.vocab, states, actions)?;
        Ok(PreparedBatch {
            encoder: inputs::encoder_inputs(states, &self.cfg, &self.device)?,
            actions: inputs::action_batch(&self.vocab, &seqs, &self.device)?,
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
    fn choose(&mut self, logits: &[f32], allowed: &[u32]) -> (u32, f32) {
        let inv_t = (1.0 / self.temperature) as f32;
        let z: Vec<f64> = allowed.iter().map(|&t| f64::from(logits[t as usize] * inv_t)).collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = z.iter().map(|v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        let pick = if self.greedy {
            z.iter().position(|&v| v == max).unwrap_or(0)
        } else {
            let mut u = self.rng.gen::<f64>() * sum;
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

    /// Encode the batch once, then one decoder pass per token position for the whole
    /// batch, sampling each state's next token among those its grammar allows.
    fn act(&mut self, states: &[ScreenState]) -> Result<Vec<Decision>> {
        ensure!(self.temperature > 0.0, "VlmPolicy temperature must be positive, it is {}", self.temperature);
        if states.is_empty() {
            return Ok(Vec::new());
        }
        let b = states.len();
        let enc = inputs::encoder_inputs(states, &self.cfg, &self.device)?;
        let mem = self.model.encode(&enc)?;
        let vocab = self.vocab.clone();
        let mut grammars: Vec<Grammar> = (0..b).map(|_| vocab.grammar()).collect();
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
                let (tok, lp) = self.choose(&logits[i], &grammars[i].allowed());
                grammars[i].advance(tok)?;
                toks[i].push(tok);
                lps[i].push(lp);
            }
        }
        states
            .iter()
            .zip(toks.iter().zip(lps))
            .map(|(s, (seq, token_logprobs))| {
                let (w, h) = s.screenshot.dimensions();
                let action = vocab.decode(seq, w, h)?;
                Ok(Decision { action, logprob: token_logprobs.iter().sum(), token_logprobs })
            })
            .collect()
    }
}
