//! Old-form `[algo]` tables: refused with their new form, or migrated on resume.
use super::*;
use crate::train::config::{AlgoKind, AlgoVariant, GigpoConfig, PpoConfig, TrainConfig};
use crate::train::run_folder::config_differences;

const MINIMAL: &str = "[run]\nname = \"r\"\niterations = 10\n[tasks]\nids = [\"miniwob/click-button\"]\n";

fn error(algo: &str) -> String {
    format!("{:#}", TrainConfig::parse(&format!("{MINIMAL}[algo]\n{algo}")).unwrap_err())
}

/// The config the migration reads `algo` (old form) as, resolved and checked.
fn migrated(algo: &str) -> (TrainConfig, Vec<String>) {
    let (mut c, notes) = TrainConfig::parse_migrating(&format!("{MINIMAL}[algo]\n{algo}")).unwrap();
    c.resolve();
    c.validate().unwrap();
    (c, notes)
}

fn new_form(algo: &str) -> TrainConfig {
    let mut c = TrainConfig::parse(&format!("{MINIMAL}{algo}")).unwrap();
    c.resolve();
    c.validate().unwrap();
    c
}

#[test]
fn the_old_form_error_shows_the_users_own_keys_in_the_new_form() {
    let e = error("kind = \"ppo\"\nlr = 3e-4\ngae_lambda = 0.8\nvalue_lr = 0.01\ncritic_warmup = 2\n");
    assert!(e.contains("[algo] is in the old form (keys gae_lambda, value_lr, critic_warmup)"), "{e}");
    assert!(e.contains("algo.gae_lambda = 0.8 → [algo.ppo] gae_lambda = 0.8"), "{e}");
    assert!(
        e.contains("[algo]\nkind = \"ppo\"\nlr = 0.0003\n\n[algo.ppo]\ncritic_warmup = 2\ngae_lambda = 0.8\nvalue_lr = 0.01"),
        "{e}"
    );
    // What it prints is a config of the new form, with the values given.
    let printed = &e[e.find("[algo]\nkind").unwrap()..];
    let c = new_form(printed);
    let want = PpoConfig { gae_lambda: 0.8, value_lr: 0.01, critic_warmup: 2, ..Default::default() };
    assert_eq!((c.algo.variant, c.algo.lr), (AlgoVariant::Ppo(want), 3e-4));
}

#[test]
fn a_kind_key_under_another_kind_is_refused_and_dropped_from_the_new_form() {
    let e = error("gae_lambda = 0.8\ngigpo_omega = 0.5\n");
    assert!(
        e.contains("algo.gae_lambda = 0.8 dropped: it is ppo's key (now [algo.ppo] gae_lambda) and did nothing under kind = \"grpo\""),
        "{e}"
    );
    assert!(e.contains("algo.gigpo_omega = 0.5 dropped") && !e.contains("[algo.gigpo]\n"), "{e}");
    let e = error("kind = \"gigpo\"\ngigpo_omega = 0.5\ngigpo_step_std = false\n");
    assert!(e.contains("[algo.gigpo]\nomega = 0.5\nstep_std = false"), "{e}");
    let e = error("kind = \"gspo\"\ngspo_level = \"trajectory\"\n");
    assert!(e.contains("[algo.gspo]\nlevel = \"trajectory\""), "{e}");
}

#[test]
fn scale_std_is_refused_with_adv_std_in_its_place() {
    let e = error("scale_std = false\n");
    assert!(e.contains("old form (keys scale_std)") && e.contains("adv_std = \"none\""), "{e}");
    let e = error("scale_std = true\nlr = 0.001\n");
    assert!(e.contains("algo.scale_std = true dropped") && e.contains("[algo]\nlr = 0.001"), "{e}");
    assert_eq!(migrated("scale_std = false\n").0.algo.adv_std(), crate::train::advantage::AdvStd::None);
}

