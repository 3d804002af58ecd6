//! `guirl play` driven from piped stdin, as a script would: elements, a click aimed at
//! the button's centre, a malformed line that does not step, a wasted step, recording,
//! and replay.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Session {
    fn start(args: &[&str], cwd: &Path) -> Session {
        let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
            .arg("play")
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting guirl play");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Session { child, stdin, stdout }
    }

    fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{line}").unwrap();
        w.flush().unwrap();
    }

    /// Lines up to and including the first that contains `until`.
    fn read_until(&mut self, until: &str) -> String {
        let mut all = String::new();
        loop {
            let mut l = String::new();
            assert!(self.stdout.read_line(&mut l).unwrap() > 0, "output ended before {until:?}:\n{all}");
            all.push_str(&l);
            if l.contains(until) {
                return all;
            }
        }
    }
}

/// The centre `(x, y)` of the first element line containing `what`.
fn centre_of(elements: &str, what: &str) -> (i32, i32) {
    let line =
        elements.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what} in:\n{elements}"));
    let c = line.split("centre=(").nth(1).unwrap().trim_end_matches(')');
    let (x, y) = c.split_once(", ").unwrap();
    (x.parse().unwrap(), y.parse().unwrap())
}

#[test]
fn play_clicks_the_button_records_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("demos");
    let shot = dir.path().join("shot.png");
    let mut s = Session::start(
        &[
            "--task",
            "miniwob/click-test",
            "--seed",
            "3",
            "--record",
            rec.to_str().unwrap(),
            "--screenshot",
            shot.to_str().unwrap(),
        ],
        dir.path(),
    );
    let head = s.read_until("screenshot: ");
    assert!(head.contains("instruction: Click the button."), "{head}");
    // Nothing taken yet: zero, not the -0.000 a float sum of no steps prints.
    assert!(head.contains("step=0 status=running reward=0.000 total=0.000"), "{head}");
    assert!(image::open(&shot).is_ok(), "the screenshot file is a PNG");

    s.send("click(3,");
    let err = s.read_until("done()");
    assert!(err.contains("error: malformed action") && err.contains("no step taken"), "{err}");
    assert!(err.contains("click(x, y)"), "the accepted forms are listed: {err}");

    s.send(":elements");
    let els = s.read_until("centre=(");
    let (x, y) = centre_of(&els, "Click Me!");
    s.send(&format!("click({x}, {y})"));
    let step = s.read_until("episode over");
    // The malformed line did not count: this click is step 1.
    assert!(step.contains("step=1 status=success reward=1.000 total=1.000"), "{step}");
    assert!(step.contains("recorded in"), "{step}");

    s.send("click(1, 1)");
    let refused = s.read_until("error:");
    assert!(refused.contains("the episode is over") && refused.contains(":reset"), "{refused}");
    // A line that is no action gets the parser's message, episode over or not.
    s.send("click(3,");
    let err = s.read_until("done()");
    assert!(err.contains("error: malformed action") && !err.contains("episode is over"), "{err}");

    // A second, unfinished episode on the next seed is not recorded.
    s.send(":reset");
    let reset = s.read_until("screenshot: ");
    assert!(reset.contains("seed=4"), "{reset}");
    s.send("hover(1, 1)");
    s.read_until("step=1 status=running");
    // A wasted step the episode goes on after is shown as `serve` shows it.
    s.send("click(5000, 5000)");
    let wasted = s.read_until("step=2");
    assert!(wasted.contains("step=2 status=invalid_action") && wasted.contains("outside the"), "{wasted}");
    s.send(":quit");
    let rest = s.read_until("quit:");
    assert!(rest.contains("not recorded") && rest.contains("quit: 1 episode(s) recorded"), "{rest}");
    drop(s.stdin.take());
    assert!(s.child.wait().unwrap().success());

    let set = guirl::rollout::TrajectorySet::read(&rec).unwrap();
    assert_eq!(set.trajectories.len(), 1);
    let t = &set.trajectories[0].trajectory;
    assert_eq!((t.seed, t.policy.as_str(), t.steps.len()), (3, "human", 1));
    assert_eq!(t.outcome.status, guirl::env::EpisodeStatus::Success);
    assert!(t.steps[0].frame.is_some() && t.final_frame.is_some(), "frames are kept for SFT and replay");
    assert_eq!(t.steps[0].action, format!("click({x}, {y})"));

    let replay =
        Command::new(env!("CARGO_BIN_EXE_guirl")).arg("replay").arg(&rec).arg("--verify").output().unwrap();
    assert!(replay.status.success(), "replay --verify: {}", String::from_utf8_lossy(&replay.stdout));
}

