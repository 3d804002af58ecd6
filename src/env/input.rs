//! Executing a [`GuiAction`] in the page: as DevTools input events where guirl holds a
//! DevTools channel to a browser it started, else as WebDriver input actions.
//!
//! A WebDriver input action costs 6-12 ms of chromedriver's per-command work (a check for
//! pending navigations, a frame-tree read, a view-size script) around the very
//! `Input.dispatch*` calls that DevTools takes directly in well under a millisecond. The
//! DevTools path sends the same events chromedriver would: for a click a move, a press and
//! a release (`clickCount` 1; a double click presses twice, the second with `clickCount`
//! 2), for a drag a press, eight moves with the button held and a release, for a scroll
//! one wheel event, and for keys `keyDown`/`keyUp` with the modifiers' bits.
//!
//! Typing goes key by key (`keyDown` carrying the character's text, then `keyUp`), not
//! as `Input.insertText`: inserted text fires only `input`, and pages that listen for
//! `keydown`/`keypress`/`keyup` (jQuery UI's autocomplete, MiniWoB++'s use-autocomplete,
//! shortcut handlers) would not see it. A newline is the Enter key, a tab the Tab key.
//!
//! One difference from chromedriver, on purpose: chromedriver counts two clicks at the
//! same place within 500 ms as a double click even across separate `click` actions; here
//! a `click` is always a single click (`clickCount` 1), as the action says.
//!
//! DevTools input is the default wherever guirl started the browser with its DevTools
//! channel and frame control (the headless path). WebDriver input is the path for
//! `--webdriver` endpoints (a Selenium Grid), for free-running frames (`--free-frames`),
//! without a DevTools channel (`--no-devtools`), and on request (`--input webdriver` or
//! `GUIRL_INPUT=webdriver`). Measured on click-test (2 cores): a step took 11.8 ms here
//! against 18.6 ms through chromedriver, and 6.9-9.1 ms once a click's move went out with
//! its press (`docs/results.md`). Five differences from WebDriver input were found
//! and fixed:
//! - the window only ever grew at a task switch (`Browser::fit_viewport` now sizes it
//!   exactly);
//! - the observation did not wait for a navigation the page requested during a DevTools
//!   action (`DevTools::wait_navigation_after`; a request is over once a new document
//!   or the end of loading follows it: a double click on a link requests two and
//!   commits one, and a step once waited for the replaced request forever);
//! - after a followed link Chromium's paint holding kept the old page on screen while the
//!   new page's elements were read (paint holding is off under frame control,
//!   `frames::FLAGS`);
//! - a followed link's navigation starts in a task queued after the click, which the
//!   observation's first read could beat (beside a busy core, 1 of 4 runs of
//!   `tests/integration/input_paths.rs` saw builtin/login-settings still on the page its Settings link
//!   left): `observe.js` reports a click that followed a link, and the observation waits
//!   for its navigation to start ([`super::browser::FOLLOW_START`]) and end;
//! - the screenshot sent together with the first page read could show the page a link
//!   left when the new document replaced it during the read: it is taken again after any
//!   navigation in the step.
//!
//! `tests/integration/input_paths.rs` follows 40 links on each path beside a busy core and checks
//! every frame.
//!
//! The events of one kind go out together and are awaited together, as chromedriver sends
//! them, except two mouse moves in a row (a drag's): a lone move is answered once the page
//! has had a frame, which the frame pump gives it within ~2 ms, while a move followed by a
//! press is dispatched with the press, so a click waits for no frame (the action phase of
//! a click-test step went from 6.4 to 2.1 ms). (This path once took
//! ~45 ms an action: the DevTools socket had Nagle's algorithm on, so the frame request
//! written right after an event waited for the browser's delayed ACK.)

use super::browser::Browser;
pub use super::browser_config::InputPath;
pub use super::devtools::InputEvent;
use super::frames::Draw;
use super::{EnvError, Frame, GuiAction, KeyCombo, Modifier};
use fantoccini::actions::{
    InputSource, KeyAction, KeyActions, MouseActions, PointerAction, WheelAction, WheelActions,
    MOUSE_BUTTON_LEFT, MOUSE_BUTTON_RIGHT,
};
use serde_json::json;
use std::time::Duration;

