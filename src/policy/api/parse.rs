//! Reading a model's free-text answer as a [`GuiAction`].
//!
//! Four answer formats are understood, with coordinates in a [`CoordMode`] frame:
//!
//! 1. guirl's own text form, floats allowed: `click(12.5, 40)`, `key(ctrl+a)`, `done()`.
//! 2. BrowserGym coordinate actions (Python calls): `mouse_click(x, y, button='right')`,
//!    `scroll(dx, dy)`, `keyboard_press('ControlOrMeta+a')`, `noop(500)`, ...
//! 3. UI-TARS actions: `click(start_box='(x,y)')`, `<|box_start|>(x,y)<|box_end|>`,
//!    `<point>x y</point>`, `<bbox>x1 y1 x2 y2</bbox>` (its centre), `hotkey(key='ctrl c')`,
//!    `scroll(start_box=..., direction='down')`, `finished()`, ...
//! 4. Qwen `computer_use` tool calls: `<tool_call>{"name": "computer_use", "arguments":
//!    {"action": "left_click", "coordinate": [x, y]}}</tool_call>`, or the bare JSON object
//!    (see [`parse_tool_call`] for the actions).
//!
//! Where the action is looked for, after any `<think>...</think>` (reasoning models),
//! first match wins: `<tool_call>` blocks (if there are any, nothing else is looked at);
//! JSON objects with `name` and `arguments`; the first call after the last `Action:`
//! (UI-TARS convention; if it names an action but cannot be read, that is the error);
//! markdown code fences, last first (first call in each); otherwise every line, last to
//! first, taking the first call on the line. Prose around the action is ignored. A call
//! that names a known action but cannot be read (bad arguments, unsupported variant) is
//! reported if nothing else in the answer reads.
//!
//! Choices where the formats leave a gap:
//! - Shared names are told apart by their arguments: `scroll(x, y, dx, dy)` is guirl's,
//!   `scroll(dx, dy)` BrowserGym's (at the screenshot's centre), `scroll(direction=...)`
//!   UI-TARS's; `click(x, y)` is guirl's, `click(start_box=...)` UI-TARS's; `wait(ms)` is
//!   guirl's, a bare `wait()` UI-TARS's.
//! - Scroll amounts are converted by the mode's scale (not clamped); UI-TARS scrolls have
//!   no amount and move [`UITARS_SCROLL_PX`] screenshot pixels.
//! - UI-TARS `wait()` waits [`UITARS_WAIT_MS`] (its prompt says 5 s); BrowserGym `noop()`
//!   and a Qwen `wait` without `time` wait [`DEFAULT_WAIT_MS`].
//! - UI-TARS `type(content='...\n')`: a trailing newline means "submit"; it is kept, and
//!   guirl's `type` presses Enter for a newline, so the text is typed and submitted.
//! - Keys use Playwright / pyautogui names mapped to guirl's (`Control`, `ControlOrMeta` →
//!   `ctrl`, `Return` → `Enter`, `left` → `ArrowLeft`, `KeyA` → `a`, ...).
//! - `finished`, `call_user`, `send_msg_to_user`, `report_infeasible`, Qwen `terminate`,
//!   `answer` and `interact` all end the episode: `done()`.

// What an answer reads as, and the readers every format shares, in one file; the
// call-shaped formats (guirl, BrowserGym, UI-TARS) in another.
mod answer;
mod calls;

use super::coords::CoordMode;
use crate::env::GuiAction;
use answer::{center, key_action, millis, split_keys, Frame};
pub use answer::{AnswerFormat, ParsedAnswer, DEFAULT_WAIT_MS, UITARS_SCROLL_PX, UITARS_WAIT_MS};
use calls::{interpret, numbers, read_call, Lexer, KNOWN};
use serde_json::Value;

