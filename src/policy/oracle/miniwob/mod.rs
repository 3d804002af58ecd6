//! Scripted oracles for MiniWoB++ tasks.
//!
//! Each oracle reads one `ScreenState` (the instruction, which is MiniWoB's utterance,
//! and the page's interactive elements) and returns the next right action. They keep no
//! state between calls: progress is read back from the page (an input's value, a
//! checkbox's `checked`, which element has focus, which tab is active).
//!
//! The oracles are grouped by the kind of widget the task exercises:
//! `click` (buttons, links, dialogs, tabs, accordions), `form` (typing into fields,
//! checkboxes, radios, lists, autocomplete).

mod click;
mod form;

use crate::env::{Element, GuiAction, KeyCombo, ScreenState};

/// MiniWoB++ tasks with an oracle (names without the `miniwob/` prefix).
pub const TASKS: &[&str] = &[
    "click-test",
    "click-test-2",
    "click-test-transfer",
    "click-button",
    "click-button-sequence",
    "click-link",
    "click-dialog",
    "click-dialog-2",
    "click-tab",
    "click-tab-2",
    "click-tab-2-easy",
    "click-tab-2-medium",
    "click-tab-2-hard",
    "click-collapsible",
    "click-collapsible-nodelay",
    "click-collapsible-2",
    "click-collapsible-2-nodelay",
    "click-widget",
    "focus-text",
    "focus-text-2",
    "enter-text",
    "enter-text-2",
    "enter-text-dynamic",
    "enter-password",
    "login-user",
    "login-user-popup",
    "unicode-test",
    "use-spinner",
    "copy-paste",
    "copy-paste-2",
    "enter-date",
    "enter-time",
    "click-checkboxes",
    "click-checkboxes-large",
    "click-checkboxes-transfer",
    "click-checkboxes-soft",
    "click-option",
    "choose-list",
    "use-autocomplete",
    "use-autocomplete-nodelay",
];

