//! A writer killed mid-line leaves a torn last line; the next writer cuts it off instead of
//! gluing its first line onto it. A real child process is SIGKILLed halfway through a line.

use guirl::env::EpisodeStatus;
use guirl::rollout::{Outcome, Trajectory, TrajectorySet, TrajectoryWriter};
use guirl::train::metrics::{read_metrics, IterationMetrics, MetricsWriter};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::test_name;

/// Set in the child process: `trajectories DIR` or `metrics FILE`.
const CHILD_ENV: &str = "GUIRL_TEST_TORN_WRITER";

fn traj(seed: u64) -> Trajectory {
    let outcome = Outcome { reward: seed as f64, status: EpisodeStatus::Success, steps: 0, error: None };
    let mut t = Trajectory::new("builtin/two-buttons", seed, vec![], outcome);
    t.instruction = format!("click button {seed}");
    t
}

/// The `i`-th line (0-based) of a run's metrics: iteration `i + 1`, every field kept (the
/// iteration-0 line holds only an evaluation).
fn metrics(i: u64) -> IterationMetrics {
    IterationMetrics { iteration: i + 1, env_steps: 10 * (i + 1), reward_mean: 0.5, ..Default::default() }
}

/// The child: three finished lines through the real writer, then the first half of a
/// fourth written to the same file, then wait to be killed before the rest.
fn torn_writer(kind: &str, path: &Path) -> ! {
    let (line, file) = if kind == "trajectories" {
        let mut w = TrajectoryWriter::open(path).unwrap();
        (0..3).for_each(|s| w.append_line(&traj(s)).unwrap());
        (serde_json::to_string(&traj(3)).unwrap(), path.join("trajectories.jsonl"))
    } else {
        let mut w = MetricsWriter::open(path).unwrap();
        (0..3).for_each(|i| w.append(&metrics(i)).unwrap());
        (serde_json::to_string(&metrics(3)).unwrap(), path.to_path_buf())
    };
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(&line.as_bytes()[..line.len() / 2]).unwrap();
    f.sync_all().unwrap();
    println!("half written");
    std::thread::sleep(std::time::Duration::from_secs(600));
    f.write_all(&line.as_bytes()[line.len() / 2..]).unwrap();
    std::process::exit(0)
}

/// Run the child for `kind` on `path` and SIGKILL it in the middle of its fourth line.
fn kill_mid_line(test: &str, kind: &str, path: &Path) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(module_path!(), test)])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, format!("{kind} {}", path.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("half written") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child exited early");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn child_mode() {
    if let Ok(arg) = std::env::var(CHILD_ENV) {
        let (kind, path) = arg.split_once(' ').unwrap();
        torn_writer(kind, Path::new(path));
    }
}

#[test]
fn trajectories_appended_after_a_killed_writer_all_read_back() {
    child_mode();
    let dir = tempfile::tempdir().unwrap();
    kill_mid_line("trajectories_appended_after_a_killed_writer_all_read_back", "trajectories", dir.path());
    let torn = TrajectorySet::read(dir.path()).unwrap();
    assert_eq!((torn.trajectories.len(), torn.torn_line), (3, Some(4)), "readers accept the torn line");
    let mut w = TrajectoryWriter::open(dir.path()).unwrap();
    for s in 4..6 {
        w.append_line(&traj(s)).unwrap();
    }
    let set = TrajectorySet::read(dir.path()).unwrap();
    assert_eq!(set.torn_line, None);
    let got: Vec<Trajectory> = set.trajectories.into_iter().map(|t| t.trajectory).collect();
    assert_eq!(got, [0, 1, 2, 4, 5].map(traj).to_vec(), "none lost, none glued");
}

#[test]
fn metrics_appended_after_a_killed_writer_all_read_back() {
    child_mode();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.jsonl");
    kill_mid_line("metrics_appended_after_a_killed_writer_all_read_back", "metrics", &path);
    assert_eq!(read_metrics(&path).unwrap().len(), 3, "readers accept the torn line");
    let mut w = MetricsWriter::open(&path).unwrap();
    for i in 3..5 {
        w.append(&metrics(i)).unwrap();
    }
    assert_eq!(read_metrics(&path).unwrap(), (0..5).map(metrics).collect::<Vec<_>>());
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 5);
}
