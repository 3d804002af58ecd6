//! Reading a MiniWoB++ page's elements and utterance, and the actions the oracles write:
//! the helpers `click` and `form` share.

use crate::env::{Element, GuiAction, KeyCombo, ScreenState};

/// A left click at the centre of `e`.
pub(super) fn click(e: &Element) -> GuiAction {
    let (x, y) = e.bbox.center();
    GuiAction::Click { x, y }
}

/// A left click on a part of `e` that no element drawn over it hides.
///
/// Absolutely positioned elements can overlap; the later one in document order is drawn
/// on top. This picks the visible point of `e` farthest from the edges of `e` and of the
/// later elements overlapping it (the centre when nothing overlaps).
pub(super) fn click_clear(state: &ScreenState, e: &Element) -> GuiAction {
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
pub(super) fn overlaps(a: &Element, b: &Element) -> bool {
    let (a, b) = (a.bbox, b.bbox);
    a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h
}

/// Whether the box of `outer` contains the box of `inner` entirely.
pub(super) fn contains(outer: &Element, inner: &Element) -> bool {
    let (o, i) = (outer.bbox, inner.bbox);
    i.x >= o.x && i.y >= o.y && i.x + i.w <= o.x + o.w && i.y + i.h <= o.y + o.h
}

/// A key press without modifiers.
pub(super) fn key(name: &str) -> GuiAction {
    GuiAction::Key(KeyCombo { modifiers: Vec::new(), key: name.to_string() })
}

/// Whether `e`'s class list contains `class`.
pub(super) fn has_class(e: &Element, class: &str) -> bool {
    e.classes.split_whitespace().any(|c| c == class)
}

/// Whether the centre of `e` lies on the screenshot (and the box is not empty).
pub(super) fn on_screen(state: &ScreenState, e: &Element) -> bool {
    let (x, y) = e.bbox.center();
    e.bbox.w > 0.0 && e.bbox.h > 0.0 && state.frame.contains(x, y)
}

/// The element with this id.
pub(super) fn by_id<'a>(state: &'a ScreenState, id: &str) -> Option<&'a Element> {
    state.elements.iter().find(|e| e.id == id)
}

/// The first on-screen element with this tag whose text (trimmed) is `text`.
pub(super) fn by_tag_text<'a>(state: &'a ScreenState, tag: &str, text: &str) -> Option<&'a Element> {
    state.elements.iter().find(|e| e.tag == tag && e.text.trim() == text && on_screen(state, e))
}

/// The on-screen button labelled `text` (a `<button>` or an `<input type=submit|button>`).
pub(super) fn button<'a>(state: &'a ScreenState, text: &str) -> Option<&'a Element> {
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
pub(super) fn inside(inner: &Element, outer: &Element) -> bool {
    let (x, y) = inner.bbox.center();
    let b = &outer.bbox;
    x as f32 >= b.x && x as f32 <= b.x + b.w && y as f32 >= b.y && y as f32 <= b.y + b.h
}

/// The strings between double quotes, in order: `Enter "a" and "b"` gives `[a, b]`.
pub(super) fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// The text between the first and the last double quote (keeps inner quotes).
pub(super) fn outer_quoted(text: &str) -> Option<String> {
    let a = text.find('"')?;
    let b = text.rfind('"')?;
    (b > a).then(|| text[a + 1..b].to_string())
}

/// `text` with `prefix` and `suffix` removed, if it has both.
pub(super) fn between<'a>(text: &'a str, prefix: &str, suffix: &str) -> Option<&'a str> {
    text.trim().strip_prefix(prefix)?.strip_suffix(suffix)
}

/// The next action to make text field `e` hold exactly `target`, or `None` if it does.
///
/// Clicks the field if it lacks focus, types what is missing if the value is a prefix of
/// the target, and otherwise deletes one character from the end.
pub(super) fn fill(e: &Element, target: &str) -> Option<GuiAction> {
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
