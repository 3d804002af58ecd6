//! Oracles for the click tasks: buttons, links, dialogs, tabs, accordions, widgets.

use super::page::{button, by_id, by_tag_text, click, click_clear, has_class, on_screen, outer_quoted};
use crate::env::{Element, GuiAction, ScreenState};

/// click-test: "Click the button." — the one button, `#subbtn`.
pub(super) fn click_test(s: &ScreenState) -> Option<GuiAction> {
    by_id(s, "subbtn").or_else(|| s.elements.iter().find(|e| e.tag == "button")).map(click)
}

/// click-test-2 / click-test-transfer: "Click button ONE." — the button with that label.
/// The two buttons are placed at random and may overlap: click a part left uncovered.
pub(super) fn click_test_2(s: &ScreenState) -> Option<GuiAction> {
    let label = s.instruction.trim().strip_prefix("Click button ")?.trim_end_matches('.');
    button(s, label).map(|b| click_clear(s, b))
}

/// click-button: `Click on the "Submit" button.` — any button with exactly that text.
pub(super) fn click_button(s: &ScreenState) -> Option<GuiAction> {
    button(s, &outer_quoted(&s.instruction)?).map(click)
}

/// click-button-sequence: "Click button ONE, then click button TWO."
///
/// A clicked button keeps keyboard focus, so ONE being focused means it was clicked.
pub(super) fn click_button_sequence(s: &ScreenState) -> Option<GuiAction> {
    let one = button(s, "ONE")?;
    let target = if one.focused { button(s, "TWO")? } else { one };
    Some(click_clear(s, target))
}

/// An on-screen `.alink` (a word styled as a link) whose text is `text`.
fn alink<'a>(s: &'a ScreenState, text: &str) -> Option<&'a Element> {
    s.elements.iter().find(|e| has_class(e, "alink") && e.text.trim() == text && on_screen(s, e))
}

/// click-link: `Click on the link "dolor".` — a `span.alink` with that word.
pub(super) fn click_link(s: &ScreenState) -> Option<GuiAction> {
    alink(s, &outer_quoted(&s.instruction)?).map(click)
}

/// The close ("x") button of a jQuery UI dialog.
fn dialog_close(s: &ScreenState) -> Option<&Element> {
    s.elements.iter().find(|e| has_class(e, "ui-dialog-titlebar-close") && on_screen(s, e))
}

/// click-dialog: `Close the dialog box by clicking the "x".`
pub(super) fn click_dialog(s: &ScreenState) -> Option<GuiAction> {
    dialog_close(s).map(click)
}

/// click-dialog-2: `Click the button in the dialog box labeled "OK".` (Cancel, OK or x).
pub(super) fn click_dialog_2(s: &ScreenState) -> Option<GuiAction> {
    match outer_quoted(&s.instruction)?.as_str() {
        "x" => dialog_close(s).map(click),
        label => button(s, label).map(click),
    }
}

/// click-tab: "Click on Tab #2." — the tab's anchor.
pub(super) fn click_tab(s: &ScreenState) -> Option<GuiAction> {
    let tab = s.instruction.trim().strip_prefix("Click on ")?.trim_end_matches('.');
    by_tag_text(s, "a", tab).map(click)
}

/// click-tab-2: `Switch between the tabs to find and click on the link "X".`
///
/// Only the active tab's words are visible: click the link if it is, else open the tab
/// after the active one (the tabs' `<li>` carry `ui-tabs-active`).
pub(super) fn click_tab_2(s: &ScreenState) -> Option<GuiAction> {
    if let Some(link) = alink(s, &outer_quoted(&s.instruction)?) {
        return Some(click(link));
    }
    let tabs: Vec<&Element> =
        s.elements.iter().filter(|e| e.tag == "a" && has_class(e, "ui-tabs-anchor")).collect();
    let active = s
        .elements
        .iter()
        .find(|e| e.tag == "li" && has_class(e, "ui-tabs-active"))
        .and_then(|li| tabs.iter().position(|a| a.text.trim() == li.text.trim()))
        .unwrap_or(0);
    tabs.get((active + 1) % tabs.len().max(1)).map(|a| click(a))
}

/// Accordion headers (`.ui-accordion-header`: the `<h3>`s, and in click-collapsible also
/// the `<p>` holding Submit, which jQuery UI takes for a header), top to bottom.
fn accordion_headers(s: &ScreenState) -> Vec<&Element> {
    let mut h: Vec<&Element> = s.elements.iter().filter(|e| has_class(e, "ui-accordion-header")).collect();
    h.sort_by(|a, b| a.bbox.y.total_cmp(&b.bbox.y));
    h
}

/// Whether an accordion header's section is expanded.
fn expanded(header: &Element) -> bool {
    has_class(header, "ui-accordion-header-active")
}

