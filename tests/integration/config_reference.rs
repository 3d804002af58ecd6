//! docs/reference/config.md against the training config's code. The keys the code accepts
//! come from the serde derives of `TrainConfig` and the structs below it, traced by
//! serde-reflection (every field with its type); the strings an enum key accepts come from
//! serde's own "expected one of" message. The test fails when:
//!
//! - a key the code accepts is not on the page, or a key on the page is rejected;
//! - a key's type on the page is not the code's (`integer`, `float`, `bool`, `string` or
//!   `path`, `array of strings`, `table of integers`, `one of `a`, `b``, every value listed);
//! - a default written as a TOML value (one code span) is not the code's default, that is,
//!   writing it into a config changes the parsed config; a default in words belongs to a
//!   key that has no fixed value when left out (resolved by kind, or off);
//! - `required` is written for a key the config can leave out, or not for one it cannot.
//!
//! `[model]`'s keys depend on its `kind`: a section headed `` `[model]` with `kind = "K"` ``
//! holds K's keys, checked against a config of that kind.
//!
//! Two more checks keep the other descriptions of the keys whole: every setting of a
//! pretrained backbone (`QwenPolicySettings`) must be a `[model]` key, and the commented
//! example config (`guirl train --example-config`) must show every key. Every shipped recipe
//! in configs/ is parsed and validated by the library's own test
//! (`train::config::tests::every_shipped_recipe_parses_and_validates`).

use guirl::train::config::TrainConfig;
use serde_reflection::{ContainerFormat, Format, Registry, Samples, Tracer, TracerConfig};
use std::collections::BTreeMap;

const PAGE: &str = "docs/reference/config.md";

/// The smallest config that parses (the required keys), plus an empty `[sft]` so that its
/// defaults show.
const MINIMAL: &str = "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"t\"]\n[sft]\n";

/// A key as the code defines it.
#[derive(Debug)]
struct CodeKey {
    /// The table (`""` for the top level).
    section: String,
    /// Its name in the table, dotted for a field of a nested struct (`train_seeds.start`).
    key: String,
    format: Format,
}

/// A row of the page.
#[derive(Debug)]
struct PageKey {
    line: usize,
    section: String,
    key: String,
    /// The `[model] kind` its section is headed with.
    kind: Option<String>,
    ty: String,
    default: String,
    meaning: String,
}

/// The tracer's settings: the text it reads for a string is one that every key read as a
/// string accepts (`"auto"`: a word of `decode_window`, which refuses `""`; any text for
/// the others).
fn tracer_config() -> TracerConfig {
    TracerConfig::default().default_borrowed_str_value("auto").default_string_value("auto".into())
}

/// The named containers below `TrainConfig`, each struct with its fields. One pass is
/// enough for the structs; it sees only one variant of each enum (serde-reflection explores
/// the others only for an enum traced on its own), so the strings an enum key accepts are
/// read from serde's message instead ([`variants`]).
///
/// `[algo]` is read through `AlgoTable` and converted with `TryFrom`, which refuses a
/// sub-table of another kind; tracing fills every `Option` (all kinds' tables at once), so
/// `AlgoTable` is traced on its own first (its formats), and `TrainConfig` then reads a
/// recorded valid sample of it in its place. `[model]` likewise, through `ModelTable`
/// (whose `TryFrom` refuses a key of another kind).
fn registry() -> Registry {
    use guirl::train::algo_table::AlgoTable;
    use guirl::train::model_table::ModelTable;
    let mut samples = Samples::new();
    let mut tracer = Tracer::new(tracer_config().record_samples_for_structs(true));
    tracer.trace_type_once::<AlgoTable>(&samples).expect("tracing AlgoTable");
    tracer.trace_value(&mut samples, &AlgoTable::default()).expect("recording an AlgoTable");
    tracer.trace_type_once::<ModelTable>(&samples).expect("tracing ModelTable");
    tracer.trace_value(&mut samples, &ModelTable::default()).expect("recording a ModelTable");
    tracer.trace_type_once::<TrainConfig>(&samples).expect("tracing TrainConfig");
    tracer.registry_unchecked()
}

/// The sub-tables of `[algo]` that belong to one kind (written only with it), and DAPO's
/// technique tables (present for DAPO whether written or not): their rows are checked
/// against a config of that kind.
fn kind_of_table(section: &str, key: &str) -> Option<&'static str> {
    if section != "algo" {
        return None;
    }
    match key.split('.').next() {
        Some("ppo") if key.contains('.') => Some("ppo"),
        Some("gigpo") if key.contains('.') => Some("gigpo"),
        Some("gspo") if key.contains('.') => Some("gspo"),
        Some("dynamic_sampling" | "overlong_penalty") if key.contains('.') => Some("dapo"),
        _ => None,
    }
}