/// The next action for task `name` in this state (None if it cannot tell).
pub fn next_action(name: &str, state: &ScreenState) -> Option<GuiAction> {
    match name {
        "click-test" => click::click_test(state),
        "click-test-2" | "click-test-transfer" => click::click_test_2(state),
        "click-button" | "unicode-test" => click::click_button(state),
        "click-button-sequence" => click::click_button_sequence(state),
        "click-link" => click::click_link(state),
        "click-dialog" => click::click_dialog(state),
        "click-dialog-2" => click::click_dialog_2(state),
        "click-tab" => click::click_tab(state),
        "click-tab-2" | "click-tab-2-easy" | "click-tab-2-medium" | "click-tab-2-hard" => {
            click::click_tab_2(state)
        }
        "click-collapsible" | "click-collapsible-nodelay" => click::click_collapsible(state),
        "click-collapsible-2" | "click-collapsible-2-nodelay" => click::click_collapsible_2(state),
        "click-widget" => click::click_widget(state),
        "focus-text" => form::focus_text(state),
        "focus-text-2" => form::focus_text_2(state),
        "enter-text" | "enter-text-dynamic" => form::enter_text(state),
        "enter-text-2" => form::enter_text_2(state),
        "enter-password" => form::enter_password(state),
        "login-user" => form::login_user(state),
        "login-user-popup" => form::login_user_popup(state),
        "use-spinner" => form::use_spinner(state),
        "copy-paste" => form::copy_paste(state),
        "copy-paste-2" => form::copy_paste_2(state),
        "enter-date" => form::enter_date(state),
        "enter-time" => form::enter_time(state),
        "click-checkboxes" | "click-checkboxes-large" | "click-checkboxes-transfer" => {
            form::click_checkboxes(state)
        }
        "click-checkboxes-soft" => form::click_checkboxes_soft(state),
        "click-option" => form::click_option(state),
        "choose-list" => form::choose_list(state),
        "use-autocomplete" | "use-autocomplete-nodelay" => form::use_autocomplete(state),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Helpers shared by the oracles.

/// A left click at the centre of `e`.
fn click(e: &Element) -> GuiAction {
    let (x, y) = e.bbox.center();
    GuiAction::Click { x, y }
}

/// A left click on a part of `e` that no element drawn over it hides.
///
/// Absolutely positioned elements can overlap; the later one in document order is drawn
/// on top. This picks the visible point of `e` farthest from the edges of `e` and of the
/// later elements overlapping it (the centre when nothing overlaps).
fn click_clear(state: &ScreenState, e: &Element) -> GuiAction {
    let idx = state.elements.iter().position(|x| std::ptr::eq(x, e));
    let over: Vec<&Element> = match idx {
        Some(i) => state.elements[i + 1..]
            .iter()
            .filter(|o| on_screen(state, o) && overlaps(o, e) && !contains(e, o))
            .collect(),
        None => Vec::new(),
    };
    if over.is_empty() {
        return click(e);
    }
    let b = e.bbox;
    let mut best: Option<(f32, i32, i32)> = None;
    for y in (b.y.ceil() as i32)..=((b.y + b.h).floor() as i32 - 1) {
        for x in (b.x.ceil() as i32)..=((b.x + b.w).floor() as i32 - 1) {
            let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
            let mut margin = (px - b.x).min(b.x + b.w - px).min(py - b.y).min(b.y + b.h - py);
            for o in &over {
                let ob = o.bbox;
                let dx = (ob.x - px).max(px - (ob.x + ob.w));
                let dy = (ob.y - py).max(py - (ob.y + ob.h));
                // Outside the box: distance to it; inside: a negative (hidden) margin.
                margin = margin.min(dx.max(dy));
            }
            if state.frame.contains(x, y) && best.is_none_or(|(m, _, _)| margin > m) {
                best = Some((margin, x, y));
            }
        }
    }
    match best {
        Some((m, x, y)) if m > 0.0 => GuiAction::Click { x, y },
        _ => click(e),
    }
}

/// Whether the boxes of `a` and `b` overlap.
fn overlaps(a: &Element, b: &Element) -> bool {
    let (a, b) = (a.bbox, b.bbox);
    a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h
}

/// Whether the box of `outer` contains the box of `inner` entirely.
fn contains(outer: &Element, inner: &Element) -> bool {
    let (o, i) = (outer.bbox, inner.bbox);
    i.x >= o.x && i.y >= o.y && i.x + i.w <= o.x + o.w && i.y + i.h <= o.y + o.h
}

/// A key press without modifiers.
fn key(name: &str) -> GuiAction {
    GuiAction::Key(KeyCombo { modifiers: Vec::new(), key: name.to_string() })
}

/// Whether `e`'s class list contains `class`.
fn has_class(e: &Element, class: &str) -> bool {
    e.classes.split_whitespace().any(|c| c == class)
}

/// Whether the centre of `e` lies on the screenshot (and the box is not empty).
fn on_screen(state: &ScreenState, e: &Element) -> bool {
    let (x, y) = e.bbox.center();
    e.bbox.w > 0.0 && e.bbox.h > 0.0 && state.frame.contains(x, y)
}

/// The element with this id.
fn by_id<'a>(state: &'a ScreenState, id: &str) -> Option<&'a Element> {
    state.elements.iter().find(|e| e.id == id)
}

/// The first on-screen element with this tag whose text (trimmed) is `text`.
fn by_tag_text<'a>(state: &'a ScreenState, tag: &str, text: &str) -> Option<&'a Element> {
    state.elements.iter().find(|e| e.tag == tag && e.text.trim() == text && on_screen(state, e))
}

/// The on-screen button labelled `text` (a `<button>` or an `<input type=submit|button>`).
fn button<'a>(state: &'a ScreenState, text: &str) -> Option<&'a Element> {
    by_tag_text(state, "button", text).or_else(|| {
        state.elements.iter().find(|e| {
            e.tag == "input"
                && matches!(e.input_type.as_str(), "submit" | "button")
                && e.value == text
                && on_screen(state, e)
        })
    })
}

/// Whether box `inner`'s centre lies inside box `outer`.
fn inside(inner: &Element, outer: &Element) -> bool {
    let (x, y) = inner.bbox.center();
    let b = &outer.bbox;
    x as f32 >= b.x && x as f32 <= b.x + b.w && y as f32 >= b.y && y as f32 <= b.y + b.h
}

/// The strings between double quotes, in order: `Enter "a" and "b"` gives `[a, b]`.
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// The text between the first and the last double quote (keeps inner quotes).
fn outer_quoted(text: &str) -> Option<String> {
    let a = text.find('"')?;
    let b = text.rfind('"')?;
    (b > a).then(|| text[a + 1..b].to_string())
}

