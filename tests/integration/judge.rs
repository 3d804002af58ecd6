//! Judge rewards (`reward = "judge:MODEL@BASE_URL"`, `guirl judge`) against a stand-in
//! OpenAI-compatible endpoint: a real local HTTP server answering scripted text (verdicts,
//! votes, garbage, slow answers; a port nobody listens on for downtime). Episodes run in
//! real headless Chromium.

use crate::common;

use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::routing::post;
use common::{fails_with, guirl, repo};
use guirl::env::EpisodeStatus;
use guirl::policy::judge::Judge;
use guirl::rollout::{Outcome, Recorded, TrajStep, Trajectory, TrajectorySet, TrajectoryWriter};
use guirl::tasks::JudgeSpec;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// What the stand-in saw: each request's route, body and Authorization header.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<(String, Value, Option<String>)>>,
}

impl Seen {
    fn count(&self, mode: &str) -> usize {
        self.requests.lock().unwrap().iter().filter(|r| r.0 == mode).count()
    }
    fn bodies(&self, mode: &str) -> Vec<(Value, Option<String>)> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == mode)
            .map(|r| (r.1.clone(), r.2.clone()))
            .collect()
    }
}

fn answer(text: &str) -> Value {
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
}

/// The instruction line of a judge request.
fn instruction(body: &Value) -> String {
    let text = body.pointer("/messages/1/content/0/text").and_then(Value::as_str).unwrap_or_default();
    text.lines().next().unwrap_or_default().trim_start_matches("Instruction: ").to_string()
}

/// The scripted judge. `mode` picks the script:
/// - `success`, `failure`: that verdict after a line of reasoning;
/// - `garbage`: prose with no verdict line; `reask`: garbage on a vote's first ask, then SUCCESS;
/// - `votesK`: vote i (from the request's seed, i·1000 + re-ask) says SUCCESS for i < K;
/// - `slow`: SUCCESS after 3 s;
/// - `table`: by instruction: `ep N` says SUCCESS for N in JUDGE_YES, `garbage …` garbage,
///   `Click A` SUCCESS, anything else FAILURE.
async fn judge_route(
    State(seen): State<Arc<Seen>>,
    UrlPath(mode): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::Json<Value> {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let auth = headers.get("authorization").and_then(|h| h.to_str().ok()).map(str::to_string);
    seen.requests.lock().unwrap().push((mode.clone(), body.clone(), auth));
    let seed = body["seed"].as_u64().unwrap_or(0);
    let text = match mode.as_str() {
        "success" => "The page shows the task done.\nVERDICT: SUCCESS".to_string(),
        "failure" => "Nothing was submitted.\nVERDICT: FAILURE".to_string(),
        "garbage" => "I think it probably worked, hard to say.".to_string(),
        "reask" if seed.is_multiple_of(1000) => "Let me look again.".to_string(),
        "reask" => "VERDICT: SUCCESS".to_string(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            "VERDICT: SUCCESS".to_string()
        }
        m if m.starts_with("votes") => {
            let k: u64 = m["votes".len()..].parse().unwrap();
            format!("VERDICT: {}", if seed / 1000 < k { "SUCCESS" } else { "FAILURE" })
        }
        "table" => {
            let ins = instruction(&body);
            if ins.starts_with("garbage") {
                "no idea".to_string()
            } else if let Some(n) = ins.strip_prefix("ep ") {
                let n: usize = n.parse().unwrap();
                format!(
                    "Episode {n}.\nVERDICT: {}",
                    if JUDGE_YES.contains(&n) { "SUCCESS" } else { "FAILURE" }
                )
            } else if ins.contains("Click A") {
                "A was asked for.\nVERDICT: SUCCESS".to_string()
            } else {
                "B was asked for.\nVERDICT: FAILURE".to_string()
            }
        }
        _ => "unknown mode".to_string(),
    };
    axum::Json(answer(&text))
}

/// Start the stand-in; returns its base (`http://127.0.0.1:PORT`) and what it sees.
fn stand_in(rt: &tokio::runtime::Runtime) -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let router =
        axum::Router::new().route("/{mode}/v1/chat/completions", post(judge_route)).with_state(seen.clone());
    let base = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{addr}")
    });
    (base, seen)
}

