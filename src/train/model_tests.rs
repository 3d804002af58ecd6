//! `[model]` by kind: each kind's keys, the errors for another kind's key, the round trip
//! through the table as written, the examples per kind.
use super::*;
use crate::policy::vlm::Input;
use crate::train::config::{example_config, with_model_kind, AlgoKind, TrainConfig, EXAMPLE_CONFIG};

const MINIMAL: &str = "[run]\nname = \"r\"\niterations = 10\n[tasks]\nids = [\"miniwob/click-button\"]\n";

fn parse(model: &str) -> anyhow::Result<TrainConfig> {
    TrainConfig::parse(&format!("{MINIMAL}[model]\n{model}"))
}

fn error(model: &str) -> String {
    format!("{:#}", parse(model).unwrap_err())
}

#[test]
fn every_kind_key_is_a_table_key() {
    let small = kind_keys(ModelKind::Small);
    let qwen = kind_keys(ModelKind::Qwen3Vl);
    assert!(small.contains(&"preset") && small.contains(&"pointer") && small.len() == 17, "{small:?}");
    assert!(qwen.contains(&"path") && qwen.contains(&"train_modules") && !qwen.contains(&"backbone"));
    assert_eq!(qwen, kind_keys(ModelKind::Qwen25Vl));
    assert!(small.iter().all(|k| !qwen.contains(k)), "a key of two kinds: {small:?} {qwen:?}");
    let want: Vec<&str> = [&["kind"][..], &small, &qwen, &["init"]].concat();
    assert_eq!(
        serde_fields::<ModelTable>(),
        want,
        "ModelTable's fields: kind, each kind's keys in order, init"
    );
}

#[test]
fn a_key_of_another_kind_is_refused_naming_its_kind() {
    let e = error("lora_rank = 8\n");
    assert!(
        e.contains(
            "model.lora_rank is a key of kind = \"qwen3_vl\" or \"qwen2_5_vl\" (a pretrained Qwen-VL backbone), \
             not of kind = \"small\" (guirl's small policy, the default when kind is left out): set model.kind"
        ),
        "{e}"
    );
    let e = error("kind = \"small\"\npath = \"p\"\n");
    assert!(e.contains("model.path is a key of kind = \"qwen3_vl\"") && !e.contains("the default"), "{e}");
    for key in ["word_buckets = 64", "preset = \"tiny\"", "pointer = true"] {
        let e = error(&format!("kind = \"qwen3_vl\"\npath = \"p\"\n{key}\n"));
        let name = key.split(' ').next().unwrap();
        assert!(
            e.contains(&format!(
                "model.{name} is a key of kind = \"small\" (guirl's small policy), not of kind = \"qwen3_vl\" \
                 (a pretrained Qwen-VL backbone): remove it"
            )),
            "{e}"
        );
    }
}

#[test]
fn unknown_keys_kinds_and_a_missing_path_are_errors_that_say_what_to_do() {
    let e = error("colour = 3\n");
    assert!(e.contains("unknown key model.colour: kind = \"small\" takes ") && e.contains("d_model"), "{e}");
    // the keys of the kind the table sets, the closest named first; not the other kinds'
    let e = error("kind = \"qwen3_vl\"\npath = \"p\"\nlora_ranks = 8\n");
    assert!(
        e.contains("unknown key model.lora_ranks: did you mean lora_rank? kind = \"qwen3_vl\" takes"),
        "{e}"
    );
    assert!(e.contains("lora_alpha") && !e.contains("d_model") && !e.contains("x_bins"), "{e}");
    let e = error("kind = \"llava\"\n");
    assert!(e.contains("unknown variant `llava`, expected one of `small`, `qwen3_vl`, `qwen2_5_vl`"), "{e}");
    let e = error("kind = \"qwen2_5_vl\"\nlora_rank = 4\n");
    assert!(
        e.contains("model.kind = \"qwen2_5_vl\" needs model.path: a Hugging Face checkpoint folder"),
        "{e}"
    );
    let e = error("kind = \"qwen3_vl\"\npath = \"p\"\nlora_rank = \"big\"\n");
    assert!(e.contains("lora_rank") || e.contains("invalid type"), "{e}");
    // values a type cannot rule out: refused on load, before anything starts
    let mut c = parse("kind = \"qwen3_vl\"\npath = \"p\"\nlora_dropout = 1.5\n").unwrap();
    c.resolve();
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(e.contains("model.lora_dropout = 1.5: use a probability in [0, 1)"), "{e}");
    let mut c = parse("d_model = 100\nheads = 3\n").unwrap();
    c.resolve();
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(e.contains("model.heads (3) must divide model.d_model (100)"), "{e}");
}