/// What the error message lists when no action can be read.
pub const ACCEPTED_FORMS: &str = "guirl actions (click(x, y), double_click, right_click, hover, \
    drag(x1, y1, x2, y2), scroll(x, y, dx, dy), type(\"text\"), key(ctrl+a), wait(ms), done()), \
    BrowserGym coordinate actions (mouse_click(x, y[, 'right']), mouse_dblclick, mouse_move, \
    mouse_drag_and_drop, scroll(dx, dy), scroll_at(x, y, dx, dy), keyboard_type('text'), \
    keyboard_press('Enter'), noop(), send_msg_to_user('...')), UI-TARS actions \
    (click(start_box='(x,y)'), left_double, right_single, hover, drag(start_box=..., end_box=...), \
    type(content='text'), hotkey(key='ctrl c'), press(key='enter'), \
    scroll(start_box='(x,y)', direction='down'), wait(), finished()) or a Qwen tool call \
    (<tool_call>{\"name\": \"computer_use\", \"arguments\": {\"action\": \"left_click\", \
    \"coordinate\": [x, y]}}</tool_call>)";

/// Read the action out of a model's answer; coordinates in the answer are in `mode`'s
/// frame of a `width`×`height` screenshot. See the module docs for formats and search order.
pub fn parse_answer(answer: &str, mode: &CoordMode, width: u32, height: u32) -> Result<ParsedAnswer, String> {
    let fr = Frame { mode, w: width, h: height };
    let fail = |why: Option<String>| {
        Err(match why {
            Some(e) => format!(
                "could not read an action from the answer {}: {e}; accepted forms: {ACCEPTED_FORMS}",
                cut(answer)
            ),
            None => {
                format!("no action found in the answer {}; accepted forms: {ACCEPTED_FORMS}", cut(answer))
            }
        })
    };
    // Reasoning models think in <think>...</think>; the answer follows it.
    let body = answer.rfind("</think>").map_or(answer, |i| &answer[i + "</think>".len()..]);
    let qwen = |a: Result<GuiAction, String>| {
        a.map(|action| ParsedAnswer { action, format: AnswerFormat::QwenToolCall })
    };
    // A <tool_call> block is the answer: no other format is looked for around it.
    let blocks = tool_call_blocks(body);
    if !blocks.is_empty() {
        let mut why = None;
        for block in blocks {
            let call = json_objects(block).into_iter().next().ok_or_else(|| {
                format!(
                    "the <tool_call> block {} holds no JSON object {{\"name\": ..., \"arguments\": ...}}",
                    cut(block)
                )
            });
            match call.and_then(|(name, args)| qwen(parse_tool_call(&name, &args, mode, width, height))) {
                Ok(p) => return Ok(p),
                Err(e) => _ = why.get_or_insert(e),
            }
        }
        return fail(why);
    }
    let mut why = None;
    for (name, args) in json_objects(body) {
        match qwen(parse_tool_call(&name, &args, mode, width, height)) {
            Ok(p) => return Ok(p),
            Err(e) => _ = why.get_or_insert(e),
        }
    }
    // After "Action:" (UI-TARS), the first call is the answer, readable or not.
    if let Some(i) = body.rfind("Action:") {
        let (found, errs) = scan(&body[i + "Action:".len()..], &fr);
        if let Some((_, p)) = found.into_iter().next() {
            return Ok(p);
        }
        if let Some(e) = errs.into_iter().next() {
            return fail(Some(e));
        }
    }
    for fence in code_fences(body).into_iter().rev() {
        let (found, errs) = scan(fence, &fr);
        if let Some((_, p)) = found.into_iter().next() {
            return Ok(p);
        }
        if let Some(e) = errs.into_iter().next() {
            why.get_or_insert(e);
        }
    }
    // Last resort: the first call on the last line that has one.
    let (found, errs) = scan(body, &fr);
    let line = |at: usize| body[..at].matches('\n').count();
    if let Some(last) = found.iter().map(|(at, _)| line(*at)).max() {
        return Ok(found.into_iter().find(|(at, _)| line(*at) == last).unwrap().1);
    }
    if let Some(e) = errs.into_iter().last() {
        why.get_or_insert(e);
    }
    fail(why)
}

