//! Old-form `[model]` tables (`backbone = ...`): refused with their new form, or migrated
//! on resume.
use super::*;
use crate::policy::qwen_vl::QwenPolicySettings;
use crate::train::config::{ModelKind, TrainConfig};
use crate::train::run_folder::{config_differences, prepare, CONFIG_FILE};

const MINIMAL: &str = "[run]\nname = \"r\"\niterations = 10\n[tasks]\nids = [\"miniwob/click-button\"]\n";

fn error(model: &str) -> String {
    format!("{:#}", TrainConfig::parse(&format!("{MINIMAL}[model]\n{model}")).unwrap_err())
}

fn new_form(rest: &str) -> TrainConfig {
    let mut c = TrainConfig::parse(&format!("{MINIMAL}{rest}")).unwrap();
    c.resolve();
    c.validate().unwrap();
    c
}

#[test]
fn the_old_form_error_shows_the_users_own_keys_in_the_new_form() {
    let e = error(
        "backbone = \"qwen2_5_vl\"\npath = \"ckpt\"\nlora_rank = 8\npreset = \"base\"\nmax_new_tokens = 24\n\
         init = \"runs/a/checkpoints/iter-000000\"\n",
    );
    assert!(e.contains("[model] is in the old form (keys backbone)"), "{e}");
    assert!(e.contains("model.backbone = \"qwen2_5_vl\" → model.kind = \"qwen2_5_vl\""), "{e}");
    assert!(e.contains("model.preset = \"base\" dropped: a key of the small policy"), "{e}");
    assert!(
        e.contains(
            "[model]\nkind = \"qwen2_5_vl\"\npath = \"ckpt\"\nlora_rank = 8\nmax_new_tokens = 24\n\
             init = \"runs/a/checkpoints/iter-000000\""
        ),
        "{e}"
    );
    // What it prints is a config of the new form, with the values given.
    let printed = &e[e.find("[model]\nkind").unwrap()..];
    let c = new_form(printed);
    let want = QwenPolicySettings {
        lora_rank: 8,
        max_new_tokens: 24,
        ..QwenPolicySettings::new("qwen2_5_vl", "ckpt")
    };
    assert_eq!((c.model.kind(), c.model.qwen()), (ModelKind::Qwen25Vl, Some(&want)));
    assert_eq!(c.model.init.as_deref(), Some(std::path::Path::new("runs/a/checkpoints/iter-000000")));
}

#[test]
fn both_old_tables_are_refused_together() {
    let e = format!(
        "{:#}",
        TrainConfig::parse(&format!(
            "{MINIMAL}[model]\nbackbone = \"qwen3_vl\"\npath = \"p\"\n[algo]\nscale_std = false\n"
        ))
        .unwrap_err()
    );
    assert!(e.contains("[algo] is in the old form") && e.contains("[model] is in the old form"), "{e}");
}

#[test]
fn the_small_policys_table_is_not_old() {
    let t: toml::Table = toml::from_str("preset = \"small\"\nword_buckets = 64\n").unwrap();
    assert!(old_keys(&t).is_empty());
    assert_eq!(migrate(&t), Migration { table: t, notes: Vec::new() });
    let t: toml::Table = toml::from_str("kind = \"qwen3_vl\"\npath = \"p\"\n").unwrap();
    assert!(old_keys(&t).is_empty());
}

#[test]
fn the_migrated_tables_are_named() {
    let notes = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(migrated_tables(&notes(&["model.backbone = 1 → model.kind = 1"])), "[model]");
    assert_eq!(migrated_tables(&notes(&["algo.scale_std = true dropped"])), "[algo]");
    assert_eq!(migrated_tables(&notes(&["algo.x", "model.y"])), "[algo] and [model]");
}