/// The parsed defaults and their serialized table, for a row of `section` / `key` (of
/// `[model] kind = model_kind` when set; a Qwen-VL kind's needs its `path`).
fn defaults_for(section: &str, key: &str, model_kind: Option<&str>) -> (TrainConfig, toml::Table) {
    let text = match (kind_of_table(section, key), model_kind) {
        (Some(kind), _) => format!("{MINIMAL}[algo]\nkind = \"{kind}\"\n"),
        (None, Some(kind)) if kind != "small" => {
            format!("{MINIMAL}[model]\nkind = \"{kind}\"\npath = \"p\"\n")
        }
        (None, _) => MINIMAL.to_string(),
    };
    let defaults = TrainConfig::parse(&text).expect("the minimal config parses");
    let toml::Value::Table(base) = toml::Value::try_from(&defaults).expect("serializes") else {
        panic!("a config serializes to a table")
    };
    assert_eq!(parse(&base).as_ref(), Ok(&defaults), "the serialized defaults read back the same");
    (defaults, base)
}

fn strip_option(f: &Format) -> &Format {
    match f {
        Format::Option(inner) => strip_option(inner),
        f => f,
    }
}

fn struct_fields<'a>(reg: &'a Registry, f: &Format) -> Option<&'a [serde_reflection::Named<Format>]> {
    match strip_option(f) {
        Format::TypeName(name) => match reg.get(name) {
            Some(ContainerFormat::Struct(fields)) => Some(fields),
            _ => None,
        },
        _ => None,
    }
}

fn code_keys(reg: &Registry) -> Vec<CodeKey> {
    fn flatten(reg: &Registry, section: &str, prefix: &str, f: &Format, out: &mut Vec<CodeKey>) {
        match struct_fields(reg, f) {
            Some(fields) => {
                for field in fields {
                    flatten(reg, section, &format!("{prefix}{}.", field.name), &field.value, out);
                }
            }
            None => out.push(CodeKey {
                section: section.into(),
                key: prefix.trim_end_matches('.').into(),
                format: f.clone(),
            }),
        }
    }
    let top = reg.get("TrainConfig").expect("TrainConfig traced");
    let ContainerFormat::Struct(fields) = top else { panic!("TrainConfig is not a struct: {top:?}") };
    let mut out = Vec::new();
    for field in fields {
        if struct_fields(reg, &field.value).is_some() {
            flatten(reg, &field.name, "", &field.value, &mut out);
        } else {
            flatten(reg, "", &format!("{}.", field.name), &field.value, &mut out);
        }
    }
    out
}

/// `table` with `section` / dotted `key` looked up, set or removed.
fn slot<'a>(table: &'a mut toml::Table, section: &str, key: &str) -> (&'a mut toml::Table, String) {
    let mut path: Vec<&str> = if section.is_empty() { vec![] } else { vec![section] };
    path.extend(key.split('.'));
    let leaf = path.pop().unwrap().to_string();
    let mut t = table;
    for p in path {
        t = t
            .entry(p)
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .expect("a table on the way to a key");
    }
    (t, leaf)
}

fn parse(table: &toml::Table) -> Result<TrainConfig, String> {
    toml::Value::Table(table.clone()).try_into::<TrainConfig>().map_err(|e| e.to_string())
}

