//! A website spec's `[success]` checks: their keys, and the status expression the page
//! evaluates after every reset and step (what each check reads, and the reward).

use super::template::fill;
use anyhow::Context;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

/// How success is checked; every check given must pass.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuccessSpec {
    /// A JS expression: a bool, or a finite number (the reward; passes at `pass_threshold`);
    /// `null`/`undefined` is not passed, any other value an error (see `status_js`).
    #[serde(default)]
    pub js: Option<String>,
    /// A regular expression the page URL must match.
    #[serde(default)]
    pub url_pattern: Option<String>,
    /// An element whose shown text must contain a string.
    #[serde(default)]
    pub element_text: Option<ElementText>,
    /// For a numeric `js`, the value at which it counts as success.
    #[serde(default = "one")]
    pub pass_threshold: f64,
    /// End the episode as soon as the checks pass (otherwise only on `done()`).
    #[serde(default = "yes")]
    pub end_on_success: bool,
}

fn one() -> f64 {
    1.0
}
pub(super) fn yes() -> bool {
    true
}

/// An element-text check.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElementText {
    /// CSS selector of the element.
    pub selector: String,
    /// Text the element must contain.
    pub contains: String,
}

/// The status expression for one episode's variables. `js` must give a bool, a finite
/// number or nothing (`null`/`undefined`: not passed); any other value (a string, an
/// object, a Promise) throws, so no truthy value passes by accident. `element_text`
/// reads the text a person sees. A number is the reward when every other check passes;
/// when one fails the reward is 0, or the number where it is below 0 (a penalty stays).
pub(super) fn status_js(success: Option<&SuccessSpec>, vars: &BTreeMap<String, String>) -> String {
    let Some(s) = success else {
        // Scored by the reward model when the episode ends; the page never ends it.
        return "({done: false, reward: 0, raw_reward: 0, success: false, reason: null})".into();
    };
    let mut checks = String::new();
    if let Some(js) = &s.js {
        checks.push_str(&format!(
            "var v = ({}); \
             if (typeof v === 'number') {{ \
               if (!isFinite(v)) throw new Error('success.js gave ' + v + ': a reward must be a finite number'); \
               score = v; js = v >= {}; \
             }} else if (typeof v === 'boolean') js = v; \
             else if (v === null || v === undefined) js = false; \
             else throw new TypeError('success.js gave ' + (typeof v.then === 'function' ? 'a Promise (it cannot \
               wait: read the page as it is)' : 'a ' + typeof v + ' (' + String(v).slice(0, 40) + ')') + \
               ', not a bool or a number: compare it (=== \\'done\\', .length > 0)');",
            fill(js, vars),
            s.pass_threshold
        ));
    }
    if let Some(e) = &s.element_text {
        checks.push_str(&format!(
            "var el = document.querySelector({}); if (!el || !guirlShownText(el).includes({})) rest = false;",
            json!(e.selector),
            json!(fill(&e.contains, vars))
        ));
    }
    format!(
        "(function() {{ var vars = {vars}; {SHOWN_TEXT} var js = true, rest = true, score = null; {checks} \
         var pass = js && rest; \
         var r = score === null ? (pass ? 1 : 0) : (rest ? score : Math.min(score, 0)); \
         return {{done: pass && {end}, reward: r, raw_reward: r, success: pass, \
         reason: pass ? 'success checks passed' : null{url}}}; }})()",
        vars = json!(vars),
        end = s.end_on_success,
        // the URL is matched by the env (`TaskStatus::check_url`)
        url = if s.url_pattern.is_some() {
            ", reward_if_url_fails: score === null ? 0 : Math.min(score, 0)"
        } else {
            ""
        },
    )
}

/// `guirlShownText(el)`: the text a person sees of `el`: nothing when it is not drawn
/// (`display: none`, `visibility: hidden`, `opacity: 0`, or inside such), a field's value,
/// a list's chosen option, else its rendered text (`innerText`: without hidden parts).
const SHOWN_TEXT: &str = "function guirlShownText(el) { \
if (el.checkVisibility && !el.checkVisibility({opacityProperty: true, visibilityProperty: true, \
    checkOpacity: true, checkVisibilityCSS: true})) return ''; \
if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') return el.value; \
if (el.tagName === 'SELECT') return Array.from(el.selectedOptions).map(function (o) { return o.label; }).join(' '); \
return el.innerText; }";

/// `success.url_pattern` compiled, within a size bound (matching is linear in the URL).
pub(super) fn url_regex(p: &str) -> anyhow::Result<regex::Regex> {
    regex::RegexBuilder::new(p).size_limit(1 << 20).build().with_context(|| {
        format!("success.url_pattern {p:?} is not a valid regular expression (Rust's `regex` syntax), or is too large")
    })
}
