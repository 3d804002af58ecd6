//! Oracles for the form tasks: focusing and filling text fields, checkboxes, radio
//! buttons, select lists and an autocomplete field.

use super::page::{between, button, by_id, click, fill, has_class, inside, key, on_screen, quoted};
use crate::env::{Element, GuiAction, KeyCombo, Modifier, ScreenState};

/// Text-like `<input>`s (text, password, untyped), in document order.
fn text_inputs(s: &ScreenState) -> Vec<&Element> {
    s.elements
        .iter()
        .filter(|e| e.tag == "input" && matches!(e.input_type.as_str(), "" | "text" | "password" | "input"))
        .collect()
}

/// Fill each `(field, value)` in order, then click the button labelled `submit`.
fn fill_and_submit(s: &ScreenState, fields: &[(&Element, &str)], submit: &str) -> Option<GuiAction> {
    for (field, value) in fields {
        if let Some(a) = fill(field, value) {
            return Some(a);
        }
    }
    button(s, submit).map(click)
}

/// focus-text: "Focus into the textbox."
pub(super) fn focus_text(s: &ScreenState) -> Option<GuiAction> {
    by_id(s, "tt").or_else(|| text_inputs(s).into_iter().next()).map(click)
}

/// The 1-based position in "1st", "2nd", "3rd", "4th", ...
fn ordinal(word: &str) -> Option<usize> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    digits.parse().ok().filter(|&n| n > 0)
}

/// focus-text-2: "Focus into the 2nd input textbox."
pub(super) fn focus_text_2(s: &ScreenState) -> Option<GuiAction> {
    let word = between(&s.instruction, "Focus into the ", " input textbox.")?;
    text_inputs(s).get(ordinal(word)? - 1).map(|e| click(e))
}

/// The task's one text field, `#tt`.
fn the_text_field(s: &ScreenState) -> Option<&Element> {
    by_id(s, "tt").or_else(|| text_inputs(s).into_iter().next())
}

/// enter-text / enter-text-dynamic: `Enter "X" into the text field and press Submit.`
pub(super) fn enter_text(s: &ScreenState) -> Option<GuiAction> {
    let target = quoted(&s.instruction).into_iter().next()?;
    fill_and_submit(s, &[(the_text_field(s)?, &target)], "Submit")
}

/// enter-text-2: `Type "kenda" in all upper case letters in the text input and press
/// Submit.` (or lower case).
pub(super) fn enter_text_2(s: &ScreenState) -> Option<GuiAction> {
    let word = quoted(&s.instruction).into_iter().next()?;
    let target = if s.instruction.contains("all upper case") {
        word.to_uppercase()
    } else if s.instruction.contains("all lower case") {
        word.to_lowercase()
    } else {
        return None;
    };
    fill_and_submit(s, &[(the_text_field(s)?, &target)], "Submit")
}

/// enter-password: `Enter the password "X" into both text fields and press submit.`
pub(super) fn enter_password(s: &ScreenState) -> Option<GuiAction> {
    let pw = quoted(&s.instruction).into_iter().next()?;
    let fields = [(by_id(s, "password")?, pw.as_str()), (by_id(s, "verify")?, pw.as_str())];
    fill_and_submit(s, &fields, "Submit")
}

/// login-user: `Enter the username "U" and the password "P" into the text fields and
/// press login.`
pub(super) fn login_user(s: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&s.instruction);
    let (user, pw) = (q.first()?, q.get(1)?);
    let fields = [(by_id(s, "username")?, user.as_str()), (by_id(s, "password")?, pw.as_str())];
    fill_and_submit(s, &fields, "Login")
}

/// The words of "Select a, b, c and click Submit." (`nothing` is the empty list).
fn select_list(instruction: &str, prefix: &str) -> Option<Vec<String>> {
    let list = between(instruction, prefix, " and click Submit.")?;
    if list == "nothing" {
        return Some(Vec::new());
    }
    Some(list.split(", ").map(|w| w.trim().to_string()).collect())
}

/// `(label text, control)` for each `<label>` wrapping a checkbox or radio input.
fn labelled_controls<'a>(s: &'a ScreenState, kind: &str) -> Vec<(&'a str, &'a Element)> {
    let controls: Vec<&Element> =
        s.elements.iter().filter(|e| e.tag == "input" && e.input_type == kind).collect();
    s.elements
        .iter()
        .filter(|e| e.tag == "label")
        .filter_map(|l| {
            let c = controls.iter().find(|c| inside(c, l))?;
            Some((l.text.trim(), *c))
        })
        .collect()
}

