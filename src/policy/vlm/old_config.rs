//! guirl 0.1's small policy read the DOM and its history through per-feature switches
//! (`screen_text`, `numbers`, `row_labels`, `fold_case`, `control_state`, `memory`,
//! `memory_actions`, `previous_frame`); guirl 0.2 declares inputs instead (`pixels`,
//! `previous_frame`, `elements`, `history`). This file says what a table of the old keys
//! (a training config's `[model]`, or a checkpoint's `config.json`) becomes, and whether
//! the new form reads it as the same policy:
//!
//! - `previous_frame = true` is the `previous_frame` input, the same;
//! - `memory = N` with `memory_actions = true` is the `history` input with `memory = N`,
//!   the same (its tables keep their names);
//! - `fold_case = true` is how words are always hashed now; word buckets without it were
//!   hashed with case, which no new policy does;
//! - `memory = N` alone marked the image only; the history now also has action tokens;
//! - `screen_text` put an element's words on the image token under it; the `elements`
//!   input gives each element a token of its own, another network;
//! - `numbers`, `row_labels` and `control_state` were each made for one task
//!   (builtin/counter, builtin/login-settings, builtin/toggle-switches) and have no
//!   equivalent: the element tokens carry every element's words, value, role and state.
//!
//! A checkpoint that the new form reads as the same policy loads; any other is refused,
//! naming the guirl that reads it ([`written_by_0_1`]).
//!
//! Since then a `config.json` records its network's layout as `format` ([`FORMAT`]).
//! guirl 0.2.0's first checkpoints have none: their pointer head keyed on the image tokens
//! alone, so with `elements` the same weights now compute another policy and are refused
//! ([`check_format`]); without `elements` they are the same network.

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

/// The keys of guirl 0.1's small policy that the declared inputs replace.
pub const OLD_KEYS: [&str; 8] = [
    "screen_text",
    "numbers",
    "row_labels",
    "fold_case",
    "control_state",
    "memory_actions",
    "memory",
    "previous_frame",
];

/// The last commit of guirl 0.1 (the per-feature small policy), which reads what it wrote.
pub const LAST_0_1_COMMIT: &str = "087a806ed16e";

/// The small policy's current network layout (`VlmConfig::format`): 2 since the pointer
/// head's keys also read each element token where the element lies.
pub const FORMAT: u32 = 2;

/// The last commit whose small policy with `elements` keyed its pointer on image tokens
/// alone (layout 1, guirl 0.2.0's first checkpoints), which reads what it wrote.
pub const LAST_FORMAT_1_COMMIT: &str = "60e270c95d88";

/// The task-shaped switches of guirl 0.1, each with the task it was made for.
const TASK_SHAPED: [(&str, &str); 3] = [
    ("numbers", "builtin/counter"),
    ("row_labels", "builtin/login-settings"),
    ("control_state", "builtin/toggle-switches"),
];

/// What a table of guirl 0.1's keys becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Upgrade {
    /// The declared inputs, `pixels` first, by name.
    pub inputs: Vec<&'static str>,
    /// The history's length (`memory`), with the `history` input.
    pub memory: Option<usize>,
    /// One line per old key written: what it became, or that it was dropped and why.
    pub notes: Vec<String>,
    /// Why the new form does not read the table as the same policy (empty: it does).
    pub differs: Vec<String>,
}

impl Upgrade {
    /// Whether the new form is the same policy (same network, same weights' names, same
    /// reading of the page).
    pub fn is_same_policy(&self) -> bool {
        self.differs.is_empty()
    }
}

/// The old keys `keys` holds.
pub fn old_keys(keys: &Map<String, Value>) -> Vec<String> {
    OLD_KEYS.into_iter().filter(|k| keys.contains_key(*k)).map(str::to_string).collect()
}

