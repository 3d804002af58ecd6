//! Scripted oracles for the built-in tasks (`environments/builtin/<name>/`).
//!
//! Each oracle reads one `ScreenState` (the instruction, the URL and the page's
//! interactive elements) and returns the next right action; it keeps no state between
//! calls, so progress is read back from the page: an input's value, a checkbox's
//! `checked`, which element has focus, which page the URL names. The instructions are
//! regular on purpose: every value the agent needs is in double quotes.
//!
//! `simple` holds the one-page tasks, `multi` the ones that navigate between pages.
//! What they share (finding elements, writing actions) is `page`.

mod multi;
mod page;
mod simple;

use super::table::Table;

/// The built-in tasks with an oracle, and their oracles (in the order the tests run them).
pub const ORACLES: Table = &[
    ("click-color-button", simple::click_color_button),
    ("counter", simple::counter),
    ("fill-form", simple::fill_form),
    ("select-option", simple::select_option),
    ("toggle-switches", simple::toggle_switches),
    ("drag-to-bin", simple::drag_to_bin),
    ("search-table", simple::search_table),
    ("scroll-to-find", simple::scroll_to_find),
    ("login-settings", multi::login_settings),
    ("shop-checkout", multi::shop_checkout),
    ("inbox-reply", multi::inbox_reply),
];

#[cfg(test)]
mod tests {
    use super::page::*;
    use crate::env::Element;
    use crate::env::{GuiAction, ScreenState};

    #[test]
    fn quoted_values_in_order() {
        assert_eq!(
            quoted(r#"Buy a "Cap" in "cyan", size "XL", and ship it to "9 Elm St", "Oakdale"."#),
            vec!["Cap", "cyan", "XL", "9 Elm St", "Oakdale"]
        );
        assert!(quoted("Turn off every switch, then click Apply.").is_empty());
    }

    #[test]
    fn page_names_and_params() {
        let u = "http://127.0.0.1:4000/builtin/shop-checkout/results.html?q=Cap&x=1";
        assert_eq!(page_name(u), "results.html");
        assert_eq!(query_param(u, "q"), Some("Cap"));
        assert_eq!(query_param(u, "x"), Some("1"));
        assert_eq!(query_param(u, "y"), None);
        assert_eq!(page_name("http://h/builtin/inbox-reply/"), "index.html");
        assert_eq!(
            page_name("http://h/builtin/inbox-reply/compose.html?mode=reply&id=2#top"),
            "compose.html"
        );
        assert_eq!(query_param("http://h/a/compose.html?mode=reply&id=2", "mode"), Some("reply"));
    }

    fn state_with(step: u32, elements: Vec<Element>) -> ScreenState {
        ScreenState {
            task_id: "builtin/fill-form".into(),
            instruction: String::new(),
            url: "http://127.0.0.1/builtin/fill-form/index.html".into(),
            step,
            frame: crate::env::Frame { width: 240, height: 240, ..Default::default() },
            elements,
            screenshot: image::RgbImage::new(1, 1).into(),
            history: Vec::new(),
            previous_screenshot: None,
        }
    }

    fn input(value: &str, focused: bool) -> Element {
        Element {
            tag: "input".into(),
            id: "name".into(),
            value: value.into(),
            focused,
            bbox: crate::env::BBox { x: 10.0, y: 20.0, w: 100.0, h: 20.0 },
            ..Default::default()
        }
    }

    #[test]
    fn fill_clicks_types_then_clears_wrong_text() {
        let s = state_with(0, vec![]);
        assert_eq!(fill(&s, &input("Ana", true), "Ana"), None);
        assert_eq!(fill(&s, &input("", false), "Ana"), Some(GuiAction::Click { x: 60, y: 30 }));
        assert_eq!(fill(&s, &input("", true), "Ana"), Some(GuiAction::Type { text: "Ana".into() }));
        // Wrong text: select all on even steps, delete on odd ones.
        assert_eq!(fill(&s, &input("Bob", true), "Ana"), Some(GuiAction::parse("key(ctrl+a)").unwrap()));
        let s1 = state_with(1, vec![]);
        assert_eq!(fill(&s1, &input("Bob", true), "Ana"), Some(GuiAction::parse("key(Backspace)").unwrap()));
    }

    #[test]
    fn counter_oracle_reads_the_count() {
        let el = |id: &str, text: &str, x: f32| Element {
            tag: if id == "count" { "output" } else { "button" }.into(),
            id: id.into(),
            text: text.into(),
            bbox: crate::env::BBox { x, y: 50.0, w: 30.0, h: 30.0 },
            ..Default::default()
        };
        let mut s = state_with(
            0,
            vec![
                el("dec", "\u{2212}", 0.0),
                el("count", "3", 40.0),
                el("inc", "+", 80.0),
                el("submit", "Submit", 120.0),
            ],
        );
        s.task_id = "builtin/counter".into();
        s.instruction = "Set the counter to 5, then click Submit.".into();
        assert_eq!(crate::policy::oracle::oracle_action(&s), Some(GuiAction::Click { x: 95, y: 65 }));
        s.instruction = "Set the counter to 3, then click Submit.".into();
        assert_eq!(crate::policy::oracle::oracle_action(&s), Some(GuiAction::Click { x: 135, y: 65 }));
        s.instruction = "Set the counter to 1, then click Submit.".into();
        assert_eq!(crate::policy::oracle::oracle_action(&s), Some(GuiAction::Click { x: 15, y: 65 }));
    }

    #[test]
    fn every_task_in_the_table_has_an_oracle() {
        for spec in crate::tasks::builtin_specs::BUILTIN_TASKS {
            assert!(
                crate::policy::oracle::has_oracle(&format!("builtin/{}", spec.name)),
                "no oracle for {}",
                spec.name
            );
        }
    }
}
