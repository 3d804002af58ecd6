//! Capturing what a person does in a visible browser window as [`GuiAction`]s.
//!
//! [`poll`] runs a script in the page that installs input listeners once per document
//! (on `window`, capture phase, trusted events only) and hands over the actions completed
//! since the last poll. The listeners turn DOM input into actions:
//!
//! - left press and release within 5 px: `click` (held 350 ms for a second press, which
//!   makes it a `double_click`); farther apart: `drag`; right press: `right_click`;
//! - keys that produce one character, without ctrl/alt/meta: merged into one `type("...")`
//!   until 300 ms pass without a key or another kind of input arrives; other keys
//!   (Enter, Tab, arrows, `ctrl+a`, ...): `key(...)`;
//! - wheel events at one pointer position, 300 ms apart at most: one `scroll`.
//!
//! The page reports CSS client pixels; [`Captured::to_action`] maps them to the
//! screenshot's pixels (device pixels, less the task's crop origin, see [`Frame`]).
//! Hovering is not captured. What was captured just before a same-origin navigation is
//! kept in `sessionStorage` and handed over by the next page; input in a new page before
//! guirl's next poll installs the listeners there (within one poll interval) is missed.

use super::gui_env::{eval, GuiEnv};
use super::{EnvError, Frame, GuiAction};
use serde::Deserialize;

/// The page script (a function body): install the listeners if needed, drain the queue.
pub const CAPTURE_JS: &str = include_str!("capture.js");

/// One action as the page captured it, in CSS client pixels.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Captured {
    /// `click`, `double_click`, `right_click`, `drag`, `scroll`, `type` or `key`.
    pub kind: String,
    /// Pointer x (the press, for a drag).
    #[serde(default)]
    pub x: f64,
    /// Pointer y.
    #[serde(default)]
    pub y: f64,
    /// Release x of a drag.
    #[serde(default)]
    pub x2: f64,
    /// Release y of a drag.
    #[serde(default)]
    pub y2: f64,
    /// Horizontal scroll in CSS pixels.
    #[serde(default)]
    pub dx: f64,
    /// Vertical scroll in CSS pixels.
    #[serde(default)]
    pub dy: f64,
    /// The typed text.
    #[serde(default)]
    pub text: String,
    /// The key's DOM name (`Enter`, `a`, ...).
    #[serde(default)]
    pub key: String,
    /// Modifiers held with the key (`ctrl`, `alt`, `shift`, `meta`).
    #[serde(default)]
    pub mods: Vec<String>,
    /// The page's device pixel ratio when it happened.
    #[serde(default = "one")]
    pub dpr: f64,
}

fn one() -> f64 {
    1.0
}

/// What one [`poll`] found.
#[derive(Debug, Clone, Deserialize)]
pub struct Drained {
    /// The actions completed since the last poll, oldest first.
    pub actions: Vec<Captured>,
    /// Input has begun that is not an action yet (a button held, a typing run or scroll
    /// still open, a click waiting for a possible second press).
    pub pending: bool,
    /// How many input events (presses, keys, wheel turns) this document has seen: a
    /// change between two polls means the person did something in between.
    pub seq: u64,
    /// The listeners were installed by this poll (a new document: the first poll after a
    /// start or a navigation).
    pub installed: bool,
    /// Where the viewport's top-left corner is on the screen, as the page reports it
    /// (for tools that drive the window with operating-system input).
    pub screen: [f64; 2],
}

/// Install the capture listeners in the current page if they are not there, and take
/// what they captured since the last call.
pub async fn poll(env: &GuiEnv) -> Result<Drained, EnvError> {
    let v = eval(env, CAPTURE_JS).await?;
    serde_json::from_value(v).map_err(|e| EnvError::Task(format!("unexpected capture result: {e}")))
}

