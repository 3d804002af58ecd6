//! What an answer reads as ([`ParsedAnswer`], [`AnswerFormat`]), the frame its
//! coordinates are in, and the readers every format shares (points, waits, key names).
//! Kept apart from the parent module (where in an answer to look) and `calls` (the
//! call-shaped formats), which both use it.

use crate::env::action::NAMED_KEYS;
use crate::env::GuiAction;
use crate::policy::api::coords::CoordMode;
use serde::Serialize;
use std::fmt;

/// Screenshot pixels one UI-TARS `scroll(direction=...)` moves.
pub const UITARS_SCROLL_PX: i32 = 100;
/// Milliseconds a UI-TARS `wait()` waits (its prompt: "Sleep for 5s").
pub const UITARS_WAIT_MS: u32 = 5000;
/// Milliseconds for BrowserGym's `noop()` (its default) and a Qwen `wait` without `time`.
pub const DEFAULT_WAIT_MS: u32 = 1000;

/// Which answer format an action was read from (for reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerFormat {
    /// guirl's own text form.
    Guirl,
    /// BrowserGym's coordinate actions.
    #[serde(rename = "browsergym")]
    BrowserGym,
    /// UI-TARS's action space.
    UiTars,
    /// A Qwen `computer_use` tool call.
    QwenToolCall,
}

impl fmt::Display for AnswerFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AnswerFormat::Guirl => "guirl",
            AnswerFormat::BrowserGym => "browsergym",
            AnswerFormat::UiTars => "ui_tars",
            AnswerFormat::QwenToolCall => "qwen_tool_call",
        })
    }
}

/// An action read from a model's answer, and the format it was written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedAnswer {
    /// The action, in screenshot pixels.
    pub action: GuiAction,
    /// The format it was read from.
    pub format: AnswerFormat,
}

/// A model answer's coordinate frame, bound to one screenshot.
pub(super) struct Frame<'a> {
    pub(super) mode: &'a CoordMode,
    pub(super) w: u32,
    pub(super) h: u32,
}

impl Frame<'_> {
    pub(super) fn pt(&self, (x, y): (f64, f64)) -> (i32, i32) {
        self.mode.to_px(x, y, self.w, self.h)
    }
    pub(super) fn delta(&self, dx: f64, dy: f64) -> (i32, i32) {
        self.mode.delta_to_px(dx, dy, self.w, self.h)
    }
    pub(super) fn centre(&self) -> (i32, i32) {
        ((self.w / 2) as i32, (self.h / 2) as i32)
    }
}

/// 2 numbers → that point; 4 → the centre of the box they span.
pub(super) fn center(n: &[f64]) -> Option<(f64, f64)> {
    match *n {
        [x, y] => Some((x, y)),
        [x1, y1, x2, y2] => Some(((x1 + x2) / 2.0, (y1 + y2) / 2.0)),
        _ => None,
    }
}

/// A wait in milliseconds, checked.
pub(super) fn millis(ms: f64) -> Result<u32, String> {
    if (0.0..=u32::MAX as f64).contains(&ms) {
        Ok(ms.round() as u32)
    } else {
        Err(format!("a wait of {ms} ms: use a non-negative number"))
    }
}

/// Split a key combination: `Control+a`, `ctrl++` (the `+` key), or space-separated
/// UI-TARS style `ctrl c`.
pub(super) fn split_keys(s: &str) -> Vec<&str> {
    if !s.is_empty() && s.trim().is_empty() {
        return vec![" "]; // the space bar, as UI-TARS writes it
    }
    let s = s.trim();
    if s == "+" || s.is_empty() {
        return vec![s];
    }
    if s.contains(char::is_whitespace) && !s.contains('+') {
        return s.split_whitespace().collect();
    }
    match s.strip_suffix("++") {
        Some(mods) => mods.split('+').map(str::trim).chain(["+"]).collect(),
        None => s.split('+').map(str::trim).collect(),
    }
}

/// Modifier names in Playwright, pyautogui and guirl (see `key_action` for the order).
const MODIFIERS: &[&str] =
    &["ctrl", "control", "controlormeta", "alt", "option", "shift", "meta", "cmd", "command", "super", "win"];

/// Modifiers then one key, in Playwright / pyautogui / guirl names → guirl's `key(...)`.
pub(super) fn key_action(parts: &[&str]) -> Result<GuiAction, String> {
    let (key, mods) = parts.split_last().ok_or("a key like Enter or ctrl+a")?;
    let mut text = String::new();
    for m in mods {
        // MODIFIERS order: 3 ctrl names, 2 alt, 1 shift, the rest meta.
        text += match MODIFIERS.iter().position(|n| m.eq_ignore_ascii_case(n)) {
            Some(0..=2) => "ctrl+",
            Some(3..=4) => "alt+",
            Some(5) => "shift+",
            Some(_) => "meta+",
            None => {
                return Err(format!(
                    "{m:?} is not a modifier (ctrl, alt, shift, meta) in {:?}",
                    parts.join("+")
                ))
            }
        };
    }
    let lower = key.to_ascii_lowercase();
    let named = match lower.as_str() {
        "return" | "enter" => Some("Enter"),
        "esc" => Some("Escape"),
        "del" => Some("Delete"),
        "ins" => Some("Insert"),
        " " | "space" | "spacebar" => Some("Space"),
        "left" => Some("ArrowLeft"),
        "right" => Some("ArrowRight"),
        "up" => Some("ArrowUp"),
        "down" => Some("ArrowDown"),
        "pgup" => Some("PageUp"),
        "pgdn" => Some("PageDown"),
        _ => NAMED_KEYS.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)).map(|(n, _)| *n),
    };
    let key = if let Some(n) = named {
        n.to_string()
    } else if key.chars().count() == 1 {
        key.to_string()
    } else if let Some(c) = lower.strip_prefix("key").or(lower.strip_prefix("digit")).filter(|c| c.len() == 1)
    {
        c.to_string() // Playwright codes: KeyA → a, Digit1 → 1
    } else if MODIFIERS.contains(&lower.as_str()) {
        return Err(format!("{:?} has modifiers but no key to press", parts.join("+")));
    } else {
        return Err(format!(
            "unknown key {key:?}: use a key name (Enter, Tab, Escape, Backspace, ArrowUp, F1, ...) or \
             one character"
        ));
    };
    GuiAction::parse(&format!("key({text}{key})")).map_err(|e| e.to_string())
}
