//! A `guirl` process stopped by a signal leaves no browser behind: SIGTERM kills its
//! browsers before it exits, and after a SIGKILL the next guirl process removes them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `guirl run` with a long random-policy job on `envs` browsers.
fn long_run(envs: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--policy", "random", "--episodes", "100000"])
        .args(["--envs", envs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running guirl")
}

/// Profile folders owned by process `pid`.
fn profiles_of(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|d| {
            d.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("guirl-chromium-"))
                && std::fs::read_to_string(d.join("guirl.owner")).is_ok_and(|s| s.trim() == pid.to_string())
        })
        .collect()
}

/// Whether any process runs with profile `dir`.
fn browser_running(dir: &Path) -> bool {
    Command::new("pgrep")
        .arg("-f")
        .arg(format!("user-data-dir={}", dir.display()))
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Wait until `child` has `n` browsers running, and return their profiles.
fn wait_for_browsers(child: &Child, n: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dirs = profiles_of(child.id());
        if dirs.len() == n && dirs.iter().all(|d| browser_running(d)) {
            return dirs;
        }
        assert!(Instant::now() < deadline, "guirl did not start {n} browsers in 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Lines in `file` so far (0 before it exists).
fn lines_in(file: &Path) -> usize {
    std::fs::read_to_string(file).unwrap_or_default().lines().count()
}

/// Wait (at most 60 s) until a journal being written has `n` lines.
fn wait_for_lines(file: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines_in(file) < n {
        assert!(Instant::now() < deadline, "{} has no {n} lines after 60 s", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Poll until `cond` holds (up to 10 s).
fn eventually(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

#[test]
fn sigterm_kills_the_browsers_before_exiting() {
    let mut child = long_run("2");
    let dirs = wait_for_browsers(&child, 2);
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "exit status after SIGTERM: {status}");
    for d in &dirs {
        assert!(eventually(|| !browser_running(d)), "a browser of {} outlived guirl", d.display());
        assert!(!d.exists(), "profile {} left behind", d.display());
    }
    // nor one started after the kill, by an env whose browser the kill took
    let late = profiles_of(child.id());
    assert!(late.is_empty(), "browsers started during the stop outlived guirl: {late:?}");
}

#[test]
fn the_next_run_removes_what_a_killed_run_left() {
    let mut child = long_run("1");
    let dirs = wait_for_browsers(&child, 1);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    // SIGKILL runs no handler: the browser is orphaned, its profile stays.
    assert!(dirs.iter().all(|d| d.exists()));
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--policy", "random", "--episodes", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for d in &dirs {
        assert!(eventually(|| !browser_running(d)), "the orphaned browser of {} still runs", d.display());
        assert!(!d.exists(), "profile {} left behind", d.display());
    }
}

/// A bench stopped by Ctrl-C journals no episode the stop broke (their browsers killed, or
/// none started any more): no env_error row, no report as if it had finished, so `--resume`
/// runs every episode that did not finish.
#[test]
fn a_stopped_bench_journals_no_episode_the_stop_broke() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args([
            "bench",
            "--suite",
            "builtin",
            "--policy",
            "random",
            "--episodes-per-task",
            "40",
            "--envs",
            "2",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running guirl");
    let journal = out.join("results.jsonl");
    wait_for_lines(&journal, 10);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status after Ctrl-C: {status}");
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(!text.contains("env_error"), "episodes the stop broke were journaled:\n{text}");
    assert!(!out.join("report.md").exists(), "a report as if the bench had finished");
    let late = profiles_of(child.id());
    assert!(late.is_empty(), "browsers outlived the bench: {late:?}");
}

/// A Ctrl-C of `guirl run` says what it had finished, and where that is kept: with `--json`
/// nothing else would say it.
#[test]
fn a_stopped_run_says_which_episodes_had_ended() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--policy", "random", "--episodes", "100000", "--json"])
        .arg("--record")
        .arg(&rec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running guirl");
    let lines = || lines_in(&rec.join("trajectories.jsonl"));
    wait_for_lines(&rec.join("trajectories.jsonl"), 2);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let said = err.lines().find(|l| l.contains("episodes had ended")).unwrap_or_else(|| panic!("{err}"));
    let n: usize = said.trim_start_matches("guirl: ").split(' ').next().unwrap().parse().unwrap();
    assert!(n >= 2 && n == lines(), "said {said}, recorded {}", lines());
    assert!(
        said.contains(" of 100000 episodes") && said.contains(&format!("recorded in {}", rec.display())),
        "{said}"
    );
}

/// `guirl train` killed during behaviour cloning loses at most the epoch under way: `--resume`
/// goes on from the last epoch saved; a Ctrl-C there saves, says so, and exits 130.
#[test]
fn a_cloning_killed_then_stopped_goes_on_from_its_last_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, run) = (dir.path().join("c.toml"), dir.path().join("run"));
    // Epochs of a few milliseconds: far more than the test lets run.
    std::fs::write(
        &cfg,
        "[run]\nname = \"c\"\nseed = 3\niterations = 0\n[tasks]\nids = [\"miniwob/click-test\"]\n\
         [model]\npreset = \"tiny\"\nkinds = [\"click\"]\n[sft]\noracle_episodes = 2\nepochs = 100000\n\
         [rollout]\nenvs = 1\nmax_steps = 2\n[eval]\ninterval = 0\n",
    )
    .unwrap();
    let log = run.join("sft.jsonl");
    let train = |resume: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_guirl"));
        c.arg("train").arg(&cfg).arg("--out").arg(&run);
        if resume {
            c.arg("--resume");
        }
        c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("running guirl")
    };
    let epochs = || -> Vec<u64> {
        let text = std::fs::read_to_string(&log).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["epoch"].as_u64())
            .collect()
    };
    let saved = || -> u64 {
        let state = std::fs::read_to_string(run.join("checkpoints/cloning/trainer.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&state).unwrap()["sft_epochs"].as_u64().unwrap()
    };
    let mut child = train(false);
    wait_for_lines(&log, 3);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let kept = saved();
    assert!(kept >= 2, "epochs logged before the kill are saved: {kept}");
    let child = train(true);
    wait_for_lines(&log, kept as usize + 3);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let at = saved();
    assert!(at > kept + 2, "the resumed cloning went on from epoch {kept}: now at {at}");
    assert_eq!(epochs(), (1..=at).collect::<Vec<_>>(), "every epoch logged once, none lost");
    let said =
        format!("stopped during behaviour cloning, after epoch {at} of 100000, saved; continue it with");
    assert!(err.contains(&said) && err.contains("guirl train --resume --out"), "{err}");
    assert!(!run.join("checkpoints/latest").exists());
    // The run folder is no policy yet; the message says where its clone so far is.
    let out = crate::common::guirl(&[
        "run",
        "--task",
        "miniwob/click-test",
        "--episodes",
        "1",
        "--policy",
        run.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("stopped during behaviour cloning")
            && err.contains("checkpoints/cloning"),
        "{err}"
    );
}

/// A second Ctrl-C stops a training run at once, mid-iteration, and still says what is kept
/// and how to go on.
#[test]
fn a_second_signal_stops_training_at_once_and_says_how_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, run) = (dir.path().join("c.toml"), dir.path().join("run"));
    // Iterations of many episodes: the first one is far from done when the signals come.
    std::fs::write(
        &cfg,
        "[run]\nname = \"c\"\niterations = 100\n[tasks]\nids = [\"miniwob/click-test\"]\n\
         [model]\npreset = \"tiny\"\n[algo]\nbatch_seeds = 64\n[rollout]\nenvs = 1\nmax_steps = 10\n\
         [eval]\ninterval = 0\n",
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .arg("train")
        .arg(&cfg)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running guirl");
    wait_for_browsers(&child, 1);
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("guirl: interrupted; the browsers it started are closed"), "{err}");
    assert!(
        err.contains(&format!(
            "what the run saved (checkpoints, recorded demonstrations, cloning epochs) is in {}",
            run.display()
        )) && err.contains("guirl train --resume --out"),
        "{err}"
    );
}

/// Ctrl-C on `guirl train … | tee log` reaches `tee` too, which closes the pipe before
/// guirl writes its last lines: the run still saves the iteration it stopped after and
/// exits 130 (a closed stdout or stderr is no crash).
#[test]
fn a_stopped_training_whose_output_pipe_closed_still_saves() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, run) = (dir.path().join("c.toml"), dir.path().join("run"));
    std::fs::write(
        &cfg,
        "[run]\nname = \"c\"\niterations = 100\n[tasks]\nids = [\"miniwob/click-test\"]\n\
         [model]\npreset = \"tiny\"\n[algo]\nbatch_seeds = 1\ngroup_size = 4\n[rollout]\nenvs = 1\nmax_steps = 3\n\
         [eval]\ninterval = 0\n[checkpoint]\ninterval = 0\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .arg("train")
        .arg(&cfg)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running guirl");
    // The reader is gone, as a `tee` killed by the same Ctrl-C.
    drop(child.stdout.take());
    drop(child.stderr.take());
    wait_for_browsers(&child, 1);
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    let saved: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("iter-") && n != "iter-000000")
        .collect();
    assert!(!saved.is_empty(), "the iteration it stopped after is saved: {saved:?}");
}
