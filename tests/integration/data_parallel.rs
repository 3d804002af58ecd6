//! Data-parallel training (`guirl train --nproc N`) on real browsers with the real tiny
//! policy: ranks repeat exactly, collect what one process collects, write the run folder
//! once, stop together when one of them dies, and resume.

use crate::common;
use crate::determinism::{assert_same_run, config_text, demos, metrics, train};
use common::fails_with;
use guirl::train::TrainConfig;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn guirl_train(config: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_guirl"));
    c.arg("train").arg(config).arg("--out").arg(out).args(extra);
    c
}

fn write_config(dir: &Path, name: &str, iterations: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, config_text(iterations, 1)).unwrap();
    p
}

fn ok(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "guirl train failed:\n{err}");
    err
}

/// Behaviour cloning on oracle demonstrations, then GRPO with an evaluation, on the
/// multi-step counter task, over two ranks of one browser each: twice, against one
/// process. The ranks sum their gradients in rank order, so a data-parallel run repeats
/// bit for bit; against one process the gradients agree only up to float rounding (the
/// update's unit test bounds that), which AdamW can amplify on near-zero gradients, so
/// only what does not pass through an update is compared there: the demonstrations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ranks_repeat_exactly_and_record_what_one_process_records() {
    let root = tempfile::tempdir().unwrap();
    let cfg = write_config(root.path(), "c.toml", 2);
    let (a, b, one) = (root.path().join("a"), root.path().join("b"), root.path().join("one"));
    let log_a = ok(guirl_train(&cfg, &a, &["--nproc", "2"]).output().unwrap());
    ok(guirl_train(&cfg, &b, &["--nproc", "2"]).output().unwrap());
    assert_same_run(&a, &b, "two ranks, twice", 2);
    assert!(!log_a.contains("held other weights"), "the ranks drifted apart:\n{log_a}");
    // Rank 0 speaks for the run: its progress lines once, not once per rank.
    assert_eq!(log_a.matches(": observation: ").count(), 1, "{log_a}");
    // Rank 0 alone wrote the run folder: one line per evaluation and iteration.
    assert_eq!(metrics(&a).len(), 3);
    assert_eq!(std::fs::read_to_string(a.join("sft.jsonl")).unwrap().lines().count(), 2);
    train(TrainConfig::parse(&config_text(2, 1)).unwrap(), &one, false).await;
    assert_eq!(demos(&a), demos(&one), "the ranks' demonstrations, gathered, are one process's");
}

/// Collections that overlap updates (`max_staleness = 1`) over two ranks: each rank's
/// background collection exchanges its episodes over connections of its own while the
/// update sums gradients, so a run repeats bit for bit and trains on rollouts one update
/// old from its second iteration on.
#[test]
fn two_ranks_overlap_collections_with_updates_and_repeat_exactly() {
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("c.toml");
    std::fs::write(&cfg, config_text(3, 1).replace("[rollout]\n", "[rollout]\nmax_staleness = 1\n")).unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let log = ok(guirl_train(&cfg, &a, &["--nproc", "2"]).output().unwrap());
    ok(guirl_train(&cfg, &b, &["--nproc", "2"]).output().unwrap());
    assert_same_run(&a, &b, "two ranks at bound 1, twice", 3);
    assert!(!log.contains("held other weights"), "the ranks drifted apart:\n{log}");
    let stale: Vec<Option<u64>> =
        metrics(&a).iter().filter_map(|l| l.get("staleness").map(|s| s.as_u64())).collect();
    assert_eq!(stale, [Some(0), Some(1), Some(1)], "the iterations' staleness");
}

/// Rank 1 killed mid-run: rank 0 and the launcher say which rank stopped and how to go
/// on, and `--resume --nproc 2` finishes the run from its last checkpoint.
#[test]
fn a_killed_rank_stops_the_run_and_it_resumes() {
    let root = tempfile::tempdir().unwrap();
    let cfg = write_config(root.path(), "c.toml", 4);
    let text = std::fs::read_to_string(&cfg).unwrap().replace("interval = 2\n", "interval = 1\n");
    std::fs::write(&cfg, text).unwrap();
    let run = root.path().join("run");
    let launcher = launch_two_ranks(&cfg, &run);
    wait_for(&run.join("checkpoints/iter-000001"));
    let rank1 =
        children(launcher.id()).into_iter().find(|&pid| rank_of(pid) == Some(1)).expect("rank 1 runs");
    Command::new("kill").args(["-KILL", &rank1.to_string()]).status().unwrap();
    let out = launcher.wait_with_output().unwrap();
    fails_with(
        &out,
        &[
            "lost the connection to rank 1",
            "continue the run with --resume --nproc 2",
            "the run stopped: rank 0",
            "rank 1 signal: 9",
        ],
    );
    let resumed = ok(guirl_train(&cfg, &run, &["--resume", "--nproc", "2"]).output().unwrap());
    assert!(!resumed.contains("held other weights"), "{resumed}");
    let m = metrics(&run);
    assert_eq!(m.last().unwrap()["iteration"], 4, "the resumed run finished");
    assert!(run.join("checkpoints/iter-000004").is_dir());
}

