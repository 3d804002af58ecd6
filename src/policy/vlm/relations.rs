//! What the screen says against the instruction, per image token: a number's order against
//! the instruction's first number (the config's `numbers`) and a control's state against
//! whether the instruction names it (`control_state`). Re-exported from `inputs`.

use super::config::VlmConfig;
use super::words::{grid_cell, policy_words};
use crate::env::ScreenState;
use std::collections::HashSet;

/// The first whole number in `text`: a run of ASCII digits, negative after `-` or `−`
/// (U+2212). Longer runs than an `i64` holds are skipped.
pub fn first_number(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let end = b[i..].iter().position(|c| !c.is_ascii_digit()).map_or(b.len(), |n| i + n);
        if let Ok(n) = text[i..end].parse::<i64>() {
            let negative = text[..i].ends_with('-') || text[..i].ends_with('\u{2212}');
            return Some(if negative { -n } else { n });
        }
        i = end;
    }
    None
}

/// For one state, [image_tokens × 3] row-major: at the token under the centre of each
/// element whose text (or, with no number in its text, its value: a spinner's field)
/// holds a number, a one-hot of how that number compares with the
/// instruction's first number (less, equal, greater). All 0 when the instruction has no
/// number.
pub fn number_relations(state: &ScreenState, cfg: &VlmConfig) -> Vec<f32> {
    let mut out = vec![0f32; cfg.image_tokens() * 3];
    let (w, h) = state.screenshot.dimensions();
    let Some(asked) = first_number(&state.instruction) else { return out };
    if w == 0 || h == 0 {
        return out;
    }
    for e in &state.elements {
        let Some(shown) = first_number(&e.text).or_else(|| first_number(&e.value)) else { continue };
        let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
        if let Some(cell) = grid_cell(cx, cy, (w, h), cfg) {
            let row = &mut out[cell * 3..cell * 3 + 3];
            row.fill(0.0);
            row[(shown.cmp(&asked) as i8 + 1) as usize] = 1.0;
        }
    }
    out
}

/// For one state, [image_tokens × 4] row-major: at the token under the centre of each
/// checkbox or radio button, a one-hot of (named, checked) in the order named & checked,
/// named & unchecked, unnamed & checked, unnamed & unchecked. Named: its accessible name
/// (label, else text) has words and every one of them is among `said` (the instruction's
/// word buckets). Every word, not any: "Dark mode" named must not name "Airplane mode".
pub fn control_states(state: &ScreenState, said: &HashSet<u32>, cfg: &VlmConfig) -> Vec<f32> {
    let mut out = vec![0f32; cfg.image_tokens() * 4];
    let (w, h) = state.screenshot.dimensions();
    if w == 0 || h == 0 {
        return out;
    }
    for e in state.elements.iter().filter(|e| matches!(e.input_type.as_str(), "checkbox" | "radio")) {
        let name = if e.label.trim().is_empty() { &e.text } else { &e.label };
        let words: Vec<u32> = policy_words(name.as_bytes(), cfg).into_iter().filter(|&id| id != 0).collect();
        let named = !words.is_empty() && words.iter().all(|id| said.contains(id));
        let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
        if let Some(cell) = grid_cell(cx, cy, (w, h), cfg) {
            let row = &mut out[cell * 4..cell * 4 + 4];
            row.fill(0.0);
            row[2 * usize::from(!named) + usize::from(!e.checked)] = 1.0;
        }
    }
    out
}
