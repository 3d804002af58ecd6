//! The learned reward model: trained on recorded successes (the oracle) and failures (a
//! random policy) of a built-in task, it separates held-out episodes far above chance; a
//! website spec with `reward = "model:PATH"` is scored by it; the errors a user can cause
//! name what to do. Real headless Chromium.

use crate::common;

use common::{fails_with, guirl, repo};
use guirl::env::EpisodeStatus;
use guirl::policy::reward_model::RewardModel;
use guirl::rollout::{Outcome, Recorded, TrajStep, Trajectory, TrajectorySet, TrajectoryWriter};
use guirl::train::reward_model::{read_episodes, split, train_reward_model, RewardTrainOptions};
use std::path::Path;
use std::time::Instant;

const TASK: &str = "builtin/toggle-switches";

/// `guirl run` `episodes` episodes of TASK from `seed` with `policy` into `dir`.
fn record(dir: &Path, policy: &str, seed: u64, episodes: u64, max_steps: &str) {
    let out = guirl(&[
        "run",
        "--task",
        TASK,
        "--policy",
        policy,
        "--episodes",
        &episodes.to_string(),
        "--seed",
        &seed.to_string(),
        "--envs",
        "2",
        "--max-steps",
        max_steps,
        "--record",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn reward_model_separates_successes_from_failures_and_scores_a_website_task() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, bad) = (dir.path().join("oracle"), dir.path().join("random"));
    let t0 = Instant::now();
    record(&ok, "oracle", 0, 120, "15");
    record(&bad, "random", 1000, 120, "5");
    eprintln!("recorded 240 episodes in {:.1} s", t0.elapsed().as_secs_f64());
    let out = dir.path().join("rm");
    let opts = RewardTrainOptions {
        dirs: vec![ok.clone(), bad.clone()],
        out: out.clone(),
        seed: 7,
        ..Default::default()
    };
    let r = train_reward_model(&opts).unwrap();
    let m = &r.heldout;
    eprintln!(
        "held out: n={} successes={} accuracy={:.3} auc={:?} brier={:.4} ece={:.4}; train n={} accuracy={:.3}; {:.1} s",
        m.episodes, m.successes, m.accuracy, m.auc, m.brier, m.ece, r.train_episodes, r.train_accuracy, r.train_seconds
    );
    // Oracle episodes that failed (if any) are failures like the random ones.
    assert!(m.episodes >= 40 && m.successes >= 16 && m.episodes - m.successes >= 16, "{m:?}");
    assert!(m.auc.unwrap() >= 0.9, "held-out AUC {:?}", m.auc);
    assert!(m.accuracy >= 0.8, "held-out accuracy {}", m.accuracy);
    for f in ["reward_model.safetensors", "reward_model.json", "metrics.json", "reliability.png"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let png = image::open(out.join("reliability.png")).unwrap();
    assert_eq!((png.width(), png.height()), (640, 720));
    // The same seed and folders give the same held-out split.
    let (eps, _) = read_episodes(&opts.dirs).unwrap();
    assert_eq!(split(&eps, 0.2, 7), split(&eps, 0.2, 7));
    assert_ne!(split(&eps, 0.2, 7).1, split(&eps, 0.2, 8).1);

    // A website task without a success check, scored by the model: its recorded reward is
    // the model's probability on the final frame, and it succeeds at P ≥ the threshold.
    let spec_text = std::fs::read_to_string(repo("fixtures/tasks/two-buttons.toml")).unwrap();
    let (head, _) = spec_text.split_once("[success]").expect("two-buttons.toml has a [success] table");
    let spec = dir.path().join("scored.toml");
    std::fs::write(&spec, format!("reward = \"model:rm\"\nreward_threshold = 0.3\n{head}")).unwrap();
    let rec = dir.path().join("scored-rec");
    let run = |spec: &Path, rec: &Path| {
        guirl(&[
            "run",
            "--task",
            spec.to_str().unwrap(),
            "--policy",
            "random",
            "--episodes",
            "4",
            "--json",
            "--record",
            rec.to_str().unwrap(),
        ])
    };
    let o = run(&spec, &rec);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = RewardModel::load(&out).unwrap();
    let set = TrajectorySet::read(&rec).unwrap();
    assert_eq!(set.trajectories.len(), 4);
    for st in &set.trajectories {
        let t = &st.trajectory;
        let frame = set.load_frame(t.final_frame.as_deref().unwrap()).unwrap();
        let history: Vec<String> = t.steps.iter().map(|s| s.action.clone()).collect();
        let p = model.predict(&frame, &t.instruction, &history).unwrap();
        assert!((t.outcome.reward - p).abs() < 1e-5, "recorded {} vs the model's {p}", t.outcome.reward);
        assert_eq!(t.outcome.status == EpisodeStatus::Success, p >= 0.3, "p = {p}, {:?}", t.outcome.status);
        assert!((t.steps.last().unwrap().reward - p).abs() < 1e-5);
    }
    // `replay --verify` scores the replayed ending with the same model: it reproduces.
    let o = guirl(&["replay", rec.to_str().unwrap(), "--verify"]);
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // `play` scores the episode it ends the same way (one click ends a 1-step episode).
    let play_rec = dir.path().join("play-rec");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["play", "--json", "--task", spec.to_str().unwrap(), "--record", play_rec.to_str().unwrap()])
        .arg("--screenshot")
        .arg(dir.path().join("play.png"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"click(40, 60)\n:quit\n").unwrap();
    let o = child.wait_with_output().unwrap();
    let end: serde_json::Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "episode_end")
        .expect("an episode_end event");
    let played = TrajectorySet::read(&play_rec).unwrap();
    let t = &played.trajectories[0].trajectory;
    let frame = played.load_frame(t.final_frame.as_deref().unwrap()).unwrap();
    let p = model.predict(&frame, &t.instruction, &["click(40, 60)".to_string()]).unwrap();
    assert!(
        (end["reward"].as_f64().unwrap() - p).abs() < 1e-5,
        "play reported {end} against the model's {p}"
    );
    assert_eq!(end["status"] == "success", p >= 0.3, "{end}");

    // `guirl serve` scores a client's spec by a model it offers by name, and refuses others.
    served_endings_are_scored(dir.path(), head, &model);

    // With both a check and a model, the check decides and the agreement is reported.
    let both = dir.path().join("both.toml");
    std::fs::write(&both, format!("reward = \"model:rm\"\n{spec_text}")).unwrap();
    let o = run(&both, &dir.path().join("both-rec"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["reward_model_agreement"]["episodes"], 4, "{v}");
    for e in v["per_episode"].as_array().unwrap() {
        let r = e["reward"].as_f64().unwrap();
        assert!(r == 0.0 || r == 1.0, "the check's reward, not the model's: {r}");
    }
}

/// One JSON request to a server at `base` (blocking ureq on a blocking thread).
async fn request(base: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let url = format!("{base}{path}");
    tokio::task::spawn_blocking(move || {
        let res = ureq::post(&url).set("Content-Type", "application/json").send_string(&body.to_string());
        let r = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{url}: {e}"),
        };
        (r.status(), r.into_json().unwrap())
    })
    .await
    .unwrap()
}

/// `guirl serve --reward-models DIR` over REST: a task_spec naming `model:rm` (a folder of
/// DIR) ends its episode with the model's P on the final screen as reward and status; a
/// server without the option, or a name that is a path, refuses the spec.
fn served_endings_are_scored(models: &Path, head: &str, model: &RewardModel) {
    use guirl::serve::env_server::{serve, ServeConfig};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let start = |reward_models: Option<std::path::PathBuf>| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let cfg = ServeConfig { reward_models, ..Default::default() };
            let task = tokio::spawn(serve(listener, cfg, async move {
                let _ = rx.await;
            }));
            (base, tx, task)
        };
        let spec = |name: &str, threshold: f64| {
            format!("reward = \"model:{name}\"\nreward_threshold = {threshold}\n{head}")
        };

        let (base, stop, task) = start(None).await;
        let (status, body) =
            request(&base, "/v1/sessions", serde_json::json!({ "task_spec": spec("rm", 0.3) })).await;
        let msg = body["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!(status, 400, "{body}");
        assert!(msg.contains("--reward-models"), "{msg}");
        let _ = stop.send(());
        task.await.unwrap().unwrap();

        let (base, stop, task) = start(Some(models.to_path_buf())).await;
        let (status, body) =
            request(&base, "/v1/sessions", serde_json::json!({ "task_spec": spec("../rm", 0.3) })).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("plain name"), "{body}");
        // Seed 0's ending at a threshold of 0.3, then the same ending with the threshold just
        // under and just over its P: a success, then not.
        let mut statuses = Vec::new();
        let mut threshold = 0.3;
        for round in 0..3 {
            let body = serde_json::json!({ "task_spec": spec("rm", threshold) });
            let (status, body) = request(&base, "/v1/sessions", body).await;
            assert_eq!(status, 201, "{body}");
            let id = body["session_id"].as_str().unwrap().to_string();
            let (status, r) =
                request(&base, &format!("/v1/sessions/{id}/reset"), serde_json::json!({ "seed": 0 })).await;
            assert_eq!(status, 200, "{r}");
            let instruction = r["observation"]["instruction"].as_str().unwrap().to_string();
            let click = "click(40, 60)";
            let (status, r) =
                request(&base, &format!("/v1/sessions/{id}/step"), serde_json::json!({ "action": click }))
                    .await;
            assert_eq!(status, 200, "{r}");
            let png = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                r["observation"]["screenshot"].as_str().unwrap(),
            )
            .unwrap();
            let shot = image::load_from_memory(&png).unwrap().to_rgb8();
            let p = model.predict(&shot, &instruction, &[click.to_string()]).unwrap();
            let rm = &r["info"]["reward_model"];
            assert!((rm["p"].as_f64().unwrap() - p).abs() < 1e-5, "served {rm} against the model's {p}");
            assert!((r["reward"].as_f64().unwrap() - p).abs() < 1e-5, "{r}");
            assert_eq!(r["info"]["status"] == "success", p >= threshold, "{r}");
            if round > 0 {
                statuses.push(r["info"]["status"].as_str().unwrap().to_string());
            }
            assert!(p > 1e-6 && p < 0.999, "P {p} leaves no room for a threshold on either side");
            threshold = if round == 0 { p * 0.999 } else { p * 1.001 };
        }
        assert_eq!(statuses, ["success", "truncated"]);
        let _ = stop.send(());
        task.await.unwrap().unwrap();
    });
}

