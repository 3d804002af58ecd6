//! Turning screen states and actions into the model's input tensors.
//!
//! Batching: screenshots of any size are resized to the config's fixed image size, so
//! states from different tasks batch together. Instructions are padded to the longest in
//! the batch (capped at `max_instruction_bytes`) and padding is masked out; actions are
//! padded to the longest token sequence, with `mask` = 0 on padding.

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use image::{imageops::FilterType, RgbImage};

use super::config::VlmConfig;
use super::copy::CopySource;
pub use super::elements::{element_tokens, ElementInputs, ElementToken, Role, ELEMENT_WORDS};
pub use super::history::{action_tokens, history_marks, HistoryInputs, ACTION_WORDS};
use super::layers::NEG;
use super::tokens::{ActionVocab, BOS, END};
use super::words::policy_words;
use crate::env::{GuiAction, ScreenState};

/// The encoder's inputs for a batch of states. The encoder's sequence is the image
/// tokens, the instruction's bytes, the remembered actions (with `history`) and the
/// element tokens (with `elements`), in that order.
#[derive(Debug, Clone)]
pub struct EncoderInputs {
    /// [B, image_height, image_width, C]: RGB standardized per image and channel, then
    /// (with `previous_frame`) the change since the previous frame.
    pub images: Tensor,
    /// [B, L] instruction bytes (u32), 0-padded.
    pub text: Tensor,
    /// [B, L] each byte's word bucket (u32; see [`super::words::word_buckets`]), when the config has them.
    pub words: Option<Tensor>,
    /// The last actions, marked on the image and as tokens, with the `history` input.
    pub history: Option<HistoryInputs>,
    /// One token per visible element, with the `elements` input.
    pub elements: Option<ElementInputs>,
    /// [B, L] f32: each instruction byte's piece index ([`CopySource`]), when the config
    /// has `copy`.
    pub pieces: Option<Tensor>,
    /// [B, 1, 1, image_tokens + L (+ memory) (+ element slots)]: 0 for real tokens, `NEG`
    /// for padding, empty history slots and empty element slots.
    pub key_mask: Tensor,
}

/// The decoder's inputs and targets for a batch of token sequences.
#[derive(Debug, Clone)]
pub struct ActionBatch {
    /// [B, T] u32: BOS then the action's tokens but the last (teacher forcing).
    pub inputs: Tensor,
    /// [B, T] u32: the action's tokens (END on padding).
    pub targets: Tensor,
    /// [B, T, vocab] f32: the grammar's additive mask before each target (0 on padding).
    pub grammar_mask: Tensor,
    /// [B, T] f32: 1 for real tokens, 0 for padding.
    pub mask: Tensor,
    /// Tokens per action.
    pub lengths: Vec<usize>,
}

/// Everything `VlmPolicy::score` needs; build once, score many times (PPO epochs).
#[derive(Debug, Clone)]
pub struct PreparedBatch {
    /// Screenshots and instructions.
    pub encoder: EncoderInputs,
    /// Actions as tokens.
    pub actions: ActionBatch,
}

/// A screenshot resized to `w`×`h`, as row-major RGB floats, each channel standardized
/// over the image (zero mean, unit variance).
///
/// Why: web pages are mostly flat white, and a light-grey button on white differs by a
/// few percent of the [0, 255] range; a fixed scaling leaves that contrast tiny next to a
/// coloured header, and a policy from random init learns a position prior long before it
/// learns to look. Standardizing makes the deviations from the page's background the
/// signal. A flat channel (std below 1/255) is only centred.
pub fn image_values(img: &RgbImage, w: usize, h: usize, out: &mut Vec<f32>) {
    let resized;
    let img = if img.width() as usize == w && img.height() as usize == h {
        img
    } else {
        resized = image::imageops::resize(img, w as u32, h as u32, FilterType::Triangle);
        &resized
    };
    let raw = img.as_raw();
    let n = (raw.len() / 3).max(1) as f64;
    let (mut sum, mut sq) = ([0f64; 3], [0f64; 3]);
    for px in raw.chunks_exact(3) {
        for c in 0..3 {
            let v = f64::from(px[c]) / 255.0;
            sum[c] += v;
            sq[c] += v * v;
        }
    }
    let mean = sum.map(|s| s / n);
    let scale: [f64; 3] =
        std::array::from_fn(|c| 1.0 / (sq[c] / n - mean[c] * mean[c]).max(0.0).sqrt().max(1.0 / 255.0));
    out.extend(
        raw.chunks_exact(3)
            .flat_map(|px| (0..3).map(move |c| ((f64::from(px[c]) / 255.0 - mean[c]) * scale[c]) as f32)),
    );
}

