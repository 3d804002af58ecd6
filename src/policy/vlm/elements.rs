//! The `elements` input: one encoder token per visible element of the page
//! (`ScreenState.elements`: the interactive elements `observe.js` finds in the DOM and
//! hit-tests as reachable in the screenshot, in document order).
//!
//! An element's token is the sum of learned parts:
//!
//! - **words**: the distinct words of its text and accessible name (`Element::label`), at
//!   most [`ELEMENT_WORDS`], through the instruction's word table, averaged; each word with
//!   the `match` vector added when the (cut) instruction has that word too. Why: an
//!   utterance-to-element alignment feature, as DOM agents for MiniWoB++ use; learning the
//!   match through attention alone from a few thousand demonstrations left the policy
//!   choosing rows at about chance.
//! - **value**: the words of its value (`Element::value`, what was typed or chosen) the same
//!   way, plus the `value` vector, so typed text and a label read differently.
//! - **role**: a row of a table of [`Role`]s, from the tag and the input type.
//! - **state**: the `checked` and `focused` vectors, for the states it is in (the page
//!   reports no disabled state).
//! - **box**: its box (x0, y0, x1, y1, each in [-1, 1] over the screenshot) through a
//!   linear layer, plus the image grid's own position vector of the token under the box's
//!   centre, so the element's token and the image tokens under it share a position.
//! - **segment**: one vector every element token has (what kind of token it is).
//!
//! Nothing is shaped for a task: no number comparison, no borrowed row label, no pairing of
//! a control's state with the instruction. Elements past the first `max_elements` are not
//! read as tokens (the screenshot still shows them); a batch pads to its longest list (at
//! least one slot) and masks the empty slots out of attention.
//!
//! The pointer head's keys are the image tokens' encoder outputs plus, on the token under
//! each element's box centre, that element's own encoder output ([`ElementInputs::on_cells`]).
//! Why: the pointer picks a place, and an element is where it lies. When only the image
//! tokens keyed the pointer, what an element token knew (its words match the instruction,
//! it is unchecked) had to cross to the image token under it by attention, which 100
//! demonstrations did not teach: a builtin/toggle-switches clone stayed at the pixels-only
//! level (docs/learning.md).

use candle_core::{Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::VlmConfig;
use super::layers::{linear, table, Linear, INIT_STD};
use super::words::{distinct_words, grid_cell, policy_words};
use crate::env::{Element, ScreenState};

/// Words an element's token averages over, from its text and name (and as many from its
/// value); later distinct words are dropped.
pub const ELEMENT_WORDS: usize = 8;

/// What an element is, from its tag and input type: a small fixed vocabulary, one learned
/// vector each. An input's type is read as the browser reports it (lower case; empty or
/// unknown text-like types are text fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Anything else a person can act on (a `div` with a click handler, `[role]`, ...).
    Other,
    /// `a`.
    Link,
    /// `button`, `summary`, and inputs of type button, submit, reset, image.
    Button,
    /// Inputs of type text, email, search, url, tel, or none.
    TextField,
    /// Inputs of type password.
    Password,
    /// Inputs of type checkbox.
    Checkbox,
    /// Inputs of type radio.
    Radio,
    /// Inputs of type number and range.
    Number,
    /// Inputs of type date, time, datetime-local, month, week.
    DateTime,
    /// `textarea`.
    TextArea,
    /// `select`.
    Select,
    /// `option`.
    Option,
    /// `label`.
    Label,
    /// Inputs of other types (color, file, ...).
    OtherInput,
}

impl Role {
    /// Rows of the role table.
    pub const COUNT: usize = 14;