/// Execute one action at screenshot coordinates, over whichever path the browser uses.
pub(crate) async fn execute(browser: &Browser, action: &GuiAction, f: &Frame) -> Result<(), EnvError> {
    match action {
        GuiAction::Wait { ms } => return browser.wait((*ms).min(60_000) as u64).await,
        GuiAction::Done => return Ok(()),
        _ => {}
    }
    // A wheel scroll is applied by the compositor, only in frames that are drawn. Keys
    // scroll on the page's main thread (smooth scrolling is off) and need no drawn frame;
    // drawn frames while a key's handler changed the page (the `guirl view` page scrolling
    // a pane from a keydown) could hang for good on a loaded machine, every later frame
    // refused as "Another frame is pending" (5 of 52 runs of tests/integration/viewer.rs beside two
    // busy cores, 0 of 48 with frames that do not draw; with threaded scrolling off, 10 of
    // 28 against 0 of 48).
    let scrolls = matches!(action, GuiAction::Scroll { .. });
    if browser.devtools_input() {
        let draw = if scrolls { Draw::Display } else { Draw::Nothing };
        browser.dispatch(&devtools_events(action, f), draw).await?;
    } else {
        browser.perform(webdriver_actions(action, f), scrolls).await?;
    }
    if matches!(action, GuiAction::Scroll { .. } | GuiAction::Drag { .. }) {
        browser.next_frames().await?;
    }
    Ok(())
}

/// Leave no focus, text selection or pointer position from the episode before: the state
/// a page loaded in a fresh browser starts in, with nothing focused and the pointer at the
/// viewport's top-left corner (where Chromium puts it for a new document).
///
/// One browser serves many episodes, and MiniWoB++ starts each in the page it already
/// has: a text field clicked in the last episode kept its focus ring, a button focused in
/// the last episode answered the next one's first `key(Enter)` (login-user scored a
/// success a fresh browser scores as nothing), and the element under the last click was
/// hovered again once the episode rebuilt the page.
pub(crate) async fn clear_state(browser: &Browser) -> Result<(), EnvError> {
    const BLUR: &str = "var a = document.activeElement; \
         if (a && a !== document.body && a.blur) a.blur(); \
         var s = window.getSelection && window.getSelection(); if (s) s.removeAllRanges(); \
         return null;";
    execute(browser, &GuiAction::Hover { x: 0, y: 0 }, &Frame::default()).await?;
    browser.execute(BLUR, vec![]).await?;
    Ok(())
}

/// Pointer moves between a drag's press and release, so drag libraries see a gesture.
const DRAG_STEPS: i32 = 8;

/// The drag's points after the press: `DRAG_STEPS` of them, the last at the end point.
fn drag_path(x1: i32, y1: i32, x2: i32, y2: i32) -> impl Iterator<Item = (i32, i32)> {
    (1..=DRAG_STEPS).map(move |i| (x1 + (x2 - x1) * i / DRAG_STEPS, y1 + (y2 - y1) * i / DRAG_STEPS))
}

const MOUSE: &str = "Input.dispatchMouseEvent";
/// The method of key events.
pub(crate) const KEY: &str = "Input.dispatchKeyEvent";

/// A mouse event at viewport point (x, y). `buttons` is the bit mask held after it
/// (left 1, right 2), as the DOM's `MouseEvent.buttons` reads.
fn mouse(kind: &str, (x, y): (f64, f64), button: &str, buttons: u32, clicks: u32) -> InputEvent {
    let p = json!({ "type": kind, "x": x, "y": y, "button": button, "buttons": buttons,
                    "clickCount": clicks, "pointerType": "mouse" });
    (MOUSE, p)
}

