//! The documented example config (`guirl train --example-config`), whole, for one
//! algorithm, or for one policy kind.

use super::algo_kind::AlgoKind;
use super::model_kind::ModelKind;

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

/// `example` (the whole example or one algorithm's) for one policy kind (`guirl train
/// --example-config --model-kind KIND`): `[model] kind` set, and for a Qwen-VL kind its keys
/// written out (those shown `# # ` stay commented: their default is to be left out) and the
/// small policy's commented out; it loads as it stands.
pub fn with_model_kind(example: &str, kind: ModelKind) -> String {
    // The blocks of `[model]` open at `# -- kind = "NAME"` and run to a lone `#` or a blank line.
    #[derive(PartialEq)]
    enum Block {
        None,
        Small,
        Qwen,
    }
    let (mut in_model, mut block) = (false, Block::None);
    let is_key = |l: &str| {
        l.split_once(" = ")
            .is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    };
    let mut out = String::new();
    for line in example.lines() {
        if line.starts_with('[') {
            in_model = line.starts_with("[model]");
        }
        if line.trim().is_empty() || line == "#" {
            block = Block::None;
        } else if let Some(rest) = line.strip_prefix("# -- kind = \"") {
            block = if rest.starts_with("small") { Block::Small } else { Block::Qwen };
        }
        let qwen = kind.is_qwen() && in_model;
        let line = match line.strip_prefix("kind = \"small\"") {
            Some(rest) if in_model => {
                // The comment stays in its column.
                let extra = kind.name().len().saturating_sub("small".len());
                let pad = rest.len() - rest.trim_start().len();
                format!(
                    "kind = \"{kind}\"{}{}",
                    " ".repeat(pad.saturating_sub(extra).max(1)),
                    rest.trim_start()
                )
            }
            _ if qwen && block == Block::Small && is_key(line) => format!("# {line}"),
            // `# key` is written out, `# # key` (no default) keeps one `# `
            _ if qwen
                && block == Block::Qwen
                && line.strip_prefix("# ").is_some_and(|l| is_key(l) || l.starts_with("# ")) =>
            {
                let line = &line[2..];
                match kind {
                    ModelKind::Qwen25Vl => {
                        line.replace("hf:Qwen/Qwen3-VL-2B-Instruct", "hf:Qwen/Qwen2.5-VL-3B-Instruct")
                    }
                    _ => line.to_string(),
                }
            }
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
