//! PPO's critic: a value network V(s) over [`ScreenState`], its loss, its own optimizer,
//! and the two steps it adds to an iteration (`algo.kind = "ppo"`, settings in `[algo.ppo]`):
//!
//! ```text
//! values   V(s_t) of every observation of every counted rollout, the final one included
//! adv, R   GAE over the per-step rewards (advantage/gae.rs); truncated rollouts bootstrap
//! critic   value_epochs × minibatches of ½·max((V − R)², (clip(V, V_old ± c) − R)²) → AdamW(value_lr)
//! policy   the usual clipped-surrogate update on the advantages (none in the first
//!          `critic_warmup` iterations: only the critic trains then)
//! ```
//!
//! **Why a separate network, not a value head on the policy's encoder.** (1) The seam:
//! the trainer knows the policy only as a [`crate::policy::TrainablePolicy`] (log-probs of
//! token ids); a head on its encoder would need a new method on every implementation (the
//! small VLM and a pretrained backbone with LoRA alike), and the value head's weights
//! would travel with every policy checkpoint and every frozen KL reference. (2)
//! Interference: the value loss's gradient would move the encoder the actor reads, at
//! its own learning rate and scale; `critic_warmup` (train only the critic) would then
//! change the policy too, unless the encoder were frozen for it. (3) Cost, measured on
//! CPU (2 shared cores, release build; `critic_cost` below, `cargo test --release --lib
//! critic_cost -- --ignored --nocapture`, two runs, per state, batch 32):
//!
//! | preset | policy score + backward | policy encoder forward | critic inputs + forward | critic forward + backward |
//! | --- | --- | --- | --- | --- |
//! | tiny (47k / critic 89k params) | 4.3–7.7 ms | 1.1–1.5 ms | 0.3–0.4 ms | 0.3 ms |
//! | small (358k / critic 269k params) | 40–68 ms | 12–16 ms | 1.1–1.8 ms | 2.1–3.0 ms |
//!
//! Training the separate critic adds about 5 % to a policy epoch (small); a head on the
//! shared encoder would be nearly free in the update, but the values of every
//! observation (the final ones included, which the policy never encodes, and rollouts
//! keep no encoder output) would cost an encoder pass, about 10× the critic's forward.
//! So the separate network is the cheaper one here, as well as the one that keeps the
//! seam and the actor's features clean. Not measured: whether the policy's features
//! would give better values on hard tasks.
//!
//! The network ([`network`]) is the screen encoder it shares with the reward model
//! ([`crate::policy::screen_encoder`]: two non-overlapping convolutions over the screenshot
//! at the policy's resolution and a bag of hashed instruction words) under a small MLP.
//! It is saved in each checkpoint folder beside the policy (`critic.safetensors`,
//! `critic.json`, `critic_optimizer.safetensors`), so `--resume` continues with the same
//! critic and the same optimizer moments.

pub mod loss;
pub mod network;

pub use loss::{explained_variance, value_loss, ValueLossStats};
pub use network::{critic_inputs, CriticConfig, CriticInputs, ValueNet};

use super::advantage::gae::{gae_advantages, GaeBatch, GaeParams, StepValues};
use super::config::{AlgoConfig, PpoConfig, TrainConfig};
use super::optim::{clip_grad_norm, AdamW, AdamWConfig};
use super::seeds::rng_for;
use crate::env::ScreenState;
use crate::rollout::{Recorded, TrainingBatch};
use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use rand::seq::SliceRandom;
use std::path::Path;

/// The critic's weights in a checkpoint folder.
pub const CRITIC_WEIGHTS: &str = "critic.safetensors";
/// The critic's architecture in a checkpoint folder.
pub const CRITIC_CONFIG: &str = "critic.json";
/// The critic's optimizer state in a checkpoint folder.
pub const CRITIC_OPTIMIZER: &str = "critic_optimizer.safetensors";

/// States per forward pass when only values are wanted.
const PREDICT_CHUNK: usize = 128;

