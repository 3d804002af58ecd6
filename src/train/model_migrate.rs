//! Configs of the old `[model]` form, where a pretrained backbone was the small policy's
//! table with `backbone = "qwen3_vl"` (or `"qwen2_5_vl"`) set beside `path` and the LoRA
//! keys. [`migrate`] rewrites such a table into the new form (`kind = "qwen3_vl"`) with the
//! same meaning, noting each key it moved or dropped. A config a user loads is refused with
//! [`old_form_error`], which prints the rewritten table with the user's own values; a run
//! folder's saved config is migrated on `--resume` with a warning, as an old-form `[algo]`
//! is (see [`super::config::TrainConfig::parse_migrating`] and [`super::algo_migrate`],
//! whose [`Migration`] this returns). docs/migration.md lists the changes.

pub use super::algo_migrate::Migration;
use super::model::kind_keys;
use super::model_kind::ModelKind;
use super::model_table::ModelTable;
use toml::{Table, Value};

/// The old-form keys `model` holds (empty: it is in the new form).
pub fn old_keys(model: &Table) -> Vec<String> {
    ["backbone"].into_iter().filter(|k| model.contains_key(*k)).map(str::to_string).collect()
}

/// Rewrite an old-form `[model]` table into the new form: `backbone` becomes `kind`, and
/// the small policy's keys, which did nothing beside a backbone (`preset` was ignored, the
/// others refused when the policy was built; a run folder's saved config always lists
/// `preset`), are dropped, so the result trains exactly as the old table did.
pub fn migrate(model: &Table) -> Migration {
    let mut t = model.clone();
    let mut notes = Vec::new();
    let Some(backbone) = t.remove("backbone") else { return Migration { table: t, notes } };
    if let Some(kind) = t.insert("kind".into(), backbone.clone()) {
        notes.push(format!("model.kind = {kind} replaced: model.backbone names the kind"));
    }
    notes.push(format!("model.backbone = {backbone} → model.kind = {backbone}"));
    for k in kind_keys(ModelKind::Small) {
        if let Some(v) = t.remove(k) {
            notes.push(format!(
                "model.{k} = {v} dropped: a key of the small policy (kind = \"small\"), which did nothing \
                 beside a backbone"
            ));
        }
    }
    Migration { table: t, notes }
}

/// `[model]` as TOML text: in the order a run folder's config writes it (`kind` first, then
/// the kind's keys, then `init`) when it reads as a `[model]` table, else `kind` first and
/// the rest by name (the parse then says what is wrong with it).
pub fn table_text(model: &Table) -> String {
    let ordered =
        Value::Table(model.clone()).try_into::<ModelTable>().ok().and_then(|m| toml::to_string(&m).ok());
    let body = ordered.unwrap_or_else(|| {
        let mut rest = model.clone();
        let kind = rest.remove("kind").map(|k| format!("kind = {k}\n")).unwrap_or_default();
        format!("{kind}{}", toml::to_string(&rest).unwrap_or_default())
    });
    format!("[model]\n{body}")
}

/// The error for an old-form `[model]`: what changed, and the user's table rewritten.
pub fn old_form_error(model: &Table) -> String {
    let m = migrate(model);
    let notes: String = m.notes.iter().map(|n| format!("\n  {n}")).collect();
    format!(
        "[model] is in the old form (keys {}): a pretrained backbone is now a kind of its own, \
         kind = \"qwen3_vl\" or \"qwen2_5_vl\", and [model] holds only the keys of its kind. What \
         changes:{notes}\n\
         Replace your [model] table with this (same meaning; comments are not carried over; \
         docs/migration.md lists every change):\n\n{}",
        old_keys(model).join(", "),
        table_text(&m.table).trim_end()
    )
}

/// The tables an old-form config's migration notes
/// ([`super::config::TrainConfig::parse_migrating`]) are about, for a message: `[algo]`,
/// `[model]` or `[algo] and [model]`.
pub fn migrated_tables(notes: &[String]) -> &'static str {
    // Every note of [`migrate`] starts with `model.`; the others are [algo]'s.
    let model = notes.iter().any(|n| n.starts_with("model."));
    let algo = notes.iter().any(|n| !n.starts_with("model."));
    match (algo, model) {
        (true, true) => "[algo] and [model]",
        (false, true) => "[model]",
        _ => "[algo]",
    }
}

#[cfg(test)]
#[path = "model_migrate_tests.rs"]
mod tests;
