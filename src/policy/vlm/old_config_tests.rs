//! guirl 0.1's `config.json` (every key written, the switches included, no `inputs`): one
//! the new form reads as the same policy loads and scores as it did; any other names the
//! guirl that reads it; the notes say what each switch became.

use super::old_config::*;
use super::speed::synthetic_batch;
use super::{Inputs, VlmConfig, VlmPolicy, CONFIG_FILE};
use candle_core::Device;
use serde_json::{json, Value};

/// `cfg`'s `config.json` as guirl 0.1 wrote it: every key, the switches included, no
/// `inputs`.
fn config_json_of_0_1(cfg: &VlmConfig, switches: Value) -> String {
    let mut v = serde_json::to_value(cfg).unwrap();
    let keys = v.as_object_mut().unwrap();
    keys.remove("inputs");
    let off = json!({"screen_text": false, "memory": 0, "memory_actions": false, "previous_frame": false,
        "numbers": false, "row_labels": false, "fold_case": false, "control_state": false});
    for (k, x) in off.as_object().unwrap().iter().chain(switches.as_object().unwrap()) {
        keys.insert(k.clone(), x.clone());
    }
    v.to_string()
}

/// A 0.1 checkpoint the new form reads as the same policy loads, and scores as the
/// policy that wrote the weights: a pixels-only one, and one with the history
/// (`memory`, `memory_actions`), case-folded words and the previous frame.
#[test]
fn a_0_1_checkpoint_of_the_same_policy_loads() {
    let history = Inputs { previous_frame: true, history: Some(2), elements: None };
    for (cfg, switches) in [
        (VlmConfig::tiny(), json!({})),
        (
            VlmConfig { word_buckets: 64, inputs: history, ..VlmConfig::tiny() },
            json!({"memory": 2, "memory_actions": true, "fold_case": true, "previous_frame": true}),
        ),
    ] {
        let p = VlmPolicy::new(cfg.clone(), &Device::Cpu, 3).unwrap();
        let dir = tempfile::tempdir().unwrap();
        p.save(dir.path()).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), config_json_of_0_1(&cfg, switches)).unwrap();
        let q = VlmPolicy::load(dir.path(), &Device::Cpu).unwrap();
        assert_eq!(q.config(), &cfg);
        let (mut states, actions) = synthetic_batch(4, 2);
        states[1].history = vec!["click(5, 5)".into(), "type(\"Hello\")".into()];
        let (a, b) = (p.log_probs(&states, &actions).unwrap(), q.log_probs(&states, &actions).unwrap());
        let diff = (a.logp - b.logp).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(diff, 0.0);
    }
}

/// Any other 0.1 checkpoint fails to load, naming the guirl that reads it and why.
#[test]
fn a_0_1_checkpoint_of_another_policy_names_the_guirl_that_reads_it() {
    let words = VlmConfig { word_buckets: 64, ..VlmConfig::tiny() };
    for (switches, why) in [
        (json!({"screen_text": true}), "screen_text: the elements' words on the image tokens under them"),
        (
            json!({"screen_text": true, "control_state": true}),
            "control_state: made for builtin/toggle-switches",
        ),
        (json!({"screen_text": true, "numbers": true}), "numbers: made for builtin/counter"),
        (json!({"screen_text": true, "row_labels": true}), "row_labels: made for builtin/login-settings"),
        (json!({"memory": 4}), "memory = 4 without memory_actions"),
        (json!({}), "word_buckets = 64 without fold_case"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 1).unwrap().save(dir.path()).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), config_json_of_0_1(&words, switches.clone())).unwrap();
        let e = format!("{:#}", VlmPolicy::load(dir.path(), &Device::Cpu).err().unwrap());
        for part in [
            "config.json was written by guirl 0.1 (the per-feature small policy)",
            &format!("this guirl ({})", env!("CARGO_PKG_VERSION")),
            &format!("Read it with guirl 0.1, e.g. git commit {LAST_0_1_COMMIT}"),
            why,
        ] {
            assert!(e.contains(part), "{switches}: {part:?} not in {e}");
        }
    }
}

#[test]
fn the_notes_say_what_each_switch_became() {
    let keys = json!({"screen_text": true, "numbers": false, "memory": 3, "memory_actions": true, "word_buckets": 8});
    let up = upgrade(keys.as_object().unwrap(), "model.");
    assert_eq!(up.inputs, ["pixels", "elements", "history"]);
    assert_eq!(up.memory, Some(3));
    assert_eq!(up.notes.len(), 4, "{:?}", up.notes);
    assert!(up.notes[1].starts_with("model.numbers = false dropped: it was off"), "{:?}", up.notes);
    assert_eq!(up.differs.len(), 2, "screen_text, and words hashed with case: {:?}", up.differs);
}

/// guirl 0.2.0's first checkpoints (no `format`) load where they are the same network
/// (no `elements`) and are refused, naming the commit that reads them, where the pointer
/// now reads the element tokens; a config of a newer layout is refused.
#[test]
fn a_config_json_of_the_first_element_layout_is_refused() {
    let c = VlmConfig { word_buckets: 64, ..VlmConfig::tiny() };
    let el = VlmConfig { inputs: Inputs { elements: Some(8), ..Inputs::default() }, ..c.clone() };
    for cfg in [&c, &el] {
        assert_eq!(&VlmConfig::from_json_str(&serde_json::to_string(cfg).unwrap()).unwrap(), cfg);
    }
    let without_format = |cfg: &VlmConfig| {
        let mut j = serde_json::to_value(cfg).unwrap();
        j.as_object_mut().unwrap().remove("format");
        VlmConfig::from_json_str(&j.to_string())
    };
    assert_eq!(without_format(&c).unwrap(), c);
    let e = format!("{:#}", without_format(&el).unwrap_err());
    assert!(e.contains("written by guirl 0.2.0 before its pointer head read the element tokens"), "{e}");
    assert!(e.contains(LAST_FORMAT_1_COMMIT), "{e}");
    let newer = VlmConfig { format: FORMAT + 1, ..c };
    let e = format!("{:#}", VlmConfig::from_json_str(&serde_json::to_string(&newer).unwrap()).unwrap_err());
    assert!(e.contains("a newer guirl wrote it"), "{e}");
}
