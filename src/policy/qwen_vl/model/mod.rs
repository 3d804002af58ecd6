//! A whole Qwen-VL checkpoint: vision tower, language model, tokenizer, processor.
//!
//! Shaped like candle-transformers' own models: [`config`] (`config.json`, the
//! architecture resolved once; [`config_keys`]: every key it accepts and why), [`weights`]
//! (safetensors, either name layout), [`vision`] and [`text`] (the towers), [`rope`]
//! (M-RoPE and the vision rotary tables) and [`nn`] (the layers, over the kernels of
//! [`crate::nn`]); adapters (LoRA in PEFT layout) in `adapters.rs`. Decoding's state:
//! [`kv_cache`] (the decoder's key/value cache, grown in blocks), [`slots`] (answers' keys and
//! values in fixed windows, `decode_window`) and `graph` (a window chunk's decoding step
//! captured once as a CUDA graph and replayed, `decode_graph`).

mod adapters;
pub mod config;
pub mod config_keys;
pub(crate) mod graph;
pub mod kv_cache;
pub mod nn;
pub mod rope;
pub mod slots;
pub mod text;
pub mod vision;
pub mod weights;

use super::chat::Chat;
use super::processor::ImageProcessor;
use super::settings::DecodeKernels;
use super::train::lora::{AdapterSwitch, LoraSettings};
use crate::nn::gemm;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use config::QwenVlConfig;
use rope::{mrope_positions, text_cos_sin};
use std::path::{Path, PathBuf};
use text::{KvCache, TextModel, VisualRows};
use vision::{VisionOutput, VisionTower};
use weights::Weights;

/// A loaded checkpoint.
pub struct QwenVl {
    /// Its `config.json`.
    pub config: QwenVlConfig,
    /// The vision tower.
    pub vision: VisionTower,
    /// The language model.
    pub text: TextModel,
    /// Tokenizer and chat template.
    pub chat: Chat,
    /// Images to patches, as the checkpoint's processor does it.
    pub processor: ImageProcessor,
    /// The folder it was read from.
    pub dir: PathBuf,
    /// The adapters' settings and their shared on/off switch, once attached.
    lora: Option<(LoraSettings, AdapterSwitch)>,
    /// Modules trained whole: (short name, name in transformers' tree, weight).
    full: Vec<(String, String, Var)>,
}

/// A prompt ready to run: its ids and M-RoPE positions.
#[derive(Clone)]
pub struct Prompt {
    /// Token ids, image placeholders included.
    pub ids: Vec<u32>,
    /// Each token's (temporal, height, width) position.
    pub positions: [Vec<i64>; 3],
    /// Added to a later token's sequence index to give its position.
    pub delta: i64,
}

/// A prefix several prompts share, run once in a training pass ([`QwenVl::run_prefix`],
/// [`QwenVl::extend_prefix`]).
pub struct PromptPrefix {
    ids: Vec<u32>,
    states: text::SharedPrefix,
}

impl PromptPrefix {
    /// Its token ids.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

impl Prompt {
    /// Append answer tokens: text, whatever their ids, at positions continuing the prompt's.
    pub fn extend(&mut self, tokens: &[u32]) {
        for &t in tokens {
            let p = self.ids.len() as i64 + self.delta;
            self.ids.push(t);
            for axis in self.positions.iter_mut() {
                axis.push(p);
            }
        }
    }
}

impl QwenVl {
    /// Load a checkpoint folder (config, weights, tokenizer, template, processor).
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let config = QwenVlConfig::load(dir)?;
        let weights = Weights::open(dir, dtype, device)?;
        let vision = VisionTower::load(&weights, &config.vision, config.arch)?;
        let text = TextModel::load(&weights, &config.text)?;
        let chat = Chat::load(dir, &config)?;
        let processor = ImageProcessor::load(dir, &config)?;
        Ok(QwenVl {
            config,
            vision,
            text,
            chat,
            processor,
            dir: dir.to_path_buf(),
            lora: None,
            full: Vec::new(),
        })
    }