/// Read one Qwen `computer_use` tool call (`name`, and `arguments` as an object or a JSON
/// string, the OpenAI `tool_calls` shape). Actions: `left_click` (or `click`),
/// `right_click`, `double_click`, `mouse_move` (`coordinate: [x, y]`; 4 numbers → the
/// box's centre); `left_click_drag` from `start_coordinate` to `coordinate` (or `swipe`
/// from `coordinate` to `coordinate2`); `type` (`text`); `key` (`keys: ["ctrl", "c"]`);
/// `scroll` (`pixels`, positive = up, as Qwen documents) and `hscroll` (positive = right),
/// at `coordinate` or the screenshot's centre; `wait` (`time` in seconds); `terminate`,
/// `answer`, `interact` → `done()`.
pub fn parse_tool_call(
    name: &str,
    arguments: &Value,
    mode: &CoordMode,
    width: u32,
    height: u32,
) -> Result<GuiAction, String> {
    if !matches!(name, "computer_use" | "computer" | "mobile_use") {
        return Err(format!("unknown tool {name:?}: guirl reads the computer_use tool"));
    }
    let parsed;
    let args = match arguments {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s)
                .map_err(|e| format!("tool arguments {s:?} are not JSON: {e}"))?;
            &parsed
        }
        v => v,
    };
    let fr = Frame { mode, w: width, h: height };
    let action = args.get("action").and_then(Value::as_str).ok_or_else(|| {
        format!("computer_use arguments {args} have no \"action\" (left_click, type, key, scroll, ...)")
    })?;
    let ctx = |what: &str| format!("computer_use {action} needs {what}, got {args}");
    let point = |key: &str| -> Result<Option<(i32, i32)>, String> {
        let Some(v) = args.get(key) else { return Ok(None) };
        let nums = match v {
            Value::Array(a) => a.iter().map(json_num).collect::<Option<Vec<f64>>>(),
            Value::String(s) => Some(numbers(s)),
            _ => None,
        };
        match nums.as_deref().map(center) {
            Some(Some(p)) => Ok(Some(fr.pt(p))),
            _ => Err(ctx(&format!("{key}: [x, y]"))),
        }
    };
    let need = |key: &str| point(key)?.ok_or_else(|| ctx(&format!("{key}: [x, y]")));
    let num = |key: &str| {
        args.get(key).map(|v| json_num(v).ok_or_else(|| ctx(&format!("a number {key}")))).transpose()
    };
    Ok(match action {
        "left_click" | "click" => {
            let (x, y) = need("coordinate")?;
            GuiAction::Click { x, y }
        }
        "right_click" => {
            let (x, y) = need("coordinate")?;
            GuiAction::RightClick { x, y }
        }
        "double_click" => {
            let (x, y) = need("coordinate")?;
            GuiAction::DoubleClick { x, y }
        }
        "mouse_move" => {
            let (x, y) = need("coordinate")?;
            GuiAction::Hover { x, y }
        }
        "left_click_drag" | "swipe" | "drag" => {
            let ((x1, y1), (x2, y2)) = match point("start_coordinate")? {
                Some(start) => (start, need("coordinate")?),
                None => match point("coordinate2")? {
                    Some(end) => (need("coordinate")?, end),
                    // Qwen2.5-VL drags from the cursor, which guirl does not track.
                    None => return Err(ctx("start_coordinate: [x, y] (guirl does not track the cursor)")),
                },
            };
            GuiAction::Drag { x1, y1, x2, y2 }
        }
        "type" => match args.get("text") {
            Some(Value::String(t)) => GuiAction::Type { text: t.clone() },
            _ => return Err(ctx("text: \"...\"")),
        },
        "key" => {
            let bad = || ctx("keys: [\"ctrl\", \"c\"]");
            let parts: Vec<&str> = match args.get("keys").or_else(|| args.get("text")) {
                Some(Value::Array(a)) => {
                    let mut parts = Vec::new();
                    for k in a {
                        parts.extend(split_keys(k.as_str().ok_or_else(bad)?));
                    }
                    parts
                }
                Some(Value::String(s)) => split_keys(s),
                _ => return Err(bad()),
            };
            key_action(&parts)?
        }
        "scroll" | "hscroll" => {
            let pixels = num("pixels")?.ok_or_else(|| ctx("pixels"))?;
            let (x, y) = point("coordinate")?.unwrap_or_else(|| fr.centre());
            // Qwen: positive pixels scroll up (wheel dy < 0); hscroll: positive = right.
            let (dx, dy) = if action == "scroll" { fr.delta(0.0, -pixels) } else { fr.delta(pixels, 0.0) };
            GuiAction::Scroll { x, y, dx, dy }
        }
        "wait" => {
            GuiAction::Wait { ms: millis(num("time")?.map_or(DEFAULT_WAIT_MS as f64, |s| s * 1000.0))? }
        }
        "terminate" | "answer" | "interact" => GuiAction::Done,
        "triple_click" | "middle_click" | "left_mouse_down" | "left_mouse_up" | "screenshot"
        | "cursor_position" | "long_press" => {
            return Err(format!("computer_use {action} is not supported by guirl"))
        }
        _ => {
            return Err(format!(
            "unknown computer_use action {action:?}: use left_click, right_click, double_click, mouse_move, \
                 left_click_drag, type, key, scroll, hscroll, wait, terminate or answer"
        ))
        }
    })
}