/// Check `[algo.ppo]`'s values (`iterations`: `run.iterations`); each bad one is passed to
/// `check` as `(false, message naming the key)`.
pub(crate) fn check_options(p: &PpoConfig, iterations: u64, check: &mut dyn FnMut(bool, String)) {
    check(
        (0.0..=1.0).contains(&p.gae_lambda),
        format!("algo.ppo.gae_lambda must be in [0, 1], got {}", p.gae_lambda),
    );
    check(
        p.value_lr > 0.0 && p.value_lr <= 1.0,
        format!("algo.ppo.value_lr must be in (0, 1], got {}", p.value_lr),
    );
    if let Some(c) = p.value_clip {
        check(c > 0.0 && c.is_finite(), format!("algo.ppo.value_clip must be > 0, got {c}"));
    }
    if let Some(e) = p.value_epochs {
        check(e >= 1, "algo.ppo.value_epochs must be at least 1".into());
    }
    check(
        p.critic_warmup < iterations,
        format!(
            "algo.ppo.critic_warmup ({}) must be less than run.iterations ({iterations}): the policy would never train",
            p.critic_warmup
        ),
    );
}

/// One observation the critic regresses on: its row in [`PpoBatch::inputs`], its GAE
/// return and its value at collection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueTarget {
    /// Row of the observation in the batch's inputs.
    pub row: usize,
    /// `R_t = A_t + V_old(s_t)`.
    pub ret: f64,
    /// `V_old(s_t)`.
    pub old: f64,
}

/// An iteration's PPO data: GAE's advantages and returns, and the critic's training rows.
pub struct PpoBatch {
    /// Advantages (what the policy trains on), returns and statistics.
    pub gae: GaeBatch,
    /// Every observation valued (acted on or final), as the critic's inputs.
    pub inputs: CriticInputs,
    /// The observations acted on, with their targets.
    pub targets: Vec<ValueTarget>,
}

/// What the critic's update did, and how good its values were before it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ValueStats {
    /// Mean value loss over the update's minibatches (sample-weighted, finite ones).
    pub loss: f64,
    /// Fraction of samples on the clipped branch of the value loss.
    pub clip_frac: f64,
    /// Mean gradient norm before clipping.
    pub grad_norm: f64,
    /// Optimizer steps taken.
    pub optimizer_steps: u64,
    /// Minibatches skipped for a non-finite loss or gradient norm.
    pub skipped_steps: u64,
    /// Mean V_old over the observations acted on.
    pub value_mean: f64,
    /// Mean GAE return over them.
    pub return_mean: f64,
    /// `1 − Var(R − V_old) / Var(R)` over them (`None`: the returns do not vary).
    pub explained_variance: Option<f64>,
}

/// The critic: network, weights and optimizer. See the module docs.
pub struct Critic {
    cfg: CriticConfig,
    varmap: VarMap,
    net: ValueNet,
    opt: AdamW,
    device: Device,
}

impl Critic {
    /// A fresh critic (weights drawn from `seed`) with its own AdamW.
    pub fn new(cfg: CriticConfig, device: &Device, seed: u64, opt: AdamWConfig) -> Result<Critic> {
        let varmap = VarMap::new();
        let vb = crate::policy::vlm::init::seeded_var_builder(&varmap, seed, device);
        let net = ValueNet::new(&cfg, vb).context("building the critic")?;
        let mut vars: Vec<(String, Var)> =
            varmap.data().lock().expect("VarMap lock").iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let opt = AdamW::new(vars, opt)?;
        Ok(Critic { cfg, varmap, net, opt, device: device.clone() })
    }

    /// The critic of a run that trains PPO with `ppo`: sized for its policy, seeded from
    /// the run's seed, and read back from `checkpoint` (a resume) when that holds one.
    pub fn for_run(
        cfg: &TrainConfig,
        ppo: &PpoConfig,
        device: &Device,
        checkpoint: Option<&Path>,
    ) -> Result<Critic> {
        let opt = AdamWConfig { lr: ppo.value_lr, weight_decay: cfg.algo.weight_decay, ..Default::default() };
        // A Qwen-VL policy has no small-policy architecture: its critic reads the screenshot
        // as the tiny preset's policy would (as before `[model]` had kinds).
        let basis = match cfg.model.small() {
            Some(s) => s.vlm_config()?,
            None => crate::policy::vlm::VlmConfig::tiny(),
        };
        let ccfg = CriticConfig::for_policy(&basis);
        let mut critic = Critic::new(ccfg, device, cfg.run.seed ^ 0xC217_1C5E_ED00_0000, opt)?;
        match checkpoint {
            Some(dir) if dir.join(CRITIC_WEIGHTS).is_file() => critic.load(dir)?,
            Some(dir) => tracing::warn!(
                "{} holds no critic ({CRITIC_WEIGHTS}; was it written by another algorithm?): PPO starts a fresh one",
                dir.display()
            ),
            None => {}
        }
        Ok(critic)
    }