/// The DevTools input events for `action` (pointer and keyboard actions; none for
/// `wait` and `done`).
pub fn devtools_events(action: &GuiAction, f: &Frame) -> Vec<InputEvent> {
    let at = |x: i32, y: i32| ((f.origin_x + x) as f64, (f.origin_y + y) as f64);
    let moved = |p| mouse("mouseMoved", p, "none", 0, 0);
    let click = |p, button, bit, n| {
        [mouse("mousePressed", p, button, bit, n), mouse("mouseReleased", p, button, 0, n)]
    };
    match action {
        &GuiAction::Click { x, y } => {
            let p = at(x, y);
            let mut v = vec![moved(p)];
            v.extend(click(p, "left", 1, 1));
            v
        }
        &GuiAction::DoubleClick { x, y } => {
            let p = at(x, y);
            let mut v = vec![moved(p)];
            v.extend(click(p, "left", 1, 1));
            v.extend(click(p, "left", 1, 2));
            v
        }
        &GuiAction::RightClick { x, y } => {
            let p = at(x, y);
            let mut v = vec![moved(p)];
            v.extend(click(p, "right", 2, 1));
            v
        }
        &GuiAction::Hover { x, y } => vec![moved(at(x, y))],
        &GuiAction::Drag { x1, y1, x2, y2 } => {
            let mut v = vec![moved(at(x1, y1)), mouse("mousePressed", at(x1, y1), "left", 1, 1)];
            v.extend(drag_path(x1, y1, x2, y2).map(|(x, y)| mouse("mouseMoved", at(x, y), "left", 1, 0)));
            v.push(mouse("mouseReleased", at(x2, y2), "left", 0, 1));
            v
        }
        &GuiAction::Scroll { x, y, dx, dy } => {
            let (px, py) = at(x, y);
            let p = json!({ "type": "mouseWheel", "x": px, "y": py, "deltaX": dx, "deltaY": dy,
                            "button": "none", "buttons": 0, "pointerType": "mouse" });
            vec![(MOUSE, p)]
        }
        GuiAction::Type { text } => text
            .chars()
            .flat_map(|c| {
                let k = match c {
                    '\n' | '\r' => named("Enter").expect("Enter is named"),
                    '\t' => named("Tab").expect("Tab is named"),
                    c => char_key(c, false),
                };
                // A character typed with Shift on a US layout says so (`shiftKey`), as
                // chromedriver's do; no Shift key events are sent around it.
                key_press(&k, if k.shifted { SHIFT } else { 0 })
            })
            .collect(),
        GuiAction::Key(combo) => combo_events(combo),
        GuiAction::Wait { .. } | GuiAction::Done => vec![],
    }
}

/// A key as DevTools describes it: `key` (the DOM's `KeyboardEvent.key`), `code` (the
/// physical key on a US layout), the Windows virtual key code (`keyCode`), and the text
/// it types, if any.
#[derive(Debug, Clone, PartialEq)]
struct KeyDef {
    key: String,
    code: &'static str,
    key_code: u32,
    text: String,
    /// Typed with Shift held on a US layout (capitals, `!`, `?`, ...).
    shifted: bool,
}

/// The Shift bit of DevTools' `modifiers`.
const SHIFT: u32 = 8;

/// Named keys: (name in the action text, DOM key, code, virtual key code, text).
const NAMED: &[(&str, &str, &str, u32, &str)] = &[
    ("Enter", "Enter", "Enter", 13, "\r"),
    ("Tab", "Tab", "Tab", 9, ""),
    ("Escape", "Escape", "Escape", 27, ""),
    ("Backspace", "Backspace", "Backspace", 8, ""),
    ("Delete", "Delete", "Delete", 46, ""),
    ("Insert", "Insert", "Insert", 45, ""),
    ("Space", " ", "Space", 32, " "),
    ("ArrowLeft", "ArrowLeft", "ArrowLeft", 37, ""),
    ("ArrowUp", "ArrowUp", "ArrowUp", 38, ""),
    ("ArrowRight", "ArrowRight", "ArrowRight", 39, ""),
    ("ArrowDown", "ArrowDown", "ArrowDown", 40, ""),
    ("Home", "Home", "Home", 36, ""),
    ("End", "End", "End", 35, ""),
    ("PageUp", "PageUp", "PageUp", 33, ""),
    ("PageDown", "PageDown", "PageDown", 34, ""),
    ("F1", "F1", "F1", 112, ""),
    ("F2", "F2", "F2", 113, ""),
    ("F3", "F3", "F3", 114, ""),
    ("F4", "F4", "F4", 115, ""),
    ("F5", "F5", "F5", 116, ""),
    ("F6", "F6", "F6", 117, ""),
    ("F7", "F7", "F7", 118, ""),
    ("F8", "F8", "F8", 119, ""),
    ("F9", "F9", "F9", 120, ""),
    ("F10", "F10", "F10", 121, ""),
    ("F11", "F11", "F11", 122, ""),
    ("F12", "F12", "F12", 123, ""),
];

fn named(name: &str) -> Option<KeyDef> {
    NAMED.iter().find(|k| k.0 == name).map(|&(_, key, code, key_code, text)| KeyDef {
        key: key.into(),
        code,
        key_code,
        text: text.into(),
        shifted: false,
    })
}

