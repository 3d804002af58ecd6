//! `guirl stats`: the figures of recorded sets, offline, as a table or JSON.

use crate::common::repo;
use std::process::{Command, Output};

fn guirl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guirl")).args(args).output().expect("running guirl")
}

#[test]
fn stats_pool_sets_and_leave_errors_out_of_the_rates() {
    let oracle = repo("fixtures/trajectories/oracle");
    let src = std::fs::read_to_string(oracle.join("trajectories.jsonl")).unwrap();
    let first = src.lines().next().unwrap();
    let task =
        serde_json::from_str::<serde_json::Value>(first).unwrap()["task_id"].as_str().unwrap().to_string();
    // A second set: the first episode again, the same one ended by the browser, and a torn
    // last line (a run killed while writing it).
    let dir = tempfile::tempdir().unwrap();
    let mut crashed: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(crashed["outcome"]["status"], "success", "the fixture's first episode succeeded");
    crashed["outcome"]["status"] = "env_error".into();
    std::fs::write(dir.path().join("trajectories.jsonl"), format!("{first}\n{crashed}\n{{\"vers")).unwrap();
    let out = guirl(&["stats", oracle.to_str().unwrap(), dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = src.lines().count() as u64;
    assert_eq!(s["all"]["figures"]["episodes"], n + 2);
    assert_eq!(s["all"]["statuses"], serde_json::json!({"success": n + 1, "env_error": 1}));
    assert_eq!(s["torn_lines"], 1);
    let row = s["rows"].as_array().unwrap().iter().find(|r| r["group"] == task.as_str()).unwrap();
    // the env error is counted, not rated: 2 of 2 completed episodes succeeded
    assert_eq!(
        (&row["figures"]["episodes"], &row["figures"]["completed"], &row["figures"]["success_rate"]),
        (&serde_json::json!(3), &serde_json::json!(2), &serde_json::json!(1.0))
    );

    let out = guirl(&["stats", oracle.to_str().unwrap(), "--by", "policy"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let flat = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(out.status.success() && flat.contains(&format!("| oracle | {n} | 1.000 |")), "{table}");

    // a folder of sets stands for them, and a set named twice counts once
    let out = guirl(&["stats", repo("fixtures").to_str().unwrap(), oracle.to_str().unwrap(), "--json"]);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["all"]["figures"]["episodes"], n, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is named twice"));
    let empty = tempfile::tempdir().unwrap();
    let out = guirl(&["stats", empty.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is not a trajectory set"), "{err}");
    // a set with no finished episode (a run stopped before its first one ended)
    std::fs::write(empty.path().join("trajectories.jsonl"), "").unwrap();
    let out = guirl(&["stats", empty.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no finished episode yet"), "{err}");
    let out = guirl(&["stats", oracle.to_str().unwrap(), "--by", "seed"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[possible values: task, policy]"), "{err}");
}
