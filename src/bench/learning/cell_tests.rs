//! A cell's config (the algorithm's own defaults, the task file's explicit keys kept), the
//! cells' names, the more-cloning baseline's epochs and config, and the plan's errors.

use super::*;
use crate::train::advantage::AdvStd;
use crate::train::algo_config::AlgoKind;

const TASK: &str = r#"
[run]
name = "t"
seed = 0
iterations = 1
[tasks]
ids = ["miniwob/click-test"]
[model]
preset = "tiny"
kinds = ["click"]
[sft]
oracle_episodes = 4
[algo]
kind = "grpo"
lr = 2e-5
"#;

const PLAN: &str =
    "env_steps = 100\nseeds = [0]\nalgos = [\"grpo\"]\n[[tasks]]\nname = \"t\"\nconfig = \"t.toml\"\n";

fn cell(task_text: &str, algo: &str) -> TrainConfig {
    cell_in(PLAN, task_text, algo)
}

fn cell_in(plan_text: &str, task_text: &str, algo: &str) -> TrainConfig {
    let plan: Plan = toml::from_str(plan_text).unwrap();
    let written = TrainConfig::parse(task_text).unwrap();
    cell_config(&plan, &plan.tasks[0], &written, algo, 1, Path::new("clone/iter-000000")).unwrap()
}

#[test]
fn each_algorithm_gets_its_own_defaults_not_the_tasks_resolved_ones() {
    // The task trains GRPO (clip 0.2 / 0.2, no dynamic sampling, group std); the cells
    // of the other kinds must not inherit those as if the task file had set them.
    let dapo = cell(TASK, "dapo");
    assert_eq!(dapo.algo.kind(), AlgoKind::Dapo);
    assert_eq!((dapo.algo.clip_low(), dapo.algo.clip_high()), (0.2, 0.28));
    assert!(dapo.algo.dynamic_sampling.is_some() && dapo.algo.overlong_penalty.is_some());
    let gspo = cell(TASK, "gspo");
    assert_eq!((gspo.algo.clip_low(), gspo.algo.clip_high()), (3e-4, 4e-4));
    assert_eq!(cell(TASK, "dr_grpo").algo.adv_std(), AdvStd::None);
    let grpo = cell(TASK, "grpo");
    assert_eq!(grpo.algo.clip_high(), 0.2);
    assert!(grpo.algo.dynamic_sampling.is_none());
    // What the file does set holds for every cell, and so does the cell's seed and start.
    assert_eq!(dapo.algo.lr, 2e-5);
    assert_eq!((dapo.run.seed, dapo.run.max_env_steps), (1, Some(100)));
    assert!(dapo.sft.is_none());
    let explicit = TASK.replace("lr = 2e-5", "lr = 2e-5\nclip_high = 0.25");
    assert_eq!(cell(&explicit, "dapo").algo.clip_high(), 0.25);
}

#[test]
fn a_tasks_algo_table_reaches_every_algorithm_and_per_algorithm_overrides_win() {
    // Plan: ppo's gamma for every task; the task: lr and warm-up for every algorithm,
    // and its own lr for gigpo.
    let plan = "env_steps = 100\nseeds = [0]\nalgos = [\"grpo\", \"ppo\", \"gigpo\"]\n\
        [overrides.ppo]\ngamma = 0.95\nppo = { critic_warmup = 2 }\n\
        [[tasks]]\nname = \"t\"\nconfig = \"t.toml\"\n\
        [tasks.algo]\nlr = 5e-5\nwarmup = 3\n\
        [tasks.overrides.gigpo]\nlr = 1e-4\n";
    let ppo = cell_in(plan, TASK, "ppo");
    assert_eq!((ppo.algo.lr, ppo.algo.warmup, ppo.algo.gamma), (5e-5, 3, 0.95));
    assert_eq!(ppo.algo.critic_only_iterations(), 2, "PPO's own table reaches it");
    let grpo = cell_in(plan, TASK, "grpo");
    assert_eq!((grpo.algo.lr, grpo.algo.warmup, grpo.algo.gamma), (5e-5, 3, 1.0));
    let gigpo = cell_in(plan, TASK, "gigpo");
    assert_eq!((gigpo.algo.lr, gigpo.algo.warmup), (1e-4, 3));
}