/// Toggle every checkbox whose state differs from `want(label)`, then Submit.
fn set_checkboxes(s: &ScreenState, want: impl Fn(&str) -> bool) -> Option<GuiAction> {
    let boxes = labelled_controls(s, "checkbox");
    if boxes.is_empty() {
        return None;
    }
    for (label, cb) in boxes {
        if want(label) != cb.checked && on_screen(s, cb) {
            return Some(click(cb));
        }
    }
    button(s, "Submit").map(click)
}

/// click-checkboxes(-large, -transfer): "Select a, b and click Submit." (or "nothing").
pub(super) fn click_checkboxes(s: &ScreenState) -> Option<GuiAction> {
    let names = select_list(&s.instruction, "Select ")?;
    set_checkboxes(s, |label| names.iter().any(|n| n == label))
}

/// click-checkboxes-soft's synonym groups (copied from the task page).
const SYNONYMS: &[&[&str]] = &[
    &["big", "large", "huge", "enormous", "gigantic"],
    &["small", "tiny", "little", "mini", "petite"],
    &["red", "scarlet", "crimson", "vermillion"],
    &["happy", "cheerful", "joyful", "gleeful", "delighted"],
    &["sad", "unhappy", "sorrowful", "miserable", "tragic"],
    &["angry", "mad", "furious", "irritated"],
    &["evil", "wicked", "immoral", "sinful", "corrupt", "depraved"],
    &["wrong", "incorrect", "mistaken", "erroneous"],
    &["real", "genuine", "actual"],
    &["strange", "odd", "peculiar", "unusual", "weird"],
    &["stop", "cease", "halt", "end", "finish"],
    &["scared", "terrified", "panicked", "fearful", "frightened", "afraid"],
    &["quiet", "calm", "peaceful", "serene", "mild"],
    &["old", "aged", "archaic"],
    &["love", "like", "adore", "favor"],
    &["kill", "murder", "assassinate"],
    &["keep", "retain", "preserve", "sustain", "maintain"],
    &["hide", "conceal", "camouflage"],
    &["hate", "despise", "loathe", "detest", "dislike"],
    &["funny", "humorous", "amusing", "comical", "laughable"],
    &["fat", "fleshy", "plump", "chubby"],
    &["stupid", "dumb", "dull", "unwise"],
    &["delicious", "savory", "delectable", "appetizing"],
    &["cut", "slice", "carve", "chop"],
    &["brave", "courageous", "fearless"],
    &["begin", "start", "initiate", "launch"],
    &["answer", "reply", "response"],
    &["television", "televisions", "TV", "TVs"],
    &["house", "home", "houses", "homes"],
    &["fire", "flame", "fires", "flames"],
    &["pig", "pork", "swine", "pig"],
    &["rabbit", "rabbits", "bunny", "bunnies"],
    &["car", "cars", "automobile", "automobiles", "vehicle", "vehicles"],
    &["water"],
];

/// The synonym group of `word` in click-checkboxes-soft.
fn synonym_group(word: &str) -> Option<usize> {
    SYNONYMS.iter().position(|g| g.contains(&word))
}

/// click-checkboxes-soft: "Select words similar to big, tiny and click Submit."
pub(super) fn click_checkboxes_soft(s: &ScreenState) -> Option<GuiAction> {
    let words = select_list(&s.instruction, "Select words similar to ")?;
    let groups: Vec<usize> = words.iter().filter_map(|w| synonym_group(w)).collect();
    set_checkboxes(s, |label| synonym_group(label).is_some_and(|g| groups.contains(&g)))
}

/// click-option: "Select X and click Submit." — the radio button labelled X.
pub(super) fn click_option(s: &ScreenState) -> Option<GuiAction> {
    let name = between(&s.instruction, "Select ", " and click Submit.")?;
    let (_, radio) = labelled_controls(s, "radio").into_iter().find(|(l, _)| *l == name)?;
    if radio.checked {
        button(s, "Submit").map(click)
    } else {
        Some(click(radio))
    }
}

