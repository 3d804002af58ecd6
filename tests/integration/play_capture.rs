//! `guirl play --headful --capture` in a virtual X display (Xvfb), with a person's input
//! injected at the operating-system level by xdotool (not through WebDriver): the
//! recorded trajectory holds the GuiActions done in the window, the task's verdict, and
//! `guirl replay --verify` reproduces it in a headless browser.
//!
//! Needs `Xvfb` and `xdotool` (scripts/setup.sh installs them); fails saying so without.

use crate::common;

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A virtual X display, stopped on drop.
struct Xvfb {
    child: Child,
    display: String,
}

impl Xvfb {
    fn start() -> Xvfb {
        for tool in ["Xvfb", "xdotool"] {
            let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
            assert!(
                found.is_ok_and(|o| o.status.success()),
                "{tool} is not installed: this test drives a visible browser in a virtual X \
                 display with OS-level input; run scripts/setup.sh (or `sudo apt-get install -y \
                 xvfb xdotool`)"
            );
        }
        // Xvfb picks a free display number itself and writes it to stdout (-displayfd).
        let mut child = Command::new("Xvfb")
            .args(["-displayfd", "1", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting Xvfb");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let n: u32 = line.trim().parse().unwrap_or_else(|_| panic!("Xvfb gave no display number: {line:?}"));
        Xvfb { child, display: format!(":{n}") }
    }

    /// Run xdotool on this display.
    fn xdotool(&self, args: &[&str]) -> String {
        let out = Command::new("xdotool").args(args).env("DISPLAY", &self.display).output().unwrap();
        assert!(out.status.success(), "xdotool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `guirl play --json` with the given arguments, on `x`'s display.
struct Play {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Play {
    fn start(x: &Xvfb, args: &[&str], cwd: &Path) -> Play {
        let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
            .args(["play", "--json", "--headful", "--capture"])
            .args(args)
            .env("DISPLAY", &x.display)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting guirl play");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Play { child, stdin, stdout }
    }

    fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{line}").unwrap();
        w.flush().unwrap();
    }

    /// Events up to and including the first of kind `until`.
    fn until(&mut self, until: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let mut l = String::new();
            assert!(self.stdout.read_line(&mut l).unwrap() > 0, "output ended before {until:?}: {seen:#?}");
            let e: Value = serde_json::from_str(&l).unwrap_or_else(|_| panic!("not JSON: {l}"));
            seen.push(e.clone());
            if e["event"] == until {
                return seen;
            }
        }
    }

    fn quit(mut self) {
        self.send(":quit");
        self.until("quit");
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// Screen position of screenshot pixel `(x, y)` given the capture's `screen` origin.
fn on_screen(capture: &Value, (x, y): (i64, i64)) -> (String, String) {
    let s = &capture["screen"];
    ((s[0].as_i64().unwrap() + x).to_string(), (s[1].as_i64().unwrap() + y).to_string())
}

/// The centre of the first element whose `key` is `value`.
fn centre(elements: &Value, key: &str, value: &str) -> (i64, i64) {
    let e = elements["elements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == value)
        .unwrap_or_else(|| panic!("no element with {key}={value:?}: {elements}"));
    (e["center"][0].as_i64().unwrap(), e["center"][1].as_i64().unwrap())
}

/// Move the pointer to screenshot pixel `at` and click, as a person would.
fn click(x: &Xvfb, capture: &Value, at: (i64, i64)) {
    let (sx, sy) = on_screen(capture, at);
    x.xdotool(&["mousemove", &sx, &sy]);
    std::thread::sleep(Duration::from_millis(200));
    x.xdotool(&["click", "1"]);
}

/// The (x, y) of a recorded `click(x, y)`.
fn clicked(action: &str) -> (i64, i64) {
    let inner =
        action.strip_prefix("click(").and_then(|a| a.strip_suffix(')')).unwrap_or_else(|| panic!("{action}"));
    let (a, b) = inner.split_once(", ").unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

fn near(got: (i64, i64), want: (i64, i64)) -> bool {
    (got.0 - want.0).abs() <= 3 && (got.1 - want.1).abs() <= 3
}

/// The set recorded in `rec` replays with the same rewards, statuses and frames, in a
/// window on `x`'s display as it was recorded: headless Chromium draws no hover state on a
/// native button, so the last screen (the pointer still on the button clicked last)
/// differs from a window's.
fn replays(x: &Xvfb, rec: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["replay", rec.to_str().unwrap(), "--verify", "--headful"])
        .env("DISPLAY", &x.display)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay --verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_click_in_the_window_is_recorded_and_replays() {
    let x = Xvfb::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("demos");
    let args = ["--task", "miniwob/click-test", "--seed", "3", "--record", rec.to_str().unwrap()];
    let mut p = Play::start(&x, &args, dir.path());
    let capture = p.until("capture").pop().unwrap();
    let window = x.xdotool(&["search", "--onlyvisible", "--class", "chromium"]);
    assert!(!window.trim().is_empty(), "xdotool finds the browser window");
    p.send(":elements");
    let els = p.until("elements").pop().unwrap();
    let target = centre(&els, "text", "Click Me!");
    click(&x, &capture, target);
    let events = p.until("episode_end");
    let steps: Vec<&Value> = events.iter().filter(|e| e["event"] == "step").collect();
    assert_eq!(steps.len(), 1, "{events:#?}");
    let got = clicked(steps[0]["action"].as_str().unwrap());
    assert!(near(got, target), "clicked at {got:?}, the button's centre is {target:?}");
    assert_eq!(steps[0]["captured"], true);
    assert_eq!(events.last().unwrap()["status"], "success");
    p.quit();

    let set = guirl::rollout::TrajectorySet::read(&rec).unwrap();
    let t = &set.trajectories[0].trajectory;
    assert_eq!((t.seed, t.policy.as_str(), t.steps.len()), (3, "human", 1));
    assert_eq!(t.outcome.status, guirl::env::EpisodeStatus::Success);
    assert!(t.steps[0].frame.is_some() && t.final_frame.is_some());
    replays(&x, &rec);
}

#[test]
fn typing_and_keys_in_the_window_are_recorded_and_replay() {
    let x = Xvfb::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("demos");
    let args = ["--task", "miniwob/enter-text", "--seed", "5", "--record", rec.to_str().unwrap()];
    let mut p = Play::start(&x, &args, dir.path());
    let reset = p.until("reset").pop().unwrap();
    let instruction = reset["instruction"].as_str().unwrap().to_string();
    let word = instruction.split('"').nth(1).unwrap_or_else(|| panic!("{instruction}")).to_string();
    let capture = p.until("capture").pop().unwrap();
    p.send(":elements");
    let els = p.until("elements").pop().unwrap();
    let (field, submit) = (centre(&els, "tag", "input"), centre(&els, "text", "Submit"));

    click(&x, &capture, field);
    p.until("step");
    std::thread::sleep(Duration::from_millis(300));
    // A typo fixed with Backspace: type("..x"), key(Backspace), then the rest.
    x.xdotool(&["type", "--delay", "60", &format!("{}x", &word[..2])]);
    std::thread::sleep(Duration::from_millis(600));
    x.xdotool(&["key", "BackSpace"]);
    std::thread::sleep(Duration::from_millis(600));
    x.xdotool(&["type", "--delay", "60", &word[2..]]);
    std::thread::sleep(Duration::from_millis(800));
    click(&x, &capture, submit);
    let events = p.until("episode_end");
    assert_eq!(events.last().unwrap()["status"], "success", "{events:#?}");
    p.quit();

    let set = guirl::rollout::TrajectorySet::read(&rec).unwrap();
    let t = &set.trajectories[0].trajectory;
    let actions: Vec<&str> = t.steps.iter().map(|s| s.action.as_str()).collect();
    assert_eq!(actions.len(), 5, "{actions:?}");
    assert!(near(clicked(actions[0]), field), "{actions:?}: the field is at {field:?}");
    assert_eq!(actions[1], format!("type(\"{}x\")", &word[..2]));
    assert_eq!(actions[2], "key(Backspace)");
    assert_eq!(actions[3], format!("type(\"{}\")", &word[2..]));
    assert!(near(clicked(actions[4]), submit), "{actions:?}: Submit is at {submit:?}");
    assert_eq!(t.outcome.status, guirl::env::EpisodeStatus::Success);
    assert_eq!(t.outcome.reward, 1.0);
    replays(&x, &rec);
}

#[test]
fn a_double_click_a_drag_and_done_are_recorded() {
    let x = Xvfb::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("demos");
    let args = ["--task", "miniwob/click-test", "--seed", "1", "--record", rec.to_str().unwrap()];
    let mut p = Play::start(&x, &args, dir.path());
    let capture = p.until("capture").pop().unwrap();
    // Blank space of the task area, away from the button.
    let (sx, sy) = on_screen(&capture, (20, 70));
    x.xdotool(&["mousemove", &sx, &sy]);
    x.xdotool(&["click", "--repeat", "2", "--delay", "80", "1"]);
    p.until("step");
    std::thread::sleep(Duration::from_millis(300));
    let (ex, ey) = on_screen(&capture, (60, 90));
    x.xdotool(&["mousedown", "1"]);
    x.xdotool(&["mousemove", &ex, &ey]);
    x.xdotool(&["mouseup", "1"]);
    p.until("step");
    p.send(":done");
    let events = p.until("episode_end");
    assert_eq!(events.last().unwrap()["status"], "fail", "done() before the task is solved: {events:#?}");
    p.quit();

    let set = guirl::rollout::TrajectorySet::read(&rec).unwrap();
    let actions: Vec<&str> = set.trajectories[0].trajectory.steps.iter().map(|s| s.action.as_str()).collect();
    assert_eq!(actions, ["double_click(20, 70)", "drag(20, 70, 60, 90)", "done()"]);
}

#[test]
fn capture_without_headful_says_to_add_it() {
    let out = common::guirl(&["play", "--task", "miniwob/click-test", "--capture"]);
    common::fails_with(&out, &["--capture", "add --headful", "xvfb-run"]);
}

#[test]
fn headful_without_a_display_names_xvfb() {
    for args in [
        &["play", "--task", "miniwob/click-test", "--headful", "--capture"][..],
        &["run", "--task", "miniwob/click-test", "--episodes", "1", "--headful"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
            .args(args)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        common::fails_with(&out, &["--headful", "no display", "xvfb-run -a", "apt-get install -y xvfb"]);
        // the error alone: no warning about the sandbox of a browser that never started
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("sandbox"), "{err}");
    }
    // A display named but not running: said, instead of four failed launches that blame
    // the browser's install.
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--episodes", "1", "--headful"])
        .env("DISPLAY", ":987")
        .env_remove("WAYLAND_DISPLAY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    common::fails_with(&out, &["DISPLAY=:987 names no running X server", "/tmp/.X11-unix/X987"]);
}