    /// The role of `e`.
    pub fn of(e: &Element) -> Role {
        match e.tag.as_str() {
            "a" => Role::Link,
            "button" | "summary" => Role::Button,
            "textarea" => Role::TextArea,
            "select" => Role::Select,
            "option" => Role::Option,
            "label" => Role::Label,
            "input" => match e.input_type.as_str() {
                "" | "text" | "email" | "search" | "url" | "tel" => Role::TextField,
                "password" => Role::Password,
                "checkbox" => Role::Checkbox,
                "radio" => Role::Radio,
                "number" | "range" => Role::Number,
                "date" | "time" | "datetime-local" | "month" | "week" => Role::DateTime,
                "button" | "submit" | "reset" | "image" => Role::Button,
                _ => Role::OtherInput,
            },
            _ => Role::Other,
        }
    }
}

/// One element as its token reads it (before the learned parts).
#[derive(Debug, Clone, PartialEq)]
pub struct ElementToken {
    /// Word buckets of its text and accessible name, distinct, at most [`ELEMENT_WORDS`].
    pub words: Vec<u32>,
    /// Per word of `words`: whether the cut instruction has it too.
    pub matched: Vec<bool>,
    /// Word buckets of its value, the same way.
    pub value: Vec<u32>,
    /// Per word of `value`: whether the cut instruction has it too.
    pub value_matched: Vec<bool>,
    /// What it is.
    pub role: Role,
    /// Checked (a checkbox, a radio button; a selected option).
    pub checked: bool,
    /// Has the keyboard focus.
    pub focused: bool,
    /// x0, y0, x1, y1 over the screenshot, each in [-1, 1] (clamped: a box may extend past
    /// the edges).
    pub bbox: [f32; 4],
    /// The image-grid cell under the box's centre (clamped onto the screenshot).
    pub cell: usize,
}

/// The tokens of `state`'s first `max` elements (document order).
pub fn element_tokens(state: &ScreenState, cfg: &VlmConfig, max: usize) -> Vec<ElementToken> {
    let text = state.instruction.as_bytes();
    let said: Vec<u32> = policy_words(&text[..text.len().min(cfg.max_instruction_bytes)], cfg);
    let flags = |ids: &[u32]| ids.iter().map(|id| said.contains(id)).collect::<Vec<bool>>();
    let (w, h) = state.screenshot.dimensions();
    state
        .elements
        .iter()
        .take(max)
        .map(|e| {
            let words = distinct_words(&format!("{} {}", e.text, e.label), cfg, ELEMENT_WORDS);
            let value = distinct_words(&e.value, cfg, ELEMENT_WORDS);
            let b = &e.bbox;
            let (bbox, cell) = if w == 0 || h == 0 {
                ([0.0; 4], 0)
            } else {
                let (w, h) = (w as f32, h as f32);
                let side = |v: f32, n: f32| (v / n).clamp(0.0, 1.0) * 2.0 - 1.0;
                let (cx, cy) = ((b.x + b.w / 2.0).clamp(0.0, w - 0.5), (b.y + b.h / 2.0).clamp(0.0, h - 0.5));
                let cell = grid_cell(cx, cy, (w as u32, h as u32), cfg).unwrap_or(0);
                ([side(b.x, w), side(b.y, h), side(b.x + b.w, w), side(b.y + b.h, h)], cell)
            };
            ElementToken {
                matched: flags(&words),
                value_matched: flags(&value),
                words,
                value,
                role: Role::of(e),
                checked: e.checked,
                focused: e.focused,
                bbox,
                cell,
            }
        })
        .collect()
}