/// A trajectory set of `n` episodes with the given outcome and synthetic frames (or none).
fn synthetic_set(dir: &Path, success: &[bool], frames: bool) {
    let mut w = TrajectoryWriter::open(dir).unwrap();
    for (i, &s) in success.iter().enumerate() {
        let status = if s { EpisodeStatus::Success } else { EpisodeStatus::Fail };
        let step = TrajStep::new("click(10, 10)", f64::from(u8::from(s)), status);
        let outcome = Outcome { reward: step.reward, status, steps: 1, error: None };
        let mut t = Trajectory::new("builtin/toggle-switches", i as u64, vec![step], outcome);
        t.instruction = "Turn on \"Sync\", turn off the rest, then click Apply.".into();
        let img: std::sync::Arc<_> =
            image::RgbImage::from_pixel(40, 40, image::Rgb([if s { 200 } else { 20 }, 90, 90])).into();
        let rec =
            Recorded { trajectory: t.clone(), frames: if frames { vec![img.clone(), img] } else { vec![] } };
        if frames {
            w.append(&rec).unwrap();
        } else {
            w.append_line(&t).unwrap();
        }
    }
}

#[test]
fn train_reward_errors_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let p = |s: &str| dir.path().join(s).to_str().unwrap().to_string();
    let out = p("rm");

    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let o = guirl(&["train-reward", &p("empty"), "--out", &out]);
    fails_with(&o, &["is not a trajectory set", "trajectories.jsonl"]);

    synthetic_set(&dir.path().join("wins"), &[true; 6], true);
    let o = guirl(&["train-reward", &p("wins"), "--out", &out]);
    fails_with(&o, &["6 successful and 0 failed episodes", "--policy random", "--record DIR"]);

    synthetic_set(&dir.path().join("losses"), &[false; 5], true);
    let o = guirl(&["train-reward", &p("losses"), "--out", &out]);
    fails_with(&o, &["0 successful and 5 failed", "--policy oracle"]);

    synthetic_set(&dir.path().join("noframes"), &[true, false, true, false], false);
    let o = guirl(&["train-reward", &p("noframes"), "--out", &out]);
    fails_with(&o, &["kept its final frame", "guirl run", "--record DIR"]);

    let o = guirl(&["train-reward", &p("wins"), "--out", &out, "--image-size", "60"]);
    fails_with(&o, &["--image-size 60x60", "multiples of 8"]);
    let o = guirl(&["train-reward", &p("wins"), "--out", &out, "--holdout", "0"]);
    fails_with(&o, &["--holdout must be in (0, 1)"]);

    // A tiny model trains on synthetic frames; a second run refuses to overwrite it.
    let o = guirl(&[
        "train-reward",
        &p("wins"),
        &p("losses"),
        "--out",
        &out,
        "--epochs",
        "3",
        "--image-size",
        "16",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("auc="));
    let o = guirl(&["train-reward", &p("wins"), &p("losses"), "--out", &out]);
    fails_with(&o, &["exists", "--force"]);
    let o = guirl(&[
        "train-reward",
        &p("wins"),
        &p("losses"),
        "--out",
        &out,
        "--force",
        "--epochs",
        "1",
        "--image-size",
        "16",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A spec that names a folder without a model.
    let spec = dir.path().join("t.toml");
    std::fs::write(
        &spec,
        "reward = \"model:nowhere\"\nstart_url = \"/fixtures/pages/two-buttons.html\"\ninstruction = \"x\"\n",
    )
    .unwrap();
    let o = guirl(&["run", "--task", spec.to_str().unwrap(), "--episodes", "1"]);
    fails_with(&o, &["is not a reward model folder", "guirl train-reward"]);
}
