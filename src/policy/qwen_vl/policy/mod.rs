//! A Qwen-VL checkpoint as a trainable policy: it reads the screenshot and the instruction
//! in its chat format, answers with an action in text, and trains through LoRA adapters.
//!
//! - The prompt is the `openai:` policy's: a system text (a file the user can replace;
//!   `{frame}` becomes the coordinate frame's sentence) and a user turn with the screenshot
//!   and the instruction, screenshot size and earlier actions, written in the model's frame.
//! - The answer is read by the grammar the `openai:` policy uses (guirl text, Qwen
//!   `computer_use` tool calls, UI-TARS). Coordinates are 0–1000 relative for Qwen3-VL and
//!   pixels of the resized image for Qwen2.5-VL, unless `coords` says otherwise. An answer
//!   with no action is an `invalid_action` step, its text and tokens kept.
//! - Behaviour cloning writes a demonstrated action as guirl text in that frame, then the
//!   end-of-turn token.
//! - Rollouts decode with KV caches in a session that states join and leave between
//!   token steps (continuous batching, `decode.rs`): each prompt runs alone (identical ones
//!   once, `prefill.rs`), the answers advance together in chunks of a fixed row count, so a
//!   result never depends on what shared its batch or when it joined (`batch_invariant =
//!   false` gives that up for speed: prompts run together, chunks unpadded). Training scores
//!   the prompt and the answer in one differentiable pass, the LM head only at the
//!   answer's positions.
//! - The vision tower is frozen, its output per screenshot cached across the update epochs
//!   of an iteration, unless `lora_vision_targets` gives it adapters (its output is then
//!   computed fresh, in the graph).
//! - The KL reference is the policy as it was when the reference was made (after behaviour
//!   cloning, the clone): the same base weights with a snapshot of the adapters.

use super::hub;
use super::model::text::KvCache;
use super::model::vision::VisionOutput;
use super::model::QwenVl;
pub use super::settings::{DecodeKernels, DecodeLora, DecodeWindow, QwenPolicySettings};
use super::train::lora::AdapterUse;
use super::Arch;
use crate::env::{GuiAction, ScreenState};
use crate::nn::decode::draw::{draw, Pick};
use crate::policy::api::coords::CoordMode;
use crate::policy::api::parse::parse_answer;
use crate::policy::api::prompt::DEFAULT_PROMPT;
use crate::policy::trainable::stream_rng;
use crate::policy::{Decision, Policy, PolicyFailure, Sampling, TokenScores, TrainablePolicy};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use rand::Rng;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

mod decode;
mod merged;
mod prefill;
mod prompt;
mod sample;

/// The file in a checkpoint folder that says which backbone its adapter belongs to.
pub const POLICY_FILE: &str = "qwen_policy.json";

/// A Qwen-VL backbone with LoRA adapters, as a [`TrainablePolicy`]. A clone shares the
/// model (weights and adapters) and the vision cache.
#[derive(Clone)]
pub struct QwenVlPolicy {
    model: Arc<QwenVl>,
    settings: QwenPolicySettings,
    coords: CoordMode,
    system: String,
    sampling: Sampling,
    /// Which adapter weights this policy runs: the live ones, or (the KL reference, the
    /// behaviour weights of an overlapped run) its own snapshot, taken when it was made.
    mode: AdapterUse,
    vision_cache: Arc<Mutex<HashMap<u64, Arc<VisionOutput>>>>,
    device: Device,
    eos: u32,
    /// 0, or −∞ at the vision tokens an answer may not contain (`[V]`).
    banned: Tensor,
}

mod score;

/// Vision outputs kept at most (screenshots of one iteration's update).
const VISION_CACHE: usize = 4096;

/// Each of `imgs` (`keys` theirs) once, in order, but those `skip` names.
fn distinct<'a>(
    keys: &[u64],
    imgs: &[&'a super::processor::ProcessedImage],
    skip: impl Fn(u64) -> bool,
) -> Vec<(u64, &'a super::processor::ProcessedImage)> {
    let mut out: Vec<(u64, &super::processor::ProcessedImage)> = Vec::new();
    for (&k, &img) in keys.iter().zip(imgs) {
        if !skip(k) && !out.iter().any(|(t, _)| *t == k) {
            out.push((k, img));
        }
    }
    out
}

/// The vision cache's key of a screenshot: its grid and pixels.
fn vision_key(img: &super::processor::ProcessedImage) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    img.grid.hash(&mut hasher);
    for v in &img.patches {
        v.to_bits().hash(&mut hasher);
    }
    hasher.finish()
}