/// US-layout punctuation: (unshifted, shifted, code, virtual key code).
const PUNCTUATION: &[(char, char, &str, u32)] = &[
    ('-', '_', "Minus", 189),
    ('=', '+', "Equal", 187),
    ('[', '{', "BracketLeft", 219),
    (']', '}', "BracketRight", 221),
    ('\\', '|', "Backslash", 220),
    (';', ':', "Semicolon", 186),
    ('\'', '"', "Quote", 222),
    (',', '<', "Comma", 188),
    ('.', '>', "Period", 190),
    ('/', '?', "Slash", 191),
    ('`', '~', "Backquote", 192),
];

/// Digits' shifted characters on a US layout, `)` to `(` for 0 to 9.
const SHIFTED_DIGITS: &str = ")!@#$%^&*(";

const DIGIT_CODES: [&str; 10] =
    ["Digit0", "Digit1", "Digit2", "Digit3", "Digit4", "Digit5", "Digit6", "Digit7", "Digit8", "Digit9"];

const LETTER_CODES: [&str; 26] = [
    "KeyA", "KeyB", "KeyC", "KeyD", "KeyE", "KeyF", "KeyG", "KeyH", "KeyI", "KeyJ", "KeyK", "KeyL", "KeyM",
    "KeyN", "KeyO", "KeyP", "KeyQ", "KeyR", "KeyS", "KeyT", "KeyU", "KeyV", "KeyW", "KeyX", "KeyY", "KeyZ",
];

/// The key that types character `c` (`shift`: Shift is held, which capitalises a letter).
/// Characters off the US layout keep their text with no code and key code 0, as a
/// keyboard of another layout or an input method would send them.
fn char_key(c: char, shift: bool) -> KeyDef {
    let c = if shift && c.is_ascii_lowercase() { c.to_ascii_uppercase() } else { c };
    let (code, key_code, shifted) = if c.is_ascii_alphabetic() {
        let i = (c.to_ascii_lowercase() as u8 - b'a') as usize;
        (LETTER_CODES[i], c.to_ascii_uppercase() as u32, c.is_ascii_uppercase())
    } else if let Some(d) = c.to_digit(10) {
        (DIGIT_CODES[d as usize], 48 + d, false)
    } else if let Some(i) = SHIFTED_DIGITS.find(c) {
        (DIGIT_CODES[i], 48 + i as u32, true)
    } else if c == ' ' {
        ("Space", 32, false)
    } else if let Some(&(plain, _, code, kc)) = PUNCTUATION.iter().find(|p| p.0 == c || p.1 == c) {
        (code, kc, c != plain)
    } else {
        ("", 0, false)
    };
    KeyDef { key: c.to_string(), code, key_code, text: c.to_string(), shifted }
}

/// The modifier's key and its bit in DevTools' `modifiers` (Alt 1, Ctrl 2, Meta 4, Shift 8).
fn modifier_key(m: Modifier) -> (KeyDef, u32) {
    let (key, code, key_code, bit) = match m {
        Modifier::Alt => ("Alt", "AltLeft", 18, 1),
        Modifier::Ctrl => ("Control", "ControlLeft", 17, 2),
        Modifier::Meta => ("Meta", "MetaLeft", 91, 4),
        Modifier::Shift => ("Shift", "ShiftLeft", 16, 8),
    };
    (KeyDef { key: key.into(), code, key_code, text: String::new(), shifted: false }, bit)
}

/// Key down then up for `k` with `modifiers` held. A key that types text goes down as
/// `keyDown` with the text (the page sees keydown, keypress and the edit); with Ctrl,
/// Alt or Meta held it types nothing (`rawKeyDown`: keydown only, which shortcuts and
/// Chromium's editing commands such as Ctrl+A read).
fn key_press(k: &KeyDef, modifiers: u32) -> [InputEvent; 2] {
    let types = !k.text.is_empty() && modifiers & 0b0111 == 0;
    let down = if types { "keyDown" } else { "rawKeyDown" };
    let text = if types { k.text.as_str() } else { "" };
    [key_event(down, k, modifiers, text), key_event("keyUp", k, modifiers, "")]
}

