//! Turning screen states and actions into the model's input tensors.
//!
//! Batching: screenshots of any size are resized to the config's fixed image size, so
//! states from different tasks batch together. Instructions are padded to the longest in
//! the batch (capped at `max_instruction_bytes`) and padding is masked out; actions are
//! padded to the longest token sequence, with `mask` = 0 on padding.

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use image::{imageops::FilterType, RgbImage};
use std::collections::HashSet;

use super::config::VlmConfig;
use super::copy::CopySource;
use super::layers::NEG;
pub use super::relations::{control_states, first_number, number_relations};
use super::tokens::{ActionVocab, BOS, END};
use super::words::{bucket, grid_cell, policy_words};
use crate::env::{Element, GuiAction, ScreenState};

/// The encoder's inputs for a batch of states.
#[derive(Debug, Clone)]
pub struct EncoderInputs {
    /// [B, image_height, image_width, C]: RGB standardized per image and channel, then
    /// (with `previous_frame`) the change since the previous frame.
    pub images: Tensor,
    /// [B, L] instruction bytes (u32), 0-padded.
    pub text: Tensor,
    /// [B, L] each byte's word bucket (u32; see [`super::words::word_buckets`]), when the config has them.
    pub words: Option<Tensor>,
    /// The visible elements' words at their image token, when the config has `screen_text`.
    pub screen: Option<ScreenWords>,
    /// [B, image_tokens, memory] f32: 1 where the action `k` steps before the last one
    /// pointed (see [`history_marks`]), when the config has `memory`.
    pub history: Option<Tensor>,
    /// The last actions as encoder tokens, when the config has `memory_actions`.
    pub actions: Option<ActionTokens>,
    /// [B, L] f32: each instruction byte's piece index ([`CopySource`]), when the config
    /// has `copy`.
    pub pieces: Option<Tensor>,
    /// [B, 1, 1, image_tokens + L (+ memory)]: 0 for real tokens, `NEG` for padding and
    /// empty history slots.
    pub key_mask: Tensor,
}

/// The last `memory` actions of each state's history as encoder tokens (slot `k`: the
/// action `k` steps before the newest); see [`action_tokens`].
#[derive(Debug, Clone)]
pub struct ActionTokens {
    /// [B, memory, kinds] f32: the slot's action kind, one-hot (all 0 on an empty slot).
    pub kinds: Tensor,
    /// [B, memory, ACTION_WORDS] u32: word buckets of the text it typed or the key it
    /// pressed (0 on empty places), when the config has `word_buckets`.
    pub words: Option<Tensor>,
    /// [B, memory, ACTION_WORDS, 1] f32: 1 on filled word places.
    pub word_mask: Option<Tensor>,
}

/// Words of one remembered action that its token carries; later ones are dropped.
pub const ACTION_WORDS: usize = 4;

/// Word buckets of the elements' texts, placed on the image-token grid (see
/// [`screen_words`]).
#[derive(Debug, Clone)]
pub struct ScreenWords {
    /// [B, image_tokens, SCREEN_WORD_SLOTS] u32 word buckets, 0 on empty slots.
    pub ids: Tensor,
    /// [B, image_tokens, SCREEN_WORD_SLOTS, 1] f32: 1 on filled slots, 0 on empty ones.
    pub mask: Tensor,
    /// [B, image_tokens, SCREEN_WORD_SLOTS, 1] f32: 1 where the slot's word is also a word
    /// of the (cut) instruction. Why: an utterance-to-element alignment feature, as DOM
    /// agents for MiniWoB++ use; learning the match through attention alone from a few
    /// thousand demonstrations left the policy choosing rows at about chance.
    pub matched: Tensor,
    /// [B, image_tokens, 3] f32, with the config's `numbers`: one-hot, how the number of
    /// the element centred on the token compares with the instruction's first number
    /// (less, equal, greater); all 0 where either has none (see [`number_relations`]).
    pub relation: Option<Tensor>,
    /// [B, image_tokens, 4] f32, with the config's `control_state`: one-hot, whether the
    /// instruction names the checkbox or radio button centred on the token and whether it
    /// is checked; all 0 where none is (see [`control_states`]).
    pub control: Option<Tensor>,
}

/// Words one image token can hold; further words of elements centred there are dropped.
pub const SCREEN_WORD_SLOTS: usize = 6;

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

/// What an element says, as an accessibility tree names it: its text, a form control's
/// accessible name, and a checkbox's or radio button's state (`checked` / `unchecked`).
pub fn element_words(e: &Element) -> String {
    let state = match e.input_type.as_str() {
        "checkbox" | "radio" if e.checked => "checked",
        "checkbox" | "radio" => "unchecked",
        _ => "",
    };
    format!("{} {} {state}", e.text, e.label)
}