#[test]
fn each_kind_reads_its_keys_and_round_trips() {
    // no kind: the small policy, as before kinds
    let c = parse("preset = \"small\"\nword_buckets = 64\n").unwrap();
    let want = SmallModel { preset: ModelPreset::Small, word_buckets: Some(64), ..Default::default() };
    assert_eq!((c.model.kind(), c.model.small()), (ModelKind::Small, Some(&want)));
    assert_eq!(parse("kind = \"small\"\npreset = \"small\"\nword_buckets = 64\n").unwrap(), c);
    assert_eq!(parse("").unwrap().model, ModelConfig::default());
    let q = parse("kind = \"qwen2_5_vl\"\npath = \"p\"\nlora_alpha = 8\ndecode_rows = 2\ninit = \"i\"\n")
        .unwrap();
    let want = QwenPolicySettings {
        lora_alpha: 8.0,
        decode_rows: Some(2),
        ..QwenPolicySettings::new("qwen2_5_vl", "p")
    };
    assert_eq!((q.model.kind(), q.model.qwen()), (ModelKind::Qwen25Vl, Some(&want)));
    assert_eq!(q.model.init, Some(PathBuf::from("i")));
    for c in [c, q] {
        let text = c.to_toml().unwrap();
        assert_eq!(TrainConfig::parse(&text).unwrap(), c, "{text}");
        assert!(text.contains(&format!("[model]\nkind = \"{}\"\n", c.model.kind())), "{text}");
        assert!(!text.contains("backbone"), "{text}");
    }
    // A Qwen-VL kind writes its settings resolved, as a run folder keeps them.
    let text = parse("kind = \"qwen3_vl\"\npath = \"p\"\n").unwrap().to_toml().unwrap();
    assert!(text.contains("path = \"p\"\nlora_rank = 16\nlora_alpha = 32.0\n"), "{text}");
}

#[test]
fn the_model_says_what_reaches_the_policy() {
    let c = parse("kind = \"qwen3_vl\"\npath = \"x\"\n").unwrap();
    assert_eq!(c.model.observation().unwrap(), crate::policy::observation::Observation::Pixels);
    let mut c = parse("").unwrap();
    assert_eq!(c.model.observation().unwrap().to_string(), "pixels");
    let s = c.model.small_mut().unwrap();
    s.inputs = Some(vec![Input::Pixels, Input::History, Input::PreviousFrame]);
    assert_eq!(c.model.observation().unwrap().to_string(), "pixels");
    c.model.small_mut().unwrap().inputs = Some(vec![Input::Pixels, Input::Elements]);
    assert_eq!(c.model.observation().unwrap().to_string(), "pixels+dom");
}