#[test]
fn a_misspelt_override_key_fails_when_the_plan_is_read() {
    let with = |extra: &str| -> Plan { toml::from_str(&format!("{PLAN}{extra}")).unwrap() };
    let e = with("[tasks.algo]\nlrr = 5e-5\n").check_algo_keys().unwrap_err().to_string();
    assert!(e.contains("[tasks.algo]") && e.contains("lrr") && e.contains("[algo]"), "{e}");
    let e = with("[tasks.overrides.grpo]\nwarmup = \"3\"\n").check_algo_keys().unwrap_err().to_string();
    assert!(e.contains("[tasks.overrides.grpo]") && e.contains("warmup"), "{e}");
    with("[tasks.algo]\nlr = 5e-5\nwarmup = 3\n").check_algo_keys().unwrap();
}

#[test]
fn cells_are_named_after_their_clone_when_the_plan_lists_clone_seeds() {
    let plan: Plan =
        toml::from_str(&PLAN.replace("seeds = [0]", "seeds = [0]\nclone_seeds = [3, 4]")).unwrap();
    assert_eq!(
        plan.all_cells(),
        ["t/clone-c3", "t/grpo-c3-s0", "t/more-sft-c3", "t/clone-c4", "t/grpo-c4-s0", "t/more-sft-c4"]
    );
    let clones = plan.clones(7);
    assert_eq!(
        clones.iter().map(|c| c.seed).collect::<Vec<_>>(),
        [3, 4],
        "the config's run.seed is not used"
    );
    // Without the key: the old names, and the config's own seed.
    let plan: Plan = toml::from_str(&PLAN.replace("seeds = [0]", "seeds = [0]\nmore_sft = false")).unwrap();
    assert_eq!(plan.all_cells(), ["t/clone", "t/grpo-s0"]);
    assert_eq!(plan.clones(7), [CloneId { seed: 7, tag: None }]);
}

#[test]
fn the_baselines_epochs_are_the_rl_cells_median_time_over_the_clones_epoch_time() {
    use super::more_sft::{extra_epochs, median};
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 2.0, 10.0]), Some(3.0));
    assert_eq!(median(&[]), None);
    // median(100, 130, 400) = 130 s over 12 s an epoch = 10.8 → 11.
    let d = extra_epochs(&[400.0, 100.0, 130.0], Some(12.0), Some(5), 20).unwrap();
    assert_eq!(d.extra_epochs, 11);
    assert!(
        d.basis.contains("3 RL cells") && d.basis.contains("130.0 s") && d.basis.contains("= 11"),
        "{}",
        d.basis
    );
    // Clamped to the plan's most, and to at least one.
    assert_eq!(extra_epochs(&[1000.0], Some(2.0), None, 20).unwrap().extra_epochs, 20);
    assert_eq!(extra_epochs(&[0.0], Some(2.0), None, 20).unwrap().extra_epochs, 1);
    // No RL cell yet: the plan's fixed count, else nothing (the baseline waits).
    let d = extra_epochs(&[], Some(2.0), Some(5), 20).unwrap();
    assert_eq!(d.extra_epochs, 5);
    assert!(d.basis.contains("more_sft_epochs = 5") && d.basis.contains("no RL cell"), "{}", d.basis);
    assert_eq!(extra_epochs(&[], Some(2.0), None, 20), None);
    // A clone without its epoch time (made by an older guirl) cannot be timed against.
    assert_eq!(extra_epochs(&[100.0], None, None, 20), None);
    assert!(extra_epochs(&[100.0], None, Some(3), 20).unwrap().basis.contains("no seconds per epoch"));
}

#[test]
fn the_baseline_continues_its_clone_on_the_clones_demonstrations() {
    // The task's RL warm-up (3 iterations) must not make the 0-iteration baseline invalid.
    let task = TASK
        .replace("oracle_episodes = 4", "oracle_episodes = 4\nepochs = 6")
        .replace("lr = 2e-5", "lr = 2e-5\nwarmup = 3");
    let mut base = TrainConfig::parse(&task).unwrap();
    base.resolve();
    let c = CloneId { seed: 2, tag: Some(2) };
    let init = Path::new("out/t/clone-c2/checkpoints/iter-000000");
    let cfg = super::more_sft::config(&base, c, Path::new("out/t/clone-c2"), init, 9).unwrap();
    let sft = cfg.sft.as_ref().unwrap();
    assert_eq!(sft.dir.as_deref(), Some(Path::new("out/t/clone-c2/demos")), "the very demonstrations");
    assert_eq!((sft.oracle_episodes, sft.epochs, sft.start_epoch), (None, 9, 6));
    assert_eq!(
        (sft.lr, sft.minibatch),
        (base.sft.as_ref().unwrap().lr, base.sft.as_ref().unwrap().minibatch)
    );
    assert_eq!((cfg.run.seed, cfg.run.iterations, cfg.model.init.as_deref()), (2, 0, Some(init)));
}