/// The values an enum key (or each item of an array of an enum: `array`) accepts, from
/// serde's error for a value it does not.
fn variants(base: &toml::Table, section: &str, key: &str, array: bool) -> Vec<String> {
    let mut t = base.clone();
    let (table, leaf) = slot(&mut t, section, key);
    let wrong = toml::Value::String("not-a-variant".into());
    table.insert(leaf, if array { toml::Value::Array(vec![wrong]) } else { wrong });
    let err = parse(&t).expect_err("an enum key took a made-up value");
    let expected = err.split("expected").nth(1).unwrap_or_else(|| panic!("no variants in {err:?}"));
    let expected = expected.lines().next().unwrap_or("");
    expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Whether a key's values are arrays.
fn is_seq(f: &Format) -> bool {
    matches!(strip_option(f), Format::Seq(_))
}

/// The page's word for a type.
fn type_word(f: &Format, variants: impl FnOnce() -> Vec<String>) -> String {
    use Format::*;
    match strip_option(f) {
        U8 | U16 | U32 | U64 | U128 | I8 | I16 | I32 | I64 | I128 => "integer".into(),
        F32 | F64 => "float".into(),
        Bool => "bool".into(),
        Str => "string".into(),
        Seq(inner) if matches!(**inner, Str) => "array of strings".into(),
        Seq(inner) if matches!(**inner, TypeName(_)) => {
            let v: Vec<String> = variants().iter().map(|v| format!("`{v}`")).collect();
            format!("array of {}", v.join(", "))
        }
        Map { key, value } if matches!(**key, Str) && type_word(value, Vec::new) == "integer" => {
            "table of integers".into()
        }
        TypeName(_) => {
            let v: Vec<String> = variants().iter().map(|v| format!("`{v}`")).collect();
            format!("one of {}", v.join(", "))
        }
        other => format!("(no word for {other:?}: extend type_word)"),
    }
}

fn page_keys(text: &str, problems: &mut Vec<String>) -> Vec<PageKey> {
    let mut section: Option<String> = None;
    let mut kind: Option<String> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some(h) = line.strip_prefix("## ") {
            // `[model]` with `kind = "small"`: the table, and the kind its keys are of
            let (name, rest) = h.trim().split_once("]`").unwrap_or((h.trim(), ""));
            section = match name {
                "Top level" => Some(String::new()),
                name => name.strip_prefix("`[").map(str::to_string),
            };
            kind = rest.split_once("kind = \"").and_then(|(_, k)| k.split('"').next()).map(str::to_string);
            continue;
        }
        // A sub-table's section (`[algo.ppo]`): its keys are the table's dotted keys.
        let (table, prefix) = match section.as_deref().and_then(|s| s.split_once('.')) {
            Some((table, sub)) => (Some(table.to_string()), format!("{sub}.")),
            None => (section.clone(), String::new()),
        };
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").map(str::trim).collect();
        let Some(section) = &table else {
            problems.push(format!("{PAGE}:{n}: a key row outside a `## `[table]`` section"));
            continue;
        };
        let [key, ty, default, meaning] = cells[..] else {
            problems.push(format!(
                "{PAGE}:{n}: expected 4 cells (key | type | default | meaning), got {}; a `|` inside a cell splits it",
                cells.len()
            ));
            continue;
        };
        let key = key.trim_matches('`');
        out.push(PageKey {
            line: n,
            section: section.clone(),
            key: format!("{prefix}{key}"),
            kind: kind.clone(),
            ty: ty.into(),
            default: default.into(),
            meaning: meaning.into(),
        });
    }
    out
}

fn shown(section: &str, key: &str) -> String {
    if section.is_empty() {
        format!("`{key}` (top level)")
    } else {
        format!("`[{section}] {key}`")
    }
}

