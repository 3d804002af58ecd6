//! Scripted oracles for MiniWoB++ tasks.
//!
//! Each oracle reads one `ScreenState` (the instruction, which is MiniWoB's utterance,
//! and the page's interactive elements) and returns the next right action. They keep no
//! state between calls: progress is read back from the page (an input's value, a
//! checkbox's `checked`, which element has focus, which tab is active).
//!
//! The oracles are grouped by the kind of widget the task exercises:
//! `click` (buttons, links, dialogs, tabs, accordions), `form` (typing into fields,
//! checkboxes, radios, lists, autocomplete). What they share (finding elements, reading
//! the utterance, writing actions) is `page`.

mod click;
mod form;
mod page;

use super::table::Table;

/// The MiniWoB++ tasks with an oracle (names without the `miniwob/` prefix), and their
/// oracles (in the order the tests run them).
pub const ORACLES: Table = &[
    ("click-test", click::click_test),
    ("click-test-2", click::click_test_2),
    ("click-test-transfer", click::click_test_2),
    ("click-button", click::click_button),
    ("click-button-sequence", click::click_button_sequence),
    ("click-link", click::click_link),
    ("click-dialog", click::click_dialog),
    ("click-dialog-2", click::click_dialog_2),
    ("click-tab", click::click_tab),
    ("click-tab-2", click::click_tab_2),
    ("click-tab-2-easy", click::click_tab_2),
    ("click-tab-2-medium", click::click_tab_2),
    ("click-tab-2-hard", click::click_tab_2),
    ("click-collapsible", click::click_collapsible),
    ("click-collapsible-nodelay", click::click_collapsible),
    ("click-collapsible-2", click::click_collapsible_2),
    ("click-collapsible-2-nodelay", click::click_collapsible_2),
    ("click-widget", click::click_widget),
    ("focus-text", form::focus_text),
    ("focus-text-2", form::focus_text_2),
    ("enter-text", form::enter_text),
    ("enter-text-2", form::enter_text_2),
    ("enter-text-dynamic", form::enter_text),
    ("enter-password", form::enter_password),
    ("login-user", form::login_user),
    ("login-user-popup", form::login_user_popup),
    ("unicode-test", click::click_button),
    ("use-spinner", form::use_spinner),
    ("copy-paste", form::copy_paste),
    ("copy-paste-2", form::copy_paste_2),
    ("enter-date", form::enter_date),
    ("enter-time", form::enter_time),
    ("click-checkboxes", form::click_checkboxes),
    ("click-checkboxes-large", form::click_checkboxes),
    ("click-checkboxes-transfer", form::click_checkboxes),
    ("click-checkboxes-soft", form::click_checkboxes_soft),
    ("click-option", form::click_option),
    ("choose-list", form::choose_list),
    ("use-autocomplete", form::use_autocomplete),
    ("use-autocomplete-nodelay", form::use_autocomplete),
];

#[cfg(test)]
mod tests {
    use super::page::*;
    use super::*;
    use crate::env::Element;
    use crate::env::{GuiAction, ScreenState};

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
        for (_, oracle) in ORACLES {
            let _ = oracle(&s);
        }
        assert!(crate::policy::oracle::oracle_for("miniwob/no-such-task").is_none());
    }
}