#[test]
fn piped_end_of_input_quits_and_json_prints_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::start(&["--task", "miniwob/click-test", "--json"], dir.path());
    s.send(":elements");
    s.send("nonsense");
    drop(s.stdin.take());
    let mut events = Vec::new();
    for l in (&mut s.stdout).lines() {
        events.push(serde_json::from_str::<serde_json::Value>(&l.unwrap()).expect("one JSON object a line"));
    }
    assert!(s.child.wait().unwrap().success());
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reset", "elements", "error", "quit"]);
    assert_eq!(events[1]["elements"][0]["tag"], "button");
    assert!(
        dir.path().join("play.png").is_file(),
        "the default screenshot is play.png in the current folder"
    );
}

#[test]
fn unknown_task_exits_2_with_the_closest_ids() {
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["play", "--task", "miniwob/click-tset"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown task \"miniwob/click-tset\"") && err.contains("miniwob/click-test"),
        "{err}"
    );
}

/// A screenshot path in a folder that does not exist is refused before anything is
/// opened: a `--record` folder is not left behind empty.
#[test]
fn a_screenshot_in_a_missing_folder_is_refused_before_recording() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let shot = dir.path().join("nodir").join("p.png");
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["play", "--task", "miniwob/click-test", "--record", rec.to_str().unwrap()])
        .arg("--screenshot")
        .arg(&shot)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nodir does not exist"), "{err}");
    assert!(!rec.exists(), "no empty set is left behind");
}

/// `--from SET:LINE:STEP` opens a recorded episode after its first steps (replayed, every
/// screen checked against the recording) for a person to continue; the recorded
/// continuation keeps the replayed steps, marked, and replays as a whole. A recording
/// whose screen no longer matches, and every malformed or out-of-range `--from`, is an
/// error that says what to give.
#[test]
fn from_opens_a_recorded_episode_at_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let rec_args = ["--task", "miniwob/click-test", "--seed", "5", "--record", first.to_str().unwrap()];
    let mut s = Session::start(&rec_args, dir.path());
    s.read_until("screenshot: ");
    s.send(":elements");
    let (x, y) = centre_of(&s.read_until("centre=("), "Click Me!");
    for (i, a) in ["hover(2, 2)", "wait(50)"].iter().enumerate() {
        s.send(a);
        s.read_until(&format!("step={} status=running", i + 1));
    }
    s.send(&format!("click({x}, {y})"));
    s.read_until("episode over");
    s.send(":quit");
    s.read_until("quit: 1 episode(s) recorded");
    drop(s.stdin.take());
    assert!(s.child.wait().unwrap().success());

    let from = format!("{}:1:2", first.display());
    let mut s = Session::start(&["--from", &from, "--record", second.to_str().unwrap()], dir.path());
    let head = s.read_until("screenshot: ");
    assert!(head.contains("task=miniwob/click-test seed=5"), "task and seed are the recording's: {head}");
    assert!(head.contains("replayed 2 recorded step(s)") && head.contains("step=2 status=running"), "{head}");
    s.send(&format!("click({x}, {y})"));
    let step = s.read_until("episode over");
    assert!(step.contains("step=3 status=success"), "{step}");
    s.send(":quit");
    s.read_until("quit: 1 episode(s) recorded");
    drop(s.stdin.take());
    assert!(s.child.wait().unwrap().success());
    let set = guirl::rollout::TrajectorySet::read(&second).unwrap();
    let t = &set.trajectories[0].trajectory;
    let marks: Vec<bool> = t.steps.iter().map(|s| s.prefix).collect();
    assert_eq!(marks, [true, true, false], "the replayed steps are marked");
    assert_eq!((t.seed, t.branch_point(), t.outcome.status), (5, 2, guirl::env::EpisodeStatus::Success));
    let replay = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .arg("replay")
        .arg(&second)
        .arg("--verify")
        .output()
        .unwrap();
    assert!(replay.status.success(), "replay --verify: {}", String::from_utf8_lossy(&replay.stdout));

    let play = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_guirl"))
            .arg("play")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let set_dir = first.display().to_string();
    for (from, says) in [
        (format!("{set_dir}:4:1"), "has no trajectory on line 4 (its lines: 1)"),
        (format!("{set_dir}:1:3"), "has 3 step(s), so the step must be 0 to 2"),
        (set_dir.clone(), "--from takes SET:LINE:STEP"),
        (format!("{set_dir}:0:1"), "is not a line number"),
    ] {
        let out = play(&["--from", &from]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{from}: {err}");
        assert!(err.contains(says), "{from}: {err}");
    }
    let out = play(&["--from", &from, "--task", "miniwob/click-test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));

    // A recording whose screens are not what the page shows: refused (the frame file is
    // shared by the identical screens before steps 0 and 1, so step 0 is the first to differ).
    let recorded = guirl::rollout::TrajectorySet::read(&first).unwrap();
    let name = recorded.trajectories[0].trajectory.steps[1].frame.clone().unwrap();
    let mut img = recorded.load_frame(&name).unwrap();
    img.pixels_mut().for_each(|p| p.0 = [255 - p.0[0], 255 - p.0[1], 255 - p.0[2]]);
    img.save(recorded.frame_path(&name)).unwrap();
    let out = play(&["--from", &from]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("diverged at step 0") && err.contains("differs from the recording"), "{err}");
}