/// `text` with `prefix` and `suffix` removed, if it has both.
fn between<'a>(text: &'a str, prefix: &str, suffix: &str) -> Option<&'a str> {
    text.trim().strip_prefix(prefix)?.strip_suffix(suffix)
}

/// The next action to make text field `e` hold exactly `target`, or `None` if it does.
///
/// Clicks the field if it lacks focus, types what is missing if the value is a prefix of
/// the target, and otherwise deletes one character from the end.
fn fill(e: &Element, target: &str) -> Option<GuiAction> {
    if e.value == target {
        return None;
    }
    if !e.focused {
        return Some(click(e));
    }
    Some(match target.strip_prefix(e.value.as_str()) {
        Some(rest) => GuiAction::Type { text: rest.to_string() },
        None => key("Backspace"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_in_order() {
        assert_eq!(
            quoted(r#"Enter the username "kenda" and the password "x1Y" into the fields."#),
            vec!["kenda", "x1Y"]
        );
        assert!(quoted("Click the button.").is_empty());
        assert_eq!(outer_quoted(r#"Click on the link "dolor.". "#).as_deref(), Some("dolor."));
        assert_eq!(outer_quoted("no quotes"), None);
    }

    #[test]
    fn between_strips_both_ends() {
        assert_eq!(between("Select a, b and click Submit.", "Select ", " and click Submit."), Some("a, b"));
        assert_eq!(between("Select a", "Select ", " and click Submit."), None);
    }

    #[test]
    fn fill_steps() {
        let mut e = Element { tag: "input".into(), ..Default::default() };
        assert!(matches!(fill(&e, "abc"), Some(GuiAction::Click { .. })));
        e.focused = true;
        assert_eq!(fill(&e, "abc"), Some(GuiAction::Type { text: "abc".into() }));
        e.value = "ab".into();
        assert_eq!(fill(&e, "abc"), Some(GuiAction::Type { text: "c".into() }));
        e.value = "abx".into();
        assert_eq!(fill(&e, "abc"), Some(GuiAction::parse("key(Backspace)").unwrap()));
        e.value = "abc".into();
        assert_eq!(fill(&e, "abc"), None);
    }

    fn el(tag: &str, text: &str, x: f32, y: f32, w: f32, h: f32) -> Element {
        Element {
            tag: tag.into(),
            text: text.into(),
            bbox: crate::env::BBox { x, y, w, h },
            ..Default::default()
        }
    }

    fn state(elements: Vec<Element>) -> ScreenState {
        ScreenState {
            task_id: String::new(),
            instruction: String::new(),
            url: String::new(),
            step: 0,
            frame: crate::env::Frame { width: 160, height: 210, ..Default::default() },
            elements,
            screenshot: image::RgbImage::new(1, 1).into(),
            history: Vec::new(),
            previous_screenshot: None,
        }
    }

    #[test]
    fn click_clear_avoids_what_is_drawn_on_top() {
        // ONE at (10..50, 60..80); TWO, later in the document, covers its right half.
        let s = state(vec![
            el("button", "ONE", 10.0, 60.0, 40.0, 20.0),
            el("button", "TWO", 30.0, 50.0, 40.0, 40.0),
        ]);
        let GuiAction::Click { x, y } = click_clear(&s, &s.elements[0]) else { panic!() };
        assert!((10..30).contains(&x) && (60..80).contains(&y), "({x}, {y})");
        // TWO is on top: its centre is fine.
        assert_eq!(click_clear(&s, &s.elements[1]), click(&s.elements[1]));
    }

    #[test]
    fn every_task_dispatches() {
        let s = ScreenState {
            task_id: String::new(),
            instruction: String::new(),
            url: String::new(),
            step: 0,
            frame: Default::default(),
            elements: Vec::new(),
            screenshot: image::RgbImage::new(1, 1).into(),
            history: Vec::new(),
            previous_screenshot: None,
        };
        // With nothing on the page no oracle can act, but none may panic either.
        for t in TASKS {
            let _ = next_action(t, &s);
        }
        assert_eq!(next_action("no-such-task", &s), None);
    }
}