/// The answer, quoted, cut to its start and end if long.
fn cut(s: &str) -> String {
    let t = s.trim();
    let n = t.chars().count();
    if n <= 240 {
        return format!("{t:?}");
    }
    let head: String = t.chars().take(120).collect();
    let tail: String = t.chars().skip(n - 100).collect();
    format!("{head:?} … {tail:?}")
}

/// Contents of `<tool_call>...</tool_call>` blocks (an unclosed one runs to the end).
fn tool_call_blocks(s: &str) -> Vec<&str> {
    s.split("<tool_call>").skip(1).map(|b| b.split("</tool_call>").next().unwrap_or(b)).collect()
}

/// Contents of markdown code fences, without the opening line's language tag.
fn code_fences(s: &str) -> Vec<&str> {
    s.split("```").skip(1).step_by(2).map(|f| f.split_once('\n').map_or(f, |(_, body)| body)).collect()
}

/// JSON objects in the text with a string `name` and an `arguments` member.
fn json_objects(s: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find('{') {
        let at = i + off;
        let mut it = serde_json::Deserializer::from_str(&s[at..]).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => {
                if let (Some(Value::String(n)), Some(a)) = (v.get("name"), v.get("arguments")) {
                    out.push((n.clone(), a.clone()));
                }
                i = at + it.byte_offset().max(1);
            }
            _ => i = at + 1,
        }
    }
    out
}

/// Every call in `text` that names a known action: the ones read, with their byte offset,
/// and why the others could not be read.
fn scan(text: &str, fr: &Frame) -> (Vec<(usize, ParsedAnswer)>, Vec<String>) {
    let (mut found, mut errs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap();
        let starts_word = (c.is_ascii_alphabetic() || c == '_')
            && !text[..i].chars().next_back().is_some_and(|p| p.is_alphanumeric() || p == '_');
        if !starts_word {
            i += c.len_utf8();
            continue;
        }
        let mut lx = Lexer { s: text, pos: i };
        let name = lx.ident();
        let after_name = lx.pos;
        lx.ws();
        if !KNOWN.contains(&name) || !lx.rest().starts_with('(') {
            i = after_name;
            continue;
        }
        lx.pos += 1;
        match read_call(name, i, &mut lx) {
            Ok(call) => {
                match interpret(&call, fr) {
                    Ok(p) => found.push((i, p)),
                    Err(e) => errs.push(format!("{}: {e}", call.text)),
                }
                i = lx.pos;
            }
            Err(e) => {
                errs.push(e);
                i = after_name;
            }
        }
    }
    (found, errs)
}

fn json_num(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