/// The screenshot as [`image_values`] gives it, each pixel followed by its change since
/// `previous` (current − previous, RGB in [-1, 1]; 0 without a previous frame): six values
/// a pixel, row-major. A plain difference, not standardized, so "nothing changed" is
/// exactly 0 on every page.
pub fn frame_and_change(img: &RgbImage, previous: Option<&RgbImage>, w: usize, h: usize, out: &mut Vec<f32>) {
    let mut now = Vec::with_capacity(w * h * 3);
    image_values(img, w, h, &mut now);
    let small = |i: &RgbImage| {
        if i.width() as usize == w && i.height() as usize == h {
            i.clone()
        } else {
            image::imageops::resize(i, w as u32, h as u32, FilterType::Triangle)
        }
    };
    let change: Vec<f32> = match previous {
        Some(p) => {
            let (a, b) = (small(img), small(p));
            a.as_raw().iter().zip(b.as_raw()).map(|(&x, &y)| (f32::from(x) - f32::from(y)) / 255.0).collect()
        }
        None => vec![0.0; w * h * 3],
    };
    for (px, d) in now.chunks_exact(3).zip(change.chunks_exact(3)) {
        out.extend_from_slice(px);
        out.extend_from_slice(d);
    }
}

/// Images, instruction bytes, the declared inputs and the key mask for `states`.
pub fn encoder_inputs(states: &[ScreenState], cfg: &VlmConfig, device: &Device) -> Result<EncoderInputs> {
    let b = states.len();
    let (w, h) = (cfg.image_width, cfg.image_height);
    let c = cfg.image_channels();
    let mut pixels = Vec::with_capacity(b * w * h * c);
    for s in states {
        if cfg.inputs.previous_frame {
            frame_and_change(&s.screenshot, s.previous_screenshot.as_deref(), w, h, &mut pixels);
        } else {
            image_values(&s.screenshot, w, h, &mut pixels);
        }
    }
    let images = Tensor::from_vec(pixels, (b, h, w, c), device)?;
    let texts: Vec<&[u8]> = states
        .iter()
        .map(|s| {
            let t = s.instruction.as_bytes();
            &t[..t.len().min(cfg.max_instruction_bytes)]
        })
        .collect();
    // At least one text position, so an all-empty batch still has a (masked) text token.
    let l = texts.iter().map(|t| t.len()).max().unwrap_or(0).max(1);
    let history = match cfg.inputs.history {
        Some(k) => Some(HistoryInputs::new(states, cfg, k, device)?),
        None => None,
    };
    let rows: Option<Vec<Vec<ElementToken>>> =
        cfg.inputs.elements.map(|max| states.iter().map(|s| element_tokens(s, cfg, max)).collect());
    // At least one slot, as for the text: a batch without elements still has a (masked) one.
    let slots = rows.as_ref().map_or(0, |r| r.iter().map(Vec::len).max().unwrap_or(0).max(1));
    let hk = cfg.inputs.history.unwrap_or(0);
    let n = cfg.image_tokens() + l + hk + slots;
    let mut text = vec![0u32; b * l];
    let mut mask = vec![0f32; b * n];
    for (i, t) in texts.iter().enumerate() {
        for (j, &c) in t.iter().enumerate() {
            text[i * l + j] = u32::from(c);
        }
        let row = &mut mask[i * n..(i + 1) * n];
        let at = cfg.image_tokens();
        row[at + t.len()..at + l].fill(NEG);
        if let Some(hist) = &history {
            row[at + l + hist.filled[i]..at + l + hk].fill(NEG);
        }
        if let Some(rows) = &rows {
            row[at + l + hk + rows[i].len()..].fill(NEG);
        }
    }
    let words = if cfg.word_buckets > 0 {
        let mut ids = vec![0u32; b * l];
        for (i, t) in texts.iter().enumerate() {
            ids[i * l..i * l + t.len()].copy_from_slice(&policy_words(t, cfg));
        }
        Some(Tensor::from_vec(ids, (b, l), device)?)
    } else {
        None
    };
    let elements = match &rows {
        Some(rows) => Some(ElementInputs::new(rows, slots, cfg.image_tokens(), device)?),
        None => None,
    };
    let pieces = if cfg.copy {
        let mut v = vec![0f32; b * l];
        for (i, s) in states.iter().enumerate() {
            for (j, k) in CopySource::new(&s.instruction, cfg.max_instruction_bytes).pieces().enumerate() {
                v[i * l + j] = k;
            }
        }
        Some(Tensor::from_vec(v, (b, l), device)?)
    } else {
        None
    };
    Ok(EncoderInputs {
        images,
        words,
        history,
        elements,
        pieces,
        text: Tensor::from_vec(text, (b, l), device)?,
        key_mask: Tensor::from_vec(mask, (b, 1, 1, n), device)?,
    })
}