/// What guirl 0.x wrote into a Qwen-VL run folder (its own `config.toml`, `preset` always
/// written) reads as the new form with nothing changed; `--resume` compares it so (no
/// difference) and rewrites the folder's copy in the new form.
#[test]
fn an_old_run_folders_config_resumes_with_an_announced_migration() {
    let old = format!(
        "{MINIMAL}[model]\npreset = \"tiny\"\nbackbone = \"qwen3_vl\"\npath = \"fixtures/qwen_vl/qwen3_vl_learn\"\n\
         lora_rank = 32\nlora_alpha = 64.0\nprompt = \"configs/prompts/short.md\"\nmax_new_tokens = 16\n\
         train_modules = [\n    \"embed_tokens\",\n    \"norm\",\n]\n\n[algo]\nkind = \"grpo\"\nscale_std = true\n"
    );
    assert!(TrainConfig::parse(&old).is_err(), "refused where a user loads it");
    let (c, notes) = TrainConfig::parse_migrating(&old).unwrap();
    for moved in
        ["model.backbone = \"qwen3_vl\" → model.kind = \"qwen3_vl\"", "model.preset = \"tiny\" dropped"]
    {
        assert!(notes.iter().any(|n| n.contains(moved)), "{moved}: {notes:?}");
    }
    assert_eq!(migrated_tables(&notes), "[algo] and [model]");
    let new = new_form(
        "[model]\nkind = \"qwen3_vl\"\npath = \"fixtures/qwen_vl/qwen3_vl_learn\"\nlora_rank = 32\nlora_alpha = 64\n\
         prompt = \"configs/prompts/short.md\"\nmax_new_tokens = 16\ntrain_modules = [\"embed_tokens\", \"norm\"]\n",
    );
    assert_eq!(c.model, new.model);
    assert_eq!(config_differences(&old, &new).unwrap(), Vec::<String>::new());
    // The resume rewrites the folder's config.toml in the new form.
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let ckpts = crate::train::checkpoint::checkpoints_dir(&run);
    std::fs::create_dir_all(ckpts.join("iter-000002")).unwrap();
    std::os::unix::fs::symlink("iter-000002", ckpts.join(crate::train::checkpoint::LATEST)).unwrap();
    std::fs::write(run.join(CONFIG_FILE), &old).unwrap();
    prepare(&run, &new, true, false).unwrap();
    let saved = std::fs::read_to_string(run.join(CONFIG_FILE)).unwrap();
    assert!(saved.contains("[model]\nkind = \"qwen3_vl\"\n") && !saved.contains("backbone"), "{saved}");
    assert_eq!(TrainConfig::parse(&saved).unwrap(), new);
}

/// A pixels-only small policy's run folder (none of guirl 0.1's switches) needs no
/// migration: its `[model]` (no `kind`) is the new form's default kind, and the folder's copy
/// gains `kind = "small"`.
#[test]
fn a_pixels_only_small_policy_run_folder_reads_unchanged() {
    let old = format!(
        "{MINIMAL}[model]\npreset = \"small\"\nimage_size = 96\nkinds = [\"click\"]\nx_bins = 20\ny_bins = 20\n"
    );
    let (c, notes) = TrainConfig::parse_migrating(&old).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let new = new_form(&old[MINIMAL.len()..].replace("[model]\n", "[model]\nkind = \"small\"\n"));
    assert_eq!(c.model, new.model);
    assert_eq!(config_differences(&old, &new).unwrap(), Vec::<String>::new());
    assert!(new.to_toml().unwrap().contains("[model]\nkind = \"small\"\npreset = \"small\"\n"));
}

