//! Collecting rollouts through a Selenium Grid 4 (started on loopback by scripts/grid.sh).

mod common;

use common::repo;
use std::process::Command;

struct Grid(u16);

impl Drop for Grid {
    fn drop(&mut self) {
        let _ = Command::new(repo("scripts/grid.sh")).args(["stop", &self.0.to_string()]).status();
    }
}

#[test]
fn collects_through_a_selenium_grid() {
    let port = 4400 + (std::process::id() % 500) as u16;
    let out = Command::new(repo("scripts/grid.sh")).args(["start", &port.to_string(), "2"]).output().unwrap();
    let _grid = Grid(port);
    assert!(out.status.success(), "grid.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
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