/// What each state's `type` may copy from: its cut instruction when the config has
/// `copy`, else nothing.
pub fn copy_sources(states: &[ScreenState], cfg: &VlmConfig) -> Vec<Option<CopySource>> {
    states
        .iter()
        .map(|s| cfg.copy.then(|| CopySource::new(&s.instruction, cfg.max_instruction_bytes)))
        .collect()
}

/// Decoder inputs, targets and grammar masks for token sequences that the grammar
/// accepts (for example from [`ActionVocab::encode`]); `sources[i]` is what sequence `i`
/// may copy from (empty: nothing, for every sequence).
pub fn action_batch(
    vocab: &ActionVocab,
    seqs: &[Vec<u32>],
    sources: &[Option<CopySource>],
    device: &Device,
) -> Result<ActionBatch> {
    let b = seqs.len();
    let t = seqs.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let v = vocab.size();
    let mut inputs = vec![BOS; b * t];
    let mut targets = vec![END; b * t];
    let mut gmask = vec![0f32; b * t * v];
    let mut mask = vec![0f32; b * t];
    for (i, seq) in seqs.iter().enumerate() {
        let mut g = vocab.grammar_in(sources.get(i).and_then(Option::as_ref));
        for (j, &tok) in seq.iter().enumerate() {
            let at = i * t + j;
            if j + 1 < t {
                inputs[at + 1] = tok;
            }
            targets[at] = tok;
            mask[at] = 1.0;
            g.fill_mask(&mut gmask[at * v..(at + 1) * v], NEG);
            g.advance(tok).with_context(|| format!("action {i} of the batch"))?;
        }
    }
    Ok(ActionBatch {
        inputs: Tensor::from_vec(inputs, (b, t), device)?,
        targets: Tensor::from_vec(targets, (b, t), device)?,
        grammar_mask: Tensor::from_vec(gmask, (b, t, v), device)?,
        mask: Tensor::from_vec(mask, (b, t), device)?,
        lengths: seqs.iter().map(Vec::len).collect(),
    })
}

/// Encode each action on its own state's screenshot size (copying typed text from
/// `sources[i]` where it can); errors name the action.
pub fn encode_actions(
    vocab: &ActionVocab,
    states: &[ScreenState],
    actions: &[GuiAction],
    sources: &[Option<CopySource>],
) -> Result<Vec<Vec<u32>>> {
    anyhow::ensure!(
        states.len() == actions.len(),
        "{} states but {} actions: log_probs needs one action per state",
        states.len(),
        actions.len()
    );
    states
        .iter()
        .zip(actions)
        .enumerate()
        .map(|(i, (s, a))| {
            let (w, h) = s.screenshot.dimensions();
            let src = sources.get(i).and_then(Option::as_ref);
            vocab.encode_in(a, w, h, src).with_context(|| format!("action {i} of the batch"))
        })
        .collect()
}
