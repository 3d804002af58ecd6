//! The documented example config (`guirl train --example-config`), whole or for one
//! algorithm.

use super::algo_kind::AlgoKind;

/// A documented example with every key (the values shown are the defaults unless the
/// comment says otherwise).
pub const EXAMPLE_CONFIG: &str = include_str!("example_config.toml");

/// The example for one algorithm (`guirl train --example-config --kind KIND`):
/// [`EXAMPLE_CONFIG`] with `kind` set and that kind's tables (DAPO's: its two techniques)
/// written out instead of commented out; it loads as it stands.
pub fn example_config(kind: AlgoKind) -> String {
    let tables = kind.own_tables();
    let mut out = String::new();
    let mut open = false;
    for line in EXAMPLE_CONFIG.lines() {
        // A commented table runs from its `# [algo.NAME]` line to the first line that is
        // not `# `-commented (a lone `#` or a blank line).
        match line.strip_prefix("# [algo.").and_then(|r| r.split(']').next()) {
            Some(name) => open = tables.contains(&name),
            None if !line.starts_with("# ") => open = false,
            None => {}
        }
        let line = match line.strip_prefix("kind = \"grpo\"") {
            Some(rest) => format!("kind = \"{kind}\"{rest}"),
            None if open => line.strip_prefix("# ").unwrap_or(line).to_string(),
            None => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
