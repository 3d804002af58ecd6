//! A cell's config: the algorithm's own defaults, the task file's explicit keys kept.

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
    assert_eq!(dapo.algo.kind, AlgoKind::Dapo);
    assert_eq!((dapo.algo.clip_low(), dapo.algo.clip_high()), (0.2, 0.28));
    assert!(dapo.algo.dynamic_sampling() && dapo.algo.overlong_penalty());
    let gspo = cell(TASK, "gspo");
    assert_eq!((gspo.algo.clip_low(), gspo.algo.clip_high()), (3e-4, 4e-4));
    assert_eq!(cell(TASK, "dr_grpo").algo.adv_std(), AdvStd::None);
    let grpo = cell(TASK, "grpo");
    assert_eq!(grpo.algo.clip_high(), 0.2);
    assert!(!grpo.algo.dynamic_sampling());
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
        [overrides.ppo]\ngamma = 0.95\n\
        [[tasks]]\nname = \"t\"\nconfig = \"t.toml\"\n\
        [tasks.algo]\nlr = 5e-5\nwarmup = 3\n\
        [tasks.overrides.gigpo]\nlr = 1e-4\n";
    let ppo = cell_in(plan, TASK, "ppo");
    assert_eq!((ppo.algo.lr, ppo.algo.warmup, ppo.algo.gamma), (5e-5, 3, 0.95));
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
