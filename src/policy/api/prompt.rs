//! What an API policy sends: the system prompt (a file users can replace) and the user
//! turn's text. The user text has a fixed layout so a server can read the state back
//! (`guirl serve-policy` does, to run a checkpoint on it):
//!
//! ```text
//! Instruction: <the instruction, one line>
//! Screenshot: <W>x<H> pixels (the last image).
//! Previous actions:            (only after the first step)
//! 1. click(12, 40)
//! Elements (one JSON object a line: tag, text, label, value, box [x, y, w, h] in screenshot pixels):
//! {"tag":"button","text":"Submit","box":[10,50,40,20]}
//! ```

use crate::env::{BBox, Element, ScreenState};
use serde_json::{json, Map, Value};

/// The built-in system prompt; `{frame}` becomes the coordinate frame's description.
pub const DEFAULT_PROMPT: &str = include_str!("default_prompt.md");

/// The line that starts the instruction.
const INSTRUCTION: &str = "Instruction: ";
/// The line that starts the element list.
const ELEMENTS: &str = "Elements (one JSON object a line";

/// The system prompt `template` with `{frame}` (the coordinate frame) filled in.
pub fn system_prompt(template: &str, frame: &str) -> String {
    template.replace("{frame}", frame)
}

/// SHA-256 of a prompt template, hex (for reproducibility records).
pub fn prompt_hash(template: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(template.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The user turn's text for `state`, given the episode's previous actions.
pub fn user_text(state: &ScreenState, previous: &[String], with_elements: bool) -> String {
    let (w, h) = state.screenshot.dimensions();
    let instruction = state.instruction.replace(['\n', '\r'], " ");
    let mut s = format!("{INSTRUCTION}{instruction}\nScreenshot: {w}x{h} pixels (the last image).\n");
    if !previous.is_empty() {
        s.push_str("Previous actions:\n");
        for (i, a) in previous.iter().enumerate() {
            s.push_str(&format!("{}. {}\n", i + 1, a.replace('\n', " ")));
        }
    }
    if with_elements && !state.elements.is_empty() {
        s.push_str(ELEMENTS);
        s.push_str(": tag, text, label, value, box [x, y, w, h] in screenshot pixels):\n");
        for e in &state.elements {
            s.push_str(&element_line(e));
            s.push('\n');
        }
    }
    s
}

/// An element as one compact JSON line: empty and false fields left out.
fn element_line(e: &Element) -> String {
    let mut m = Map::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), json!(v));
        }
    };
    put("tag", &e.tag);
    put("text", &e.text);
    put("label", &e.label);
    put("value", &e.value);
    put("type", &e.input_type);
    put("id", &e.id);
    put("name", &e.name);
    put("class", &e.classes);
    if e.checked {
        m.insert("checked".into(), json!(true));
    }
    if e.focused {
        m.insert("focused".into(), json!(true));
    }
    // f32's shortest decimal form reads back to the same f32 (json!(f32) would widen
    // 10.3 to 10.300000190734863).
    let b = e.bbox;
    let boxed = format!("[{},{},{},{}]", b.x, b.y, b.w, b.h);
    m.insert("box".into(), serde_json::from_str(&boxed).unwrap_or(Value::Null));
    Value::Object(m).to_string()
}

fn element_of(v: &Value) -> Option<Element> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let b = v.get("box")?.as_array()?;
    let n = |i: usize| b.get(i).and_then(Value::as_f64);
    Some(Element {
        tag: s("tag"),
        id: s("id"),
        classes: s("class"),
        text: s("text"),
        label: s("label"),
        value: s("value"),
        input_type: s("type"),
        checked: v.get("checked").and_then(Value::as_bool).unwrap_or(false),
        focused: v.get("focused").and_then(Value::as_bool).unwrap_or(false),
        name: s("name"),
        bbox: BBox { x: n(0)? as f32, y: n(1)? as f32, w: n(2)? as f32, h: n(3)? as f32 },
    })
}

/// What a server reads back from a user text written by [`user_text`]: the instruction
/// and the elements (empty when the text has none). `None` without an `Instruction:` line.
pub fn read_user_text(text: &str) -> Option<(String, Vec<Element>)> {
    let mut instruction = None;
    let mut elements = Vec::new();
    let mut in_elements = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(INSTRUCTION) {
            instruction.get_or_insert_with(|| rest.to_string());
            in_elements = false;
        } else if line.starts_with(ELEMENTS) {
            in_elements = true;
        } else if in_elements {
            match serde_json::from_str::<Value>(line).ok().as_ref().and_then(element_of) {
                Some(e) => elements.push(e),
                None => in_elements = false,
            }
        }
    }
    instruction.map(|i| (i, elements))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_text_reads_back() {
        let mut state = crate::env::ScreenState {
            task_id: "t".into(),
            instruction: "Click \"OK\" then Submit".into(),
            url: String::new(),
            step: 1,
            frame: Default::default(),
            elements: vec![],
            screenshot: image::RgbImage::new(160, 210).into(),
            history: Vec::new(),
            previous_screenshot: None,
        };
        let e = Element {
            tag: "input".into(),
            text: String::new(),
            label: "Name".into(),
            value: "a \"b\"".into(),
            input_type: "text".into(),
            checked: true,
            focused: true,
            bbox: BBox { x: 10.3, y: 20.0, w: 30.25, h: 12.1 },
            ..Element::default()
        };
        state.elements = vec![e.clone(), Element { tag: "button".into(), text: "OK".into(), ..e.clone() }];
        let text = user_text(&state, &["click(1, 2)".into()], true);
        assert!(text.contains("Previous actions:\n1. click(1, 2)\n"), "{text}");
        let (instruction, elements) = read_user_text(&text).unwrap();
        assert_eq!(instruction, state.instruction);
        assert_eq!(elements, state.elements);
        assert!(read_user_text("no instruction here").is_none());
    }

    #[test]
    fn the_prompt_hash_is_sha256() {
        // sha256("") is the well-known e3b0c442…b855.
        assert_eq!(prompt_hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
