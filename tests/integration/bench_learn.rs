//! `guirl bench-learn` end to end on a tiny plan (real Chromium, real training): two
//! clones, an algorithm from each, the more-cloning baseline of each, every cell's test
//! split, a benchmark killed mid-run and run again that skips finished cells, the report;
//! the old cell names of a plan without clone seeds; and the plan errors a user can make.

use crate::common;

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

/// The plan of the main test: clones 0 and 1, grpo from each, 6 test episodes a cell.
const PLAN: &str = "clone_seeds = [0, 1]\ntest_episodes = 6\nmore_sft_max_epochs = 3";

fn cell_json(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join("click").join(name).join(CELL_FILE)).unwrap()
}

#[test]
fn a_tiny_plan_runs_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(dir.path(), r#"["grpo"]"#, PLAN);
    let out = dir.path().join("out");
    let (p, o) = (p.to_str().unwrap(), out.to_str().unwrap());
    // Killed once the first clone is done, then run again.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["bench-learn", p, "--out", o])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !out.join("click/clone-c0").join(CELL_FILE).is_file() {
        assert!(t0.elapsed().as_secs() < 150, "the first clone never finished");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let clone = cell_json(&out, "clone-c0");
    let r = guirl(&["bench-learn", p, "--out", o]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(cell_json(&out, "clone-c0"), clone, "the finished clone was skipped, not made again");

    let cells = read_cells(&out).unwrap();
    let names: Vec<(&str, Option<u64>, u64)> =
        cells.iter().map(|c| (c.algo.as_str(), c.clone_seed, c.seed)).collect();
    assert_eq!(
        names,
        [
            ("clone", Some(0), 0),
            ("clone", Some(1), 1),
            ("grpo", Some(0), 0),
            ("grpo", Some(1), 0),
            ("more-sft", Some(0), 0),
            ("more-sft", Some(1), 1)
        ]
    );
    for name in ["clone-c0", "clone-c1", "grpo-c0-s0", "grpo-c1-s0", "more-sft-c0", "more-sft-c1"] {
        assert!(out.join("click").join(name).join(CELL_FILE).is_file(), "{name}");
    }
    let first = guirl::train::seeds::TEST_SEEDS;
    for c in &cells {
        let t = c.test.as_ref().unwrap_or_else(|| panic!("{c:?} has no test result"));
        assert_eq!((t.first_seed, t.per_task, t.episodes), (first, 6, 6), "{c:?}");
        assert!(t.successes <= 6);
        // which episodes it won: as many as it counts, each a test seed of the task
        let won = t.won.as_ref().unwrap_or_else(|| panic!("{c:?} kept no episodes"));
        let seeds: Vec<u64> = won.values().flatten().copied().collect();
        assert_eq!(seeds.len(), t.successes, "{c:?}");
        assert!(won.keys().all(|k| k == "miniwob/click-test"), "{won:?}");
        assert!(seeds.iter().all(|s| (first..first + 6).contains(s)), "{won:?}");
    }
    for c in cells.iter().filter(|c| c.algo == "grpo") {
        // The budget: the run stops after the iteration whose env steps reach 20; an
        // iteration of 2 × 4 rollouts takes 8 to 16 steps.
        assert!((20..36).contains(&c.env_steps), "env steps {}", c.env_steps);
        assert_eq!(c.curve.first().map(|c| c.0), Some(0), "the curve starts at the clone");
        assert_eq!(c.curve.last().map(|c| c.0), Some(c.env_steps), "the last iteration is evaluated");
    }
    for k in [0, 1] {
        let m = cells.iter().find(|c| c.algo == "more-sft" && c.clone_seed == Some(k)).unwrap();
        let sft = m.sft.as_ref().unwrap();
        assert!((1..=3).contains(&sft.epochs) && sft.start_epoch == 2, "{sft:?}");
        assert!(sft.demo_episodes == 8 && sft.demo_env_steps >= 8, "{sft:?}");
        assert!(sft.basis.as_deref().unwrap().contains("median wall-clock"), "{sft:?}");
        assert_eq!(m.env_steps, 0);
        let dir = out.join(format!("click/more-sft-c{k}"));
        assert!(!dir.join("demos").exists(), "the clone's demonstrations are reused, not recorded again");
        // Cloning continues: epochs numbered on from the clone's, the clone's optimizer.
        let log = std::fs::read_to_string(dir.join("sft.jsonl")).unwrap();
        assert!(log.lines().next().unwrap().contains("\"epoch\":3"), "{log}");
        let ckpt = out.join(format!("click/clone-c{k}/checkpoints/iter-000000"));
        assert!(ckpt.join(guirl::train::trainer::SFT_OPTIMIZER_FILE).is_file());
    }

    let stdout = String::from_utf8_lossy(&r.stdout);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(stdout.contains(&md), "the command prints the report");
    for want in [
        "— observation: pixels\n",
        "test pooled [Wilson 95 %]",
        "| clone | 2 |",
        "| grpo | 2 |",
        "| more-sft (+",
        "/12) |",
        "(demos)",
        "the clone trained N more epochs on its demonstrations",
        "seeds 2000000..2000005 of every task",
        "| vs more-sft (test) |",
        " episodes, p ",
    ] {
        assert!(md.contains(want), "{want:?} missing from\n{md}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let grpo = &json["rows"][1];
    assert_eq!((grpo["algo"].as_str(), grpo["cells"].as_u64()), (Some("grpo"), Some(2)));
    assert_eq!(grpo["test_pooled"]["episodes"], 12);
    assert!(grpo["test_pooled"]["ci95"][1].as_f64().unwrap() > 0.0);
    assert_eq!(grpo["gain"]["n"], 2, "each grpo cell paired with its own clone");
    // episode by episode: the discordant episodes against the clones, at most all 12
    let paired = &grpo["paired_clone"];
    let discordant = paired["won"].as_u64().unwrap() + paired["lost"].as_u64().unwrap();
    assert!(discordant <= 12 && paired["p"].as_f64().unwrap() <= 1.0, "{paired}");
    assert!(grpo["paired_more_sft"]["p"].is_number(), "{grpo}");
    assert!(std::fs::metadata(out.join("learning-click.png")).unwrap().len() > 1000);

    // `guirl bench` with one of the clones says what its policy saw.
    let b = dir.path().join("bench");
    let r = guirl(
        &["bench", "--tasks", "miniwob/click-test", "--episodes-per-task", "2", "--out"]
            .into_iter()
            .chain([b.to_str().unwrap(), "--policy", out.join("click/clone-c1").to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let md = std::fs::read_to_string(b.join("report.md")).unwrap();
    assert!(md.contains("- observation: pixels\n"), "{md}");
}

#[test]
fn a_plan_without_clone_seeds_keeps_the_old_cell_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(dir.path(), r#"["grpo"]"#, "test_episodes = 2");
    let out = dir.path().join("out");
    let r =
        guirl(&["bench-learn", p.to_str().unwrap(), "--out", out.to_str().unwrap(), "--only", "click/clone"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let cells = read_cells(&out).unwrap();
    assert_eq!(cells.len(), 1, "--only ran the clone alone");
    assert_eq!((cells[0].algo.as_str(), cells[0].clone_seed, cells[0].seed), ("clone", None, 0));
    assert!(out.join("click/clone").join(CELL_FILE).is_file());
    assert_eq!(cells[0].test.as_ref().map(|t| t.episodes), Some(2));
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
    let p = plan(dir.path(), r#"["grpo"]"#, "clone_seeds = [0, 1]");
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o, "--only", "click/grpo-s0"]),
        &["matches no cell", "TASK/ALGO-cK-sSEED", "click/grpo-c0-s0"],
    );
    let p = plan(dir.path(), r#"["grpo", "more-sft"]"#, "");
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]),
        &["\"more-sft\" is not an algorithm"],
    );
    let p = plan(dir.path(), r#"["grpo"]"#, "clone_seeds = []");
    fails_with(&guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]), &["clone_seeds is empty"]);
    let p = plan(dir.path(), r#"["grpo"]"#, "test_episodes = 0");
    fails_with(
        &guirl(&["bench-learn", p.to_str().unwrap(), "--out", o]),
        &["test_episodes must be at least 1"],
    );
}
