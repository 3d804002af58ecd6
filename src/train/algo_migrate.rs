//! Configs of the old `[algo]` form, where every kind's own keys and DAPO's techniques sat
//! flat in `[algo]` (`gae_lambda`, `gigpo_omega`, `gspo_level`, `dynamic_sampling = true`,
//! `overlong_window`, `scale_std`, ...). [`migrate`] rewrites such a table into the new
//! form with the same meaning, noting each key it moved or dropped. A config a user loads
//! is refused with [`old_form_error`], which prints the rewritten table with the user's
//! own values; a run folder's saved config is migrated on `--resume` with a warning
//! (see [`super::config::TrainConfig::parse_migrating`]). docs/migration.md lists the
//! changes.

use toml::{Table, Value};

/// Each kind's old flat keys: (the kind's sub-table, [(old key, its name in the table)]).
const MOVED: [(&str, &[(&str, &str)]); 3] = [
    (
        "ppo",
        &[
            ("gae_lambda", "gae_lambda"),
            ("value_lr", "value_lr"),
            ("value_clip", "value_clip"),
            ("critic_warmup", "critic_warmup"),
            ("value_epochs", "value_epochs"),
            ("normalize_advantages", "normalize_advantages"),
        ],
    ),
    ("gigpo", &[("gigpo_omega", "omega"), ("gigpo_step_std", "step_std")]),
    ("gspo", &[("gspo_level", "level")]),
];

/// DAPO's technique keys of the old form (besides `dynamic_sampling` and
/// `overlong_penalty` written as booleans, which are tables now).
const TECHNIQUE_KEYS: [&str; 4] =
    ["drop_all_equal_groups", "dynamic_sampling_max_extra", "overlong_window", "overlong_weight"];

/// The old-form keys `algo` holds (empty: it is in the new form).
pub fn old_keys(algo: &Table) -> Vec<String> {
    let flat = MOVED.iter().flat_map(|(_, keys)| keys.iter().map(|(old, _)| *old));
    let mut out: Vec<String> = flat
        .chain(TECHNIQUE_KEYS)
        .chain(["scale_std"])
        .filter(|k| algo.contains_key(*k))
        .map(str::to_string)
        .collect();
    for k in ["dynamic_sampling", "overlong_penalty"] {
        if algo.get(k).is_some_and(Value::is_bool) {
            out.push(k.to_string());
        }
    }
    out
}

/// An old-form table rewritten: the new table and one note per key moved or dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// The `[algo]` table in the new form, with the same meaning.
    pub table: Table,
    /// What moved where, and what was dropped and why.
    pub notes: Vec<String>,
}

/// Rewrite an old-form `[algo]` table into the new form. Keys that meant nothing under
/// the table's kind (the old form accepted, for instance, `gigpo_omega` under GRPO and
/// ignored it; a run folder's saved config lists every kind's keys) are dropped, so the
/// result trains exactly as the old table did.
pub fn migrate(algo: &Table) -> Migration {
    let mut t = algo.clone();
    let mut notes = Vec::new();
    let kind = t.get("kind").and_then(Value::as_str).unwrap_or("grpo").to_string();
    if let Some(v) = t.remove("scale_std") {
        if v.as_bool() == Some(false) && !t.contains_key("adv_std") {
            t.insert("adv_std".into(), "none".into());
            notes.push("algo.scale_std = false → algo.adv_std = \"none\" (its newer spelling)".into());
        } else {
            notes.push(format!("algo.scale_std = {v} dropped (adv_std, or the default, says the same)"));
        }
    }
    for (table, keys) in MOVED {
        for (old, new) in keys {
            let Some(v) = t.remove(*old) else { continue };
            if kind == table {
                sub_table(&mut t, table).insert(new.to_string(), v.clone());
                notes.push(format!("algo.{old} = {v} → [algo.{table}] {new} = {v}"));
            } else {
                notes.push(format!(
                    "algo.{old} = {v} dropped: it is {table}'s key (now [algo.{table}] {new}) and did \
                     nothing under kind = \"{kind}\""
                ));
            }
        }
    }
    techniques(&mut t, &kind, &mut notes);
    Migration { table: t, notes }
}