#[test]
fn plan_errors_say_what_to_do() {
    let check = |extra: &str| -> String {
        let text = PLAN.replace("seeds = [0]", &format!("seeds = [0]\n{extra}"));
        toml::from_str::<Plan>(&text).unwrap().check().unwrap_err().to_string()
    };
    let e = check("clone_seeds = []");
    assert!(
        e.contains("clone_seeds is empty")
            && e.contains("clone_seeds = [0, 1, 2]")
            && e.contains("leave the key out"),
        "{e}"
    );
    let e = check("clone_seeds = [1, 1]");
    assert!(e.contains("lists 1 twice"), "{e}");
    let e = check("test_episodes = 0");
    assert!(e.contains("test_episodes must be at least 1") && e.contains("100"), "{e}");
    let e = check("more_sft_max_epochs = 0");
    assert!(e.contains("more_sft = false"), "{e}");
    let with_algo = PLAN.replace("algos = [\"grpo\"]", "algos = [\"grpo\", \"more-sft\"]");
    let e = toml::from_str::<Plan>(&with_algo).unwrap().check().unwrap_err().to_string();
    assert!(
        e.contains("\"more-sft\" is not an algorithm")
            && e.contains("remove it from algos")
            && e.contains("more_sft = false"),
        "{e}"
    );
}

#[test]
fn success_replay_cells_start_from_the_clones_demonstrations() {
    let plan: Plan = toml::from_str(
        &PLAN.replace("config = \"t.toml\"", "config = \"t.toml\"\nalgo = { success_replay = 8 }"),
    )
    .unwrap();
    let written = TrainConfig::parse(TASK).unwrap();
    let init = Path::new("out/t/clone-c1/checkpoints/iter-000000");
    let cfg = cell_config(&plan, &plan.tasks[0], &written, "grpo", 1, init).unwrap();
    assert_eq!(cfg.algo.success_replay_demos.as_deref(), Some(Path::new("out/t/clone-c1/demos")));
    cfg.validate().unwrap();
    // without replay there is nothing to seed
    assert_eq!(cell(TASK, "grpo").algo.success_replay_demos, None);
}

#[test]
fn a_plan_task_sets_the_rl_cells_task_sampling() {
    use crate::train::curriculum::TaskSampling;
    let progress = PLAN.replace("config = \"t.toml\"", "config = \"t.toml\"\nsampling = \"progress\"");
    assert_eq!(cell_in(&progress, TASK, "grpo").tasks.sampling, TaskSampling::Progress);
    // the config's own setting stays where the plan task names none
    let written = TASK.replace("[tasks]", "[tasks]\nsampling = \"progress\"");
    assert_eq!(cell(&written, "grpo").tasks.sampling, TaskSampling::Progress);
    assert_eq!(cell(TASK, "grpo").tasks.sampling, TaskSampling::Uniform);
    let e =
        toml::from_str::<Plan>(&PLAN.replace("config = \"t.toml\"", "config = \"t.toml\"\nsampling = \"x\""))
            .unwrap_err()
            .to_string();
    assert!(e.contains("uniform") && e.contains("progress"), "{e}");
}

#[test]
fn every_plan_in_benches_learning_loads() {
    // A plan whose config moved or whose keys went stale fails here, not hours into a run.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/learning");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            Plan::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 7, "found {n} plans in {}", dir.display());
}

#[test]
fn a_cell_killed_while_cloning_resumes_and_one_with_nothing_kept_starts_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cell");
    std::fs::create_dir_all(dir.join("demos")).unwrap();
    assert_eq!(cell_state(&dir).unwrap(), Some(false));
    assert!(!dir.exists(), "nothing to keep: cleared");
    let cloning = crate::train::checkpoint::cloning_dir(&dir);
    std::fs::create_dir_all(&cloning).unwrap();
    std::fs::write(cloning.join(crate::train::checkpoint::TRAINER_FILE), "{}").unwrap();
    assert_eq!(cell_state(&dir).unwrap(), Some(true), "a cloning under way is resumed");
    assert!(cloning.is_dir());
    std::fs::write(dir.join(CELL_FILE), "{}").unwrap();
    assert_eq!(cell_state(&dir).unwrap(), None, "a finished cell is skipped");
}