/// choose-list: "Select X from the list and click Submit."
///
/// The oracle focuses the closed list with Tab and types the option's text: the list's
/// type-ahead selects it at once. Type-ahead can stop at an earlier option that merely
/// starts with the text (`Ann` → `Anna`); the closed list shows only its choice, so the
/// oracle then opens it with a click (guirl draws it in the page, its options as items
/// under it, see src/env/popups.js) and clicks the option where it shows, walking the open
/// list down with the arrow key until it does.
pub(super) fn choose_list(s: &ScreenState) -> Option<GuiAction> {
    let target = between(&s.instruction, "Select ", " from the list and click Submit.")?;
    let select = by_id(s, "options").or_else(|| s.elements.iter().find(|e| e.tag == "select"))?;
    // a closed list shows its chosen option's text (its `value` is not drawn, so not listed)
    let chosen = select.text.trim();
    if chosen == target {
        return button(s, "Submit").map(click);
    }
    if !select.focused {
        let submit_focused = button(s, "Submit").is_some_and(|b| b.focused);
        return Some(GuiAction::Key(crate::env::KeyCombo {
            modifiers: if submit_focused { vec![crate::env::Modifier::Shift] } else { vec![] },
            key: "Tab".into(),
        }));
    }
    if !chosen.to_lowercase().starts_with(&target.to_lowercase()) {
        return Some(GuiAction::Type { text: target.to_string() });
    }
    // The open list's items are the page's only listed <div>s.
    let items: Vec<&Element> = s.elements.iter().filter(|e| e.tag == "div" && on_screen(s, e)).collect();
    if let Some(item) = items.iter().find(|e| e.text.trim() == target) {
        return Some(click(item));
    }
    if items.iter().any(|e| e.text.trim() == chosen) {
        return Some(key("ArrowDown"));
    }
    Some(click(select))
}

/// use-autocomplete(-nodelay): `Enter an item that starts with "Ba" and ends with "os".`
/// (the second part is optional).
///
/// Types the prefix, then clicks a suggestion that fits; with no fitting suggestion on
/// screen it types the suffix itself (the check is only starts-with / ends-with).
pub(super) fn use_autocomplete(s: &ScreenState) -> Option<GuiAction> {
    let q = quoted(&s.instruction);
    let prefix = q.first()?.as_str();
    let suffix = q.get(1).map(String::as_str).unwrap_or("");
    let fits = |v: &str| v.starts_with(prefix) && v.ends_with(suffix) && !v.is_empty();
    let input = by_id(s, "tags").or_else(|| text_inputs(s).into_iter().next())?;
    let menu: Vec<&Element> =
        s.elements.iter().filter(|e| has_class(e, "ui-menu-item-wrapper") && on_screen(s, e)).collect();
    if fits(&input.value) {
        if menu.is_empty() {
            return button(s, "Submit").map(click);
        }
        return Some(key("Escape"));
    }
    if let Some(item) = menu.iter().find(|e| fits(e.text.trim())) {
        return Some(click(item));
    }
    if input.value == prefix && input.focused {
        // The suggestions open a moment after typing; past a few steps, finish by hand.
        if menu.is_empty() && s.step < 6 {
            return Some(GuiAction::Wait { ms: 200 });
        }
        return Some(GuiAction::Type { text: suffix.to_string() });
    }
    fill(input, prefix)
}

/// login-user-popup: login-user, except that focusing a field may open a "session
/// expiring" popup that disables the form; its Cancel closes it (OK fails the episode).
pub(super) fn login_user_popup(s: &ScreenState) -> Option<GuiAction> {
    if let Some(cancel) = by_id(s, "popup-cancel").filter(|e| on_screen(s, e)) {
        return Some(click(cancel));
    }
    let q = quoted(&s.instruction);
    let (user, pw) = (q.first()?, q.get(1)?);
    let fields = [(by_id(s, "username")?, user.as_str()), (by_id(s, "password")?, pw.as_str())];
    for (field, value) in fields {
        if let Some(a) = fill(field, value) {
            return Some(a);
        }
    }
    by_id(s, "subbtn").map(click)
}

/// use-spinner: "Select -3 with the spinner and hit Submit." The field ignores the
/// keyboard, so the oracle clicks the spinner's up / down arrows one step at a time.
pub(super) fn use_spinner(s: &ScreenState) -> Option<GuiAction> {
    let want: i64 =
        between(&s.instruction, "Select ", " with the spinner and hit Submit.")?.trim().parse().ok()?;
    let field = by_id(s, "spinner")?;
    let have: i64 = field.value.trim().parse().unwrap_or(0);
    let arrow = match have.cmp(&want) {
        std::cmp::Ordering::Equal => return button(s, "Submit").map(click),
        std::cmp::Ordering::Less => "ui-spinner-up",
        std::cmp::Ordering::Greater => "ui-spinner-down",
    };
    s.elements.iter().find(|e| has_class(e, arrow) && on_screen(s, e)).map(click)
}

/// copy-paste: "Copy the text in the textarea below, paste it into the textbox and press
/// Submit." Copied and pasted as a person does it (see [`paste_from`]).
pub(super) fn copy_paste(s: &ScreenState) -> Option<GuiAction> {
    paste_from(s, by_id(s, "to-copy")?)
}