fn spec(base: &str, mode: &str, votes: u32, retries: u32, timeout_s: f64) -> JudgeSpec {
    JudgeSpec {
        votes,
        retries,
        timeout_s,
        temperature: 1.0,
        ..JudgeSpec::parse(&format!("stand-in@{base}/{mode}/v1")).unwrap()
    }
}

fn shot(seed: u8) -> image::RgbImage {
    image::RgbImage::from_fn(24, 16, |x, y| image::Rgb([seed, x as u8 * 9, y as u8 * 13]))
}

#[test]
fn verdicts_votes_downtime_garbage_timeouts_and_the_cache() {
    let rt = runtime();
    let (base, seen) = stand_in(&rt);
    let ask = |s: &JudgeSpec| Judge::new(s).unwrap().judge(&[shot(1)], "Subscribe ann", &[]);

    let (v, cached) = ask(&spec(&base, "success", 1, 0, 5.0)).unwrap();
    assert_eq!((v.success_votes, v.votes, cached), (1, 1, false));
    assert!(v.reasoning[0].starts_with("The page shows the task done."), "{v:?}");
    let (v, _) = ask(&spec(&base, "failure", 1, 0, 5.0)).unwrap();
    assert_eq!((v.success_votes, v.success(0.5)), (0, false));

    // Voting: 2 of 3 votes say SUCCESS; that passes a threshold of 0.5, not one of 0.7.
    let (v, _) = ask(&spec(&base, "votes2", 3, 0, 5.0)).unwrap();
    assert_eq!((v.success_votes, v.votes, v.reasoning.len()), (2, 3, 3));
    assert!(v.success(0.5) && !v.success(0.7));
    assert_eq!(seen.count("votes2"), 3, "one request per vote");
    let seeds: Vec<u64> = seen.bodies("votes2").iter().map(|b| b.0["seed"].as_u64().unwrap()).collect();
    assert_eq!(
        seeds.iter().collect::<std::collections::BTreeSet<_>>().len(),
        3,
        "each vote its own seed: {seeds:?}"
    );

    // Garbage: re-asked `retries` times, then an error that quotes the answer, no verdict.
    let e = ask(&spec(&base, "garbage", 1, 2, 5.0)).unwrap_err();
    assert!(e.contains("no `VERDICT: SUCCESS` or `VERDICT: FAILURE` line in 3 answer(s)"), "{e}");
    assert!(e.contains("hard to say"), "{e}");
    assert_eq!(seen.count("garbage"), 3);
    // A vote whose first answer has no verdict gets it on the re-ask.
    let (v, _) = ask(&spec(&base, "reask", 1, 1, 5.0)).unwrap();
    assert_eq!(v.success_votes, 1);
    assert_eq!(seen.count("reask"), 2);

    // Down: nobody listens on port 1; the client's error names the URL.
    let t0 = Instant::now();
    let e = ask(&spec("http://127.0.0.1:1", "x", 1, 1, 5.0)).unwrap_err();
    assert!(
        e.starts_with("judge stand-in@http://127.0.0.1:1/x/v1: ") && e.contains("(after 2 tries)"),
        "{e}"
    );
    // Slow: the 3 s answer hits the 0.4 s limit (no retry), well before it comes.
    let t1 = Instant::now();
    let e = ask(&spec(&base, "slow", 1, 0, 0.4)).unwrap_err();
    assert!(t1.elapsed() < Duration::from_secs(2), "{e}");
    assert!(e.to_lowercase().contains("timed out") || e.to_lowercase().contains("timeout"), "{e}");
    eprintln!("down: {:.2} s, slow: {:.2} s", (t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64());

    // The cache: the same screens, instruction, rubric, model and votes ask nothing.
    let dir = tempfile::tempdir().unwrap();
    let cached_spec = JudgeSpec { cache: Some(dir.path().join("cache")), ..spec(&base, "votes1", 2, 0, 5.0) };
    let judge = Judge::new(&cached_spec).unwrap();
    let (first, c1) = judge.judge(&[shot(7)], "Subscribe bo", &[]).unwrap();
    let (again, c2) = Judge::new(&cached_spec).unwrap().judge(&[shot(7)], "Subscribe bo", &[]).unwrap();
    assert_eq!((first.success_votes, c1, c2), (1, false, true));
    assert_eq!(first, again);
    assert_eq!(seen.count("votes1"), 2, "the second judge (another process, say) read the cache");
    // Another screen, or another number of votes, is asked again.
    judge.judge(&[shot(8)], "Subscribe bo", &[]).unwrap();
    Judge::new(&JudgeSpec { votes: 3, ..cached_spec.clone() })
        .unwrap()
        .judge(&[shot(7)], "Subscribe bo", &[])
        .unwrap();
    assert_eq!(seen.count("votes1"), 2 + 2 + 3);
}

/// Which `ep N` episodes the `table` judge passes.
const JUDGE_YES: [usize; 7] = [0, 1, 2, 3, 5, 6, 10];

/// A one-step episode `ep N` recorded with status `status` (its own screens).
fn episode(n: usize, name: &str, status: EpisodeStatus) -> Recorded {
    let mut t = Trajectory::new(
        "builtin/toggle-switches",
        n as u64,
        vec![TrajStep::new("click(3, 4)", 0.0, status)],
        Outcome { reward: (status == EpisodeStatus::Success) as u8 as f64, status, steps: 1, error: None },
    );
    t.instruction = name.to_string();
    Recorded { trajectory: t, frames: vec![shot(2 * n as u8).into(), shot(2 * n as u8 + 1).into()] }
}

#[test]
fn guirl_judge_rescores_a_set_reports_agreement_and_caches() {
    let rt = runtime();
    let (base, seen) = stand_in(&rt);
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("run/set");
    let mut w = TrajectoryWriter::open(&set).unwrap();
    // Episodes 0–4 passed the task's check, 5–9 failed it; 10 ended on a browser error
    // (no check verdict to compare with).
    for n in 0..11 {
        let status = match n {
            0..=4 => EpisodeStatus::Success,
            5..=9 => EpisodeStatus::Fail,
            _ => EpisodeStatus::EnvError,
        };
        w.append(&episode(n, &format!("ep {n}"), status)).unwrap();
    }
    drop(w);
    let judge = format!("stand-in@{base}/table/v1");
    let run = |path: &Path| {
        let out =
            guirl(&["judge", path.to_str().unwrap(), "--judge", &judge, "--api-retries", "0", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    // The run folder above the set: its sets are found.
    let r = run(&tmp.path().join("run"));
    // Judge yes on 0–3 (check yes: tp 4), no on 4 (fn 1), yes on 5, 6 (fp 2), no on 7–9
    // (tn 3). n = 10, p_o = 0.7; judge yes 0.6, check yes 0.5, p_e = 0.6·0.5 + 0.4·0.5 =
    // 0.5; κ = (0.7 − 0.5) / 0.5 = 0.4; precision 4/6, recall 4/5;
    // SE = √(0.7·0.3 / (10·0.25)) = √0.084 = 0.2898275, CI 0.4 ± 0.5680619.
    assert_eq!(r["agreement"], json!({"tp": 4, "fp": 2, "fn_": 1, "tn": 3}), "{r}");
    assert_eq!(
        (r["episodes"].as_u64(), r["judged"].as_u64(), r["compared"].as_u64()),
        (Some(11), Some(11), Some(10))
    );
    let close = |k: &str, want: f64| assert!((r[k].as_f64().unwrap() - want).abs() < 1e-6, "{k}: {}", r[k]);
    close("precision", 4.0 / 6.0);
    close("recall", 0.8);
    close("kappa", 0.4);
    let ci = &r["kappa_ci95"];
    assert!(
        (ci[0].as_f64().unwrap() + 0.168_061_9).abs() < 1e-6
            && (ci[1].as_f64().unwrap() - 0.968_061_9).abs() < 1e-6,
        "{ci}"
    );
    assert_eq!(
        (r["judge_failures"].as_u64(), r["cached"].as_u64(), r["requests"].as_u64()),
        (Some(0), Some(0), Some(11))
    );
    assert_eq!(seen.count("table"), 11);
    assert!(r["kappa_ci_method"].as_str().unwrap().contains("asymptotic"));

    // Again: every verdict from the cache (RUN/judge-cache), the endpoint never called.
    let again = run(&tmp.path().join("run"));
    assert_eq!(seen.count("table"), 11, "the second pass asked the judge nothing");
    assert_eq!((again["cached"].as_u64(), again["requests"].as_u64()), (Some(11), Some(0)));
    assert_eq!(again["agreement"], r["agreement"]);
    assert!(tmp.path().join("run/judge-cache").is_dir());

    // An episode the judge answers garbage on: an infrastructure failure, not a verdict;
    // not cached, so it is asked again next time. The text report says so.
    let mut w = TrajectoryWriter::open(&set).unwrap();
    w.append(&episode(11, "garbage 11", EpisodeStatus::Fail)).unwrap();
    drop(w);
    let third = run(&tmp.path().join("run"));
    assert_eq!(
        (third["judge_failures"].as_u64(), third["compared"].as_u64()),
        (Some(1), Some(10)),
        "{third}"
    );
    assert_eq!(seen.count("table"), 12);
    let out =
        guirl(&["judge", tmp.path().join("run").to_str().unwrap(), "--judge", &judge, "--api-retries", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("judge failures 1") && text.contains("kappa 0.400"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no `VERDICT"), "the failure is named");
    assert_eq!(seen.count("table"), 13);

    // A set the judge gave no verdict on at all: the report is printed, and the command
    // fails, since nothing in it measures the judge.
    let only = tmp.path().join("only-garbage");
    let mut w = TrajectoryWriter::open(&only).unwrap();
    w.append(&episode(0, "garbage 0", EpisodeStatus::Fail)).unwrap();
    drop(w);
    let out = guirl(&["judge", only.to_str().unwrap(), "--judge", &judge, "--api-retries", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nothing was judged"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("judge failures 1"));
}

#[test]
fn judge_errors_a_user_can_cause_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    fails_with(
        &guirl(&["judge", tmp.path().to_str().unwrap(), "--judge", "@http://127.0.0.1:8000/v1"]),
        &["names no model", "judge:MODEL@http://HOST:PORT/v1"],
    );
    fails_with(
        &guirl(&[
            "judge",
            tmp.path().join("nowhere").to_str().unwrap(),
            "--judge",
            "m@http://127.0.0.1:8000/v1",
        ]),
        &["nowhere does not exist"],
    );
    fails_with(
        &guirl(&["judge", tmp.path().to_str().unwrap(), "--judge", "m@http://127.0.0.1:8000/v1"]),
        &["holds no trajectory set", "--record"],
    );
    // A judge nobody runs: `guirl judge` says so before asking about any episode.
    let set = tmp.path().join("set");
    TrajectoryWriter::open(&set).unwrap().append(&episode(0, "ep 0", EpisodeStatus::Success)).unwrap();
    fails_with(
        &guirl(&["judge", set.to_str().unwrap(), "--judge", "m@http://127.0.0.1:1/v1"]),
        &["cannot reach the judge at http://127.0.0.1:1/v1", "start its server"],
    );
    // Training against a judge nobody runs: said before any browser starts.
    let down = tmp.path().join("down.toml");
    std::fs::write(&down, two_buttons("judge:qwen@http://127.0.0.1:1/v1", "")).unwrap();
    let cfg = tmp.path().join("train.toml");
    let ids = format!("[tasks]\nids = [{:?}]\n", down.display().to_string());
    std::fs::write(
        &cfg,
        format!("[run]\nname = \"down\"\niterations = 1\n{ids}[model]\npreset = \"tiny\"\n"),
    )
    .unwrap();
    let out = guirl(&["train", cfg.to_str().unwrap(), "--out", tmp.path().join("run").to_str().unwrap()]);
    fails_with(&out, &["cannot reach the judge at http://127.0.0.1:1/v1", "start its server", "down.toml"]);
    assert!(!tmp.path().join("run").exists(), "no run folder made for a run that cannot start");
    for (reward, table, needles) in [
        ("judge:qwen@localhost:8000/v1", "", vec!["is not a base URL", "judge:MODEL@http://HOST:PORT/v1"]),
        (
            "judge:qwen@http://127.0.0.1:8000/v1",
            "[judge]\nrubric = \"missing.md\"\n",
            vec!["judge.rubric = \"missing.md\": cannot read", "leave judge.rubric out"],
        ),
        (
            "judge:qwen@http://127.0.0.1:8000/v1",
            "[judge]\nvotes = 0\n",
            vec!["judge.votes = 0 is out of range"],
        ),
    ] {
        let spec = tmp.path().join("bad.toml");
        std::fs::write(&spec, two_buttons(reward, table)).unwrap();
        let out = guirl(&["run", "--task", spec.to_str().unwrap(), "--policy", "random", "--episodes", "1"]);
        fails_with(&out, &needles);
    }
}

/// fixtures/tasks/two-buttons.toml without its `[success]` table, with `reward` and a
/// `[judge]` table (or any other text) added where TOML puts them in the right table.
fn two_buttons(reward: &str, tables_after: &str) -> String {
    let text = std::fs::read_to_string(repo("fixtures/tasks/two-buttons.toml")).unwrap();
    let (head, _) = text.split_once("[success]").unwrap();
    let (top, tables) = head.split_once("[viewport]").unwrap();
    format!("{top}reward = \"{reward}\"\n[viewport]{tables}{tables_after}")
}

#[test]
fn a_website_task_without_a_check_is_scored_by_the_judge_in_a_real_browser() {
    let rt = runtime();
    let (base, seen) = stand_in(&rt);
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, reward: &str, judge_table: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, two_buttons(reward, judge_table)).unwrap();
        p
    };
    // The judge passes "Click A" and fails "Click B", whatever the random policy clicked.
    let spec = write(
        "judged.toml",
        &format!("judge:stand-in@{base}/table/v1"),
        "[judge]\nframes = 2\nactions = true\napi_key_env = \"GUIRL_TEST_JUDGE_KEY\"\n",
    );
    let rec = tmp.path().join("rec");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", spec.to_str().unwrap(), "--policy", "random", "--episodes", "4", "--json"])
        .args(["--record", rec.to_str().unwrap()])
        .env("GUIRL_TEST_JUDGE_KEY", "sekret")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let set = TrajectorySet::read(&rec).unwrap();
    assert_eq!(set.trajectories.len(), 4);
    let mut seen_a = false;
    for st in &set.trajectories {
        let t = &st.trajectory;
        let a = t.instruction.contains("Click A");
        seen_a |= a;
        let j = t.judge.as_ref().expect("the judge's record is in the trajectory");
        assert!(j.decided && j.votes == 1 && !j.cached && j.error.is_none(), "{j:?}");
        assert_eq!((j.success, j.success_votes), (a, a as u32));
        assert!(j.reasoning[0].contains(if a { "A was asked for." } else { "B was asked for." }), "{j:?}");
        // (A failure verdict leaves the episode's own ending: this 1-step task truncates.)
        let (status, reward) =
            if a { (EpisodeStatus::Success, 1.0) } else { (EpisodeStatus::Truncated, 0.0) };
        assert_eq!((t.outcome.status, t.outcome.reward), (status, reward), "{}", t.instruction);
        assert_eq!(t.steps.last().unwrap().reward, reward);
    }
    assert!(seen_a, "seeds 0..4 draw both buttons");
    // Each request: the rubric, the instruction, the actions, both screenshots, the key.
    let bodies = seen.bodies("table");
    assert_eq!(bodies.len(), 4);
    for (b, auth) in &bodies {
        assert_eq!(auth.as_deref(), Some("Bearer sekret"));
        assert!(b["messages"][0]["content"].as_str().unwrap().contains("VERDICT: SUCCESS"));
        let content = b["messages"][1]["content"].as_array().unwrap();
        let text = content[0]["text"].as_str().unwrap();
        assert!(text.contains("Actions taken:\n1. ") && text.contains("The last 2 screenshots"), "{text}");
        assert_eq!(content.iter().filter(|c| c["type"] == "image_url").count(), 2);
    }
    // The viewer shows the verdict and the reasoning.
    let html = tmp.path().join("view.html");
    let o = guirl(&["view", rec.to_str().unwrap(), "--out", html.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let view = common::view_task(tmp.path(), &html);
    rt.block_on(async {
        let mut env = common::env_for(view.to_str().unwrap());
        env.reset(0).await.unwrap();
        let shown = guirl::env::gui_env::eval(
            &env,
            "var j = document.querySelector('#detail .judge'); \
             return [j ? j.textContent : null, document.querySelectorAll('#detail .judge details').length];",
        )
        .await
        .unwrap();
        let first = &set.trajectories[0].trajectory;
        let said = if first.outcome.status == EpisodeStatus::Success { "SUCCESS" } else { "FAILURE" };
        let line = shown[0].as_str().unwrap_or_default();
        assert!(
            line.starts_with(&format!("Judge {said} · stand-in@"))
                && line.contains("votes SUCCESS, threshold 0.5"),
            "{shown}"
        );
        assert_eq!(shown[1], json!(1), "one vote's reasoning");
        env.close().await;
    });

    // Replayed while its judge is down: nothing of the task can be checked, so each
    // episode is skipped as an infrastructure failure (not "not reproduced"), and with
    // nothing checked --verify does not pass.
    let _ = std::fs::remove_dir_all(rec.join("judge-cache"));
    write(
        "judged.toml",
        "judge:stand-in@http://127.0.0.1:1/v1",
        "[judge]\nframes = 2\nactions = true\nretries = 0\n",
    );
    let out = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("skipped=\"the judge gave no verdict at replay") && !text.contains("reproduced=false"),
        "{text}"
    );
    assert!(text.contains("replayed=0 reproduced=0 skipped=4"), "{text}");

    // A judge that is down: refused before any episode is played (each would end
    // `judge_error` after its retries), as `train` and `judge` refuse it.
    let down = write("down.toml", "judge:stand-in@http://127.0.0.1:1/v1", "[judge]\nretries = 0\n");
    let out =
        guirl(&["run", "--task", down.to_str().unwrap(), "--policy", "random", "--episodes", "2", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot reach the judge at http://127.0.0.1:1/v1") && err.contains("start its server"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no episode was played");
    let bench = tmp.path().join("bench-down");
    let out = guirl(&[
        "bench",
        "--tasks",
        down.to_str().unwrap(),
        "--policy",
        "random",
        "--episodes-per-task",
        "1",
        "--out",
        bench.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot reach the judge at http://127.0.0.1:1/v1"), "{err}");
    assert!(!bench.join("results.jsonl").exists(), "no episode was journaled");

    // A judge that never gives a verdict: every episode `judge_error`, counted, none a silent 0.
    let mute = write("mute.toml", &format!("judge:stand-in@{base}/garbage/v1"), "[judge]\nretries = 0\n");
    let out =
        guirl(&["run", "--task", mute.to_str().unwrap(), "--policy", "random", "--episodes", "2", "--json"]);
    // Nothing was measured: the report is still printed, and the run fails saying why.
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was measured"));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["judge_errors"], json!(2), "{r}");
    // ... and left out of the rates, which then cover no episode at all.
    assert_eq!(
        (r["infrastructure_errors"].clone(), r["success_rate"].clone()),
        (json!(2), Value::Null),
        "{r}"
    );
    let out = guirl(&["run", "--task", mute.to_str().unwrap(), "--policy", "random", "--episodes", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim_end().ends_with("judge_errors=2 infrastructure_errors=2 (left out of the rates)")
            && text.contains("success_rate=none"),
        "{text}"
    );
    for e in r["per_episode"].as_array().unwrap() {
        assert_eq!(e["status"], json!("judge_error"), "{e}");
    }
    // A judge answering garbage: the same, after its re-asks.
    let garbage =
        write("garbage.toml", &format!("judge:stand-in@{base}/garbage/v1"), "[judge]\nretries = 1\n");
    let out = guirl(&[
        "run",
        "--task",
        garbage.to_str().unwrap(),
        "--policy",
        "random",
        "--episodes",
        "1",
        "--json",
    ]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["per_episode"][0]["status"], json!("judge_error"), "{r}");
    assert!(r["per_episode"][0]["error"].as_str().unwrap().contains("in 2 answer(s)"), "{r}");
}