/// Every disagreement between a page's text and the code.
fn problems(page: &str) -> Vec<String> {
    let reg = registry();
    let code = code_keys(&reg);

    let mut problems = Vec::new();
    let rows = page_keys(page, &mut problems);
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in &rows {
        if let Some(first) = seen.insert((r.section.clone(), r.key.clone()), r.line) {
            problems.push(format!(
                "{PAGE}:{}: {} is listed twice (first on line {first})",
                r.line,
                shown(&r.section, &r.key)
            ));
        }
    }
    for c in &code {
        if !rows.iter().any(|r| r.section == c.section && r.key == c.key) {
            let (_, base) = defaults_for(&c.section, &c.key, None);
            let ty = type_word(&c.format, || variants(&base, &c.section, &c.key, is_seq(&c.format)));
            problems.push(format!(
                "{} ({ty}) is accepted by the config but missing from {PAGE}: add a row",
                shown(&c.section, &c.key)
            ));
        }
    }
    for r in &rows {
        let at = format!("{PAGE}:{}: {}", r.line, shown(&r.section, &r.key));
        let Some(c) = code.iter().find(|c| c.section == r.section && c.key == r.key) else {
            problems.push(format!(
                "{at} is not a key of the config (it would be rejected): remove or rename the row"
            ));
            continue;
        };
        let (defaults, base) = defaults_for(&r.section, &r.key, r.kind.as_deref());
        let ty = type_word(&c.format, || variants(&base, &c.section, &c.key, is_seq(&c.format)));
        if r.ty != ty && !(ty == "string" && r.ty == "path") {
            problems.push(format!("{at}: type `{}` on the page, the code's is `{ty}`", r.ty));
        }
        if r.meaning.is_empty() {
            problems.push(format!("{at}: no meaning given"));
        }
        // Leave it out: parses unless required. A field of an inline table goes with it.
        let mut without = base.clone();
        let (table, leaf) = slot(&mut without, &r.section, r.key.split('.').next().unwrap());
        table.remove(&leaf);
        match (r.default == "required", parse(&without)) {
            (true, Ok(_)) => problems.push(format!("{at}: marked required, but a config without it parses")),
            (false, Err(e)) => {
                problems.push(format!("{at}: a config without it fails ({e}): write `required`"))
            }
            _ => {}
        }
        if r.default == "required" {
            continue;
        }
        // A field of an inline table left out on its own, its siblings written: a default the
        // page gives as a value must be the code's for the field alone too
        // (`train_seeds = { start = 5 }`).
        let has_literal = r.default.starts_with('`') && r.default.ends_with('`');
        if r.key.contains('.') && has_literal {
            let mut alone = base.clone();
            let (table, leaf) = slot(&mut alone, &r.section, &r.key);
            table.remove(&leaf);
            if let Err(e) = parse(&alone) {
                problems.push(format!(
                    "{at}: a config that writes its table without this field fails ({e}): \
                     give the field a default in the code, or mark it required"
                ));
            }
        }
        let mut t = base.clone();
        let (table, leaf) = slot(&mut t, &r.section, &r.key);
        let code_default = table.get(&leaf).cloned();
        let literal =
            r.default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).filter(|d| !d.contains('`'));
        match literal {
            Some(lit) => match toml::from_str::<toml::Table>(&format!("v = {lit}")) {
                Err(_) => problems.push(format!(
                    "{at}: default `{lit}` is not a TOML value (write words without a code span)"
                )),
                Ok(mut v) => {
                    table.insert(leaf, v.remove("v").unwrap());
                    match parse(&t) {
                        Ok(c) if c == defaults => {}
                        Ok(_) | Err(_) => problems.push(format!(
                            "{at}: default `{lit}` on the page, but the code's is {}",
                            code_default
                                .map_or("none (left out, it is resolved or off)".into(), |v| format!(
                                    "`{v}`"
                                ))
                        )),
                    }
                }
            },
            None => {
                if let Some(v) = code_default {
                    problems.push(format!(
                        "{at}: the code's default is `{v}`: write it as a code span, not {:?}",
                        r.default
                    ));
                }
            }
        }
    }
    problems
}

fn page() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE)).unwrap()
}

