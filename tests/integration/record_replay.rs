//! Recording, crash safety, replay with verification, and bad trajectory sets.

use crate::common;

use common::repo;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn guirl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guirl")).args(args).output().expect("running guirl")
}

fn lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("trajectories.jsonl")).map(|s| s.lines().count()).unwrap_or(0)
}

#[test]
fn sigkill_while_recording_keeps_every_finished_line() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let mut child = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args([
            "run",
            "--task",
            "miniwob/click-test",
            "--policy",
            "random",
            "--episodes",
            "500",
            "--envs",
            "2",
        ])
        .arg("--record")
        .arg(&rec)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while lines(&rec) < 4 {
        assert!(t0.elapsed() < Duration::from_secs(90), "the recording never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let set = guirl::rollout::TrajectorySet::read(&rec).expect("a killed run leaves a readable set");
    assert!(set.trajectories.len() >= 4);
    for st in &set.trajectories {
        for step in &st.trajectory.steps {
            let f = step.frame.as_ref().expect("frame name");
            assert!(set.frame_path(f).is_file(), "line {} names a frame that exists", st.line);
        }
    }
    // A torn last line, as a kill in the middle of a write would leave it, is skipped.
    let file = rec.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::write(&file, format!("{text}{}", &first[..first.len() / 2])).unwrap();
    let set2 = guirl::rollout::TrajectorySet::read(&rec).unwrap();
    assert_eq!(set2.trajectories.len(), set.trajectories.len());
    assert_eq!(set2.torn_line, Some(set.trajectories.len() + 1));
    let out = guirl(&["replay", rec.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("torn"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fixture_recordings_replay_exactly() {
    let out =
        guirl(&["replay", repo("fixtures/trajectories/oracle").to_str().unwrap(), "--verify", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{}", serde_json::to_string_pretty(&v).unwrap());
    assert_eq!(v["replayed"], v["reproduced"]);
    assert!(v["replayed"].as_u64().unwrap() >= 20);
    // The fixtures are format v1: their MiniWoB++ final frames show the START cover, which
    // an episode now leaves hidden, so those are not compared, and the replay says so.
    let src = std::fs::read_to_string(repo("fixtures/trajectories/oracle/trajectories.jsonl")).unwrap();
    let miniwob = src.lines().filter(|l| l.contains("\"task_id\":\"miniwob/")).count();
    assert!(miniwob > 0 && src.lines().all(|l| l.starts_with("{\"version\":1,")), "v1 MiniWoB++ fixtures");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{miniwob} MiniWoB++ episodes recorded by an older guirl")), "{err}");

    // A line of a newer format is refused, with the line and what to do.
    let dir = tempfile::tempdir().unwrap();
    let first = src.lines().next().unwrap().replacen("{\"version\":1,", "{\"version\":99,", 1);
    std::fs::write(dir.path().join("trajectories.jsonl"), format!("{first}\n")).unwrap();
    let out = guirl(&["replay", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(":1: written in trajectory format v99")
            && err.contains("upgrade guirl"),
        "{err}"
    );
}

#[test]
fn a_changed_page_diverges_at_the_first_differing_step() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    std::fs::copy(repo("fixtures/pages/actions.html"), &page).unwrap();
    let spec = dir.path().join("task.toml");
    let text = std::fs::read_to_string(repo("fixtures/tasks/actions.toml")).unwrap();
    std::fs::write(
        &spec,
        text.replace("/fixtures/pages/actions.html", &format!("file://{}", page.display())),
    )
    .unwrap();
    let rec = dir.path().join("rec");
    // Four clicks (on buttons and beside them), so the episode's frames depend on the page
    // alone, not on a key's smooth scroll or a caret's blink.
    let mut play = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args([
            "play",
            "--task",
            spec.to_str().unwrap(),
            "--max-steps",
            "4",
            "--record",
            rec.to_str().unwrap(),
        ])
        .arg("--screenshot")
        .arg(dir.path().join("play.png"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    play.stdin
        .take()
        .unwrap()
        .write_all(b"click(30, 25)\nclick(300, 200)\nclick(180, 25)\nclick(130, 75)\n:quit\n")
        .unwrap();
    let out = play.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("quit: 1 episode(s) recorded"));
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    assert!(out.status.success(), "unchanged page reproduces: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("has changed"));
    // The recording keeps a digest of the spec: an edit of it is said at replay (this one
    // changes nothing the page does, so the episode still reproduces).
    let recorded = std::fs::read_to_string(rec.join("trajectories.jsonl")).unwrap();
    let digest = serde_json::from_str::<serde_json::Value>(recorded.lines().next().unwrap()).unwrap()
        ["task_digest"]
        .clone();
    assert_eq!(digest.as_str().map(str::len), Some(16), "{digest}");
    let spec_text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, format!("{spec_text}\n# edited\n")).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("has changed since it was recorded"), "{err}");
    std::fs::write(&spec, spec_text).unwrap();
    // Move the blue square: the very first screen differs.
    let original = std::fs::read_to_string(&page).unwrap();
    let html = original.replace("left: 260px; top: 20px", "left: 200px; top: 60px");
    std::fs::write(&page, html).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("reproduced=false") && text.contains("diverged_at_step=0"), "{text}");
    assert!(text.contains("replayed=1 reproduced=0"), "{text}");
    // An episode whose browser crashed is recorded as env_error: nothing of the task to
    // reproduce, so it is skipped and said so, and does not fail --verify.
    std::fs::write(&page, original).unwrap();
    let file = rec.join("trajectories.jsonl");
    let line = std::fs::read_to_string(&file).unwrap().trim().to_string();
    let mut v: serde_json::Value = serde_json::from_str(&line).unwrap();
    v["outcome"]["status"] = "env_error".into();
    std::fs::write(&file, format!("{v}\n{line}\n")).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("skipped=\"recorded env_error: an infrastructure failure"), "{text}");
    assert!(text.contains("replayed=1 reproduced=1 skipped=1"), "{text}");
    // With nothing but the failure, nothing is verified, and --verify does not pass.
    std::fs::write(&file, format!("{v}\n")).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was replayed") && err.contains("1 skipped"), "{err}");
}

#[test]
fn bad_trajectory_sets_are_named_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = guirl(&["replay", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a trajectory set"));

    let src = std::fs::read_to_string(repo("fixtures/trajectories/oracle/trajectories.jsonl")).unwrap();
    let first = src.lines().next().unwrap();
    let id =
        serde_json::from_str::<serde_json::Value>(first).unwrap()["task_id"].as_str().unwrap().to_string();
    let cases = [
        (
            "newer",
            first.replacen("\"version\":1", "\"version\":99", 1),
            "trajectories.jsonl:2: written in trajectory format v99",
        ),
        (
            "gone",
            first.replacen("\"task_id\":\"", "\"task_id\":\"miniwob/no-such-", 1),
            "trajectories.jsonl:2: task miniwob/no-such-",
        ),
        (
            // A website spec recorded by a path relative to where guirl ran.
            "relative",
            first.replacen(&format!("\"task_id\":\"{id}\""), "\"task_id\":\"specs/my-site.toml\"", 1),
            "task specs/my-site.toml cannot be loaded from ",
        ),
        (
            "garbage",
            "{\"version\": 1, \"oops\": true}".to_string(),
            "trajectories.jsonl:2: not a valid trajectory",
        ),
    ];
    for (name, bad, needle) in cases {
        let d = dir.path().join(name);
        std::fs::create_dir_all(d.join("frames")).unwrap();
        std::fs::write(d.join("trajectories.jsonl"), format!("{first}\n{bad}\n")).unwrap();
        let out = guirl(&["replay", d.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{name}: {err}");
    }
}

/// A recorded frame that is gone is not compared, and said so; the episode's actions,
/// rewards and the other frames are still checked (replay stopped at the first one), and
/// `--verify` does not pass.
#[test]
fn a_missing_frame_is_not_compared_and_the_rest_is_checked() {
    let src = repo("fixtures/trajectories/oracle");
    let frames_of = |t: &serde_json::Value| {
        let mut f: Vec<String> = t["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["frame"].as_str().map(String::from))
            .collect();
        f.extend(t["final_frame"].as_str().map(String::from));
        f
    };
    // An episode with two different screens at least (frames are named by content).
    let text = std::fs::read_to_string(src.join("trajectories.jsonl")).unwrap();
    let (line, frames) = text
        .lines()
        .map(|l| (l, frames_of(&serde_json::from_str(l).unwrap())))
        .find(|(_, f)| f.iter().any(|x| *x != f[0]))
        .expect("a recorded episode whose screen changed");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("frames")).unwrap();
    for f in frames.iter().filter(|f| **f != frames[0]) {
        std::fs::copy(src.join("frames").join(f), dir.path().join("frames").join(f)).unwrap();
    }
    std::fs::write(dir.path().join("trajectories.jsonl"), format!("{line}\n")).unwrap();
    let out = guirl(&["replay", dir.path().to_str().unwrap(), "--verify", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    // Everything else reproduced, but a screen not compared is not verified.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("could not be read") && err.contains("not compared"), "{err}");
    assert!(err.contains("frame not compared") && err.contains(&frames[0]), "{err}");
    let gone = frames.iter().filter(|f| **f == frames[0]).count();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["replayed"].as_u64(), v["reproduced"].as_u64()), (Some(1), Some(1)), "{v}");
    assert_eq!(v["unreadable_frames"].as_u64(), Some(gone as u64), "{v}");
    let r = &v["trajectories"][0];
    assert_eq!(r["frame_diffs"].as_array().unwrap().len(), frames.len() - gone, "{v}");
}

/// An episode replays under the rules it was recorded with (`--strict-actions` ends an
/// episode at an action that cannot be taken; replay ignored it and failed its own sets),
/// and an action edited into one that does not parse is named as such, at its step.
#[test]
fn replays_play_by_the_recorded_rules_and_name_an_action_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("strict");
    let args =
        ["run", "--task", "miniwob/enter-text", "--policy", "random", "--episodes", "8", "--strict-actions"];
    let out = guirl(&[&args[..], &["--record", rec.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = rec.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.iter().all(|t| t["rules"]["strict_actions"] == true), "{text}");
    assert!(
        lines.iter().any(|t| t["outcome"]["status"] == "invalid_action"),
        "a random policy on enter-text takes an invalid action within 8 episodes: {text}"
    );
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    // Without the rules (a file from before they were kept) the strict endings differ.
    let plain: Vec<String> = lines
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.as_object_mut().unwrap().remove("rules");
            t.to_string()
        })
        .collect();
    std::fs::write(&file, plain.join("\n") + "\n").unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));

    // An action that was taken when recorded and no longer parses.
    let mut first = lines[0].clone();
    first["steps"][0]["action"] = "clack(66 63".into();
    first["steps"][0].as_object_mut().unwrap().remove("action_error");
    std::fs::write(&file, format!("{first}\n")).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("diverged_at_step=0") && text.contains("does not parse"), "{text}");

    // A recorded frame of another size (a viewport changed since) says the sizes.
    std::fs::write(&file, format!("{}\n", lines[0])).unwrap();
    let frame = rec.join("frames").join(lines[0]["steps"][0]["frame"].as_str().unwrap());
    image::RgbImage::new(10, 10).save(&frame).unwrap();
    let out = guirl(&["replay", rec.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the screen is 160x210, the recorded frames 10x10"), "{text}");
}