/// `inputs` declares what the small policy reads, with `memory` and `max_elements` as the
/// sizes of `history` and `elements`: defaults, the word table's default with `elements`,
/// and every combination that means nothing refused with the key named.
#[test]
fn inputs_declare_what_the_small_policy_reads() {
    let v = |model: &str| {
        let mut c = parse(model).unwrap();
        c.resolve();
        c.validate().map(|_| c.model.small().unwrap().vlm_config().unwrap()).map_err(|e| format!("{e:#}"))
    };
    let plain = v("").unwrap();
    assert_eq!((plain.inputs, plain.word_buckets), (crate::policy::vlm::Inputs::default(), 0));
    let all = v("inputs = [\"pixels\", \"previous_frame\", \"elements\", \"history\"]\n").unwrap();
    let want = crate::policy::vlm::Inputs { previous_frame: true, elements: Some(32), history: Some(4) };
    assert_eq!(
        (all.inputs, all.word_buckets),
        (want, 1024),
        "defaults: 32 elements, 4 actions, 1024 buckets"
    );
    let sized = v(
        "inputs = [\"history\", \"elements\", \"pixels\"]\nmemory = 2\nmax_elements = 8\nword_buckets = 64\n",
    );
    let sized = sized.unwrap();
    assert_eq!((sized.inputs.elements, sized.inputs.history, sized.word_buckets), (Some(8), Some(2), 64));
    for (model, says) in [
        ("inputs = [\"elements\"]\n", "model.inputs must list \"pixels\""),
        ("inputs = [\"pixels\", \"history\", \"history\"]\n", "model.inputs lists \"history\" twice"),
        ("memory = 2\ninputs = [\"pixels\"]\n", "model.memory = 2 is the size of the \"history\" input"),
        ("max_elements = 9\n", "model.max_elements = 9 is the size of the \"elements\" input"),
        ("inputs = [\"pixels\", \"history\"]\nmemory = 0\n", "model.memory must be at least 1"),
        ("inputs = [\"pixels\", \"elements\"]\nmax_elements = 0\n", "model.max_elements must be at least 1"),
        (
            "inputs = [\"pixels\", \"elements\"]\nword_buckets = 0\n",
            "model.word_buckets = 0: the \"elements\" input",
        ),
    ] {
        let e = v(model).unwrap_err();
        assert!(e.contains(says), "{model}: {e}");
    }
    let e = error("inputs = [\"pixels\", \"dom\"]\n");
    assert!(
        e.contains(
            "unknown variant `dom`, expected one of `pixels`, `previous_frame`, `elements`, `history`"
        ),
        "{e}"
    );
    // The declared form round-trips through a run folder's config.toml.
    let c = parse("inputs = [\"pixels\", \"elements\"]\nmax_elements = 8\n").unwrap();
    let text = c.to_toml().unwrap();
    assert!(text.contains("inputs = [\n    \"pixels\",\n    \"elements\",\n]\nmax_elements = 8\n"), "{text}");
    assert_eq!(TrainConfig::parse(&text).unwrap(), c);
}

/// `--example-config --model-kind KIND` (with or without `--kind`) loads as that kind, its
/// keys at their defaults; the small kind's is the example as it stands.
#[test]
fn the_example_of_each_kind_loads_with_its_defaults() {
    assert_eq!(with_model_kind(EXAMPLE_CONFIG, ModelKind::Small), EXAMPLE_CONFIG);
    for &kind in ModelKind::all() {
        for algo in [AlgoKind::Grpo, AlgoKind::Ppo] {
            let text = with_model_kind(&example_config(algo), kind);
            let mut c = TrainConfig::parse(&text).unwrap_or_else(|e| panic!("{kind} {algo}: {e:#}\n{text}"));
            c.resolve();
            c.validate().unwrap_or_else(|e| panic!("{kind} {algo}: {e:#}"));
            assert_eq!((c.model.kind(), c.algo.kind()), (kind, algo));
            match c.model.qwen() {
                Some(q) => {
                    assert_eq!(q, &QwenPolicySettings::new(kind.name(), &q.path), "{kind}: the defaults");
                    assert!(text.contains("\n# preset = \"tiny\""), "the small policy's keys commented out");
                    assert!(text.contains("\n# coords = "), "a key without a default stays commented");
                }
                None => assert_eq!(c.model, ModelConfig::default()),
            }
        }
    }
}

#[test]
fn a_qwen_kind_started_from_a_file_is_told_to_give_the_folder() {
    let root = env!("CARGO_MANIFEST_DIR");
    let c = parse(&format!(
        "kind = \"qwen3_vl\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\"\ninit = \"{root}/fixtures/qwen_vl/qwen3_vl/config.json\"\n"
    ))
    .unwrap();
    let e = format!("{:#}", c.model.build(&Device::Cpu, 0).err().unwrap());
    assert!(e.contains("starts from an adapter folder") && e.contains("not a file: give its folder"), "{e}");
}

/// A kind's name is one name: the config's (serde), `--kind` / `--model-kind`'s (clap) and
/// `name()` agree, and `from_name` finds it.
#[test]
fn kind_names_agree_in_configs_and_on_the_command_line() {
    use clap::ValueEnum;
    fn check<K: ValueEnum + serde::Serialize + PartialEq + std::fmt::Debug + Copy>(
        all: &[K],
        name: fn(K) -> &'static str,
        from_name: fn(&str) -> Option<K>,
    ) {
        assert_eq!(all.len(), K::value_variants().len());
        for &k in all {
            let clap_name = k.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(name(k)), "{k:?}");
            assert_eq!(clap_name, name(k), "{k:?}");
            assert_eq!(from_name(name(k)), Some(k));
        }
    }
    check(AlgoKind::all(), AlgoKind::name, AlgoKind::from_name);
    check(ModelKind::all(), ModelKind::name, ModelKind::from_name);
}
