//! Oracles for the built-in tasks that navigate between pages. Each one first asks which
//! page the URL names, then does the next thing that page needs.

use super::page::{by_id, click, fill, has_class, page_name, query_param, quoted, with_class, within};
use crate::env::{GuiAction, ScreenState};

/// Which settings field `... change your FIELD to "..."` names, as its input id.
fn settings_field(instruction: &str) -> Option<&'static str> {
    [("display name to", "displayname"), ("email to", "email"), ("phone number to", "phone")]
        .into_iter()
        .find(|(phrase, _)| instruction.contains(phrase))
        .map(|(_, id)| id)
}

/// `Sign in as "U" with password "P", then in Settings change your FIELD to "V" and save.`
pub(super) fn login_settings(state: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&state.instruction);
    let [user, pass, value] = q.as_slice() else { return None };
    if let Some(to_login) = by_id(state, "to-login") {
        return Some(click(to_login));
    }
    match page_name(&state.url) {
        "index.html" => {
            for (id, want) in [("username", user), ("password", pass)] {
                if let Some(a) = fill(state, by_id(state, id)?, want) {
                    return Some(a);
                }
            }
            by_id(state, "signin").map(click)
        }
        "dashboard.html" => by_id(state, "nav-settings").map(click),
        "settings.html" => {
            let field = settings_field(&state.instruction)?;
            let input = by_id(state, field)?;
            if input.value == *value {
                return by_id(state, "save").map(click);
            }
            if !input.value.is_empty() {
                if let Some(clear) = by_id(state, &format!("clear-{field}")) {
                    return Some(click(clear));
                }
            }
            fill(state, input, value)
        }
        _ => None,
    }
}

/// `Buy a "P" in "C", size "S", and ship it to "STREET", "CITY".`
pub(super) fn shop_checkout(state: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&state.instruction);
    let [product, color, size, street, city] = q.as_slice() else { return None };
    let label = format!("{product} ({color})");
    let home = || by_id(state, "home").map(click);
    match page_name(&state.url) {
        "index.html" => {
            let search = by_id(state, "search")?;
            fill(state, search, product).or_else(|| by_id(state, "search-btn").map(click))
        }
        "results.html" => match with_class(state, "a", "result").find(|e| e.text.trim() == label) {
            Some(link) => Some(click(link)),
            None => home(),
        },
        "product.html" => {
            if by_id(state, "pname")?.text.trim() != label {
                return home();
            }
            let sizes: Vec<_> = with_class(state, "button", "size").collect();
            let chosen = sizes.iter().find(|e| has_class(e, "selected"));
            if chosen.map(|e| e.text.trim()) != Some(size.as_str()) {
                return sizes.iter().find(|e| e.text.trim() == size).map(|e| click(e));
            }
            by_id(state, "add").map(click)
        }
        "cart.html" => {
            let want = format!("{label}, size {size}, qty 1");
            let is_right = |t: &str| {
                let t = t.trim();
                t.strip_suffix("Remove").unwrap_or(t).trim() == want
            };
            let lines: Vec<_> = with_class(state, "div", "line").collect();
            if let Some(bad) = lines.iter().find(|l| !is_right(&l.text)) {
                return within(state, bad, "button", "remove").map(click);
            }
            match lines.len() {
                1 => by_id(state, "checkout").map(click),
                0 => home(),
                _ => within(state, lines[1], "button", "remove").map(click),
            }
        }
        "checkout.html" => {
            for (id, want) in [("street", street), ("city", city)] {
                if let Some(a) = fill(state, by_id(state, id)?, want) {
                    return Some(a);
                }
            }
            by_id(state, "place").map(click)
        }
        _ => home(),
    }
}

/// `Reply to the email from "NAME" with the text "T".` or
/// `Forward the email from "NAME" to "ADDRESS".`
pub(super) fn inbox_reply(state: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&state.instruction);
    let [sender, arg] = q.as_slice() else { return None };
    let mode = if state.instruction.starts_with("Forward") { "forward" } else { "reply" };
    match page_name(&state.url) {
        "index.html" => {
            let needle = format!(" {sender} ");
            with_class(state, "a", "msg").find(|e| format!(" {} ", e.text).contains(&needle)).map(click)
        }
        "message.html" => {
            let from = by_id(state, "msg-from")?;
            if from.text.starts_with(&format!("From: {sender} <")) {
                by_id(state, mode).map(click)
            } else {
                by_id(state, "back").map(click)
            }
        }
        "compose.html" => {
            let about = by_id(state, "quoted").map(|e| e.text.as_str()).unwrap_or("");
            let right_message = about.starts_with(&format!("{sender} wrote:"))
                || about.starts_with(&format!("Forwarded from {sender}:"));
            if query_param(&state.url, "mode") != Some(mode) || !right_message {
                return by_id(state, "discard").map(click);
            }
            let field = if mode == "reply" { "body" } else { "to" };
            fill(state, by_id(state, field)?, arg).or_else(|| by_id(state, "send").map(click))
        }
        _ => by_id(state, "inbox-link").map(click),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_field_from_instruction() {
        let i = r#"Sign in as "ab1" with password "x", then in Settings change your phone number to "555-1234" and save."#;
        assert_eq!(settings_field(i), Some("phone"));
        assert_eq!(settings_field("... change your email to \"a@b\" and save."), Some("email"));
        assert_eq!(settings_field("... change your display name to \"A B\" and save."), Some("displayname"));
    }
}
