//! The `history` input: the episode's last `memory` actions (`ScreenState.history`,
//! newest first), read two ways.
//!
//! - **Marks**: an action that pointed at the screen (click, double-click, hover, a drag's
//!   ends, a scroll's place) adds its age's learned vector to the image token it pointed
//!   at. Why: a policy that reads only the current frame cannot tell a switch it just
//!   flipped from one it has not touched, and greedy decoding then flips it back and forth
//!   until the step limit.
//! - **Tokens**: each remembered action is also an encoder token: its kind's vector plus
//!   its age's, plus (with word buckets) the sum of the words it typed or the key it
//!   pressed. Why: the marks say where the policy pointed, not that it typed, so "the field
//!   is filled, press Add" and "type now" looked alike.
//!
//! Empty slots (a history shorter than `memory`) are masked out of attention.

use candle_core::{Device, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::VlmConfig;
use super::layers::table;
use super::words::{grid_cell, policy_words};
use crate::env::{GuiAction, ScreenState};

/// Words of one remembered action that its token carries; later ones are dropped.
pub const ACTION_WORDS: usize = 4;

/// [image_tokens × memory] row-major: 1 at (cell, k) where the action `k` steps before
/// the newest of `state.history` pointed; actions without a point (typing, keys, done)
/// still take their age slot but mark nothing, and text that does not parse is skipped.
pub fn history_marks(state: &ScreenState, cfg: &VlmConfig, memory: usize) -> Vec<f32> {
    let mut out = vec![0f32; cfg.image_tokens() * memory];
    let size = state.screenshot.dimensions();
    let actions = state.history.iter().rev().filter_map(|t| GuiAction::parse(t).ok());
    for (age, action) in actions.take(memory).enumerate() {
        for (x, y) in action.points() {
            if let Some(cell) = grid_cell(x as f32 + 0.5, y as f32 + 0.5, size, cfg) {
                out[cell * memory + age] = 1.0;
            }
        }
    }
    out
}

/// For one state, the last `memory` parseable actions of its history, newest first: per
/// slot the kind's index in [`GuiAction::KINDS`] and the word buckets of the text it typed
/// or the key it pressed (at most [`ACTION_WORDS`]; none without word buckets).
pub fn action_tokens(state: &ScreenState, cfg: &VlmConfig, memory: usize) -> Vec<(usize, Vec<u32>)> {
    let actions = state.history.iter().rev().filter_map(|t| GuiAction::parse(t).ok());
    actions
        .take(memory)
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

/// A batch's history as tensors (K = `memory` slots, slot `k`: the action `k` steps before
/// the newest).
#[derive(Debug, Clone)]
pub struct HistoryInputs {
    /// [B, image_tokens, K] f32: the marks (see [`history_marks`]).
    pub marks: Tensor,
    /// [B, K, kinds] f32: each slot's action kind, one-hot (all 0 on an empty slot).
    pub kinds: Tensor,
    /// [B, K, ACTION_WORDS] u32: word buckets of the text typed or the key pressed (0 on
    /// empty places), when the config has word buckets.
    pub words: Option<Tensor>,
    /// [B, K, ACTION_WORDS, 1] f32: 1 on filled word places.
    pub word_mask: Option<Tensor>,
    /// Filled slots per state (the rest are masked out of attention).
    pub filled: Vec<usize>,
}

impl HistoryInputs {
    /// The history of each of `states`, `memory` actions deep.
    pub fn new(states: &[ScreenState], cfg: &VlmConfig, memory: usize, device: &Device) -> Result<Self> {
        let (b, nk) = (states.len(), GuiAction::KINDS.len());
        let marks: Vec<f32> = states.iter().flat_map(|s| history_marks(s, cfg, memory)).collect();
        let mut kinds = vec![0f32; b * memory * nk];
        let mut ids = vec![0u32; b * memory * ACTION_WORDS];
        let mut filled = Vec::with_capacity(b);
        for (i, s) in states.iter().enumerate() {
            let slots = action_tokens(s, cfg, memory);
            filled.push(slots.len());
            for (k, (kind, words)) in slots.iter().enumerate() {
                kinds[(i * memory + k) * nk + kind] = 1.0;
                let at = (i * memory + k) * ACTION_WORDS;
                ids[at..at + words.len()].copy_from_slice(words);
            }
        }
        let (words, word_mask) = if cfg.word_buckets > 0 {
            let m: Vec<f32> = ids.iter().map(|&id| f32::from(u8::from(id != 0))).collect();
            (
                Some(Tensor::from_vec(ids, (b, memory, ACTION_WORDS), device)?),
                Some(Tensor::from_vec(m, (b, memory, ACTION_WORDS, 1), device)?),
            )
        } else {
            (None, None)
        };
        Ok(HistoryInputs {
            marks: Tensor::from_vec(marks, (b, cfg.image_tokens(), memory), device)?,
            kinds: Tensor::from_vec(kinds, (b, memory, nk), device)?,
            words,
            word_mask,
            filled,
        })
    }
}

/// The history's learned tables, under the encoder's names of guirl 0.1 (`memory`,
/// `action_kind`, `action_age`), so a 0.1 checkpoint with `memory` and `memory_actions`
/// loads as it was.
#[derive(Debug, Clone)]
pub struct HistoryEncoder {
    /// [K, d]: added to the image token an earlier action pointed at, one row per age.
    marks: Tensor,
    /// [kinds, d].
    kinds: Tensor,
    /// [K, d].
    ages: Tensor,
}

impl HistoryEncoder {
    /// The tables for `memory` actions of width `d`.
    pub fn new(memory: usize, d: usize, vb: &VarBuilder) -> Result<HistoryEncoder> {
        Ok(HistoryEncoder {
            marks: table(vb, "memory", memory, d)?,
            kinds: table(vb, "action_kind", GuiAction::KINDS.len(), d)?,
            ages: table(vb, "action_age", memory, d)?,
        })
    }

    /// The image tokens `img` [B, N, d] with the marks added.
    pub fn mark(&self, img: &Tensor, h: &HistoryInputs) -> Result<Tensor> {
        // [B, N, K] one-hot ages × [K, d]: a plain matmul, so the table learns.
        img + h.marks.broadcast_matmul(&self.marks)?
    }

    /// The action tokens [B, K, d], their words read from `word_emb` when there are some.
    pub fn tokens(&self, h: &HistoryInputs, word_emb: Option<&Tensor>) -> Result<Tensor> {
        let mut tok = h.kinds.broadcast_matmul(&self.kinds)?.broadcast_add(&self.ages)?;
        if let (Some(table), Some(ids), Some(m)) = (word_emb, &h.words, &h.word_mask) {
            let (b, k, w) = ids.dims3()?;
            let d = table.dim(1)?;
            let emb = table.index_select(&ids.flatten_all()?, 0)?.reshape((b, k, w, d))?;
            tok = (tok + emb.broadcast_mul(m)?.sum(2)?)?;
        }
        Ok(tok)
    }
}