/// For one state, `SCREEN_WORD_SLOTS` word buckets per image token (row-major, 0 = empty):
/// each element puts the distinct words of [`element_words`], in order, on the token under
/// its box's centre. Elements centred outside the screenshot are skipped.
///
/// Why: the labels a task names are a few pixels high once the screenshot is resized to
/// the model's input, so reading them off the pixels is the hard part of a multi-step task
/// (`builtin/toggle-switches` clones to about 25 % on pixels alone). The accessibility
/// tree has the same words; through the instruction's word table they read as the same
/// vector in both places, and matching a name against a place becomes attention.
pub fn screen_words(state: &ScreenState, cfg: &VlmConfig) -> Vec<u32> {
    let mut out = vec![0u32; cfg.image_tokens() * SCREEN_WORD_SLOTS];
    let (w, h) = state.screenshot.dimensions();
    if w == 0 || h == 0 {
        return out;
    }
    let own: Vec<Vec<u32>> =
        state.elements.iter().map(|e| policy_words(element_words(e).as_bytes(), cfg)).collect();
    let has_words = |i: usize| own[i].iter().any(|&id| id != 0);
    for (i, e) in state.elements.iter().enumerate() {
        let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
        let Some(cell) = grid_cell(cx, cy, (w, h), cfg) else { continue };
        let slots = &mut out[cell * SCREEN_WORD_SLOTS..(cell + 1) * SCREEN_WORD_SLOTS];
        let mut words = own[i].clone();
        let symbols = if e.text.trim().is_empty() { e.label.trim() } else { e.text.trim() };
        if cfg.numbers && !has_words(i) && !symbols.is_empty() && symbols.chars().count() <= 3 {
            // Only symbols (`+`, `−`): the whole of them is the element's one word.
            words = vec![bucket(symbols.as_bytes(), cfg.word_buckets)];
        }
        if cfg.row_labels && !has_words(i) {
            if let Some(j) = row_label(&state.elements, i, has_words) {
                words.extend(&own[j]);
            }
        }
        words.dedup();
        for id in words.into_iter().filter(|&id| id != 0) {
            match slots.iter().position(|&s| s == 0 || s == id) {
                Some(k) => slots[k] = id,
                None => break,
            }
        }
    }
    out
}

/// For the config's `row_labels`: the element nearest to the left of `elements[i]` on its
/// line (its box spans `elements[i]`'s vertical centre, its centre lies left of `i`'s) among
/// those `has_words` says have words.
fn row_label(elements: &[Element], i: usize, has_words: impl Fn(usize) -> bool) -> Option<usize> {
    let b = &elements[i].bbox;
    let (cx, cy) = (b.x + b.w / 2.0, b.y + b.h / 2.0);
    (0..elements.len())
        .filter(|&j| j != i && has_words(j))
        .filter(|&j| {
            let o = &elements[j].bbox;
            (o.y..=o.y + o.h).contains(&cy) && o.x + o.w / 2.0 < cx
        })
        .max_by(|&a, &c| {
            let right = |j: usize| elements[j].bbox.x + elements[j].bbox.w / 2.0;
            right(a).total_cmp(&right(c))
        })
}

/// [image_tokens × memory] row-major: 1 at (cell, k) where the action `k` steps before
/// the newest of `state.history` pointed; actions without a point (typing, keys, done)
/// still take their age slot but mark nothing, and text that does not parse is skipped.
pub fn history_marks(state: &ScreenState, cfg: &VlmConfig) -> Vec<f32> {
    let k = cfg.memory;
    let mut out = vec![0f32; cfg.image_tokens() * k];
    let size = state.screenshot.dimensions();
    let actions = state.history.iter().rev().filter_map(|t| GuiAction::parse(t).ok());
    for (age, action) in actions.take(k).enumerate() {
        for (x, y) in action.points() {
            if let Some(cell) = grid_cell(x as f32 + 0.5, y as f32 + 0.5, size, cfg) {
                out[cell * k + age] = 1.0;
            }
        }
    }
    out
}

/// For one state, the last `cfg.memory` parseable actions of its history, newest first:
/// per slot the kind's index in [`GuiAction::KINDS`] and the word buckets of the text it
/// typed or the key it pressed (at most [`ACTION_WORDS`]).
pub fn action_tokens(state: &ScreenState, cfg: &VlmConfig) -> Vec<(usize, Vec<u32>)> {
    let actions = state.history.iter().rev().filter_map(|t| GuiAction::parse(t).ok());
    actions
        .take(cfg.memory)
        .map(|a| {
            let kind = GuiAction::KINDS.iter().position(|k| *k == a.kind()).expect("every kind is listed");
            let text = match &a {
                GuiAction::Type { text } => text.clone(),
                GuiAction::Key(combo) => combo.to_string(),
                _ => String::new(),
            };
            let mut words: Vec<u32> = match cfg.word_buckets {
                0 => vec![],
                _ => policy_words(text.as_bytes(), cfg),
            };
            words.dedup();
            words.retain(|&w| w != 0);
            words.truncate(ACTION_WORDS);
            (kind, words)
        })
        .collect()
}

