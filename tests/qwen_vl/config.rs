//! The checkpoint config keys guirl reads, honours or refuses, against docs/qwen-vl.md's table.
use crate::common::qwen::*;
use std::path::Path;

/// docs/qwen-vl.md's "Config keys" table and the reader's list
/// (`model::config_keys::CONFIG_KEYS`) name the same keys, in the same sections, with the
/// same use; every row gives a reason, and the counts line counts them.
#[test]
fn the_config_keys_table_is_the_readers_list() {
    use guirl::policy::qwen_vl::model::config_keys::{KeyUse, CONFIG_KEYS};
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/qwen-vl.md")).unwrap();
    let section = doc.split("## Config keys").nth(1).expect("docs/qwen-vl.md has a Config keys section");
    let section = section.split("\n## ").next().unwrap();
    let mut table = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| section")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        assert!(!cells[3].is_empty(), "no reason given: {line}");
        table.push((cells[0].to_string(), cells[1].trim_matches('`').to_string(), cells[2].to_string()));
    }
    let word = |u: KeyUse| match u {
        KeyUse::Used => "used",
        KeyUse::Refused => "refused",
        KeyUse::Ignored => "ignored",
    };
    let code: Vec<(String, String, String)> = CONFIG_KEYS
        .iter()
        .map(|&(s, k, u)| (s.name().to_string(), k.to_string(), word(u).to_string()))
        .collect();
    let missing: Vec<_> = code.iter().filter(|r| !table.contains(r)).collect();
    let extra: Vec<_> = table.iter().filter(|r| !code.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "not in the doc: {missing:?}\nnot in the reader: {extra:?}"
    );
    assert_eq!(table.len(), code.len(), "a row twice");
    let count = |w: &str| code.iter().filter(|r| r.2 == w).count();
    let line = format!(
        "Counted: {} keys, {} used, {} refused, {} ignored.",
        code.len(),
        count("used"),
        count("refused"),
        count("ignored")
    );
    assert!(section.contains(&line), "the doc should say: {line}");
}

/// The keys read only to refuse them: each value guirl cannot honour is an error naming
/// the key, and the value that changes nothing loads.
#[test]
fn config_keys_guirl_cannot_honour_are_refused_by_name() {
    use guirl::policy::qwen_vl::model::config::QwenVlConfig;
    use serde_json::{json, Value};
    let config = |arch: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir(arch).join("config.json")).unwrap()).unwrap()
    };
    // Qwen2.5-VL keeps the text keys at the top level, Qwen3-VL under text_config
    let text = |c: &Value, arch: &str| -> Value {
        if arch == "qwen3_vl" {
            c["text_config"].clone()
        } else {
            c.clone()
        }
    };
    let cases: [(&str, Value, &str); 6] = [
        ("quantization_config", json!({"quant_method": "awq"}), "quantized"),
        ("use_sliding_window", json!(true), "sliding-window"),
        ("layer_types", json!(["full_attention", "sliding_attention"]), "full_attention"),
        ("attention_dropout", json!(0.1), "attention dropout"),
        ("hidden_act", json!("gelu"), "silu"),
        ("bogus_key", json!(1), "unknown config key"),
    ];
    for arch in ARCHS {
        assert!(QwenVlConfig::from_json(&config(arch), "config.json").is_ok(), "{arch}");
        for (key, value, says) in &cases {
            let mut c = config(arch);
            let mut t = text(&c, arch);
            t[*key] = value.clone();
            if arch == "qwen3_vl" {
                c["text_config"] = t;
            } else {
                c = t;
            }
            let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
            assert!(e.contains(key) && e.contains(says), "{arch} {key}: {e}");
        }
        // the harmless values load
        let mut c = config(arch);
        let mut t = text(&c, arch);
        t["use_sliding_window"] = json!(false);
        t["layer_types"] = json!(["full_attention", "full_attention"]);
        t["attention_dropout"] = json!(0.0);
        if arch == "qwen3_vl" {
            c["text_config"] = t;
        } else {
            c = t;
        }
        QwenVlConfig::from_json(&c, "config.json").unwrap();
    }
    // a Qwen3-VL without any text rope_theta: transformers 4 and 5 disagree on the default
    let mut c = config("qwen3_vl");
    c["text_config"]["rope_parameters"].as_object_mut().unwrap().remove("rope_theta");
    let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
    assert!(e.contains("rope_theta") && e.contains("500000"), "{e}");
    // the vision tower's rope object takes only its own keys
    let mut c = config("qwen3_vl");
    c["vision_config"]["rope_parameters"]["factor"] = json!(2.0);
    let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
    assert!(e.contains("vision_config.rope_parameters.factor"), "{e}");
}