impl QwenVlPolicy {
    /// Load the checkpoint `settings.path` names and attach fresh adapters (initialised
    /// from `seed`).
    pub fn new(mut settings: QwenPolicySettings, device: &Device, seed: u64) -> Result<Self> {
        settings.check()?;
        settings.check_on(device)?;
        // Absolute paths, so a saved checkpoint loads from any working directory.
        if !settings.path.starts_with("hf:") {
            if let Ok(abs) = std::fs::canonicalize(&settings.path) {
                settings.path = abs.display().to_string();
            }
        }
        if let Some(abs) = settings.prompt.as_ref().and_then(|p| std::fs::canonicalize(p).ok()) {
            settings.prompt = Some(abs);
        }
        let dir = hub::resolve(&settings.path)?;
        let dtype = if settings.dtype == "bf16" { DType::BF16 } else { DType::F32 };
        let mut model = QwenVl::load(&dir, dtype, device)
            .with_context(|| format!("model.path: cannot load the checkpoint {}", dir.display()))?;
        let want = if settings.backbone == "qwen3_vl" { Arch::Qwen3Vl } else { Arch::Qwen25Vl };
        if model.config.arch != want {
            bail!(
                "model.kind = {:?}, but {} holds a {} checkpoint; set kind = {:?} to match",
                settings.backbone,
                dir.display(),
                model.config.arch.kind(),
                model.config.arch.kind()
            );
        }
        model.attach_lora(&settings.lora(), seed)?;
        model.train_whole(&settings.train_modules)?;
        let coords = match &settings.coords {
            Some(c) => c.parse::<CoordMode>().map_err(|e| anyhow!("model.coords: {e}"))?,
            None => match want {
                Arch::Qwen3Vl => CoordMode::Rel1000,
                Arch::Qwen25Vl => CoordMode::SmartResize {
                    factor: model.config.image_factor() as u32,
                    min_pixels: model.processor.min_pixels,
                    max_pixels: model.processor.max_pixels,
                },
            },
        };
        let system = match &settings.prompt {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("model.prompt: cannot read the system prompt {}", p.display()))?,
            None => DEFAULT_PROMPT.to_string(),
        };
        let eos =
            model.config.eos_token_id.or_else(|| model.chat.token_id("<|im_end|>")).ok_or_else(|| {
                anyhow!("{}: no eos_token_id in config.json and no <|im_end|> token", dir.display())
            })?;
        // An answer is text: the vision placeholders are never sampled (nor scored).
        let c = &model.config;
        let mut ban = vec![0f32; c.text.vocab_size];
        for t in [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id] {
            if let Some(slot) = ban.get_mut(t as usize) {
                *slot = f32::NEG_INFINITY;
            }
        }
        let banned = Tensor::new(ban, device)?;
        Ok(QwenVlPolicy {
            banned,
            model: Arc::new(model),
            settings,
            coords,
            system,
            sampling: Sampling::default(),
            mode: AdapterUse::Live,
            vision_cache: Arc::new(Mutex::new(HashMap::new())),
            device: device.clone(),
            eos,
        })
    }

    /// Load a checkpoint folder written by [`TrainablePolicy::save`].
    pub fn load_dir(dir: &Path, device: &Device) -> Result<Self> {
        let path = dir.join(POLICY_FILE);
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let settings: QwenPolicySettings = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a Qwen-VL policy file", path.display()))?;
        let base = settings.path.clone();
        let mut p = Self::new(settings, device, 0).with_context(|| {
            format!(
                "{}: the base model it names (\"path\": {base:?}) did not load; if the model moved, set \
                 \"path\" there to where it is now",
                path.display()
            )
        })?;
        p.load(dir)?;
        Ok(p)
    }

    /// Whether a checkpoint folder holds a Qwen-VL policy.
    pub fn is_checkpoint(dir: &Path) -> bool {
        dir.join(POLICY_FILE).is_file()
    }

    /// The loaded model.
    pub fn model(&self) -> &QwenVl {
        &self.model
    }

    /// The answer's coordinate frame.
    pub fn coords(&self) -> CoordMode {
        self.coords
    }

    fn vision(&self, img: &super::processor::ProcessedImage) -> Result<Arc<VisionOutput>> {
        Ok(self.visions(&[img])?.remove(0))
    }

    /// The vision tower's output for each of `imgs`: from the cache where it is there, the
    /// rest encoded in one call (images of one size attend as one batch) and cached.
    fn visions(&self, imgs: &[&super::processor::ProcessedImage]) -> Result<Vec<Arc<VisionOutput>>> {
        let keys: Vec<u64> = imgs.iter().map(|img| vision_key(img)).collect();
        self.visions_keyed(imgs, &keys)
    }

    /// [`Self::visions`] of `imgs` whose keys ([`vision_key`]) the caller has already.
    fn visions_keyed(
        &self,
        imgs: &[&super::processor::ProcessedImage],
        keys: &[u64],
    ) -> Result<Vec<Arc<VisionOutput>>> {
        if self.model.vision.has_adapters() {
            // the tower's output depends on adapters that change every step, and on which
            // of them are switched on (the reference): computed fresh, in the graph, each
            // screenshot once (its states' gradients meet in its output), unless LoRA
            // dropout draws each state's own masks
            if self.model.text.pass().get().dropout_key.is_some() {
                return self.encode_split(imgs);
            }
            let todo = distinct(keys, imgs, |_| false);
            let encoded = self.encode_split(&todo.iter().map(|(_, img)| *img).collect::<Vec<_>>())?;
            let found: HashMap<u64, Arc<VisionOutput>> = todo.iter().map(|(k, _)| *k).zip(encoded).collect();
            return Ok(keys.iter().map(|k| found[k].clone()).collect());
        }
        let mut found: HashMap<u64, Arc<VisionOutput>> = {
            let cache = self.vision_cache.lock().expect("vision cache");
            keys.iter().filter_map(|k| Some((*k, cache.get(k)?.clone()))).collect()
        };
        // each missing screenshot once, however many states show it
        let todo = distinct(keys, imgs, |k| found.contains_key(&k));
        if !todo.is_empty() {
            let encoded = self.encode_split(&todo.iter().map(|(_, img)| *img).collect::<Vec<_>>())?;
            let mut cache = self.vision_cache.lock().expect("vision cache");
            if cache.len() + encoded.len() > VISION_CACHE {
                cache.clear();
            }
            for ((k, _), v) in todo.into_iter().zip(encoded) {
                cache.insert(k, v.clone());
                found.insert(k, v);
            }
        }
        Ok(keys.iter().map(|k| found[k].clone()).collect())
    }

    /// `imgs` through the vision tower in one call, cut back into one output per image.
    fn encode_split(&self, imgs: &[&super::processor::ProcessedImage]) -> Result<Vec<Arc<VisionOutput>>> {
        let (px, grids) = self.model.processor.batch(imgs, &self.device)?;
        let all = self.model.encode_images(&px, &grids)?;
        if imgs.len() == 1 {
            return Ok(vec![Arc::new(all)]);
        }
        let merge = self.model.config.vision.spatial_merge_size;
        let mut at = 0;
        let mut out = Vec::with_capacity(imgs.len());
        for img in imgs {
            let n = img.tokens(merge);
            out.push(Arc::new(VisionOutput {
                embeds: all.embeds.narrow(0, at, n)?,
                deepstack: all
                    .deepstack
                    .iter()
                    .map(|d| d.narrow(0, at, n))
                    .collect::<candle_core::Result<_>>()?,
            }));
            at += n;
        }
        Ok(out)
    }

    /// Run `f` with the adapter weights this policy uses, on this thread (the model is
    /// shared with the reference and the behaviour copy, which choose their own).
    fn with_adapters<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _use = self.model.lora().map(|(_, s)| s.scope(self.mode.clone()));
        f()
    }

    /// The next token of each answer, drawn on the device from its logits (`logits` `[n, V]`,
    /// row `i` greedy or with one uniform draw from `rngs[i]`), left on the device: the
    /// tokens `[n]` (u32, to feed back) and `[n, 2]` f32 rows of token id and log-prob (ids
    /// are exact in f32, a vocabulary below 2^24) for the host to read when it needs them
    /// ([`sample`]; with `decode_kernels = "fused"`, [`draw`] in one kernel).
    fn draw_rows(
        &self,
        logits: &Tensor,
        rngs: &mut [&mut rand_chacha::ChaCha8Rng],
    ) -> Result<(Tensor, Tensor)> {
        // one uniform draw per row unless greedy, the same for either kernel
        let u: Vec<f32> =
            if self.sampling.greedy { Vec::new() } else { rngs.iter_mut().map(|r| r.gen()).collect() };
        let pick = if self.sampling.greedy { Pick::Greedy } else { Pick::Sample(&u) };
        if self.settings.decode_kernels_on(&self.device) == DecodeKernels::Fused {
            return Ok(draw(logits, &self.banned, self.sampling.temperature, pick)?);
        }
        let scaled =
            (logits.to_dtype(DType::F32)? / self.sampling.temperature)?.broadcast_add(&self.banned)?;
        let lp = candle_nn::ops::log_softmax(&scaled, D::Minus1)?;
        let tok = match pick {
            Pick::Greedy => sample::greedy_rows(&lp)?,
            Pick::Sample(u) => sample::sample_rows(&lp, u)?,
        };
        let lps = lp.gather(&tok.unsqueeze(1)?, 1)?;
        let both = Tensor::cat(&[tok.to_dtype(DType::F32)?.unsqueeze(1)?, lps], 1)?;
        Ok((tok, both))
    }

    /// The decision for an answer's tokens: its text parsed into an action.
    /// `size` is the screenshot's, which the answer's coordinates are read against.
    fn finish(&self, size: (u32, u32), tokens: Vec<u32>, lps: Vec<f32>) -> Result<Decision> {
        let text = self.text_of(&tokens)?;
        let (w, hgt) = size;
        let mut d = match parse_answer(&text, &self.coords, w, hgt) {
            Ok(p) => Decision::deterministic(p.action),
            Err(e) => Decision::failed(PolicyFailure::Unparsable(e), None),
        };
        d.logprob = lps.iter().sum();
        d.token_logprobs = lps;
        d.tokens = tokens;
        d.answer = Some(text);
        Ok(d)
    }

    /// The text an answer's tokens write, its end token left out.
    fn text_of(&self, tokens: &[u32]) -> Result<String> {
        let body: Vec<u32> = tokens.iter().copied().filter(|&t| t != self.eos).collect();
        self.model.chat.decode(&body)
    }
}