/// DAPO's techniques: the old keys' resolved meaning, written as the new tables.
fn techniques(t: &mut Table, kind: &str, notes: &mut Vec<String>) {
    let take_bool = |t: &mut Table, k: &str| match t.get(k) {
        Some(Value::Boolean(b)) => {
            let b = *b;
            t.remove(k);
            Some(b)
        }
        _ => None,
    };
    let sampling = take_bool(t, "dynamic_sampling");
    let drop = take_bool(t, "drop_all_equal_groups");
    let max_extra = t.remove("dynamic_sampling_max_extra");
    let penalty = take_bool(t, "overlong_penalty");
    let window = t.remove("overlong_window");
    let weight = t.remove("overlong_weight");
    let dapo = kind == "dapo";
    // The old defaults: both on for dapo; drop_all_equal_groups alone is dynamic sampling
    // with no extra collection.
    let filter = drop.unwrap_or(dapo || sampling == Some(true));
    let refill = sampling.unwrap_or(dapo && drop != Some(false));
    let penalized = penalty.unwrap_or(dapo);
    if dapo && !(filter && penalized) {
        // `kind = "dapo"` always has both now; DAPO without one is GRPO with DAPO's clip.
        t.insert("kind".into(), "grpo".into());
        if !t.contains_key("clip_high") {
            t.insert("clip_high".into(), Value::Float(0.28));
        }
        notes.push(
            "algo.kind = \"dapo\" with dynamic sampling or the overlong penalty off → kind = \"grpo\" \
             with DAPO's clip_high = 0.28 (kind = \"dapo\" now always has both)"
                .into(),
        );
    }
    let now_dapo = t.get("kind").and_then(Value::as_str) == Some("dapo");
    let ds_written = sampling.is_some() || drop.is_some() || max_extra.is_some();
    if filter {
        let n = if refill { max_extra.unwrap_or(Value::Integer(3)) } else { Value::Integer(0) };
        if ds_written || !now_dapo {
            sub_table(t, "dynamic_sampling").insert("max_extra".into(), n.clone());
            notes.push(format!(
                "algo.dynamic_sampling / drop_all_equal_groups / dynamic_sampling_max_extra → \
                 [algo.dynamic_sampling] max_extra = {n}"
            ));
        }
    } else if ds_written {
        notes.push(
            "algo.dynamic_sampling / drop_all_equal_groups / dynamic_sampling_max_extra dropped: off".into(),
        );
        if sampling == Some(true) {
            notes.push(
                "(dynamic_sampling = true with drop_all_equal_groups = false was refused before)".into(),
            );
        }
    }
    let ol_written = penalty.is_some() || window.is_some() || weight.is_some();
    if penalized {
        if ol_written || !now_dapo {
            let table = sub_table(t, "overlong_penalty");
            if let Some(w) = window {
                table.insert("window".into(), w);
            }
            table.insert("weight".into(), weight.unwrap_or(Value::Float(1.0)));
            notes.push(
                "algo.overlong_penalty / overlong_window / overlong_weight → [algo.overlong_penalty] \
                 window, weight"
                    .into(),
            );
        }
    } else if ol_written {
        notes.push("algo.overlong_penalty / overlong_window / overlong_weight dropped: off".into());
    }
}

fn sub_table<'a>(t: &'a mut Table, name: &str) -> &'a mut Table {
    let v = t.entry(name.to_string()).or_insert_with(|| Value::Table(Table::new()));
    if !v.is_table() {
        *v = Value::Table(Table::new());
    }
    v.as_table_mut().expect("made a table above")
}

/// `[algo]` (and its sub-tables) as TOML text, `kind` first.
pub fn table_text(algo: &Table) -> String {
    let mut rest = algo.clone();
    let kind = rest.remove("kind");
    let mut doc = Table::new();
    doc.insert("algo".into(), Value::Table(rest));
    let text = toml::to_string(&doc).unwrap_or_default();
    // TOML leaves the header out of a table that holds only sub-tables.
    let body = text.strip_prefix("[algo]\n").unwrap_or(&text);
    let kind = kind.map(|k| format!("kind = {k}\n")).unwrap_or_default();
    format!("[algo]\n{kind}{body}")
}

/// The error for an old-form `[algo]`: what changed, and the user's table rewritten.
pub fn old_form_error(algo: &Table) -> String {
    let m = migrate(algo);
    let notes: String = m.notes.iter().map(|n| format!("\n  {n}")).collect();
    format!(
        "[algo] is in the old form (keys {}): each kind's own keys now sit in its sub-table \
         ([algo.ppo], [algo.gigpo], [algo.gspo]) and DAPO's techniques are the tables \
         [algo.dynamic_sampling] and [algo.overlong_penalty]. What changes:{notes}\n\
         Replace your [algo] table with this (same meaning; comments are not carried over; \
         docs/migration.md lists every change):\n\n{}",
        old_keys(algo).join(", "),
        table_text(&m.table).trim_end()
    )
}

#[cfg(test)]
#[path = "algo_migrate_tests.rs"]
mod tests;
