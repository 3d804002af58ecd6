//! How a config's TOML errors read: the table a bad key is in, `[model]`'s keys by kind,
//! and numbers named as numbers rather than as Rust's types.

/// The error for `text` that TOML or serde refused with `e`.
pub(super) fn parse_error(text: &str, e: toml::de::Error) -> anyhow::Error {
    let table = e.span().and_then(|s| table_at(text, s.start));
    // [model]'s unknown key: the keys of its kind, not of every kind
    let unknown = e.message().strip_prefix("unknown field `").and_then(|m| m.split('`').next());
    if let (Some("model"), Some(key)) = (table.as_deref(), unknown) {
        let doc = toml::from_str::<toml::Table>(text).ok();
        let model = doc.as_ref().and_then(|d| d.get("model")?.as_table());
        return anyhow::anyhow!("{}", super::model::unknown_key_error(key, model));
    }
    // serde names Rust's types; a config's reader knows numbers
    let mut e = e.to_string();
    for (rust, plain) in [("u32", "a whole number"), ("u64", "a whole number"), ("usize", "a whole number")]
        .into_iter()
        .chain([("f64", "a number"), ("f32", "a number")])
    {
        e = e.replace(&format!("expected {rust}"), &format!("expected {plain}"));
    }
    // after serde's list of every name (43 in [algo]), the one that was meant
    if let Some(close) = closest_name(e.trim_end()) {
        e = format!("{}\ndid you mean `{close}`?", e.trim_end());
    }
    match table {
        Some(t) => anyhow::anyhow!("in table [{t}]: {e}"),
        None => anyhow::anyhow!("{e}"),
    }
}

/// In serde's ``unknown field `x`, expected one of `a`, `b` `` (or ``unknown variant``),
/// the expected name closest to `x`, when one is close: Jaro-Winkler above 0.85, as
/// `[model]`'s unknown keys (`super::model::unknown_key_error`) and the task ids are matched.
fn closest_name(message: &str) -> Option<&str> {
    let line = message
        .lines()
        .rev()
        .find(|l| l.starts_with("unknown field `") || l.starts_with("unknown variant `"))?;
    let (given, expected) = line.split_once('`')?.1.split_once("`, expected ")?;
    let names = expected.split('`').skip(1).step_by(2);
    let (score, best) =
        names.map(|n| (strsim::jaro_winkler(given, n), n)).max_by(|a, b| a.0.total_cmp(&b.0))?;
    (score > 0.85).then_some(best)
}

/// The dotted name of the TOML table that the key at byte `pos` of `text` belongs to
/// (`None` at top level): the last `[header]` line above it, or, for a key in a header
/// line itself, that header's parent.
fn table_at(text: &str, pos: usize) -> Option<String> {
    let before = text.get(..pos)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    let header = |l: &str| -> Option<String> {
        let l = l.split('#').next()?.trim();
        let name = l.trim_start_matches('[').trim_end_matches(']').trim();
        (!name.is_empty()).then(|| name.to_string())
    };
    if line.starts_with('[') {
        return header(line)?.rsplit_once('.').map(|(parent, _)| parent.trim().to_string());
    }
    text[..line_start].lines().rev().map(str::trim).find(|l| l.starts_with('[')).and_then(header)
}