#[test]
fn the_config_page_matches_the_code() {
    let problems = problems(&page());
    assert!(problems.is_empty(), "{} problem(s) with {PAGE}:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn every_code_key_is_found_and_typed() {
    let keys = code_keys(&registry());
    let has = |s: &str, k: &str| keys.iter().any(|c| c.section == s && c.key == k);
    assert!(has("", "device") && has("run", "name") && has("algo", "kind") && has("sft", "start_epoch"));
    assert!(has("tasks", "train_seeds.start") && has("tasks", "eval_seeds.count"));
    assert!(keys.len() > 90, "only {} keys traced", keys.len());
    let defaults = TrainConfig::parse(MINIMAL).unwrap();
    let toml::Value::Table(base) = toml::Value::try_from(&defaults).unwrap() else { unreachable!() };
    assert_eq!(variants(&base, "algo", "gspo.level", false), ["action", "trajectory"]);
    assert!(
        has("algo", "ppo.gae_lambda")
            && has("algo", "gigpo.omega")
            && has("algo", "dynamic_sampling.max_extra")
    );
    assert_eq!(variants(&base, "algo", "loss_agg", false).len(), 4);
    assert!(
        has("model", "kind") && has("model", "preset") && has("model", "lora_rank") && has("model", "init")
    );
    assert_eq!(variants(&base, "model", "kind", false), ["small", "qwen3_vl", "qwen2_5_vl"]);
}

#[test]
fn the_check_catches_a_stale_page() {
    let page = page();
    let drifted = page
        .replace("| `envs` | integer | `4` | Browsers in parallel |\n", "")
        .replace("| `minibatch` | integer | `16` | Samples (steps)", "| `minibatch` | integer | `32` | Samples (steps)")
        .replace("| `lr` | float | `1e-4` | Peak", "| `lr` | integer | `1e-4` | Peak")
        .replace("| `seed` | integer | `0` |", "| `seed` | integer | required |")
        .replace("| `kind` | one of `grpo`, `dr_grpo`, ", "| `kind` | one of `grpo`, ")
        .replace("| `dir` | path | `\"runs\"` | Parent folder of run folders |", "| `dir` | path | `\"runs\"` | Parent folder of run folders |\n| `colour` | string | none | Made up |")
        .replace("| `clip_low` | float | by kind: gspo 3e-4, else 0.2 |", "| `clip_low` | float | `0.2` |");
    assert_ne!(drifted, page);
    let found = problems(&drifted);
    for expected in [
        "`[rollout] envs` (integer) is accepted by the config but missing",
        "`[algo] minibatch`: default `32` on the page, but the code's is `16`",
        "`[algo] lr`: type `integer` on the page, the code's is `float`",
        "`[run] seed`: marked required",
        "`[algo] kind`: type `one of `grpo`, `dapo`",
        "`[run] colour` is not a key of the config",
        "`[algo] clip_low`: default `0.2` on the page, but the code's is none",
    ] {
        assert!(found.iter().any(|p| p.contains(expected)), "missed {expected:?} in:\n{}", found.join("\n"));
    }
    assert_eq!(found.len(), 7, "{}", found.join("\n"));
}

/// Every setting of a pretrained backbone (`QwenPolicySettings`, documented as the `[model]`
/// keys of a Qwen-VL kind) can be set from a training config: a field there without a
/// `[model]` key of the same name and type is a setting no config can reach (`backbone` is
/// `kind`).
#[test]
fn every_backbone_setting_is_a_model_key() {
    let samples = Samples::new();
    let mut tracer = Tracer::new(tracer_config());
    tracer
        .trace_type_once::<guirl::policy::qwen_vl::QwenPolicySettings>(&samples)
        .expect("tracing QwenPolicySettings");
    let settings = tracer.registry_unchecked();
    let Some(ContainerFormat::Struct(fields)) = settings.get("QwenPolicySettings") else {
        panic!("QwenPolicySettings is not a struct: {settings:?}")
    };
    let model = code_keys(&registry());
    let mut missing = Vec::new();
    for f in fields.iter().filter(|f| f.name != "backbone") {
        let word = type_word(&f.value, Vec::new);
        match model.iter().find(|k| k.section == "model" && k.key == f.name) {
            Some(k) if type_word(&k.format, Vec::new) == word => {}
            Some(k) => missing.push(format!(
                "`[model] {}` is {} but the backbone setting is {word}",
                f.name,
                type_word(&k.format, Vec::new)
            )),
            None => missing.push(format!(
                "QwenPolicySettings::{} ({word}) has no `[model] {}` key: add it to ModelTable \
                 (src/train/model_table.rs) and a row to {PAGE}",
                f.name, f.name
            )),
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // ... and reaches the settings.
    let text =
        format!("{MINIMAL}[model]\nkind = \"qwen3_vl\"\npath = \"p\"\nlora_vision_targets = [\"qkv\"]\n");
    let c = TrainConfig::parse(&text).unwrap();
    assert_eq!(c.model.qwen().unwrap().lora_vision_targets, ["qkv"]);
}

/// The keys the commented example config leaves out: each one the code accepts must be
/// written in it, set or commented out (`key =` or `# key =`; a nested table by its own name).
fn left_out_of_example(example: &str) -> Vec<String> {
    let mut section = String::new();
    let mut written: Vec<(String, String)> = Vec::new();
    for line in example.lines() {
        // `# # key = ` is a key the example leaves out even for its kind (no default).
        let t = line.trim_start_matches(['#', ' ']).trim();
        if let Some(name) = t.strip_prefix('[').and_then(|t| t.split(']').next()) {
            if !t.contains('=') {
                section = name.trim().to_string();
                // A sub-table's header writes its key in the parent table.
                if let Some((parent, sub)) = section.split_once('.') {
                    written.push((parent.to_string(), sub.to_string()));
                }
                continue;
            }
        }
        if let Some((key, _)) = t.split_once(" = ") {
            if !key.contains(' ') {
                written.push((section.clone(), key.trim().to_string()));
            }
        }
    }
    code_keys(&registry())
        .iter()
        .map(|k| (k.section.clone(), k.key.split('.').next().unwrap().to_string()))
        .filter(|k| !written.contains(k))
        .map(|(s, k)| shown(&s, &k))
        .collect()
}

/// `guirl train --example-config` promises every key, with its default.
#[test]
fn the_example_config_shows_every_key() {
    use guirl::train::config::EXAMPLE_CONFIG;
    let missing = left_out_of_example(EXAMPLE_CONFIG);
    assert!(
        missing.is_empty(),
        "src/train/example_config.toml leaves out {} key(s): {}",
        missing.len(),
        missing.join(", ")
    );
    let without_copy: String =
        EXAMPLE_CONFIG.lines().filter(|l| !l.starts_with("# copy =")).map(|l| format!("{l}\n")).collect();
    assert_eq!(left_out_of_example(&without_copy), ["`[model] copy`"]);
}