/// Ctrl-C (SIGINT to the launcher) stops both ranks at the end of the same iteration, rank 0
/// saves that iteration's checkpoint and says so once, and the launcher exits with Ctrl-C's
/// status (130), not an error: a script must not take the stopped run for a trained one.
#[test]
fn ctrl_c_stops_every_rank_at_one_iteration_with_a_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let cfg = write_config(root.path(), "c.toml", 40);
    let run = root.path().join("run");
    let launcher = launch_two_ranks(&cfg, &run);
    wait_for(&run.join("checkpoints/iter-000000"));
    Command::new("kill").args(["-INT", &launcher.id().to_string()]).status().unwrap();
    let out = launcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(!err.contains("error"), "{err}");
    assert_eq!(err.matches("stopping after this iteration").count(), 1, "{err}");
    assert_eq!(err.matches("checkpoint saved").count(), 1, "{err}");
    // the resume named is on the run's 2 ranks: one process would give other results
    let resume = format!("continue it with `guirl train --resume --nproc 2 --out {}`", run.display());
    assert_eq!(err.matches(&resume).count(), 1, "{err}");
    let m = metrics(&run);
    let last = m.last().unwrap()["iteration"].as_u64().unwrap();
    assert!(last < 40, "the run was not stopped early");
    assert!(run.join(format!("checkpoints/iter-{last:06}")).is_dir(), "no checkpoint of iteration {last}");
}

/// One process: a Ctrl-C saves and exits 130 with the way to continue; a second Ctrl-C,
/// while the first is still finishing its iteration, stops at once, and the browsers it kills
/// on the way out log nothing (they had logged env errors).
#[test]
fn ctrl_c_of_one_process_saves_and_exits_130_and_a_second_stops_quietly() {
    let root = tempfile::tempdir().unwrap();
    let cfg = write_config(root.path(), "c.toml", 40);
    let start = |run: &Path| {
        guirl_train(&cfg, run, &[]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let int = |pid: u32| Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    let run = root.path().join("once");
    let child = start(&run);
    wait_for(&run.join("checkpoints/iter-000000"));
    int(child.id());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let last = metrics(&run).last().unwrap()["iteration"].as_u64().unwrap();
    assert!(last < 40 && run.join(format!("checkpoints/iter-{last:06}")).is_dir(), "{err}");
    assert!(err.contains(&format!("stopped at iteration {last} of 40, saved; continue it with")), "{err}");

    // The second Ctrl-C goes as soon as the first is acknowledged, mid-iteration.
    let run = root.path().join("twice");
    let mut child = start(&run);
    wait_for(&run.join("checkpoints/iter-000000"));
    int(child.id());
    let mut err = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap())) {
        let line = line.unwrap();
        if line.contains("signal again to stop now") {
            int(child.id());
        }
        err.push_str(&line);
        err.push('\n');
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let after = &err[err.find("signal again to stop now").expect("the first stop's line")..];
    assert!(after.contains("interrupted"), "{err}");
    assert!(!after.contains("WARN"), "warnings after the stop:\n{after}");
}

/// `guirl train --nproc 2` started in the background, its error output kept.
fn launch_two_ranks(cfg: &Path, run: &Path) -> std::process::Child {
    guirl_train(cfg, run, &["--nproc", "2"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Wait (at most 2 minutes) until the run has written the checkpoint folder `dir`.
fn wait_for(dir: &Path) {
    let t0 = Instant::now();
    while !dir.is_dir() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no {} after 2 minutes", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process ids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// `RANK` in a process's environment.
fn rank_of(pid: u32) -> Option<u32> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| std::str::from_utf8(kv).ok()?.strip_prefix("RANK=")?.parse().ok())
}

#[test]
fn launch_mistakes_get_clear_errors() {
    let root = tempfile::tempdir().unwrap();
    let cfg = write_config(root.path(), "c.toml", 1);
    let out_dir = root.path().join("r");
    let run = |envs: &[(&str, &str)], extra: &[&str]| {
        let mut c = guirl_train(&cfg, &out_dir, extra);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    fails_with(&run(&[], &["--nproc", "0"]), &["--nproc", "0"]);
    fails_with(
        &run(&[("WORLD_SIZE", "2"), ("RANK", "0")], &["--nproc", "2"]),
        &["already is one rank", "WORLD_SIZE"],
    );
    fails_with(&run(&[("WORLD_SIZE", "2")], &[]), &["RANK is not set", "--nproc 2"]);
    fails_with(&run(&[("WORLD_SIZE", "2"), ("RANK", "5")], &[]), &["ranks run from 0 to 1"]);
    // how GPU gradients are summed: said once by the launcher, before any rank starts
    let bad = run(&[("GUIRL_DIST_BACKEND", "gloo")], &["--nproc", "2"]);
    fails_with(&bad, &["GUIRL_DIST_BACKEND=\"gloo\"", "nccl, tcp or auto"]);
    assert_eq!(String::from_utf8_lossy(&bad.stderr).matches("GUIRL_DIST_BACKEND").count(), 1);
    if !cfg!(feature = "nccl") {
        fails_with(
            &run(&[("GUIRL_DIST_BACKEND", "nccl")], &["--nproc", "2"]),
            &["no NCCL", "--features nccl"],
        );
    }
    // A rank whose partner never comes: rank 0 names the missing rank.
    let lonely =
        run(&[("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_PORT", "0"), ("GUIRL_DIST_TIMEOUT", "1")], &[]);
    fails_with(&lonely, &["rank(s) 1", "GUIRL_DIST_TIMEOUT"]);
}
