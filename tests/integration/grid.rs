//! Collecting rollouts and training through a Selenium Grid 4 (started on loopback by
//! scripts/grid.sh).

use crate::common;

use common::repo;
use std::process::Command;

struct Grid(u16);

impl Drop for Grid {
    fn drop(&mut self) {
        let _ = Command::new(repo("scripts/grid.sh")).args(["stop", &self.0.to_string()]).status();
    }
}

impl Grid {
    /// Start a Grid with 2 sessions; `slot` keeps the tests of this file on different ports.
    fn start(slot: u16) -> (Grid, String) {
        let port = 4400 + (std::process::id() % 250) as u16 * 2 + slot;
        let out =
            Command::new(repo("scripts/grid.sh")).args(["start", &port.to_string(), "2"]).output().unwrap();
        let grid = Grid(port);
        assert!(out.status.success(), "grid.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        (grid, String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// How many sessions the Grid has handed out (from its log).
    fn sessions(&self) -> usize {
        let log = std::fs::read_to_string(repo(&format!(".cache/grid/grid-{}.log", self.0))).unwrap();
        log.matches("Session created by the Distributor").count()
    }
}

#[test]
fn collects_through_a_selenium_grid() {
    let (_grid, url) = Grid::start(0);
    let rec = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args([
            "run",
            "--task",
            "miniwob/click-button",
            "--policy",
            "oracle",
            "--episodes",
            "4",
            "--envs",
            "2",
        ])
        .args(["--webdriver", &url, "--record"])
        .arg(rec.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.ends_with("episodes=4 success_rate=1.000 mean_reward=1.000\n"), "{text}");
    let set = guirl::rollout::TrajectorySet::read(rec.path()).unwrap();
    assert_eq!(set.trajectories.len(), 4);
}

#[test]
fn trains_through_a_selenium_grid() {
    let (grid, url) = Grid::start(1);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("grid.toml");
    let task = repo("fixtures/tasks/two-buttons.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nname = \"grid\"\niterations = 1\n[tasks]\nids = [\"{}\"]\n[model]\npreset = \"tiny\"\n\
             [algo]\ngroup_size = 2\nbatch_seeds = 2\nminibatch = 4\n[rollout]\nenvs = 2\nmax_steps = 1\n\
             [eval]\ninterval = 0\n",
            task.display()
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .arg("train")
        .arg(&config)
        .arg("--out")
        .arg(&run)
        .args(["--webdriver", &url, "--command-timeout", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("iterations=1"), "{text}");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert!(metrics.lines().any(|l| l.contains("\"iteration\":1")), "{metrics}");
    // where the iteration's time went, kept beside the metrics (the small policy answers whole calls)
    let phases = std::fs::read_to_string(run.join("phases.md")).unwrap();
    assert!(
        phases.contains("| **iteration** (the trainer) |") && phases.contains("policy: whole calls"),
        "{phases}"
    );
    assert!(grid.sessions() >= 2, "the rollouts ran in the Grid's browsers");
}
