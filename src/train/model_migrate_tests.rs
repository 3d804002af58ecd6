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

/// A small policy's run folder needs no migration: its `[model]` (no `kind`) is the new
/// form's default kind, and the folder's copy gains `kind = "small"`.
#[test]
fn an_old_small_policy_run_folder_reads_unchanged() {
    let old = format!(
        "{MINIMAL}[model]\npreset = \"small\"\nimage_size = 96\nword_buckets = 1024\nscreen_text = true\n\
         numbers = true\nkinds = [\"click\"]\nx_bins = 20\ny_bins = 20\n"
    );
    let (c, notes) = TrainConfig::parse_migrating(&old).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let new = new_form(&old[MINIMAL.len()..].replace("[model]\n", "[model]\nkind = \"small\"\n"));
    assert_eq!(c.model, new.model);
    assert_eq!(config_differences(&old, &new).unwrap(), Vec::<String>::new());
    assert!(new.to_toml().unwrap().contains("[model]\nkind = \"small\"\npreset = \"small\"\n"));
}
