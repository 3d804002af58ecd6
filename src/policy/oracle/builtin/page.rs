//! Reading a built-in page's elements, and the actions the oracles write: the helpers
//! `simple` and `multi` share.

use crate::env::{Element, GuiAction, KeyCombo, Modifier, ScreenState};

/// The double-quoted values of an instruction, in order.
pub(super) fn quoted(s: &str) -> Vec<String> {
    s.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// Whether the element has a box at all (hidden elements are not listed, but be safe).
pub(super) fn has_box(e: &Element) -> bool {
    e.bbox.w > 0.0 && e.bbox.h > 0.0
}

/// Whether the element's centre lies inside the screenshot.
pub(super) fn on_screen(state: &ScreenState, e: &Element) -> bool {
    let (x, y) = e.bbox.center();
    has_box(e) && state.frame.contains(x, y)
}

/// The first element with this id.
pub(super) fn by_id<'a>(state: &'a ScreenState, id: &str) -> Option<&'a Element> {
    state.elements.iter().find(|e| e.id == id && has_box(e))
}

/// Whether `e` has the CSS class `class`.
pub(super) fn has_class(e: &Element, class: &str) -> bool {
    e.classes.split_whitespace().any(|c| c == class)
}

/// Elements with this tag and CSS class.
pub(super) fn with_class<'a>(
    state: &'a ScreenState,
    tag: &'a str,
    class: &'a str,
) -> impl Iterator<Item = &'a Element> + 'a {
    state.elements.iter().filter(move |e| e.tag == tag && has_class(e, class) && has_box(e))
}

/// A click at the element's centre.
pub(super) fn click(e: &Element) -> GuiAction {
    let (x, y) = e.bbox.center();
    GuiAction::Click { x, y }
}

/// A key press with optional modifiers.
pub(super) fn key(modifiers: &[Modifier], key: &str) -> GuiAction {
    GuiAction::Key(KeyCombo { modifiers: modifiers.to_vec(), key: key.to_string() })
}

/// The next action that makes text field `e` hold exactly `target`, or None when it does.
///
/// Click to focus, type into an empty field; a field holding anything else is cleared
/// first with ctrl+a then Backspace (on alternate steps, since a stateless oracle cannot
/// see a selection: at worst one extra Backspace before the next ctrl+a).
pub(super) fn fill(state: &ScreenState, e: &Element, target: &str) -> Option<GuiAction> {
    if e.value == target {
        return None;
    }
    if !e.focused {
        return Some(click(e));
    }
    if e.value.is_empty() {
        return Some(GuiAction::Type { text: target.to_string() });
    }
    Some(if state.step.is_multiple_of(2) { key(&[Modifier::Ctrl], "a") } else { key(&[], "Backspace") })
}

/// The last path segment of the page URL (`index.html` for a folder URL), without query.
pub(super) fn page_name(url: &str) -> &str {
    let path = url.split(['?', '#']).next().unwrap_or("");
    match path.rsplit('/').next() {
        Some("") | None => "index.html",
        Some(p) => p,
    }
}

/// A query parameter of the page URL (no percent-decoding: the oracles need plain ones).
pub(super) fn query_param<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let query = url.split('#').next()?.split_once('?')?.1;
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Whether point (x, y) lies inside the element's box.
pub(super) fn inside(e: &Element, x: i32, y: i32) -> bool {
    let (x, y) = (x as f32, y as f32);
    x >= e.bbox.x && x < e.bbox.x + e.bbox.w && y >= e.bbox.y && y < e.bbox.y + e.bbox.h
}

/// The first element with this tag and class whose centre lies inside `outer`.
pub(super) fn within<'a>(
    state: &'a ScreenState,
    outer: &Element,
    tag: &str,
    class: &str,
) -> Option<&'a Element> {
    state.elements.iter().find(|e| {
        let (x, y) = e.bbox.center();
        e.tag == tag && has_class(e, class) && has_box(e) && inside(outer, x, y)
    })
}