    /// The architecture.
    pub fn config(&self) -> &CriticConfig {
        &self.cfg
    }

    /// The network.
    pub fn net(&self) -> &ValueNet {
        &self.net
    }

    /// Every weight with its name, sorted by name.
    pub fn named_vars(&self) -> Vec<(String, Var)> {
        let data = self.varmap.data().lock().expect("VarMap lock");
        let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &AdamW {
        &self.opt
    }

    /// The network's inputs for `states`.
    pub fn inputs(&self, states: &[ScreenState]) -> Result<CriticInputs> {
        critic_inputs(states, &self.cfg, &self.device)
    }

    /// V of every row of `x` (no update).
    pub fn predict(&self, x: &CriticInputs) -> Result<Vec<f64>> {
        let rows: Vec<usize> = (0..x.len()).collect();
        let mut out = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(PREDICT_CHUNK) {
            let v = self.net.forward(&x.select(chunk)?)?.detach().to_vec1::<f32>()?;
            out.extend(v.into_iter().map(f64::from));
        }
        Ok(out)
    }

    /// Value every observation of the counted rollouts (`batch`, grouped from `recs` as
    /// `index` says, with the training rewards), then GAE (see the module docs).
    pub fn gae(
        &self,
        algo: &AlgoConfig,
        ppo: &PpoConfig,
        batch: &TrainingBatch,
        recs: &[Recorded],
        index: &[Vec<usize>],
    ) -> Result<PpoBatch> {
        // (group, rollout, t) of every observation: each one acted on, then the final one.
        let (mut states, mut at) = (Vec::new(), Vec::new());
        for (g, members) in index.iter().enumerate() {
            for (j, &k) in members.iter().enumerate() {
                let t = &recs[k].trajectory;
                if t.outcome.status.is_infrastructure_failure() {
                    continue;
                }
                for (i, frame) in recs[k].frames.iter().enumerate().take(t.steps.len() + 1) {
                    states.push(t.state_at(i, frame.clone(), None));
                    at.push((g, j, i));
                }
            }
        }
        let inputs = self.inputs(&states)?;
        drop(states);
        let v = self.predict(&inputs)?;
        let mut values: StepValues = index
            .iter()
            .map(|m| m.iter().map(|&k| Some(vec![0.0; recs[k].trajectory.steps.len() + 1])).collect())
            .collect();
        for (&(g, j, i), &x) in at.iter().zip(&v) {
            if let Some(row) = values[g][j].as_mut() {
                row[i] = x;
            }
        }
        let gae = gae_advantages(batch, &values, GaeParams::from_algo(algo, ppo));
        let targets = at
            .iter()
            .enumerate()
            .filter_map(|(row, &(g, j, i))| {
                let ret = gae.returns[g][j].as_ref()?.get(i)?;
                Some(ValueTarget { row, ret: *ret, old: v[row] })
            })
            .collect();
        Ok(PpoBatch { gae, inputs, targets })
    }

    /// `value_epochs` passes of shuffled minibatches (`minibatch` observations each) of
    /// the value loss, each an AdamW step after clipping the gradient norm to
    /// `max_grad_norm`. A minibatch with a non-finite loss or gradient norm is skipped.
    pub fn train(
        &mut self,
        p: &PpoBatch,
        algo: &AlgoConfig,
        ppo: &PpoConfig,
        seed: u64,
        iteration: u64,
    ) -> Result<ValueStats> {
        let n = p.targets.len().max(1) as f64;
        let old: Vec<f64> = p.targets.iter().map(|t| t.old).collect();
        let ret: Vec<f64> = p.targets.iter().map(|t| t.ret).collect();
        let mut st = ValueStats {
            value_mean: old.iter().sum::<f64>() / n,
            return_mean: ret.iter().sum::<f64>() / n,
            explained_variance: explained_variance(&old, &ret),
            ..Default::default()
        };
        let (mut loss_sum, mut clip_sum, mut seen, mut norms) = (0.0, 0.0, 0usize, Vec::new());
        for epoch in 0..ppo.value_epochs.unwrap_or(algo.epochs) {
            let mut order: Vec<usize> = (0..p.targets.len()).collect();
            order.shuffle(&mut rng_for(seed, iteration, 300 + epoch as u64));
            for chunk in order.chunks(algo.minibatch.max(1)) {
                let rows: Vec<usize> = chunk.iter().map(|&k| p.targets[k].row).collect();
                let column = |f: fn(&ValueTarget) -> f64| {
                    let v: Vec<f32> = chunk.iter().map(|&k| f(&p.targets[k]) as f32).collect();
                    Tensor::from_vec(v, chunk.len(), &self.device)
                };
                let v = self.net.forward(&p.inputs.select(&rows)?)?;
                let (loss, ls) = value_loss(&v, &column(|t| t.old)?, &column(|t| t.ret)?, ppo.value_clip)?;
                if !ls.loss.is_finite() {
                    st.skipped_steps += 1;
                    continue;
                }
                let mut grads = loss.backward()?;
                let norm = clip_grad_norm(&mut grads, self.opt.vars(), algo.max_grad_norm)?;
                if !norm.is_finite() {
                    st.skipped_steps += 1;
                    continue;
                }
                self.opt.step(&grads)?;
                norms.push(norm);
                loss_sum += ls.loss * chunk.len() as f64;
                clip_sum += ls.clip_frac * chunk.len() as f64;
                seen += chunk.len();
            }
        }
        if st.skipped_steps > 0 {
            tracing::warn!(
                "critic: {} minibatch(es) skipped: non-finite loss or gradient norm",
                st.skipped_steps
            );
        }
        st.optimizer_steps = norms.len() as u64;
        st.grad_norm = norms.iter().sum::<f64>() / norms.len().max(1) as f64;
        st.loss = loss_sum / seen.max(1) as f64;
        st.clip_frac = clip_sum / seen.max(1) as f64;
        Ok(st)
    }

    /// Write the weights, the architecture and the optimizer state into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let weights = dir.join(CRITIC_WEIGHTS);
        self.varmap.save(&weights).with_context(|| format!("cannot write {}", weights.display()))?;
        let cfg = dir.join(CRITIC_CONFIG);
        std::fs::write(&cfg, serde_json::to_string_pretty(&self.cfg)?)
            .with_context(|| format!("cannot write {}", cfg.display()))?;
        self.opt.save(&dir.join(CRITIC_OPTIMIZER))
    }

