//! What a Qwen-VL checkpoint folder holds and what guirl writes into one: every
//! `config.json` setting that changes the model is read (the vision tower's rotary base),
//! the model's context bounds the KV cache with an error, and saved adapters name their
//! modules so that peft loads exactly what was trained (full names; a tied head saved; a
//! peft adapter's own `target_modules` kept).

use crate::common::qwen::*;
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::train::lora::LoraSettings;
use guirl::policy::qwen_vl::QwenVl;
use serde_json::{json, Value};
use std::path::Path;

/// A copy of the fixture checkpoint `src` with its `config.json` changed by `edit`.
fn edited(src: &Path, file: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
        }
    }
    let p = tmp.path().join(file);
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(&mut c);
    std::fs::write(&p, serde_json::to_string_pretty(&c).unwrap()).unwrap();
    tmp
}

fn load_err(dir: &Path) -> String {
    match QwenVl::load(dir, dtype(), &device()) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn the_vision_rope_theta_is_read_not_assumed() {
    let arch = "qwen3_vl";
    let r = reference(arch);
    let (base, _) = prompt_logits(&load(arch), &r, "one_image", None).unwrap();
    let at = |theta: f64| {
        edited(&dir(arch), "config.json", |c| {
            c["vision_config"]["rope_parameters"]["rope_theta"] = json!(theta)
        })
    };
    let same = at(10_000.0);
    let m = QwenVl::load(same.path(), dtype(), &device()).unwrap();
    assert_eq!(rel_err(&prompt_logits(&m, &r, "one_image", None).unwrap().0, &base), 0.0);
    let other = at(2_000.0);
    let m = QwenVl::load(other.path(), dtype(), &device()).unwrap();
    assert_eq!(m.config.vision.rope_theta, 2_000.0);
    let e = rel_err(&prompt_logits(&m, &r, "one_image", None).unwrap().0, &base);
    assert!(e > 1e-6, "a vision rope theta of 2000 changed the logits by only {e:.1e}");
    let yarn = edited(&dir(arch), "config.json", |c| {
        c["vision_config"]["rope_parameters"]["rope_type"] = json!("yarn")
    });
    let e = load_err(yarn.path());
    assert!(e.contains("vision_config.rope_parameters.rope_type") && e.contains("yarn"), "{e}");
}

#[test]
fn a_prompt_longer_than_the_context_is_an_error_not_a_panic() {
    let arch = "qwen2_5_vl";
    let short = edited(&dir(arch), "config.json", |c| {
        let text = if c.get("text_config").is_some() { &mut c["text_config"] } else { c };
        text["max_position_embeddings"] = json!(8);
    });
    let m = QwenVl::load(short.path(), dtype(), &device()).unwrap();
    let mut cache = KvCache::default();
    let e = format!("{:#}", prompt_logits(&m, &reference(arch), "one_image", Some(&mut cache)).unwrap_err());
    assert!(e.contains("context of 8") && e.contains("max_position_embeddings"), "{e}");
}

/// `adapter_config.json` and the tensor names of an adapter folder.
fn saved(dir: &Path) -> (Value, Vec<String>) {
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap()).unwrap();
    let tensors =
        candle_core::safetensors::load(dir.join("adapter_model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    let mut names: Vec<String> = tensors.into_keys().collect();
    names.sort();
    (cfg, names)
}

#[test]
fn saved_adapters_name_their_modules_in_full() {
    for arch in ARCHS {
        let mut m = load(arch);
        let vision: Vec<String> = if arch == "qwen2_5_vl" {
            ["qkv", "0", "2"].map(String::from).to_vec()
        } else {
            vec!["qkv".into()]
        };
        let settings =
            LoraSettings { rank: 2, alpha: 4.0, vision_targets: vision, ..LoraSettings::default() };
        m.attach_lora(&settings, 0).unwrap();
        m.train_whole(&["norm".to_string()]).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        m.save_adapter(tmp.path()).unwrap();
        let (cfg, names) = saved(tmp.path());
        let adapted: Vec<&str> = names
            .iter()
            .filter_map(|k| k.strip_prefix("base_model.model.")?.strip_suffix(".lora_A.weight"))
            .collect();
        let mut targets: Vec<&str> =
            cfg["target_modules"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        targets.sort();
        assert_eq!(targets, adapted, "{arch}: target_modules are exactly the adapted modules");
        // peft matches list entries as name suffixes: a bare `norm` or `0` would catch more
        assert!(targets.iter().all(|t| t.starts_with("model.")), "{arch}: {targets:?}");
        if arch == "qwen2_5_vl" {
            assert!(targets.contains(&"model.visual.merger.mlp.0"), "{arch}: {targets:?}");
            assert!(!targets.iter().any(|t| t.ends_with("blocks.0")), "{arch}: {targets:?}");
        }
        assert_eq!(cfg["modules_to_save"], json!(["model.language_model.norm"]), "{arch}");
        // read back: the same modules, the same values
        let mut m2 = load(arch);
        m2.load_adapter(tmp.path()).unwrap();
        assert_eq!(m2.lora_vars().len(), m.lora_vars().len(), "{arch}");
    }
}

#[test]
fn a_trained_embedding_on_a_tied_head_is_saved_as_the_head_too() {
    let arch = "qwen3_vl";
    let mut m = load(arch);
    assert!(m.config.text.tie_word_embeddings, "the fixture ties its head");
    m.attach_lora(&LoraSettings { rank: 2, alpha: 4.0, ..LoraSettings::default() }, 0).unwrap();
    m.train_whole(&["embed_tokens".to_string()]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    m.save_adapter(tmp.path()).unwrap();
    let (cfg, names) = saved(tmp.path());
    let to_save: Vec<&str> =
        cfg["modules_to_save"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(to_save, ["lm_head", "model.language_model.embed_tokens"]);
    assert!(names.contains(&"base_model.model.lm_head.weight".to_string()), "{names:?}");
    // guirl reads its own folder back: the tie stands, the head copy is not trained twice
    let mut m2 = load(arch);
    m2.load_adapter(tmp.path()).unwrap();
    let r = reference(arch);
    let (a, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
    let (b, _) = prompt_logits(&m2, &r, "one_image", None).unwrap();
    assert_eq!(rel_err(&b, &a), 0.0);
    m2.set_adapter_values(tmp.path()).unwrap();
}

#[test]
fn a_peft_adapters_target_modules_are_saved_as_peft_wrote_them() {
    let arch = "qwen3_vl";
    let regex = ".*language_model.*\\.(q_proj|v_proj)";
    let lora = edited(&dir(arch).join("lora"), "adapter_config.json", |c| c["target_modules"] = json!(regex));
    let mut m = load(arch);
    m.load_adapter(lora.path()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    m.save_adapter(tmp.path()).unwrap();
    let (cfg, _) = saved(tmp.path());
    assert_eq!(cfg["target_modules"], json!(regex));
}

/// One adapter setting: architecture, folder name, language-model targets, vision
/// targets, modules trained whole.
type PeftCase =
    (&'static str, &'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str]);

/// The adapter settings whose folders guirl writes for peft to check.
const PEFT_CASES: [PeftCase; 4] = [
    ("qwen3_vl", "text_embed_norm", &["q_proj", "v_proj", "down_proj"], &[], &["embed_tokens", "norm"]),
    ("qwen3_vl", "vision", &["q_proj", "o_proj"], &["qkv", "proj", "linear_fc1", "linear_fc2"], &[]),
    (
        "qwen2_5_vl",
        "vision_merger",
        &["k_proj", "up_proj"],
        &["qkv", "proj", "gate_proj", "up_proj", "down_proj", "0", "2"],
        &[],
    ),
    ("qwen2_5_vl", "head_norm", &["q_proj"], &[], &["lm_head", "norm"]),
];

fn peft_case_dir(arch: &str, name: &str) -> std::path::PathBuf {
    dir(arch).join("guirl_adapters").join(name)
}

/// Writes `fixtures/qwen_vl/ARCH/guirl_adapters/*`: adapters as `guirl train` saves them,
/// with random non-zero weights, for `scripts/make_qwen_fixtures.py --guirl-adapters` to
/// load in peft. Run it only when the fixtures must change:
/// `cargo test --release --test integration write_guirl_adapter_fixtures -- --ignored`.
#[test]
#[ignore]
fn write_guirl_adapter_fixtures() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(57);
    for (arch, name, targets, vision, whole) in PEFT_CASES {
        let mut m = load(arch);
        let strings = |s: &[&str]| s.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let settings = LoraSettings {
            rank: 2,
            alpha: 4.0,
            targets: strings(targets),
            vision_targets: strings(vision),
            ..LoraSettings::default()
        };
        m.attach_lora(&settings, 0).unwrap();
        m.train_whole(&strings(whole)).unwrap();
        for (n, v) in m.lora_vars() {
            let noise: Vec<f32> = (0..v.elem_count()).map(|_| rng.gen_range(-0.2f32..0.2)).collect();
            let noise = candle_core::Tensor::from_vec(noise, v.dims(), v.device()).unwrap();
            let value = if n.ends_with(".weight") { (v.as_tensor() + noise).unwrap() } else { noise };
            v.set(&value).unwrap();
        }
        let out = peft_case_dir(arch, name);
        let _ = std::fs::remove_dir_all(&out);
        m.save_adapter(&out).unwrap();
        eprintln!("wrote {}", out.display());
    }
}

/// Every adapter setting the docs offer, saved by guirl and loaded by peft 0.21 on its base
/// (`PeftModel.from_pretrained`, default options), gives peft the logits guirl computes.
#[test]
fn guirl_adapters_give_peft_the_same_logits() {
    for (arch, name, ..) in PEFT_CASES {
        let folder = peft_case_dir(arch, name);
        let want = candle_core::safetensors::load(
            folder.join("peft_reference.safetensors"),
            &candle_core::Device::Cpu,
        )
        .unwrap_or_else(|e| {
            panic!("{}: {e} (run scripts/make_qwen_fixtures.py --guirl-adapters)", folder.display())
        });
        let mut m = load(arch);
        m.load_adapter(&folder).unwrap();
        let (logits, _) = prompt_logits(&m, &reference(arch), "one_image", None).unwrap();
        let e = rel_err(&logits, &want["one_image.logits"]);
        eprintln!("{arch}/{name}: guirl against peft, relative error {e:.2e}");
        assert!(e <= tolerance(), "{arch}/{name}: guirl against peft, relative error {e}");
        // the adapter changes the logits by more than the bound: the check could fail
        let (base, _) = prompt_logits(&load(arch), &reference(arch), "one_image", None).unwrap();
        let moved = rel_err(&base, &want["one_image.logits"]);
        assert!(
            moved > 10.0 * tolerance(),
            "{arch}/{name}: the adapter moves the logits by only {moved:.1e}"
        );
    }
}