impl Policy for QwenVlPolicy {
    fn name(&self) -> String {
        format!("{}:{}", self.settings.backbone, self.settings.path)
    }

    fn act(&mut self, states: &[ScreenState]) -> Result<Vec<Decision>> {
        let keys: Vec<u64> = (0..states.len() as u64).collect();
        self.act_keyed(states, &keys)
    }

    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> Result<Vec<Decision>> {
        if states.len() != keys.len() {
            bail!("{} states with {} sampling keys", states.len(), keys.len());
        }
        self.decide_all(states, keys)
    }

    fn batch_invariant(&self) -> bool {
        // fixed-row (or row-count-free) decoding (see `decode`), unless the settings gave it
        // up; tested bit for bit on the CPU
        self.settings.batch_invariant
    }

    fn step_decoder(&self, live: usize) -> Option<Box<dyn crate::policy::StepDecoder>> {
        Some(self.decode_session(self.settings.decode_rows_for(live)))
    }

    fn info(&self) -> serde_json::Value {
        let device = crate::policy::device::name_of(&self.device);
        json!({ "name": self.name(), "backbone": self.settings, "coords": self.coords.to_string(), "device": device })
    }
}

impl TrainablePolicy for QwenVlPolicy {
    fn sampling(&self) -> Sampling {
        self.sampling
    }