/// What the old keys of `keys` (a small policy's settings; a key left out is off) become;
/// notes name the keys with `prefix` (`model.`).
pub fn upgrade(keys: &Map<String, Value>, prefix: &str) -> Upgrade {
    let on = |k: &str| keys.get(k).and_then(Value::as_bool).unwrap_or(false);
    let size = |k: &str| keys.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
    let (memory, buckets) = (size("memory"), size("word_buckets"));
    let elements = on("screen_text") || TASK_SHAPED.iter().any(|(k, _)| on(k));
    let mut inputs = vec!["pixels"];
    inputs.extend(on("previous_frame").then_some("previous_frame"));
    inputs.extend(elements.then_some("elements"));
    inputs.extend((memory > 0).then_some("history"));
    let (mut notes, mut differs) = (Vec::new(), Vec::new());
    for key in old_keys(keys) {
        let written = &keys[&key];
        let k = format!("{prefix}{key}");
        let off = !on(&key) && size(&key) == 0;
        let note = match key.as_str() {
            "memory_actions" if memory > 0 => continue, // noted with memory
            _ if off => format!("{k} = {written} dropped: it was off"),
            "screen_text" => {
                differs.push("screen_text: the elements' words on the image tokens under them".to_string());
                format!(
                    "{k} = true → \"elements\" in {prefix}inputs: each element is a token of its own (its words, \
                     value, role, state and box) instead of its words on the image token under it"
                )
            }
            "fold_case" => format!("{k} = true dropped: words are always hashed without case now"),
            "previous_frame" => format!("{k} = true → \"previous_frame\" in {prefix}inputs"),
            "memory" if on("memory_actions") => format!(
                "{k} = {memory} and {prefix}memory_actions = true → \"history\" in {prefix}inputs, {k} = {memory}"
            ),
            "memory" => {
                differs.push(format!("memory = {memory} without memory_actions: marks on the image only"));
                format!(
                    "{k} = {memory} → \"history\" in {prefix}inputs, {k} = {memory}: the history now also makes each \
                     remembered action an encoder token (what {prefix}memory_actions added)"
                )
            }
            "memory_actions" => format!("{k} = true dropped: it needed {prefix}memory"),
            _ => {
                let task = TASK_SHAPED.iter().find(|(t, _)| *t == key).map_or("", |(_, task)| task);
                differs.push(format!("{key}: made for {task}"));
                format!(
                    "{k} = true dropped: task-shaped (made for {task}), it has no equivalent; the element tokens \
                     (\"elements\" in {prefix}inputs) carry every element's words, value, role and state"
                )
            }
        };
        notes.push(note);
    }
    if buckets > 0 && !on("fold_case") {
        differs.push(format!("word_buckets = {buckets} without fold_case: words hashed with case"));
        notes.push(format!(
            "{prefix}word_buckets = {buckets} kept: its words are now hashed without case (with {prefix}fold_case \
             off they were hashed with case)"
        ));
    }
    Upgrade { inputs, memory: (memory > 0).then_some(memory), notes, differs }
}

/// The refusal of something guirl 0.1 wrote that the new form does not read as the same
/// policy (`what`: e.g. "this checkpoint's config.json"; `differs`: why).
pub fn written_by_0_1(what: &str, differs: &[String]) -> String {
    format!(
        "{what} was written by guirl 0.1 (the per-feature small policy); this guirl ({}) reads one element \
         encoding and declared inputs instead, and would read it as another policy ({}). Read it with guirl \
         0.1, e.g. git commit {LAST_0_1_COMMIT} (git checkout {LAST_0_1_COMMIT} && cargo build --release); \
         docs/migration.md says what changed",
        env!("CARGO_PKG_VERSION"),
        differs.join("; ")
    )
}

/// A checkpoint's `config.json` (its keys) in the new form: one written by guirl 0.1 (it
/// has no `inputs`) is rewritten when the new form reads it as the same policy, refused
/// otherwise (`what` names it); one of the new form is left as it is.
pub fn upgrade_checkpoint(keys: &mut Map<String, Value>, what: &str) -> Result<()> {
    if keys.contains_key("inputs") {
        return Ok(());
    }
    let up = upgrade(keys, "");
    if !up.is_same_policy() {
        bail!("{}", written_by_0_1(what, &up.differs));
    }
    for k in OLD_KEYS {
        keys.remove(k);
    }
    let inputs = json!({
        "previous_frame": up.inputs.contains(&"previous_frame"),
        "elements": null,
        "history": up.memory,
    });
    keys.insert("inputs".into(), inputs);
    Ok(())
}

/// A config's keys (after [`upgrade_checkpoint`]) with the current `format`: a checkpoint's
/// (`written`) without one that reads `elements` is layout 1 and refused; one of another
/// format was written by a newer guirl and refused; the rest (a hand-written config, or
/// layout 1 without `elements`) is the current layout.
pub fn check_format(keys: &mut Map<String, Value>, what: &str, written: bool) -> Result<()> {
    let reads_elements = keys.get("inputs").and_then(|i| i.get("elements")).is_some_and(|e| !e.is_null());
    match keys.get("format") {
        None if written && reads_elements => bail!(
            "{what} was written by guirl 0.2.0 before its pointer head read the element tokens \
             (layout 1): with the `elements` input this guirl computes another policy from those \
             weights. Read it with guirl at git commit {LAST_FORMAT_1_COMMIT}, or train it again"
        ),
        None => {
            keys.insert("format".into(), FORMAT.into());
        }
        Some(f) if f.as_u64() != Some(u64::from(FORMAT)) => bail!(
            "{what} has format {f}, not this guirl's small-policy layout ({FORMAT}): a newer guirl wrote it"
        ),
        Some(_) => {}
    }
    Ok(())
}
