//! Configs of the old `[model]` forms:
//!
//! - a pretrained backbone as the small policy's table with `backbone = "qwen3_vl"` (or
//!   `"qwen2_5_vl"`) set beside `path` and the LoRA keys;
//! - guirl 0.1's small policy with its per-feature switches (`screen_text`, `numbers`,
//!   `row_labels`, `fold_case`, `control_state`, `memory` without `inputs`,
//!   `memory_actions`, `previous_frame`), now declared inputs (see
//!   [`crate::policy::vlm::old_config`]).
//!
//! [`migrate`] rewrites such a table into the new form, noting each key it moved or
//! dropped. A config a user loads is refused with [`old_form_error`], which prints the
//! rewritten table with the user's own values; a run folder's saved config is migrated on
//! `--resume` with a warning, as an old-form `[algo]` is (see
//! [`super::config::TrainConfig::parse_migrating`] and [`super::algo_migrate`], whose
//! [`Migration`] this returns), unless it is a small policy that the new form reads as
//! another ([`resume_refusal`]). docs/migration.md lists the changes.

pub use super::algo_migrate::Migration;
use super::model::kind_keys;
use super::model_kind::ModelKind;
use super::model_table::ModelTable;
use crate::policy::vlm::old_config::{self, OLD_KEYS};
use crate::policy::vlm::Input;
use toml::{Table, Value};

/// The old-form keys `model` holds (empty: it is in the new form).
pub fn old_keys(model: &Table) -> Vec<String> {
    match model.contains_key("backbone") {
        true => vec!["backbone".to_string()],
        false => switches(model),
    }
}

/// guirl 0.1's switches in a small policy's `model` (`memory` is the new form's too when
/// `inputs` is written).
fn switches(model: &Table) -> Vec<String> {
    if model.get("kind").is_some_and(|k| k.as_str() != Some(ModelKind::Small.name())) {
        return Vec::new();
    }
    let new_memory = model.contains_key("inputs");
    OLD_KEYS
        .iter()
        .filter(|k| model.contains_key(**k) && !(new_memory && **k == "memory"))
        .map(|k| k.to_string())
        .collect()
}

/// What guirl 0.1's switches in `model` become (`None` without them).
fn upgrade(model: &Table) -> Option<old_config::Upgrade> {
    let old = switches(model);
    if old.is_empty() {
        return None;
    }
    let mut keys: serde_json::Map<String, serde_json::Value> =
        serde_json::to_value(model).ok()?.as_object()?.clone();
    keys.retain(|k, _| !OLD_KEYS.contains(&k.as_str()) || old.contains(k) || k == "word_buckets");
    Some(old_config::upgrade(&keys, "model."))
}

/// Rewrite an old-form `[model]` table into the new form. `backbone` becomes `kind`, and
/// the small policy's keys, which did nothing beside a backbone (`preset` was ignored, the
/// others refused when the policy was built; a run folder's saved config always lists
/// `preset`), are dropped, so the result trains exactly as the old table did. guirl 0.1's
/// switches become `inputs` (and `memory`), as [`old_config::upgrade`] says.
pub fn migrate(model: &Table) -> Migration {
    let mut t = model.clone();
    let mut notes = Vec::new();
    if let Some(up) = upgrade(model) {
        for k in switches(model) {
            t.remove(&k);
        }
        let written: Vec<String> = match t.get("inputs").and_then(Value::as_array) {
            Some(list) => list.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
            None => Vec::new(),
        };
        let inputs: Vec<Value> = Input::ALL
            .iter()
            .map(|i| i.name())
            .filter(|n| up.inputs.contains(n) || written.iter().any(|w| w == n))
            .map(|n| Value::String(n.to_string()))
            .collect();
        if inputs.len() > 1 || t.contains_key("inputs") {
            t.insert("inputs".into(), Value::Array(inputs));
        }
        if let Some(m) = up.memory {
            t.insert("memory".into(), Value::Integer(m as i64));
        }
        return Migration { table: t, notes: up.notes };
    }
    let Some(backbone) = t.remove("backbone") else { return Migration { table: t, notes } };
    if let Some(kind) = t.insert("kind".into(), backbone.clone()) {
        notes.push(format!("model.kind = {kind} replaced: model.backbone names the kind"));
    }
    notes.push(format!("model.backbone = {backbone} → model.kind = {backbone}"));
    for k in kind_keys(ModelKind::Small).into_iter().chain(OLD_KEYS) {
        if let Some(v) = t.remove(k) {
            notes.push(format!(
                "model.{k} = {v} dropped: a key of the small policy (kind = \"small\"), which did nothing \
                 beside a backbone"
            ));
        }
    }
    Migration { table: t, notes }
}

/// Why a run folder's `model` cannot be resumed in the new form: it holds guirl 0.1's
/// switches and the new form reads them as another policy (its checkpoints would not
/// load, or would read the page otherwise). `None` when it can.
pub fn resume_refusal(model: &Table) -> Option<String> {
    let up = upgrade(model)?;
    (!up.is_same_policy()).then(|| old_config::written_by_0_1("the run's [model]", &up.differs))
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
    let keys = old_keys(model).join(", ");
    let table = table_text(&m.table);
    let Some(up) = upgrade(model) else {
        return format!(
            "[model] is in the old form (keys {keys}): a pretrained backbone is now a kind of its own, \
             kind = \"qwen3_vl\" or \"qwen2_5_vl\", and [model] holds only the keys of its kind. What \
             changes:{notes}\n\
             Replace your [model] table with this (same meaning; comments are not carried over; \
             docs/migration.md lists every change):\n\n{}",
            table.trim_end()
        );
    };
    let shaped = ["numbers", "row_labels", "control_state"];
    let task_shaped = match model.keys().any(|k| shaped.contains(&k.as_str())) {
        true => {
            "The task-shaped switches (numbers, row_labels, control_state: each made for one task) have no \
                 equivalent: the element tokens are the same for every task.\n"
        }
        false => "",
    };
    let meaning = match up.is_same_policy() {
        true => "the same policy".to_string(),
        false => format!(
            "another policy than the old table's: retrain it, or train the old one with guirl 0.1, git commit {}",
            old_config::LAST_0_1_COMMIT
        ),
    };
    format!(
        "[model] is in the old form (keys {keys}): guirl 0.2 replaced the small policy's per-feature switches \
         with declared inputs, [model] inputs = [\"pixels\", \"previous_frame\", \"elements\", \"history\"] (any of \
         the last three; \"elements\" makes each visible element one token of its words, value, role, state \
         and box; \"history\" remembers the last `memory` actions). What changes:{notes}\n{task_shaped}\
         Replace your [model] table with this ({meaning}; comments are not carried over; docs/migration.md \
         lists every change):\n\n{}",
        table.trim_end()
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