impl Captured {
    /// The action in screenshot pixels of `frame`; an error says why it cannot be one
    /// (a point outside the screenshot, a key guirl has no name for).
    pub fn to_action(&self, frame: &Frame) -> Result<GuiAction, String> {
        let px = |x: f64, origin: i32| (x * self.dpr).round() as i32 - origin;
        let (x, y) = (px(self.x, frame.origin_x), px(self.y, frame.origin_y));
        let action = match self.kind.as_str() {
            "click" => GuiAction::Click { x, y },
            "double_click" => GuiAction::DoubleClick { x, y },
            "right_click" => GuiAction::RightClick { x, y },
            "drag" => GuiAction::Drag {
                x1: x,
                y1: y,
                x2: px(self.x2, frame.origin_x),
                y2: px(self.y2, frame.origin_y),
            },
            "scroll" => GuiAction::Scroll { x, y, dx: self.dx.round() as i32, dy: self.dy.round() as i32 },
            "type" => GuiAction::Type { text: self.text.clone() },
            "key" => {
                let mut text = self.mods.join("+");
                if !text.is_empty() {
                    text.push('+');
                }
                text.push_str(&self.key);
                GuiAction::parse(&format!("key({text})"))
                    .map_err(|_| format!("the key {:?} has no name in guirl's key(...) form", self.key))?
            }
            other => return Err(format!("unknown captured input {other:?}")),
        };
        if let Some((px, py)) = action.points().into_iter().find(|&(x, y)| !frame.contains(x, y)) {
            return Err(format!(
                "{action} is outside the task's {}x{} screenshot (at {px}, {py})",
                frame.width, frame.height
            ));
        }
        Ok(action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Frame {
        Frame { width: 160, height: 210, origin_x: 0, origin_y: 50, ..Default::default() }
    }

    fn cap(json: serde_json::Value) -> Captured {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn pointer_input_maps_to_screenshot_pixels() {
        let f = frame();
        let click = cap(serde_json::json!({"kind": "click", "x": 80.4, "y": 100.6}));
        assert_eq!(click.to_action(&f).unwrap().to_string(), "click(80, 51)");
        // At device pixel ratio 2 the screenshot has twice the CSS pixels.
        let zoomed = cap(serde_json::json!({"kind": "double_click", "x": 40, "y": 50, "dpr": 2.0}));
        assert_eq!(zoomed.to_action(&f).unwrap().to_string(), "double_click(80, 50)");
        let drag = cap(serde_json::json!({"kind": "drag", "x": 10, "y": 60, "x2": 30, "y2": 90}));
        assert_eq!(drag.to_action(&f).unwrap().to_string(), "drag(10, 10, 30, 40)");
        let wheel = cap(serde_json::json!({"kind": "scroll", "x": 10, "y": 60, "dx": 0, "dy": 99.6}));
        assert_eq!(wheel.to_action(&f).unwrap().to_string(), "scroll(10, 10, 0, 100)");
        let above = cap(serde_json::json!({"kind": "right_click", "x": 10, "y": 20}));
        let err = above.to_action(&f).unwrap_err();
        assert!(err.contains("outside the task's 160x210 screenshot"), "{err}");
    }

    #[test]
    fn keys_map_to_type_and_key_actions() {
        let f = frame();
        let typed = cap(serde_json::json!({"kind": "type", "text": "Hi \"you\""}));
        assert_eq!(typed.to_action(&f).unwrap(), GuiAction::Type { text: "Hi \"you\"".into() });
        let enter = cap(serde_json::json!({"kind": "key", "key": "Enter", "mods": []}));
        assert_eq!(enter.to_action(&f).unwrap().to_string(), "key(Enter)");
        let select_all = cap(serde_json::json!({"kind": "key", "key": "a", "mods": ["ctrl"]}));
        assert_eq!(select_all.to_action(&f).unwrap().to_string(), "key(ctrl+a)");
        let back_tab = cap(serde_json::json!({"kind": "key", "key": "Tab", "mods": ["shift"]}));
        assert_eq!(back_tab.to_action(&f).unwrap().to_string(), "key(shift+Tab)");
        let odd = cap(serde_json::json!({"kind": "key", "key": "PrintScreen", "mods": []}));
        assert!(odd.to_action(&f).unwrap_err().contains("PrintScreen"));
    }
}