    /// Read what [`Critic::save`] wrote into `dir`; another architecture is an error.
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let cfg_path = dir.join(CRITIC_CONFIG);
        let text =
            std::fs::read_to_string(&cfg_path).with_context(|| format!("reading {}", cfg_path.display()))?;
        let theirs: CriticConfig = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a critic config", cfg_path.display()))?;
        ensure!(
            theirs == self.cfg,
            "{} holds a critic of another architecture ({theirs:?}) than this run's ({:?}); \
             resume with the config the run was made with",
            dir.display(),
            self.cfg
        );
        let weights = dir.join(CRITIC_WEIGHTS);
        let tensors = candle_core::safetensors::load(&weights, &self.device)
            .with_context(|| format!("cannot read {}", weights.display()))?;
        for (name, var) in self.named_vars() {
            let t =
                tensors.get(&name).with_context(|| format!("{} has no tensor {name}", weights.display()))?;
            ensure!(
                t.dims() == var.dims(),
                "{}: {name} has shape {:?}, the critic needs {:?}",
                weights.display(),
                t.dims(),
                var.dims()
            );
            var.set(&t.to_dtype(DType::F32)?)?;
        }
        self.opt.load(&dir.join(CRITIC_OPTIMIZER))
    }
}

#[cfg(test)]
mod tests;