/// copy-paste-2: "Copy the text from the 2nd text area below and paste it into the text
/// input, then press Submit."
pub(super) fn copy_paste_2(s: &ScreenState) -> Option<GuiAction> {
    let rest = s.instruction.trim().strip_prefix("Copy the text from the ")?;
    let (word, _) = rest.split_once(" text area")?;
    let areas: Vec<&Element> = s.elements.iter().filter(|e| e.tag == "textarea").collect();
    paste_from(s, areas.get(ordinal(word)? - 1)?)
}

/// Click `area`, `ctrl+a`, `ctrl+c`, click the answer field, `ctrl+v`, then Submit once the
/// field holds the text. Why not type the text: it is on the page, not in the instruction,
/// so a policy could only spell it byte by byte; the five steps are the same for every
/// seed but the clicks' targets.
fn paste_from(s: &ScreenState, area: &Element) -> Option<GuiAction> {
    let answer = by_id(s, "answer-input")?;
    if !area.value.is_empty() && answer.value == area.value {
        return button(s, "Submit").map(click);
    }
    let chord = |k: &str| GuiAction::Key(KeyCombo { modifiers: vec![Modifier::Ctrl], key: k.into() });
    Some(next_in_sequence(s, &[click(area), chord("a"), chord("c"), click(answer), chord("v")]))
}

/// The step of `seq` that comes next: after the longest run of `seq`'s first steps that the
/// episode's history ends with, or its first step. Why history: the screen alone does not
/// show a selection copied or a segment typed.
fn next_in_sequence(s: &ScreenState, seq: &[GuiAction]) -> GuiAction {
    let texts: Vec<String> = seq.iter().map(ToString::to_string).collect();
    let done = (1..seq.len()).rev().find(|&j| s.history.ends_with(&texts[..j])).unwrap_or(0);
    seq[done].clone()
}

/// A click on the first (leftmost) segment of a date or time field, where typing starts.
fn click_first_segment(e: &Element) -> GuiAction {
    let (_, y) = e.bbox.center();
    GuiAction::Click { x: (e.bbox.x + 8.0).round() as i32, y }
}

/// enter-date: "Enter 05/12/2013 as the date and hit submit." — an `<input type=date>`,
/// whose value reads `2013-05-12`. Typing into the month segment fills month, day and year
/// in turn and passes over a `/`, so the oracle types the instruction's own `05/12/2013`:
/// a span a policy can copy.
pub(super) fn enter_date(s: &ScreenState) -> Option<GuiAction> {
    let date = between(&s.instruction, "Enter ", " as the date and hit submit.")?;
    let [m, d, y]: [&str; 3] = date.split('/').collect::<Vec<_>>().try_into().ok()?;
    let want = format!("{y}-{m}-{d}");
    let field = by_id(s, "tt")?;
    if field.value == want {
        return button(s, "Submit").map(click);
    }
    if !field.focused {
        return Some(click_first_segment(field));
    }
    Some(GuiAction::Type { text: date.to_string() })
}

/// `9:39 AM` as the 24-hour `09:39` an `<input type=time>` reads, and the instruction's
/// pieces that type it: hour, minutes and `AM` / `PM` (`9`, `39`, `AM`).
fn parse_time(t: &str) -> Option<(String, [String; 3])> {
    let (hm, ampm) = t.trim().split_once(' ')?;
    let (h_text, m_text) = hm.split_once(':')?;
    let (h, m): (u32, u32) = (h_text.parse().ok()?, m_text.parse().ok()?);
    let pm = match ampm {
        "AM" => false,
        "PM" => true,
        _ => return None,
    };
    if !(1..=12).contains(&h) || m > 59 {
        return None;
    }
    let h24 = (h % 12) + if pm { 12 } else { 0 };
    Some((format!("{h24:02}:{m:02}"), [h_text.to_string(), m_text.to_string(), ampm.to_string()]))
}