    /// Image features for patches `[N, C·T·p·p]` of images with these grids.
    pub fn encode_images(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> Result<VisionOutput> {
        self.vision.forward(pixel_values, grids).context("the vision tower failed")
    }

    /// A prompt's text before its first image placeholder (the system prompt and the user
    /// turn's opening: the same at every step of a task), empty when it starts with one.
    pub fn text_prefix<'a>(&self, ids: &'a [u32]) -> &'a [u32] {
        let image = self.config.image_token_id;
        &ids[..ids.iter().position(|&t| t == image).unwrap_or(0)]
    }

    /// The indices of `prompts` (token ids) grouped by their [`Self::text_prefix`], in
    /// order of first appearance: the prompts a shared prefix pass can serve.
    pub fn by_text_prefix<'a>(
        &self,
        prompts: impl IntoIterator<Item = &'a [u32]>,
    ) -> Vec<(&'a [u32], Vec<usize>)> {
        let mut groups: Vec<(&[u32], Vec<usize>)> = Vec::new();
        for (i, ids) in prompts.into_iter().enumerate() {
            let prefix = self.text_prefix(ids);
            match groups.iter_mut().find(|(p, _)| *p == prefix) {
                Some((_, members)) => members.push(i),
                None => groups.push((prefix, vec![i])),
            }
        }
        groups
    }

    /// Positions for a prompt's ids with these image grids.
    pub fn prompt(&self, ids: Vec<u32>, grids: &[[usize; 3]]) -> Result<Prompt> {
        let (positions, delta) =
            mrope_positions(&ids, self.config.image_token_id, grids, self.config.vision.spatial_merge_size)?;
        Ok(Prompt { ids, positions, delta })
    }

    /// Final hidden states `[T, H]` of one prompt (whole sequence, differentiable), filling
    /// `cache` when given so decoding can continue from it.
    pub fn hidden(
        &self,
        prompt: &Prompt,
        vision: Option<&VisionOutput>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        self.hidden_span(prompt, 0, vision, cache)
    }

    /// Final hidden states `[T - from, H]` of a prompt's tokens from index `from` on, whose
    /// first `from` tokens `cache` holds already (a prefix several prompts share, run once):
    /// they attend to the cached tokens and are appended to them. The image placeholders
    /// must all come at `from` or after.
    pub fn hidden_from(
        &self,
        prompt: &Prompt,
        from: usize,
        vision: Option<&VisionOutput>,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        if cache.len() != from {
            bail!("a prompt continued from token {from} over a cache of {} tokens", cache.len());
        }
        self.hidden_span(prompt, from, vision, Some(cache))
    }

    fn hidden_span(
        &self,
        prompt: &Prompt,
        from: usize,
        vision: Option<&VisionOutput>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let image = self.config.image_token_id;
        if from >= prompt.ids.len() || prompt.ids[..from].contains(&image) {
            bail!(
                "cannot run a prompt of {} tokens from token {from}: the tokens before it must be text \
                 (no image placeholder) and at least one must follow",
                prompt.ids.len()
            );
        }
        let device = self.text_device();
        let ids = Tensor::new(&prompt.ids[from..], &device)?.unsqueeze(0)?;
        let dtype = self.text_dtype();
        let positions = prompt.positions.clone().map(|axis| axis[from..].to_vec());
        let (cos, sin) = text_cos_sin(&self.config.text, &positions, dtype, &device)?;
        let rows: Vec<u32> = prompt.ids[from..]
            .iter()
            .enumerate()
            .filter(|(_, &t)| t == image)
            .map(|(i, _)| i as u32)
            .collect();
        let rows = Tensor::new(rows.as_slice(), &device)?;
        let visual = vision.map(|v| VisualRows { rows: &rows, embeds: &v.embeds, deepstack: &v.deepstack });
        let h = self.text.forward(&ids, &cos.unsqueeze(0)?, &sin.unsqueeze(0)?, visual, cache)?;
        Ok(h.squeeze(0)?)
    }

    /// Final hidden states `[B, T, H]` of several prompts in one pass, right-padded to the
    /// longest (`T`): row `b`'s first `prompts[b].ids.len()` positions are what
    /// [`QwenVl::hidden`] gives for it alone, since the causal mask keeps each token from the
    /// padding after it. One pass instead of `B`: on a GPU the training pass's time is the
    /// host issuing kernels (docs/gpu.md), so `B` sequences cost about what one does.
    pub fn hidden_batch(&self, prompts: &[Prompt], visions: &[Option<&VisionOutput>]) -> Result<Tensor> {
        self.hidden_batch_after(None, prompts, visions)
    }

    /// A training pass's text prefix (`ids`, no image) run once for the prompts that all
    /// start with it ([`Self::hidden_batch_after`]), each layer's keys and values in the graph.
    pub fn run_prefix(&self, ids: &[u32]) -> Result<PromptPrefix> {
        if ids.is_empty() || ids.contains(&self.config.image_token_id) {
            bail!("a shared prefix must be text of at least one token, no image placeholder");
        }
        self.extend_prefix(None, &self.prompt(ids.to_vec(), &[])?, ids.len(), None)
    }

    /// A longer prefix run once for the prompts that all start with it: `prompt`'s tokens
    /// before `upto`, continuing `parent` (their first tokens, already run) when given,
    /// with `vision`, the features of the screenshot whose placeholders lie in that span.
    /// States that show one screen with one prompt (a group's first step) so run their
    /// whole prompt once, and only their answers apart.
    pub fn extend_prefix(
        &self,
        parent: Option<&PromptPrefix>,
        prompt: &Prompt,
        upto: usize,
        vision: Option<&VisionOutput>,
    ) -> Result<PromptPrefix> {
        let from = parent.map_or(0, |p| p.ids.len());
        if upto <= from || upto > prompt.ids.len() || parent.is_some_and(|p| prompt.ids[..from] != p.ids) {
            bail!(
                "a prefix up to token {upto} of a prompt of {} tokens cannot continue a prefix of {from} \
                 it does not start with",
                prompt.ids.len()
            );
        }
        let image = self.config.image_token_id;
        let span = &prompt.ids[from..upto];
        let rows: Vec<u32> = (0..span.len() as u32).filter(|&i| span[i as usize] == image).collect();
        if rows.is_empty() != vision.is_none() {
            bail!(
                "a prefix with {} image placeholders needs a screenshot's features, and only then",
                rows.len()
            );
        }
        let device = self.text_device();
        let positions = prompt.positions.clone().map(|axis| axis[from..upto].to_vec());
        let (cos, sin) = text_cos_sin(&self.config.text, &positions, self.text_dtype(), &device)?;
        let t = Tensor::new(span, &device)?.unsqueeze(0)?;
        let rows = Tensor::new(rows.as_slice(), &device)?;
        let visual = vision.map(|v| VisualRows { rows: &rows, embeds: &v.embeds, deepstack: &v.deepstack });
        let states = self.text.run_prefix(
            parent.map(|p| &p.states),
            &t,
            &cos.unsqueeze(0)?,
            &sin.unsqueeze(0)?,
            visual,
        )?;
        Ok(PromptPrefix { ids: prompt.ids[..upto].to_vec(), states })
    }

    /// [`Self::hidden_batch`] of prompts that all start with `prefix` (run once by
    /// [`Self::run_prefix`] or [`Self::extend_prefix`]), over their tokens after it (no
    /// vision output for a prompt whose screenshot is in the prefix): `[B, T, H]`, `T` the longest
    /// remainder. Gradients reach the prefix through every row.
    pub fn hidden_batch_after(
        &self,
        prefix: Option<&PromptPrefix>,
        prompts: &[Prompt],
        visions: &[Option<&VisionOutput>],
    ) -> Result<Tensor> {
        let tails = tails(prefix.map_or(&[][..], |p| &p.ids), prompts, visions.len())?;
        let b = self.padded(&tails, visions)?;
        match prefix {
            Some(q) => self.text.forward_shared(&b.ids, &b.cos, &b.sin, b.visual(), &q.states),
            None => self.text.forward(&b.ids, &b.cos, &b.sin, b.visual(), None),
        }
    }

    /// Decoding's prompts run together: prompts that all start with the `from` tokens whose
    /// keys and values `prefix` (a decoding cache of one row) holds, each with its image's
    /// features, in one right-padded pass over their remainders. Returns, per prompt, its
    /// cache (the prefix's, its own tokens appended, room made for `reserve` more) and its
    /// last position's hidden state `[H]`. Each row's results are what
    /// [`Self::hidden_from`] gives it alone up to the rounding of the products' row count:
    /// a throughput path, not a batch-invariant one.
    pub fn prefill_batch(
        &self,
        prefix: &KvCache,
        prompts: &[Prompt],
        visions: &[&VisionOutput],
        reserve: usize,
    ) -> Result<Vec<(KvCache, Tensor)>> {
        let from = prefix.len();
        let first = &prompts.first().context("no prompt to run")?.ids;
        let text = &first[..from.min(first.len())];
        if from == 0 || text.contains(&self.config.image_token_id) {
            bail!("prompts run together continue a text prefix of at least one token, no image placeholder");
        }
        let visions: Vec<Option<&VisionOutput>> = visions.iter().map(|v| Some(*v)).collect();
        let tails = tails(text, prompts, visions.len())?;
        let b = self.padded(&tails, &visions)?;
        let (hidden, kv) = self.text.forward_after_cache(&b.ids, &b.cos, &b.sin, b.visual(), prefix)?;
        let mut out = Vec::with_capacity(tails.len());
        for (row, tail) in tails.iter().enumerate() {
            let n = tail.ids.len();
            let mut cache = prefix.clone();
            cache.reserve(reserve);
            for (layer, (k, v)) in kv.iter().enumerate() {
                cache.append(
                    layer,
                    &k.narrow(0, row, 1)?.narrow(2, 0, n)?,
                    &v.narrow(0, row, 1)?.narrow(2, 0, n)?,
                )?;
            }
            out.push((cache, hidden.get(row)?.get(n - 1)?));
        }
        Ok(out)
    }

    /// Right-padded inputs of prompts `prompts` (remainders after a shared prefix, their
    /// deltas continuing the whole prompts' positions) with their images' features.
    fn padded(&self, prompts: &[Prompt], visions: &[Option<&VisionOutput>]) -> Result<Padded> {
        let device = self.text_device();
        let dtype = self.text_dtype();
        let t = prompts.iter().map(|p| p.ids.len()).max().unwrap_or(0);
        let image = self.config.image_token_id;
        // padding: any text token (never the image placeholder), at positions continuing the prompt's
        let pad = if image == 0 { 1 } else { 0 };
        let (mut ids, mut cos, mut sin, mut rows) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut embeds, mut deepstack) = (Vec::new(), Vec::<Vec<Tensor>>::new());
        for (b, (p, v)) in prompts.iter().zip(visions).enumerate() {
            if let Some(v) = v {
                rows.extend(
                    p.ids.iter().enumerate().filter(|(_, &id)| id == image).map(|(i, _)| (b * t + i) as u32),
                );
                embeds.push(v.embeds.clone());
                deepstack.resize(v.deepstack.len().max(deepstack.len()), Vec::new());
                for (level, f) in v.deepstack.iter().enumerate() {
                    deepstack[level].push(f.clone());
                }
            }
            let mut padded = p.clone();
            padded.extend(&vec![pad; t - p.ids.len()]);
            let (c, s) = text_cos_sin(&self.config.text, &padded.positions, dtype, &device)?;
            cos.push(c);
            sin.push(s);
            ids.extend(padded.ids);
        }
        let ids = Tensor::from_vec(ids, (prompts.len(), t), &device)?;
        let (cos, sin) = (Tensor::stack(&cos, 0)?, Tensor::stack(&sin, 0)?);
        let rows = Tensor::new(rows.as_slice(), &device)?;
        let (embeds, deepstack) = if embeds.is_empty() {
            (None, Vec::new())
        } else {
            let levels =
                deepstack.iter().map(|l| Tensor::cat(l, 0)).collect::<candle_core::Result<Vec<_>>>()?;
            (Some(Tensor::cat(&embeds, 0)?), levels)
        };
        Ok(Padded { ids, cos, sin, rows, embeds, deepstack })
    }

    /// Hidden state `[1, H]` of one more token at sequence index `index` (decoding).
    pub fn step(&self, token: u32, index: usize, delta: i64, cache: &mut KvCache) -> Result<Tensor> {
        let device = self.text_device();
        let p = index as i64 + delta;
        let pos = [vec![p], vec![p], vec![p]];
        let (cos, sin) = text_cos_sin(&self.config.text, &pos, self.text_dtype(), &device)?;
        let ids = Tensor::new(&[token], &device)?.unsqueeze(0)?;
        let h = self.text.forward(&ids, &cos.unsqueeze(0)?, &sin.unsqueeze(0)?, None, Some(cache))?;
        Ok(h.squeeze(0)?)
    }

    /// Hidden states `[B, H]` of one more token per answer, decoding several at once: row
    /// `i` is `tokens[i]` at M-RoPE position `positions[i]` (sequence index + the prompt's
    /// delta), continuing `caches[i]`. Products run on exactly `rows` rows, so a row's
    /// result does not depend on the others ([`text::TextModel::decode`]).
    pub fn step_rows(
        &self,
        tokens: &[u32],
        positions: &[i64],
        caches: &mut [&mut KvCache],
        rows: usize,
    ) -> Result<Tensor> {
        let ids = Tensor::new(tokens, &self.text_device())?;
        self.step_rows_on(&ids, positions, caches, rows, DecodeKernels::Eager)
    }

    /// [`QwenVl::step_rows`] with the tokens already on the device (`[B]` u32): a decoder
    /// feeds back the tokens it drew without the host reading them. Each row attends with
    /// `kernels`' attention.
    pub fn step_rows_on(
        &self,
        tokens: &Tensor,
        positions: &[i64],
        caches: &mut [&mut KvCache],
        rows: usize,
        kernels: DecodeKernels,
    ) -> Result<Tensor> {
        let pos = [positions.to_vec(), positions.to_vec(), positions.to_vec()];
        let (cos, sin) = text_cos_sin(&self.config.text, &pos, self.text_dtype(), &self.text_device())?;
        self.text.decode(tokens, &cos, &sin, caches, rows, kernels)
    }

    /// Hidden states `[R, H]` of one more token for each row of a decoding chunk whose
    /// answers keep their keys and values in fixed windows (`decode_window`): row `r` is
    /// `tokens[r]` (`[R]` u32, on the device) at M-RoPE position `positions[r]`, written
    /// into its slot; free rows take any token, and their outputs mean nothing
    /// ([`text::TextModel::decode_window`]).
    pub fn step_window(
        &self,
        tokens: &Tensor,
        positions: &[i64],
        chunk: &mut slots::WindowChunk,
    ) -> Result<Tensor> {
        let pos = [positions.to_vec(), positions.to_vec(), positions.to_vec()];
        let (cos, sin) = text_cos_sin(&self.config.text, &pos, self.text_dtype(), &self.text_device())?;
        self.text.decode_window(tokens, &cos, &sin, chunk)
    }

    /// Logits `[B, V]` of a decoding step's hidden rows `[B, H]` (`B ≤ rows`), the head run
    /// with `kernels` on exactly `rows` rows (the real ones, then copies of the first) where
    /// the count changes the product's rounding ([`gemm::padded_rows`]), as in
    /// [`QwenVl::step_rows`].
    pub fn logits_rows(&self, hidden: &Tensor, rows: usize, kernels: DecodeKernels) -> Result<Tensor> {
        let b = hidden.dim(0)?;
        if b == 0 || b > rows {
            bail!("{b} hidden rows for a head of {rows} rows");
        }
        let rows = gemm::padded_rows(b, rows, self.text.invariant_rows(kernels));
        let logits = |h: &Tensor| self.text.step_logits(h, kernels).map_err(candle_core::Error::wrap);
        Ok(gemm::on_rows(hidden, rows, logits)?)
    }

    /// The most rows a decoding step with `kernels` can run with each row's bits the same
    /// whatever the count ([`text::TextModel::invariant_rows`]: 8 for f32 on a CPU, 16 on CUDA
    /// with the fused kernels): chunks of up to this many rows need no padding.
    pub fn invariant_rows(&self, kernels: DecodeKernels) -> usize {
        self.text.invariant_rows(kernels)
    }

    /// Logits `[N, V]` of hidden rows `[N, H]`.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        self.text.logits(hidden)
    }

    fn text_device(&self) -> Device {
        self.text.embed_tensor().device().clone()
    }

    fn text_dtype(&self) -> DType {
        self.text.dtype()
    }
}