/// Images, instruction bytes and the key mask for `states`.
pub fn encoder_inputs(states: &[ScreenState], cfg: &VlmConfig, device: &Device) -> Result<EncoderInputs> {
    let b = states.len();
    let (w, h) = (cfg.image_width, cfg.image_height);
    let c = cfg.image_channels();
    let mut pixels = Vec::with_capacity(b * w * h * c);
    for s in states {
        if cfg.previous_frame {
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
    let remembered: Vec<Vec<(usize, Vec<u32>)>> =
        if cfg.memory_actions { states.iter().map(|s| action_tokens(s, cfg)).collect() } else { vec![] };
    let hk = if cfg.memory_actions { cfg.memory } else { 0 };
    let n = cfg.image_tokens() + l + hk;
    let mut text = vec![0u32; b * l];
    let mut mask = vec![0f32; b * n];
    for (i, t) in texts.iter().enumerate() {
        for (j, &c) in t.iter().enumerate() {
            text[i * l + j] = u32::from(c);
        }
        mask[i * n + cfg.image_tokens() + t.len()..i * n + cfg.image_tokens() + l].fill(NEG);
    }
    let actions = if cfg.memory_actions {
        let nk = GuiAction::KINDS.len();
        let mut kinds = vec![0f32; b * hk * nk];
        let mut ids = vec![0u32; b * hk * ACTION_WORDS];
        for (i, slots) in remembered.iter().enumerate() {
            // empty slots (a history shorter than `memory`) are masked out of attention
            mask[i * n + cfg.image_tokens() + l + slots.len()..(i + 1) * n].fill(NEG);
            for (k, (kind, words)) in slots.iter().enumerate() {
                kinds[(i * hk + k) * nk + kind] = 1.0;
                let at = (i * hk + k) * ACTION_WORDS;
                ids[at..at + words.len()].copy_from_slice(words);
            }
        }
        let (words, word_mask) = if cfg.word_buckets > 0 {
            let m: Vec<f32> = ids.iter().map(|&id| f32::from(u8::from(id != 0))).collect();
            (
                Some(Tensor::from_vec(ids, (b, hk, ACTION_WORDS), device)?),
                Some(Tensor::from_vec(m, (b, hk, ACTION_WORDS, 1), device)?),
            )
        } else {
            (None, None)
        };
        Some(ActionTokens { kinds: Tensor::from_vec(kinds, (b, hk, nk), device)?, words, word_mask })
    } else {
        None
    };
    let text_words: Vec<Vec<u32>> = match cfg.word_buckets {
        0 => vec![],
        _ => texts.iter().map(|t| policy_words(t, cfg)).collect(),
    };
    let words = if cfg.word_buckets > 0 {
        let mut ids = vec![0u32; b * l];
        for (i, w) in text_words.iter().enumerate() {
            ids[i * l..i * l + w.len()].copy_from_slice(w);
        }
        Some(Tensor::from_vec(ids, (b, l), device)?)
    } else {
        None
    };
    let screen = if cfg.screen_text {
        let (mut ids, mut matched, mut control) = (vec![], vec![], vec![]);
        for (s, said) in states.iter().zip(&text_words) {
            let said: HashSet<u32> = said.iter().copied().filter(|&w| w != 0).collect();
            let slots = screen_words(s, cfg);
            matched.extend(slots.iter().map(|id| f32::from(u8::from(said.contains(id)))));
            ids.extend(slots);
            if cfg.control_state {
                control.extend(control_states(s, &said, cfg));
            }
        }
        let mask: Vec<f32> = ids.iter().map(|&id| f32::from(u8::from(id != 0))).collect();
        let shape = (b, cfg.image_tokens(), SCREEN_WORD_SLOTS, 1);
        Some(ScreenWords {
            ids: Tensor::from_vec(ids, (b, cfg.image_tokens(), SCREEN_WORD_SLOTS), device)?,
            mask: Tensor::from_vec(mask, shape, device)?,
            matched: Tensor::from_vec(matched, shape, device)?,
            relation: if cfg.numbers {
                let rel: Vec<f32> = states.iter().flat_map(|s| number_relations(s, cfg)).collect();
                Some(Tensor::from_vec(rel, (b, cfg.image_tokens(), 3), device)?)
            } else {
                None
            },
            control: if cfg.control_state {
                Some(Tensor::from_vec(control, (b, cfg.image_tokens(), 4), device)?)
            } else {
                None
            },
        })
    } else {
        None
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
    let history = match cfg.memory {
        0 => None,
        k => {
            let marks: Vec<f32> = states.iter().flat_map(|s| history_marks(s, cfg)).collect();
            Some(Tensor::from_vec(marks, (b, cfg.image_tokens(), k), device)?)
        }
    };
    Ok(EncoderInputs {
        images,
        words,
        screen,
        history,
        actions,
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