    fn set_sampling(&mut self, s: Sampling) {
        self.sampling = s;
    }

    fn encode(&self, state: &ScreenState, action: &GuiAction) -> Result<Vec<u32>> {
        let (w, h) = state.screenshot.dimensions();
        let mut ids = self.model.chat.encode(&self.format_action(action, w, h))?;
        ids.push(self.eos);
        Ok(ids)
    }

    fn prompt_tokens(&self, state: &ScreenState) -> Result<usize> {
        // the screenshot's token count from its size alone: no resize and patching of it
        // beside the one the answer runs
        let (w, h) = state.screenshot.dimensions();
        Ok(self.prompt_ids(state, self.model.processor.image_tokens(h, w))?.len())
    }

    fn score(&self, states: &[ScreenState], tokens: &[Vec<u32>]) -> Result<TokenScores> {
        self.score_pass(states, tokens, None)
    }

    fn score_train(&self, states: &[ScreenState], tokens: &[Vec<u32>], pass: u64) -> Result<TokenScores> {
        // only the live policy trains: a reference scored this way gets a plain pass
        let pass = self.mode.is_live().then_some(pass);
        self.score_pass(states, tokens, pass)
    }

    fn gradients(&self, loss: &Tensor) -> Result<candle_core::backprop::GradStore> {
        let pass = self.model.text.pass();
        pass.clear_side_grads();
        let mut grads = loss.backward()?;
        // checkpointed layers computed their adapters' gradients outside the main graph
        let vars: Vec<Tensor> =
            self.trainable_vars().into_iter().map(|(_, v)| v.as_tensor().clone()).collect();
        pass.merge_into(&mut grads, &vars)?;
        Ok(grads)
    }