fn key_event(kind: &str, k: &KeyDef, modifiers: u32, text: &str) -> InputEvent {
    let mut p = json!({ "type": kind, "key": k.key, "code": k.code, "modifiers": modifiers,
                        "windowsVirtualKeyCode": k.key_code, "nativeVirtualKeyCode": k.key_code });
    if !text.is_empty() {
        p["text"] = json!(text);
        p["unmodifiedText"] = json!(text);
    }
    if k.code.ends_with("Left") && k.key.len() > 1 && !k.key.starts_with("Arrow") {
        // Left-hand modifier keys.
        p["location"] = json!(1);
    }
    (KEY, p)
}

/// A chord: each modifier down (the bits growing), the key down and up, the modifiers
/// up in reverse order.
fn combo_events(combo: &KeyCombo) -> Vec<InputEvent> {
    let shift = combo.modifiers.contains(&Modifier::Shift);
    let key = named(&combo.key).unwrap_or_else(|| char_key(combo.key.chars().next().unwrap_or(' '), shift));
    let mut held = 0;
    let mut v = Vec::new();
    for &m in &combo.modifiers {
        let (k, bit) = modifier_key(m);
        held |= bit;
        v.push(key_event("rawKeyDown", &k, held, ""));
    }
    v.extend(key_press(&key, held));
    for &m in combo.modifiers.iter().rev() {
        let (k, bit) = modifier_key(m);
        held &= !bit;
        v.push(key_event("keyUp", &k, held, ""));
    }
    v
}

/// The WebDriver input actions for a pointer or keyboard action (`wait` and `done` are
/// handled before).
fn webdriver_actions(action: &GuiAction, f: &Frame) -> fantoccini::actions::Actions {
    let at = |x: i32, y: i32| move_to(f, x, y, Duration::ZERO);
    let mouse = || MouseActions::new("mouse".into());
    let down = |b| PointerAction::Down { button: b };
    let up = |b| PointerAction::Up { button: b };
    match *action {
        GuiAction::Click { x, y } => {
            mouse().then(at(x, y)).then(down(MOUSE_BUTTON_LEFT)).then(up(MOUSE_BUTTON_LEFT)).into()
        }
        GuiAction::DoubleClick { x, y } => mouse()
            .then(at(x, y))
            .then(down(MOUSE_BUTTON_LEFT))
            .then(up(MOUSE_BUTTON_LEFT))
            .then(down(MOUSE_BUTTON_LEFT))
            .then(up(MOUSE_BUTTON_LEFT))
            .into(),
        GuiAction::RightClick { x, y } => {
            mouse().then(at(x, y)).then(down(MOUSE_BUTTON_RIGHT)).then(up(MOUSE_BUTTON_RIGHT)).into()
        }
        GuiAction::Hover { x, y } => mouse().then(at(x, y)).into(),
        GuiAction::Drag { x1, y1, x2, y2 } => {
            let mut m = mouse().then(at(x1, y1)).then(down(MOUSE_BUTTON_LEFT));
            for (x, y) in drag_path(x1, y1, x2, y2) {
                m = m.then(move_to(f, x, y, Duration::from_millis(5)));
            }
            m.then(up(MOUSE_BUTTON_LEFT)).into()
        }
        GuiAction::Scroll { x, y, dx, dy } => {
            let mut w = WheelActions::new("wheel".into());
            w.push(WheelAction::Scroll {
                duration: Some(Duration::ZERO),
                x: (f.origin_x + x) as i64,
                y: (f.origin_y + y) as i64,
                delta_x: dx as i64,
                delta_y: dy as i64,
            });
            w.into()
        }
        GuiAction::Type { ref text } => {
            let mut k = KeyActions::new("keyboard".into());
            for c in text.chars() {
                let c = if c == '\n' { '\u{E007}' } else { c };
                k = k.then(KeyAction::Down { value: c }).then(KeyAction::Up { value: c });
            }
            k.into()
        }
        GuiAction::Key(ref combo) => {
            let mut k = KeyActions::new("keyboard".into());
            for m in &combo.modifiers {
                k = k.then(KeyAction::Down { value: m.webdriver_char() });
            }
            let c = combo.webdriver_char();
            k = k.then(KeyAction::Down { value: c }).then(KeyAction::Up { value: c });
            for m in combo.modifiers.iter().rev() {
                k = k.then(KeyAction::Up { value: m.webdriver_char() });
            }
            k.into()
        }
        GuiAction::Wait { .. } | GuiAction::Done => KeyActions::new("keyboard".into()).into(),
    }
}