/// A padded batch's inputs ([`QwenVl::padded`]).
struct Padded {
    ids: Tensor,
    cos: Tensor,
    sin: Tensor,
    rows: Tensor,
    embeds: Option<Tensor>,
    deepstack: Vec<Tensor>,
}

impl Padded {
    fn visual(&self) -> Option<VisualRows<'_>> {
        self.embeds.as_ref().map(|e| VisualRows { rows: &self.rows, embeds: e, deepstack: &self.deepstack })
    }
}

/// Each of `prompts` after the `prefix` they all start with (all of it when empty),
/// its positions and delta continuing the whole prompt's, for `visions` vision outputs.
fn tails(prefix: &[u32], prompts: &[Prompt], visions: usize) -> Result<Vec<Prompt>> {
    if prompts.len() != visions {
        bail!("{} prompts with {visions} vision outputs", prompts.len());
    }
    let from = prefix.len();
    let mut tails = Vec::with_capacity(prompts.len());
    for p in prompts {
        if from > 0 && (p.ids.len() <= from || p.ids[..from] != *prefix) {
            bail!("a prompt of {} tokens does not continue the shared prefix of {from}", p.ids.len());
        }
        let positions = p.positions.clone().map(|axis| axis[from..].to_vec());
        // the delta of a tail: its padding continues the whole prompt's positions
        tails.push(Prompt { ids: p.ids[from..].to_vec(), positions, delta: p.delta + from as i64 });
    }
    Ok(tails)
}