/// enter-time: "Enter 9:39 AM as the time and press submit." — an `<input type=time>`.
/// Every typed text is a span of the instruction a policy can copy: click the hour, type
/// `9:39` (the field ignores the `:`, and a filled hour or minute segment moves on), type
/// `AM`. A lone `1` waits for a second hour digit, so an hour of 1 goes one segment at a
/// time: click the hour, type `1`, click the minutes, type `39`, type `AM`. Which step
/// comes next is read off the episode's history (the longest run of the sequence its last
/// actions end with).
pub(super) fn enter_time(s: &ScreenState) -> Option<GuiAction> {
    let t = between(&s.instruction, "Enter ", " as the time and press submit.")?;
    let (want, [h, m, ampm]) = parse_time(t)?;
    let field = by_id(s, "tt")?;
    if field.value == want {
        return button(s, "Submit").map(click);
    }
    let seq = if h == "1" {
        let (_, y) = field.bbox.center();
        vec![
            click_first_segment(field),
            GuiAction::Type { text: h },
            // the minutes segment
            GuiAction::Click { x: (field.bbox.x + 32.0).round() as i32, y },
            GuiAction::Type { text: m },
            GuiAction::Type { text: ampm },
        ]
    } else {
        vec![
            click_first_segment(field),
            GuiAction::Type { text: format!("{h}:{m}") },
            GuiAction::Type { text: ampm },
        ]
    };
    Some(next_in_sequence(s, &seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals() {
        assert_eq!(ordinal("1st"), Some(1));
        assert_eq!(ordinal("2nd"), Some(2));
        assert_eq!(ordinal("3rd"), Some(3));
        assert_eq!(ordinal("11th"), Some(11));
        assert_eq!(ordinal("first"), None);
    }

    #[test]
    fn select_lists() {
        assert_eq!(
            select_list("Select xK, 9a, Qq1 and click Submit.", "Select "),
            Some(vec!["xK".to_string(), "9a".into(), "Qq1".into()])
        );
        assert_eq!(select_list("Select nothing and click Submit.", "Select "), Some(vec![]));
        assert_eq!(
            select_list("Select words similar to big, tiny and click Submit.", "Select words similar to "),
            Some(vec!["big".to_string(), "tiny".into()])
        );
    }

    #[test]
    fn times() {
        let pieces = |h: &str, m: &str, ap: &str| [h.to_string(), m.to_string(), ap.to_string()];
        assert_eq!(parse_time("9:39 AM"), Some(("09:39".into(), pieces("9", "39", "AM"))));
        assert_eq!(parse_time("12:05 AM"), Some(("00:05".into(), pieces("12", "05", "AM"))));
        assert_eq!(parse_time("12:30 PM"), Some(("12:30".into(), pieces("12", "30", "PM"))));
        assert_eq!(parse_time("1:07 PM"), Some(("13:07".into(), pieces("1", "07", "PM"))));
        assert_eq!(parse_time("13:07"), None);
    }

    fn select_state(text: &str, focused: bool) -> ScreenState {
        let select = Element {
            tag: "select".into(),
            id: "options".into(),
            text: text.into(),
            focused,
            bbox: crate::env::BBox { x: 2.0, y: 57.0, w: 150.0, h: 19.0 },
            ..Default::default()
        };
        let submit = Element {
            tag: "button".into(),
            text: "Submit".into(),
            bbox: crate::env::BBox { x: 2.0, y: 81.0, w: 95.0, h: 31.0 },
            ..Default::default()
        };
        ScreenState {
            task_id: "miniwob/choose-list".into(),
            instruction: "Select Ann from the list and click Submit.".into(),
            url: String::new(),
            step: 0,
            frame: crate::env::Frame { width: 160, height: 210, ..Default::default() },
            elements: vec![select, submit],
            screenshot: image::RgbImage::new(1, 1).into(),
            history: Vec::new(),
            previous_screenshot: None,
        }
    }

    #[test]
    fn choose_list_steps() {
        let act = |chosen: &str, focused: bool, items: &[&str]| {
            let mut s = select_state(chosen, focused);
            for (i, t) in items.iter().enumerate() {
                s.elements.push(Element {
                    tag: "div".into(),
                    text: t.to_string(),
                    bbox: crate::env::BBox { x: 2.0, y: 76.0 + 16.0 * i as f32, w: 150.0, h: 16.0 },
                    ..Default::default()
                });
            }
            choose_list(&s).unwrap().to_string()
        };
        // Focus without opening the popup, type, and walk off a type-ahead near miss.
        assert_eq!(act("Bob", false, &[]), "key(Tab)");
        assert_eq!(act("Bob", true, &[]), r#"type("Ann")"#);
        assert_eq!(act("Anna", true, &[]), "click(77, 66)");
        assert_eq!(act("Anna", true, &["Bob", "Anna"]), "key(ArrowDown)");
        assert_eq!(act("Anna", true, &["Anna", "Ann"]), "click(77, 100)");
        assert_eq!(act("Ann", true, &[]), "click(49, 96)");
    }

    #[test]
    fn synonym_groups_do_not_overlap() {
        for (i, g) in SYNONYMS.iter().enumerate() {
            for w in *g {
                assert_eq!(synonym_group(w), Some(i), "{w} is in two groups");
            }
        }
        assert_eq!(synonym_group("tiny"), synonym_group("petite"));
    }
}