/// A batch's element tokens as tensors: B rows of E slots (E: the longest row, at least
/// one); an empty slot has no words, role [`Role::Other`], no state, a zero box, cell 0.
#[derive(Debug, Clone)]
pub struct ElementInputs {
    /// [B, E, ELEMENT_WORDS] u32: word buckets of text and name (0 on empty places).
    pub words: Tensor,
    /// [B, E, ELEMENT_WORDS, 1] f32: the masked mean's weights, 1/n on an element's n words.
    pub word_weights: Tensor,
    /// [B, E, 1] f32: the share of the element's words that the instruction has too (the
    /// mean of the per-word match flags).
    pub word_match: Tensor,
    /// [B, E, ELEMENT_WORDS] u32: word buckets of the value.
    pub value: Tensor,
    /// [B, E, ELEMENT_WORDS, 1] f32: the value words' weights.
    pub value_weights: Tensor,
    /// [B, E, 1] f32: the share of the value's words that the instruction has too.
    pub value_match: Tensor,
    /// [B, E, 1] f32: 1 where the element has value words.
    pub has_value: Tensor,
    /// [B, E] u32: each element's [`Role`] (its index).
    pub roles: Tensor,
    /// [B, E, 2] f32: checked, focused.
    pub states: Tensor,
    /// [B, E, 4] f32: the box.
    pub boxes: Tensor,
    /// [B, E] u32: the image-grid cell under the box's centre.
    pub cells: Tensor,
    /// [B, image_tokens, E] f32: 1 where element `e`'s box centre lies on image token `i`
    /// (0 for empty slots): the pointer's keys add each element's encoder output there.
    pub on_cells: Tensor,
}

impl ElementInputs {
    /// Pack each state's tokens into `slots` slots (at least the longest list), over an
    /// image of `image_tokens` tokens.
    pub fn new(
        rows: &[Vec<ElementToken>],
        slots: usize,
        image_tokens: usize,
        device: &Device,
    ) -> Result<ElementInputs> {
        let (b, e, k) = (rows.len(), slots, ELEMENT_WORDS);
        let mut out = Packed::new(b * e);
        let mut on_cells = vec![0f32; b * image_tokens * e];
        for (i, row) in rows.iter().enumerate() {
            for (j, t) in row.iter().enumerate() {
                let at = i * e + j;
                out.words(at, &t.words, &t.matched, false);
                out.words(at, &t.value, &t.value_matched, true);
                out.roles[at] = t.role as u32;
                let flag = |b: bool| f32::from(u8::from(b));
                out.states[at * 2..at * 2 + 2].copy_from_slice(&[flag(t.checked), flag(t.focused)]);
                out.boxes[at * 4..at * 4 + 4].copy_from_slice(&t.bbox);
                out.cells[at] = t.cell as u32;
                if t.cell < image_tokens {
                    on_cells[(i * image_tokens + t.cell) * e + j] = 1.0;
                }
            }
        }
        let Packed {
            ids: [ids, vids],
            weights: [w, vw],
            matched: [m, vm],
            has_value,
            roles,
            states,
            boxes,
            cells,
        } = out;
        Ok(ElementInputs {
            words: Tensor::from_vec(ids, (b, e, k), device)?,
            word_weights: Tensor::from_vec(w, (b, e, k, 1), device)?,
            word_match: Tensor::from_vec(m, (b, e, 1), device)?,
            value: Tensor::from_vec(vids, (b, e, k), device)?,
            value_weights: Tensor::from_vec(vw, (b, e, k, 1), device)?,
            value_match: Tensor::from_vec(vm, (b, e, 1), device)?,
            has_value: Tensor::from_vec(has_value, (b, e, 1), device)?,
            roles: Tensor::from_vec(roles, (b, e), device)?,
            states: Tensor::from_vec(states, (b, e, 2), device)?,
            boxes: Tensor::from_vec(boxes, (b, e, 4), device)?,
            cells: Tensor::from_vec(cells, (b, e), device)?,
            on_cells: Tensor::from_vec(on_cells, (b, image_tokens, e), device)?,
        })
    }
}

/// The host-side buffers of [`ElementInputs`] (index 0: text and name; 1: value).
struct Packed {
    ids: [Vec<u32>; 2],
    weights: [Vec<f32>; 2],
    matched: [Vec<f32>; 2],
    has_value: Vec<f32>,
    roles: Vec<u32>,
    states: Vec<f32>,
    boxes: Vec<f32>,
    cells: Vec<u32>,
}