    fn trainable_vars(&self) -> Vec<(String, Var)> {
        if self.mode.is_live() {
            self.model.lora_vars()
        } else {
            Vec::new()
        }
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        match &self.mode {
            AdapterUse::Live => self.model.save_adapter(dir)?,
            AdapterUse::Snapshot(s) => self.model.save_snapshot(s, dir)?,
            AdapterUse::Off => {}
        }
        let tmp = dir.join(format!("{POLICY_FILE}.tmp"));
        std::fs::write(&tmp, serde_json::to_string_pretty(&self.settings)?)?;
        std::fs::rename(&tmp, dir.join(POLICY_FILE))?;
        Ok(())
    }

    fn load(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join(POLICY_FILE);
        if path.is_file() {
            let theirs: QwenPolicySettings = serde_json::from_str(&std::fs::read_to_string(&path)?)
                .with_context(|| format!("{}: not a Qwen-VL policy file", path.display()))?;
            if theirs.train_modules != self.settings.train_modules {
                bail!(
                    "{}: the checkpoint trains {:?} whole; this policy's model.train_modules is {:?}",
                    dir.display(),
                    theirs.train_modules,
                    self.settings.train_modules
                );
            }
            // dropout is how the adapter was trained, not its shape: any value loads
            let shape = |s: &QwenPolicySettings| {
                (s.lora_rank, s.lora_alpha, s.lora_targets.clone(), s.lora_vision_targets.clone())
            };
            if theirs.backbone != self.settings.backbone || shape(&theirs) != shape(&self.settings) {
                bail!(
                    "{}: the adapter was trained for {} with LoRA r={} on {:?} (vision {:?}); this policy is {} \
                     with r={} on {:?} (vision {:?})",
                    dir.display(),
                    theirs.backbone,
                    theirs.lora_rank,
                    theirs.lora_targets,
                    theirs.lora_vision_targets,
                    self.settings.backbone,
                    self.settings.lora_rank,
                    self.settings.lora_targets,
                    self.settings.lora_vision_targets
                );
            }
        }
        match self.mode {
            AdapterUse::Live => self.model.set_adapter_values(dir),
            // the reference reads into a snapshot of its own: the live adapters are not touched
            AdapterUse::Snapshot(_) => {
                self.mode = AdapterUse::Snapshot(self.model.load_snapshot(dir)?);
                Ok(())
            }
            AdapterUse::Off => Ok(()),
        }
    }

    fn reference(&self) -> Result<Box<dyn TrainablePolicy>> {
        // the live adapters copied now; a copy's copy shares its (frozen) snapshot
        let mode = match &self.mode {
            AdapterUse::Live => AdapterUse::Snapshot(self.model.snapshot_adapters()?),
            frozen => frozen.clone(),
        };
        Ok(Box::new(QwenVlPolicy { mode, ..self.clone() }))
    }

    fn copy_on(&self, device: &Device) -> Result<Option<Box<dyn TrainablePolicy>>> {
        // a frozen reference is not copied: its snapshot would have to move too
        if !self.mode.is_live() {
            return Ok(None);
        }
        // the base weights read again from the checkpoint (the settings hold the absolute
        // path), the adapters and whole-trained modules copied over
        let mut copy = QwenVlPolicy::new(self.settings.clone(), device, 0)?;
        (copy.system, copy.sampling) = (self.system.clone(), self.sampling);
        crate::policy::copy_trainable(self, &copy)?;
        Ok(Some(Box::new(copy)))
    }

    fn describe(&self) -> String {
        let params: usize = self.model.lora_vars().iter().map(|(_, v)| v.elem_count()).sum();
        format!(
            "{} from {} with LoRA r={} alpha={} on {} ({params} trainable parameters), answers in {}",
            self.settings.backbone,
            self.settings.path,
            self.settings.lora_rank,
            self.settings.lora_alpha,
            self.settings.lora_targets.join(","),
            self.coords
        )
    }

    fn token_text(&self, token: u32) -> String {
        // the text the token writes (a space, not the tokenizer's `Ġ`); a special token by name
        match self.model.chat.decode(&[token]) {
            Ok(t) if !t.is_empty() => t,
            _ => self.model.chat.token_text(token),
        }
    }

    fn answer_text(&self, tokens: &[u32]) -> Result<Option<String>> {
        Ok(Some(self.text_of(tokens)?))
    }

    fn answer_stopped(&self, tokens: &[u32]) -> bool {
        tokens.last() == Some(&self.eos)
    }

    fn answer_frame(&self) -> CoordMode {
        self.coords
    }
}