fn move_to(f: &Frame, x: i32, y: i32, duration: Duration) -> PointerAction {
    PointerAction::MoveTo { duration: Some(duration), x: (f.origin_x + x) as f64, y: (f.origin_y + y) as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn events(a: &str) -> Vec<InputEvent> {
        devtools_events(
            &GuiAction::parse(a).unwrap(),
            &Frame { origin_x: 10, origin_y: 20, ..Frame::default() },
        )
    }

    #[test]
    fn a_click_is_a_move_a_press_and_a_release_at_the_viewport_point() {
        let e = events("click(5, 6)");
        let kinds: Vec<&str> = e.iter().map(|(_, p)| p["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["mouseMoved", "mousePressed", "mouseReleased"]);
        assert!(e.iter().all(|(m, p)| *m == MOUSE && p["x"] == 15.0 && p["y"] == 26.0));
        assert_eq!((e[1].1["buttons"].as_u64(), e[2].1["buttons"].as_u64()), (Some(1), Some(0)));
        let counts: Vec<u64> =
            events("double_click(1, 1)").iter().map(|(_, p)| p["clickCount"].as_u64().unwrap()).collect();
        assert_eq!(counts, [0, 1, 1, 2, 2]);
        let right = events("right_click(1, 1)");
        assert_eq!((right[1].1["button"].as_str(), right[1].1["buttons"].as_u64()), (Some("right"), Some(2)));
    }

    #[test]
    fn a_drag_holds_the_button_through_its_moves() {
        let e = events("drag(0, 0, 80, 40)");
        assert_eq!(e.len(), 2 + DRAG_STEPS as usize + 1);
        let moves = &e[2..e.len() - 1];
        assert!(moves.iter().all(|(_, p)| p["type"] == "mouseMoved" && p["buttons"] == 1));
        assert_eq!((moves[7].1["x"].as_f64(), moves[7].1["y"].as_f64()), (Some(90.0), Some(60.0)));
        assert_eq!(e.last().unwrap().1["type"], "mouseReleased");
    }

    #[test]
    fn chords_carry_the_modifier_bits_and_type_no_text() {
        let e = events("key(ctrl+shift+a)");
        let summary: Vec<(String, String, u64)> = e
            .iter()
            .map(|(_, p)| {
                (
                    p["type"].as_str().unwrap().into(),
                    p["key"].as_str().unwrap().into(),
                    p["modifiers"].as_u64().unwrap(),
                )
            })
            .collect();
        let s = |t: &str, k: &str, m| (t.to_string(), k.to_string(), m);
        assert_eq!(
            summary,
            [
                s("rawKeyDown", "Control", 2),
                s("rawKeyDown", "Shift", 10),
                s("rawKeyDown", "A", 10),
                s("keyUp", "A", 10),
                s("keyUp", "Shift", 2),
                s("keyUp", "Control", 0)
            ]
        );
        assert!(e.iter().all(|(_, p)| p.get("text").is_none()));
        // Shift alone still types: shift+a is a capital A.
        let e = events("key(shift+a)");
        assert_eq!((e[1].1["type"].as_str(), e[1].1["text"].as_str()), (Some("keyDown"), Some("A")));
    }

    #[test]
    fn typing_sends_each_character_as_a_key_with_its_text() {
        let e = events("type(\"a1?é\\n\")");
        let downs: Vec<(&str, &str, u64, &str)> = e
            .iter()
            .filter(|(_, p)| p["type"] != "keyUp")
            .map(|(_, p)| {
                let p = p.as_object().unwrap();
                (
                    p["key"].as_str().unwrap(),
                    p["code"].as_str().unwrap(),
                    p["windowsVirtualKeyCode"].as_u64().unwrap(),
                    p.get("text").and_then(Value::as_str).unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            downs,
            [
                ("a", "KeyA", 65, "a"),
                ("1", "Digit1", 49, "1"),
                ("?", "Slash", 191, "?"),
                ("é", "", 0, "é"),
                ("Enter", "Enter", 13, "\r")
            ]
        );
        assert_eq!(e.len(), 10, "each character goes down and up");
    }

    #[test]
    fn input_paths_parse_and_refuse_unknown_names() {
        assert_eq!("devtools".parse(), Ok(InputPath::DevTools));
        assert_eq!("WebDriver".parse(), Ok(InputPath::WebDriver));
        let e = "fast".parse::<InputPath>().unwrap_err();
        assert!(e.contains("expected devtools or webdriver"), "{e}");
    }
}
