//! Oracles for the one-page built-in tasks.

use super::page::{by_id, click, fill, has_class, on_screen, quoted, with_class};
use crate::env::{Element, GuiAction, ScreenState};

/// `Click the "red" button.`: the button with class `c-red`.
pub(super) fn click_color_button(state: &ScreenState) -> Option<GuiAction> {
    let color = quoted(&state.instruction).into_iter().next()?;
    let class = format!("c-{color}");
    state.elements.iter().find(|e| e.tag == "button" && has_class(e, &class)).map(click)
}

/// The number N in `Set the counter to N, then click Submit.`
fn counter_target(instruction: &str) -> Option<i64> {
    let rest = instruction.split("counter to ").nth(1)?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    digits.parse().ok()
}

/// Press + or - (read the value from `#count`) until it is N, then Submit.
pub(super) fn counter(state: &ScreenState) -> Option<GuiAction> {
    let target = counter_target(&state.instruction)?;
    let value: i64 = by_id(state, "count")?.text.trim().replace('\u{2212}', "-").parse().ok()?;
    let id = match value.cmp(&target) {
        std::cmp::Ordering::Less => "inc",
        std::cmp::Ordering::Greater => "dec",
        std::cmp::Ordering::Equal => "submit",
    };
    by_id(state, id).map(click)
}

/// `Enter name "A B" and email "x@y", check only "Remember me", then click Submit.`
pub(super) fn fill_form(state: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&state.instruction);
    let [name, email, box_label] = q.as_slice() else { return None };
    for (id, want) in [("name", name), ("email", email)] {
        if let Some(a) = fill(state, by_id(state, id)?, want) {
            return Some(a);
        }
    }
    let wrong_box = state
        .elements
        .iter()
        .filter(|e| e.tag == "input" && e.input_type == "checkbox")
        .find(|e| e.checked != (e.name == *box_label));
    match wrong_box {
        Some(e) => Some(click(e)),
        None => by_id(state, "submit").map(click),
    }
}

/// Open `#dropdown`, click the option whose text is the quoted value, then Submit.
pub(super) fn select_option(state: &ScreenState) -> Option<GuiAction> {
    let target = quoted(&state.instruction).into_iter().next()?;
    let dropdown = by_id(state, "dropdown")?;
    if dropdown.text.trim() == target {
        return by_id(state, "submit").map(click);
    }
    if let Some(opt) = with_class(state, "li", "option").find(|e| e.text.trim() == target) {
        return Some(click(opt));
    }
    Some(click(dropdown))
}

/// The quoted switch names are to be on, all others off; then Apply.
pub(super) fn toggle_switches(state: &ScreenState) -> Option<GuiAction> {
    let on = quoted(&state.instruction);
    let wrong = with_class(state, "input", "switch").find(|e| e.checked != on.contains(&e.name));
    match wrong {
        Some(e) => Some(click(e)),
        None => by_id(state, "apply").map(click),
    }
}

/// Drag each quoted chip still on the page onto the centre of `#bin`.
pub(super) fn drag_to_bin(state: &ScreenState) -> Option<GuiAction> {
    let targets = quoted(&state.instruction);
    let bin = by_id(state, "bin")?;
    let chip = with_class(state, "div", "chip").find(|e| targets.contains(&e.text.trim().to_string()))?;
    let (x1, y1) = chip.bbox.center();
    let (x2, y2) = bin.bbox.center();
    Some(GuiAction::Drag { x1, y1, x2, y2 })
}

/// Whether element `e` shows fully inside the scrolling container `c` and the screenshot.
fn shown_in(state: &ScreenState, c: &Element, e: &Element) -> bool {
    on_screen(state, e) && e.bbox.y >= c.bbox.y - 0.5 && e.bbox.y + e.bbox.h <= c.bbox.y + c.bbox.h + 0.5
}

/// A wheel scroll over container `c` that brings element `e` to its middle.
fn scroll_towards(c: &Element, e: &Element) -> GuiAction {
    let (x, y) = c.bbox.center();
    let dy = (e.bbox.center().1 - y).clamp(-3000, 3000);
    GuiAction::Scroll { x, y, dx: 0, dy }
}

/// Press Delete on the row of the quoted person: directly if the row shows, else after
/// typing the name into the search box (which filters the table), else by scrolling.
pub(super) fn search_table(state: &ScreenState) -> Option<GuiAction> {
    let target = quoted(&state.instruction).into_iter().next()?;
    let wrap = by_id(state, "table-wrap")?;
    let prefix = format!("{target} ");
    let row = with_class(state, "tr", "row").find(|e| e.text.starts_with(&prefix));
    let button = row.and_then(|r| super::page::within(state, r, "button", "del"));
    if let Some(b) = button.filter(|b| shown_in(state, wrap, b)) {
        return Some(click(b));
    }
    let search = by_id(state, "search")?;
    if let Some(a) = fill(state, search, &target) {
        return Some(a);
    }
    Some(row.map_or_else(|| page_down(wrap), |r| scroll_towards(wrap, r)))
}

/// A wheel scroll over container `c` by most of its height: what brings rows not yet listed
/// (the elements hold only what shows) into view.
fn page_down(c: &Element) -> GuiAction {
    let (x, y) = c.bbox.center();
    GuiAction::Scroll { x, y, dx: 0, dy: (c.bbox.h * 0.8).max(20.0) as i32 }
}

/// Scroll `#list` down ("Scroll down the list") until the quoted item shows, then click it.
pub(super) fn scroll_to_find(state: &ScreenState) -> Option<GuiAction> {
    let target = quoted(&state.instruction).into_iter().next()?;
    let list = by_id(state, "list")?;
    match with_class(state, "button", "item").find(|e| e.text.trim() == target) {
        Some(item) if shown_in(state, list, item) => Some(click(item)),
        Some(item) => Some(scroll_towards(list, item)),
        None => Some(page_down(list)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_instruction() {
        assert_eq!(counter_target("Set the counter to 12, then click Submit."), Some(12));
        assert_eq!(counter_target("Set the counter to 0, then click Submit."), Some(0));
        assert_eq!(counter_target("Click it."), None);
    }
}