impl Packed {
    fn new(n: usize) -> Packed {
        let k = ELEMENT_WORDS;
        Packed {
            ids: [vec![0; n * k], vec![0; n * k]],
            weights: [vec![0.0; n * k], vec![0.0; n * k]],
            matched: [vec![0.0; n], vec![0.0; n]],
            has_value: vec![0.0; n],
            roles: vec![Role::Other as u32; n],
            states: vec![0.0; n * 2],
            boxes: vec![0.0; n * 4],
            cells: vec![0; n],
        }
    }

    /// Slot `at`'s words (the value's when `value`) with their match flags.
    fn words(&mut self, at: usize, ids: &[u32], matched: &[bool], value: bool) {
        let (s, k) = (usize::from(value), ELEMENT_WORDS);
        if ids.is_empty() {
            return;
        }
        let share = 1.0 / ids.len() as f32;
        self.ids[s][at * k..at * k + ids.len()].copy_from_slice(ids);
        self.weights[s][at * k..at * k + ids.len()].fill(share);
        self.matched[s][at] = matched.iter().filter(|&&m| m).count() as f32 * share;
        if value {
            self.has_value[at] = 1.0;
        }
    }
}

/// The learned parts of an element token (see the module docs); the word table and the
/// image grid's positions are the model's own, passed in.
#[derive(Debug, Clone)]
pub struct ElementEncoder {
    /// [1, d]: added to a word the instruction has too.
    matched: Tensor,
    /// [1, d]: added to an element that has value words.
    value: Tensor,
    /// [`Role::COUNT`, d].
    roles: Tensor,
    /// [2, d]: checked, focused.
    states: Tensor,
    /// 4 → d, no bias (the segment vector is the constant).
    bbox: Linear,
    /// [1, d].
    segment: Tensor,
}

impl ElementEncoder {
    /// The parts for width `d`, named `elements.*` under `vb`.
    pub fn new(d: usize, vb: VarBuilder) -> Result<ElementEncoder> {
        Ok(ElementEncoder {
            matched: table(&vb, "match", 1, d)?,
            value: table(&vb, "value", 1, d)?,
            roles: table(&vb, "role", Role::COUNT, d)?,
            states: table(&vb, "state", 2, d)?,
            bbox: linear(vb.pp("box"), 4, d, false, INIT_STD)?,
            segment: table(&vb, "segment", 1, d)?,
        })
    }

    /// The element tokens [B, E, d] of `x`, reading words from `word_emb` [buckets, d] and
    /// positions from the image grid's table `grid_pos` [image_tokens, d].
    pub fn forward(&self, x: &ElementInputs, word_emb: &Tensor, grid_pos: &Tensor) -> Result<Tensor> {
        let (b, e, _) = x.words.dims3()?;
        let d = self.segment.dim(1)?;
        let mean = |ids: &Tensor, weights: &Tensor| -> Result<Tensor> {
            let k = ids.dim(2)?;
            word_emb
                .index_select(&ids.flatten_all()?, 0)?
                .reshape((b, e, k, d))?
                .broadcast_mul(weights)?
                .sum(2)
        };
        // mean(word + flag · match) = mean(word) + share of flagged words · match
        let words = (mean(&x.words, &x.word_weights)? + x.word_match.broadcast_mul(&self.matched)?)?;
        let value = (mean(&x.value, &x.value_weights)?
            + x.value_match.broadcast_mul(&self.matched)?
            + x.has_value.broadcast_mul(&self.value)?)?;
        let role = self.roles.index_select(&x.roles.flatten_all()?, 0)?.reshape((b, e, d))?;
        // [B, E, 2] flags × [2, d]: a plain matmul, so both rows learn.
        let state = x.states.broadcast_matmul(&self.states)?;
        let place = (self.bbox.forward(&x.boxes)?
            + grid_pos.index_select(&x.cells.flatten_all()?, 0)?.reshape((b, e, d))?)?;
        (words + value + role + state + place)?.broadcast_add(&self.segment)
    }
}
