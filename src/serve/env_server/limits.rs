//! The bounds on what a client may send, each enforced with a 400 `field_too_long` that
//! names the field, its length and the limit (docs/serve.md, "Limits"). The whole body
//! and each WebSocket message are bounded separately by `--max-body`; these bound the
//! fields inside, so a spec cannot make the server parse, store or run without limit.
//! Specs read from the user's own files by the CLI are not bounded.

use super::error::ApiError;
pub use super::error::{cut, MAX_MESSAGE_CHARS};
use crate::tasks::website::{Variable, WebsiteSpec};
use serde_json::Value;

/// A task id (`task`).
pub const MAX_TASK_ID_CHARS: usize = 200;
/// A website spec's TOML text (`task_spec`), in bytes.
pub const MAX_TASK_SPEC_BYTES: usize = 64 * 1024;
/// The spec's `start_url`.
pub const MAX_START_URL_CHARS: usize = 2048;
/// The spec's `instruction` template.
pub const MAX_INSTRUCTION_CHARS: usize = 2000;
/// The spec's `setup_js` and `success.js`, each.
pub const MAX_JS_CHARS: usize = 16 * 1024;
/// Variables in the spec's `[variables]`.
pub const MAX_VARIABLES: usize = 64;
/// A variable's name.
pub const MAX_VARIABLE_NAME_CHARS: usize = 64;
/// Choices of one list variable.
pub const MAX_VARIABLE_CHOICES: usize = 1000;
/// One choice of a list variable.
pub const MAX_VARIABLE_VALUE_CHARS: usize = 1000;
/// `success.url_pattern`, `success.element_text.selector` and `.contains`, `reward`.
pub const MAX_CHECK_CHARS: usize = 1000;
/// The extra fields of a WebSocket message (`metadata`, `request_id`, `episode_id`),
/// each as JSON text, in bytes.
pub const MAX_EXTRA_BYTES: usize = 4096;
/// Longest piece of a client's own text quoted back in an answer (an unknown field's
/// name, a rejected value). A malformed action is quoted around the problem only (80
/// bytes, see [`crate::env::ParseActionError`]).
pub const MAX_ECHO_CHARS: usize = 200;

/// 400 `field_too_long` when `len` is over `limit`.
pub fn check(field: &str, len: usize, limit: usize, unit: &str) -> Result<(), ApiError> {
    if len <= limit {
        return Ok(());
    }
    Err(ApiError::invalid(
        "field_too_long",
        format!(
            "{field} is {len} {unit} long; this server takes at most {limit}: shorten it \
             (docs/serve.md lists every limit)"
        ),
    ))
}

fn chars(field: &str, s: &str, limit: usize) -> Result<(), ApiError> {
    // Count only past the byte length that could be over, so a short field costs nothing.
    if s.len() <= limit {
        return Ok(());
    }
    check(field, s.chars().count(), limit, "characters")
}

/// The `task` id's length.
pub fn task_id(id: &str) -> Result<(), ApiError> {
    chars("task", id, MAX_TASK_ID_CHARS)
}

/// The `task_spec` text's size (before it is parsed).
pub fn task_spec_text(text: &str) -> Result<(), ApiError> {
    check("task_spec", text.len(), MAX_TASK_SPEC_BYTES, "bytes")
}

/// Every bounded field of a parsed spec.
pub fn spec(spec: &WebsiteSpec) -> Result<(), ApiError> {
    chars("task_spec: start_url", &spec.start_url, MAX_START_URL_CHARS)?;
    chars("task_spec: instruction", &spec.instruction, MAX_INSTRUCTION_CHARS)?;
    if let Some(js) = &spec.setup_js {
        chars("task_spec: setup_js", js, MAX_JS_CHARS)?;
    }
    if let Some(r) = &spec.reward {
        chars("task_spec: reward", r, MAX_CHECK_CHARS)?;
    }
    if let Some(s) = &spec.success {
        if let Some(js) = &s.js {
            chars("task_spec: success.js", js, MAX_JS_CHARS)?;
        }
        if let Some(p) = &s.url_pattern {
            chars("task_spec: success.url_pattern", p, MAX_CHECK_CHARS)?;
        }
        if let Some(e) = &s.element_text {
            chars("task_spec: success.element_text.selector", &e.selector, MAX_CHECK_CHARS)?;
            chars("task_spec: success.element_text.contains", &e.contains, MAX_CHECK_CHARS)?;
        }
    }
    // What a seed's variables make of them, which is what every observation carries.
    let expanded = |field: &str, template: &str, limit: usize| {
        let n = spec.expanded_chars(template);
        if n <= limit {
            return Ok(());
        }
        Err(ApiError::invalid(
            "field_too_long",
            format!(
                "{field} expands to up to {n} characters with its [variables]; this server takes at \
                 most {limit}: use fewer or shorter variables there (docs/serve.md lists every limit)"
            ),
        ))
    };
    expanded("task_spec: start_url", &spec.start_url, MAX_START_URL_CHARS)?;
    expanded("task_spec: instruction", &spec.instruction, MAX_INSTRUCTION_CHARS)?;
    for js in spec.setup_js.iter().chain(spec.success.as_ref().and_then(|s| s.js.as_ref())) {
        expanded("task_spec: a script", js, MAX_JS_CHARS)?;
    }
    check("task_spec: [variables]", spec.variables.len(), MAX_VARIABLES, "entries")?;
    for (name, v) in &spec.variables {
        chars("task_spec: a variable's name", name, MAX_VARIABLE_NAME_CHARS)?;
        if let Variable::Choice(c) = v {
            check(&format!("task_spec: variables.{name}"), c.len(), MAX_VARIABLE_CHOICES, "choices")?;
            for value in c {
                chars(&format!("task_spec: a choice of variables.{name}"), value, MAX_VARIABLE_VALUE_CHARS)?;
            }
        }
    }
    Ok(())
}

/// An extra WebSocket field (`metadata`, `request_id`, `episode_id`), as JSON text.
pub fn extra(field: &str, v: Option<&Value>) -> Result<(), ApiError> {
    match v {
        Some(v) => check(field, v.to_string().len(), MAX_EXTRA_BYTES, "bytes of JSON"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_marks_what_it_cut() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("ééé", 3), "ééé", "counts characters, not bytes");
        let c = cut(&"a".repeat(9000), MAX_ECHO_CHARS);
        assert!(
            c.starts_with(&"a".repeat(MAX_ECHO_CHARS)) && c.ends_with("[cut: 9000 characters in all]"),
            "{c}"
        );
        assert!(c.chars().count() < MAX_ECHO_CHARS + 40);
    }

    #[test]
    fn a_field_over_its_limit_is_named_with_its_length_and_the_limit() {
        let spec = WebsiteSpec::parse(&format!(
            "start_url = \"/x.html\"\ninstruction = \"i\"\n[success]\njs = \"{}\"\n",
            "1".repeat(MAX_JS_CHARS + 1)
        ))
        .unwrap();
        let e = super::spec(&spec).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, "field_too_long"));
        assert!(
            e.message.contains("success.js is 16385 characters long") && e.message.contains("at most 16384"),
            "{}",
            e.message
        );
        let ok =
            WebsiteSpec::parse("start_url = \"/x.html\"\ninstruction = \"i\"\n[success]\njs = \"true\"\n")
                .unwrap();
        super::spec(&ok).unwrap();
    }
}