/// Each of guirl 0.1's switches in a config a user loads is refused with the user's
/// `[model]` in the new form, and what it printed loads; the task-shaped ones are said to
/// have no equivalent.
#[test]
fn each_old_switch_is_refused_with_the_new_form() {
    let cases = [
        (
            "word_buckets = 1024\nscreen_text = true\n",
            "inputs = [\"pixels\", \"elements\"]\nword_buckets = 1024",
        ),
        ("word_buckets = 64\nscreen_text = true\nnumbers = true\n", "inputs = [\"pixels\", \"elements\"]"),
        ("word_buckets = 64\nscreen_text = true\nrow_labels = true\n", "inputs = [\"pixels\", \"elements\"]"),
        (
            "word_buckets = 64\nscreen_text = true\ncontrol_state = true\n",
            "inputs = [\"pixels\", \"elements\"]",
        ),
        ("word_buckets = 64\nfold_case = true\n", "word_buckets = 64"),
        ("memory = 2\nmemory_actions = true\n", "inputs = [\"pixels\", \"history\"]\nword_buckets"),
        ("memory = 3\n", "inputs = [\"pixels\", \"history\"]"),
        ("previous_frame = true\n", "inputs = [\"pixels\", \"previous_frame\"]"),
        ("previous_frame = false\nscreen_text = false\n", "[model]\n"),
    ];
    for (old, want) in cases {
        let e = error(&format!("preset = \"small\"\n{old}"));
        let keys: Vec<&str> =
            old.lines().map(|l| l.split(' ').next().unwrap()).filter(|k| *k != "word_buckets").collect();
        let named = e.split("(keys ").nth(1).and_then(|r| r.split(')').next()).unwrap();
        let mut named: Vec<&str> = named.split(", ").collect();
        named.sort();
        assert_eq!(
            named,
            {
                let mut k = keys.clone();
                k.sort();
                k
            },
            "{e}"
        );
        assert!(e.contains("Replace your [model] table with this"), "{e}");
        let printed = &e[e.rfind("[model]\n").unwrap()..];
        assert!(printed.contains(want.split('\n').next().unwrap()), "{old}: {printed}");
        let c = new_form(printed);
        assert!(c.model.small().unwrap().vlm_config().is_ok(), "{printed}");
        let shaped = ["numbers", "row_labels", "control_state"].iter().any(|k| old.contains(k));
        assert_eq!(e.contains("have no equivalent"), shaped, "{e}");
        for k in keys {
            assert!(e.contains(&format!("model.{k} = ")), "{k} has no note: {e}");
        }
    }
    // memory with memory_actions is one "history"; the number stays memory
    let e = error("memory = 2\nmemory_actions = true\n");
    assert!(
        e.contains("model.memory = 2 and model.memory_actions = true → \"history\" in model.inputs"),
        "{e}"
    );
    assert!(e.contains("inputs = [\"pixels\", \"history\"]\nmemory = 2"), "{e}");
    assert!(e.contains("(the same policy;"), "{e}");
    let e = error("word_buckets = 64\nscreen_text = true\ncontrol_state = true\n");
    assert!(
        e.contains("model.control_state = true dropped: task-shaped (made for builtin/toggle-switches)"),
        "{e}"
    );
    assert!(
        e.contains("another policy than the old table's")
            && e.contains(crate::policy::vlm::old_config::LAST_0_1_COMMIT),
        "{e}"
    );
}

/// `--resume` of a run folder that guirl 0.1 wrote: refused, naming the guirl that reads
/// it, where the new form is another policy (here: `screen_text` and `numbers`), whichever
/// config the resume is given; migrated with a note where it is the same policy.
#[test]
fn resuming_an_old_small_policy_run_names_the_guirl_that_reads_it() {
    let old = format!(
        "{MINIMAL}[model]\npreset = \"small\"\nimage_size = 96\nword_buckets = 1024\nscreen_text = true\n\
         numbers = true\nkinds = [\"click\"]\nx_bins = 20\ny_bins = 20\n"
    );
    let e = format!("{:#}", TrainConfig::parse_migrating(&old).unwrap_err());
    for part in [
        "the run's [model] was written by guirl 0.1 (the per-feature small policy)",
        "read it with guirl 0.1, e.g. git commit ",
        "numbers: made for builtin/counter",
    ] {
        assert!(e.to_lowercase().contains(&part.to_lowercase()), "{part}: {e}");
    }
    let new = new_form(
        "[model]\npreset = \"small\"\nimage_size = 96\ninputs = [\"pixels\", \"elements\"]\nkinds = [\"click\"]\n\
         x_bins = 20\ny_bins = 20\n",
    );
    let e = format!("{:#}", config_differences(&old, &new).unwrap_err());
    assert!(e.contains("written by guirl 0.1"), "{e}");
    // memory with memory_actions, and fold_case with the word table: the same policy
    let same = format!(
        "{MINIMAL}[model]\npreset = \"tiny\"\nword_buckets = 64\nfold_case = true\nmemory = 2\nmemory_actions = true\n\
         previous_frame = true\n"
    );
    let (c, notes) = TrainConfig::parse_migrating(&same).unwrap();
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert_eq!(migrated_tables(&notes), "[model]");
    let v = c.model.small().unwrap().vlm_config().unwrap();
    assert_eq!(
        v.inputs,
        crate::policy::vlm::Inputs { previous_frame: true, elements: None, history: Some(2) }
    );
    // without fold_case the word table hashed with case: another policy
    let cased = same.replace("fold_case = true\n", "");
    let e = format!("{:#}", TrainConfig::parse_migrating(&cased).unwrap_err());
    assert!(e.contains("word_buckets = 64 without fold_case"), "{e}");
}