/// Whether the accordion panel `p` (`.ui-accordion-content`) is mid-animation.
///
/// jQuery animates a panel's height in fractional pixels; at rest it is a whole number
/// of pixels (text lines, padding and border).
fn panel_sliding(p: &Element) -> bool {
    p.bbox.h.fract() != 0.0
}

/// Whether an accordion header is closing: jQuery UI drops `-active` when the closing
/// starts and adds `-collapsed` only when its panel has slid shut.
fn header_closing(h: &Element) -> bool {
    !has_class(h, "ui-accordion-header-active") && !has_class(h, "ui-accordion-header-collapsed")
}

/// click-collapsible(-nodelay): "Expand the section below and click submit."
///
/// Without -nodelay the section slides open over 400 ms and pushes Submit down as it
/// goes; a click aimed at where Submit was can land on the `<p>` around it, which
/// jQuery UI takes for a second header, and close the section again. So the oracle
/// waits until the panel has stopped growing before it clicks Submit.
pub(super) fn click_collapsible(s: &ScreenState) -> Option<GuiAction> {
    let header = s.elements.iter().find(|e| e.tag == "h3" && has_class(e, "ui-accordion-header"))?;
    if !expanded(header) {
        return Some(click(header));
    }
    let panel = s.elements.iter().find(|e| has_class(e, "ui-accordion-content-active"));
    if panel.is_some_and(|p| panel_sliding(p) || p.bbox.h < 10.0) {
        return Some(GuiAction::Wait { ms: 300 });
    }
    button(s, "Submit").map(click)
}

/// Whether an accordion section is still sliding open or shut.
///
/// Panels and headers say so (see `panel_sliding`, `header_closing`), and so does the
/// geometry: at rest a collapsed header sits right above the next one and shows no links,
/// and the links of the open section lie between its header and the next header.
/// Mid-animation a collapsing section leaves a gap below its header, and links of a
/// section that is sliding open overhang the header after it.
fn accordion_moving(s: &ScreenState, headers: &[&Element]) -> bool {
    let panels = s.elements.iter().filter(|e| has_class(e, "ui-accordion-content"));
    if headers.iter().any(|h| header_closing(h)) || panels.into_iter().any(panel_sliding) {
        return true;
    }
    for (k, h) in headers.iter().enumerate() {
        let next_top = headers.get(k + 1).map(|n| n.bbox.y);
        let bottom = h.bbox.y + h.bbox.h;
        if !expanded(h) && next_top.is_some_and(|t| t - bottom > 6.0) {
            return true;
        }
        let mut links = s.elements.iter().filter(|e| {
            has_class(e, "alink") && e.bbox.y >= h.bbox.y && next_top.is_none_or(|t| e.bbox.y < t)
        });
        let overhang = |e: &&Element| next_top.is_some_and(|t| e.bbox.y + e.bbox.h > t + 0.5);
        if if expanded(h) { links.any(|e| overhang(&e)) } else { links.next().is_some() } {
            return true;
        }
    }
    false
}

/// click-collapsible-2(-nodelay): `Expand the sections below, to find and click on the
/// link "X".` — click the link once visible, else expand the section after the open one;
/// while a section slides (400 ms without -nodelay) wait, as positions are not final.
pub(super) fn click_collapsible_2(s: &ScreenState) -> Option<GuiAction> {
    let target = outer_quoted(&s.instruction)?;
    let headers = accordion_headers(s);
    if accordion_moving(s, &headers) {
        return Some(GuiAction::Wait { ms: 300 });
    }
    let link = s.elements.iter().find(|e| has_class(e, "alink") && e.text.trim() == target);
    if let Some(link) = link {
        if on_screen(s, link) {
            return Some(click(link));
        }
        // Below the 210-pixel task area: bring it up with the wheel.
        let (_, y) = link.bbox.center();
        return Some(GuiAction::Scroll { x: 80, y: 105, dx: 0, dy: y - 105 });
    }
    let next = match headers.iter().position(|h| expanded(h)) {
        Some(i) => (i + 1) % headers.len(),
        None => 0,
    };
    headers.get(next).map(|h| click(h))
}

/// click-widget: `Click on a "checkbox" widget.` (radio, checkbox, text, textarea, button).
pub(super) fn click_widget(s: &ScreenState) -> Option<GuiAction> {
    let kind = outer_quoted(&s.instruction)?;
    s.elements
        .iter()
        .filter(|e| on_screen(s, e))
        .find(|e| match kind.as_str() {
            "radio" | "checkbox" => e.tag == "input" && e.input_type == kind,
            // The page writes `<input type="input">`, which browsers treat as text.
            "text" => e.tag == "input" && matches!(e.input_type.as_str(), "text" | "input"),
            "textarea" => e.tag == "textarea",
            "button" => e.tag == "button",
            _ => false,
        })
        .map(click)
}