/// The old technique keys keep their meaning: dynamic sampling's three keys become one
/// table, DAPO without one technique becomes GRPO with DAPO's clip.
#[test]
fn dapos_old_switches_keep_their_meaning() {
    let e = error("dynamic_sampling = true\ndynamic_sampling_max_extra = 5\n");
    assert!(e.contains("[algo.dynamic_sampling]\nmax_extra = 5"), "{e}");
    let (c, _) = migrated("dynamic_sampling = true\ndynamic_sampling_max_extra = 5\n");
    assert_eq!((c.algo.drop_all_equal_groups(), c.algo.max_extra_collections()), (true, 5));
    // drop_all_equal_groups alone: left out, nothing collected in their place
    let (c, _) = migrated("drop_all_equal_groups = true\n");
    assert_eq!((c.algo.drop_all_equal_groups(), c.algo.max_extra_collections()), (true, 0));
    // DAPO's dynamic_sampling = false still dropped all-equal groups
    let (c, _) = migrated("kind = \"dapo\"\ndynamic_sampling = false\n");
    assert_eq!((c.algo.kind(), c.algo.max_extra_collections()), (AlgoKind::Dapo, 0));
    assert!(c.algo.drop_all_equal_groups() && c.algo.overlong_penalty.is_some());
    // DAPO keeping every group: GRPO with DAPO's clip and overlong penalty
    let (c, notes) = migrated("kind = \"dapo\"\ndrop_all_equal_groups = false\n");
    assert_eq!((c.algo.kind(), c.algo.clip_high(), c.algo.clip_low()), (AlgoKind::Grpo, 0.28, 0.2));
    assert!(!c.algo.drop_all_equal_groups() && c.algo.overlong_penalty.is_some());
    assert!(notes.iter().any(|n| n.contains("→ kind = \"grpo\" with DAPO's clip_high = 0.28")), "{notes:?}");
    let (c, _) = migrated("kind = \"dapo\"\noverlong_penalty = false\nclip_high = 0.3\n");
    assert_eq!((c.algo.kind(), c.algo.clip_high(), c.algo.max_extra_collections()), (AlgoKind::Grpo, 0.3, 3));
    assert!(c.algo.overlong_penalty.is_none());
    // the penalty's settings go with it
    let (c, _) = migrated("overlong_penalty = true\noverlong_window = 4\noverlong_weight = 0.5\n");
    assert_eq!(
        c.algo.overlong_penalty,
        Some(crate::train::config::OverlongPenalty { window: Some(4), weight: 0.5 })
    );
    // settings of a technique that was off: dropped, said so
    let (c, notes) = migrated("overlong_window = 4\ndynamic_sampling_max_extra = 2\n");
    assert_eq!(c, new_form(""));
    assert!(notes.iter().filter(|n| n.ends_with("dropped: off")).count() == 2, "{notes:?}");
}

/// What an older guirl wrote into a run folder (every kind's keys, resolved) reads as the
/// new form with nothing changed, and `--resume` compares it so: no difference.
#[test]
fn an_old_run_folders_config_resumes_with_an_announced_migration() {
    let old = format!(
        "{MINIMAL}[algo]\nkind = \"gigpo\"\ngroup_size = 8\nbatch_seeds = 8\nclip_low = 0.2\nclip_high = 0.2\n\
         gspo_level = \"action\"\nloss_agg = \"token-mean\"\nadv_std = \"group\"\ngigpo_omega = 0.5\n\
         gigpo_step_std = true\ngamma = 0.9\nfail_reward = 0.0\ntruncation_reward = 0.0\ngae_lambda = 0.95\n\
         value_lr = 0.001\ncritic_warmup = 0\ndrop_all_equal_groups = false\ndynamic_sampling = false\n\
         dynamic_sampling_max_extra = 3\noverlong_penalty = false\noverlong_weight = 1.0\n"
    );
    assert!(TrainConfig::parse(&old).is_err(), "refused where a user loads it");
    let (c, notes) = TrainConfig::parse_migrating(&old).unwrap();
    assert_eq!(c.algo.variant, AlgoVariant::Gigpo(GigpoConfig { omega: 0.5, step_std: true }));
    assert!(c.algo.dynamic_sampling.is_none() && c.algo.overlong_penalty.is_none());
    for moved in
        ["[algo.gigpo] omega = 0.5", "algo.gae_lambda = 0.95 dropped", "algo.gspo_level = \"action\" dropped"]
    {
        assert!(notes.iter().any(|n| n.contains(moved)), "{moved}: {notes:?}");
    }
    let new = new_form(
        "[algo]\nkind = \"gigpo\"\ngamma = 0.9\nfail_reward = 0.0\ntruncation_reward = 0.0\n[algo.gigpo]\nomega = 0.5\n",
    );
    assert_eq!(config_differences(&old, &new).unwrap(), Vec::<String>::new());
    // and the new form written back round-trips
    assert_eq!(TrainConfig::parse(&new.to_toml().unwrap()).unwrap(), new);
}

#[test]
fn a_new_form_table_is_not_old() {
    let t: toml::Table = toml::from_str(
        "kind = \"dapo\"\n[dynamic_sampling]\nmax_extra = 2\n[overlong_penalty]\nweight = 0.5\n",
    )
    .unwrap();
    assert!(old_keys(&t).is_empty());
    let t: toml::Table = toml::from_str("dynamic_sampling = true\n").unwrap();
    assert_eq!(old_keys(&t), ["dynamic_sampling"]);
}

/// Every kind's default config loads, and its example (`--example-config --kind`) too.
#[test]
fn a_default_config_of_each_kind_loads() {
    for &kind in AlgoKind::all() {
        let c = new_form(&format!("[algo]\nkind = \"{kind}\"\n"));
        assert_eq!(c.algo.kind(), kind);
        assert_eq!(TrainConfig::parse(&c.to_toml().unwrap()).unwrap(), c, "{kind} round-trips");
        let mut e = TrainConfig::parse(&crate::train::config::example_config(kind)).unwrap();
        e.resolve();
        e.validate().unwrap();
        assert_eq!(e.algo.kind(), kind);
        assert_eq!(e.algo.variant, c.algo.variant, "{kind}: the example's table holds the defaults");
    }
}
