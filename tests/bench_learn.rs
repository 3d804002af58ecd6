//! `guirl bench-learn` end to end on a tiny plan (real Chromium, real training): the
//! clone, two algorithms on an env-step budget, a killed-and-rerun benchmark that skips
//! finished cells, the report; and the plan errors a user can make.

mod common;

use common::{fails_with, guirl};
use guirl::bench::learning::{read_cells, CELL_FILE};
use std::path::Path;

const CONFIG: &str = r#"
[run]
name = "tiny"
seed = 0
iterations = 1
[tasks]
ids = ["miniwob/click-test"]
eval_seeds = { start = 1000000, count = 8 }
[model]
preset = "tiny"
kinds = ["click"]
[sft]
oracle_episodes = 8
epochs = 2
lr = 1e-3
[algo]
group_size = 4
batch_seeds = 2
minibatch = 16
[rollout]
envs = 2
max_steps = 2
[eval]
interval = 2
"#;

fn plan(dir: &Path, algos: &str, extra: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("tiny.toml"), CONFIG).unwrap();
    let p = dir.join("plan.toml");
    let text = format!(
        "env_steps = 20\nseeds = [0]\nalgos = {algos}\n{extra}\n[[tasks]]\nname = \"click\"\nconfig = \"tiny.toml\"\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_tiny_plan_runs_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(dir.path(), r#"["grpo", "ppo"]"#, "[overrides.ppo]\ncritic_warmup = 1");
    let out = dir.path().join("out");
    let (p, o) = (p.to_str().unwrap(), out.to_str().unwrap());
    let r = guirl(&["bench-learn", p, "--out", o, "--only", "click/grpo"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let cells = read_cells(&out).unwrap();
    let names: Vec<&str> = cells.iter().map(|c| c.algo.as_str()).collect();
    assert_eq!(names, ["clone", "grpo"], "--only ran the clone and grpo's cell alone");
    let grpo = &cells[1];
    // The budget: the run stops after the iteration whose env steps reach 20; an
    // iteration of 2 × 4 rollouts takes 8 to 16 steps.
    assert!((20..36).contains(&grpo.env_steps), "env steps {}", grpo.env_steps);
    assert_eq!(grpo.curve.first().map(|c| c.0), Some(0), "the curve starts at the clone");
    assert_eq!(grpo.curve.last().map(|c| c.0), Some(grpo.env_steps), "the last iteration is evaluated");
    let clone = std::fs::read_to_string(out.join("click/clone").join(CELL_FILE)).unwrap();

    // Again without --only: finished cells are skipped (the clone is not made again), ppo runs.
    let r = guirl(&["bench-learn", p, "--out", o]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read_to_string(out.join("click/clone").join(CELL_FILE)).unwrap(), clone);
    assert_eq!(read_cells(&out).unwrap().len(), 3);
    let stdout = String::from_utf8_lossy(&r.stdout);
    for row in ["| clone |", "| grpo |", "| ppo |"] {
        assert!(stdout.contains(row), "{row} missing from\n{stdout}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| ppo |"), "{md}");
    assert!(std::fs::metadata(out.join("learning-click.png")).unwrap().len() > 1000);
    let m = std::fs::read_to_string(out.join("click/ppo-s0/metrics.jsonl")).unwrap();
    assert!(m.contains("value_loss"), "ppo's cell trained a critic");
}

#[test]
fn plan_errors_say_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    let o = o.to_str().unwrap();
    let p = plan(dir.path(), r#"["grpo", "ppo2"]"#, "");
    fails_with(&guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]), &["algos", "ppo2", "gigpo"]);
    let p = plan(dir.path(), r#"["grpo"]"#, "[overrides.ppo]\ngamma = 0.9");
    fails_with(&guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]), &["overrides.ppo", "not in algos"]);
    let p = plan(dir.path(), r#"["grpo"]"#, "");
    std::fs::write(
        dir.path().join("tiny.toml"),
        CONFIG.replace("[sft]\noracle_episodes = 8\nepochs = 2\nlr = 1e-3\n", ""),
    )
    .unwrap();
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]),
        &["has no [sft]", "behaviour-cloned"],
    );
    fails_with(
        &guirl(&["bench-learn", "no-such-plan.toml", "--out", o]),
        &["cannot read plan", "no-such-plan.toml"],
    );
    let p = plan(dir.path(), r#"["grpo"]"#, "");
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o, "--only", "nothing/x-s0"]),
        &["--only \"nothing/x-s0\" matches no cell", "/grpo-s0"],
    );
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o, "--report"]),
        &["does not exist", "without --report"],
    );
}
