//! A website spec's templates: `{name}` replaced by an episode's variable.

use std::collections::BTreeMap;

/// `template` with each `{name}` of `vars` replaced by its value, in one pass: a value
/// is never expanded again, so the result is at most `WebsiteSpec::expanded_chars` long.
pub(super) fn fill(template: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').and_then(|close| Some((vars.get(&after[..close])?, close))) {
            Some((value, close)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
