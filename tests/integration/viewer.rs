//! `guirl view`: a recorded trajectory set as one self-contained HTML page, checked by
//! opening it in headless Chromium and driving it with real key presses.

use guirl::env::gui_env::eval;
use guirl::env::{encode_png, EnvConfig, EpisodeStatus, GuiAction, GuiEnv};
use guirl::rollout::TrajectorySet;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Output};

fn guirl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guirl")).args(args).output().expect("running guirl")
}

fn ok(args: &[&str]) -> String {
    let out = guirl(args);
    assert!(
        out.status.success(),
        "guirl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

async fn js(env: &GuiEnv, script: &str) -> Value {
    eval(env, script).await.unwrap_or_else(|e| panic!("{script}: {e}"))
}

async fn key(env: &mut GuiEnv, k: &str) -> EpisodeStatus {
    let out = env.step(&GuiAction::parse(&format!("key({k})")).unwrap()).await.unwrap();
    assert_eq!(out.info.action_error, None);
    out.info.status
}

/// Poll until every image on the page has loaded (data URIs decode asynchronously).
async fn all_images_loaded(env: &GuiEnv) -> Value {
    let script = "var i = Array.from(document.images); \
                  return [i.length, i.filter(function (m) { return m.complete && m.naturalWidth > 0; }).length];";
    let mut v = js(env, script).await;
    for _ in 0..50 {
        if v[0] == v[1] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        v = js(env, script).await;
    }
    v
}

#[tokio::test]
async fn the_viewer_page_shows_filters_and_steps_through_a_recorded_set() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("set");
    ok(&[
        "run",
        "--task",
        "miniwob/click-test",
        "--policy",
        "oracle",
        "--episodes",
        "2",
        "--record",
        s(&dir),
    ]);
    // Random on enter-text with seed 2 (its draws are keyed by task and seed): fails, and
    // types while nothing has focus.
    ok(&[
        "run",
        "--task",
        "miniwob/enter-text",
        "--policy",
        "random",
        "--seed",
        "2",
        "--episodes",
        "1",
        "--max-steps",
        "12",
        "--record",
        s(&dir),
    ]);
    let set = TrajectorySet::read(&dir).unwrap();
    assert_eq!(set.trajectories.len(), 3);
    let failed = &set.trajectories[2].trajectory;
    assert_ne!(failed.outcome.status, EpisodeStatus::Success, "random should not solve enter-text");
    let fail_status = failed.outcome.status.as_str();

    let html = tmp.path().join("x.html");
    let printed = ok(&["view", s(&dir), "--out", s(&html)]);
    assert_eq!(printed.trim(), html.display().to_string());
    let page = std::fs::read_to_string(&html).unwrap();
    for external in ["<link", "src=\"http", "url(http", "@import"] {
        assert!(!page.contains(external), "the page loads an external resource ({external})");
    }
    // Each distinct frame is embedded exactly once.
    let mut distinct = HashSet::new();
    for st in &set.trajectories {
        let t = &st.trajectory;
        for name in t.steps.iter().filter_map(|s| s.frame.as_ref()).chain(t.final_frame.as_ref()) {
            distinct.insert(std::fs::read(set.frame_path(name)).unwrap());
        }
    }
    assert_eq!(page.matches("data:image/png;base64,").count(), distinct.len());
    // The default output is DIR/view.html.
    assert_eq!(ok(&["view", s(&dir)]).trim(), dir.join("view.html").display().to_string());
    assert!(dir.join("view.html").is_file());

    // Open it in Chromium as a website task whose success is "the 2nd card is current".
    let spec = tmp.path().join("viewer.toml");
    std::fs::write(
        &spec,
        format!(
            "start_url = \"file://{}\"\ninstruction = \"Look at the trajectories\"\nmax_steps = 20\n\
             [viewport]\nwidth = 900\nheight = 600\n[success]\n\
             js = \"(function () {{ var c = document.querySelector('.step.current'); return !!c && c.dataset.step === '1'; }})()\"\n",
            html.display()
        ),
    )
    .unwrap();
    let task = guirl::tasks::load_task(s(&spec)).unwrap();
    let mut env = GuiEnv::new(task, EnvConfig::default());
    env.reset(0).await.unwrap();

    assert_eq!(js(&env, "return document.querySelectorAll('.traj').length;").await, json!(3));
    assert_eq!(js(&env, "return document.getElementById('count').textContent;").await, json!("3 of 3 shown"));
    assert_eq!(
        js(&env, "return [document.querySelector('.traj.current').dataset.i, document.querySelector('.step.current').dataset.step];").await,
        json!(["0", "0"]),
        "the first trajectory and its first step are current"
    );
    let loaded = all_images_loaded(&env).await;
    assert_eq!(loaded, json!([2, 2]), "click-test: one step and the final frame, both loaded");
    assert_eq!(
        js(&env, "return document.querySelectorAll('#detail svg circle').length > 0;").await,
        json!(true)
    );

    // Filter by outcome: only the failed run stays, and it becomes the current one.
    let filtered = js(
        &env,
        &format!(
            "var s = document.getElementById('f-status'); s.value = '{fail_status}'; \
             s.dispatchEvent(new Event('change')); \
             return [Array.from(document.querySelectorAll('.traj')).filter(function (e) {{ return !e.hidden && e.offsetParent !== null; }}).map(function (e) {{ return e.dataset.i; }}), \
                     document.getElementById('count').textContent, document.querySelector('#detail h2').textContent];"
        ),
    )
    .await;
    assert_eq!(filtered[0], json!(["2"]), "{filtered}");
    assert_eq!(filtered[1], json!("1 of 3 shown"));
    assert!(filtered[2].as_str().unwrap().starts_with("miniwob/enter-text"), "{filtered}");
    // Its steps are all there, with loaded frames, the action error and the typed text.
    let n = failed.steps.len() as u64 + 1;
    assert_eq!(all_images_loaded(&env).await, json!([n, n]));
    let errs = js(&env, "return Array.from(document.querySelectorAll('#detail .step .error')).map(function (e) { return e.textContent; });").await;
    assert!(errs.to_string().contains("nothing has keyboard focus"), "{errs}");
    let labels = js(&env, "return Array.from(document.querySelectorAll('#detail .label')).map(function (e) { return e.textContent; });").await;
    assert!(labels.to_string().contains("type"), "{labels}");

    // Text search on the instruction, with the status filter off again.
    let searched = js(
        &env,
        "document.getElementById('f-status').value = ''; document.getElementById('f-status').dispatchEvent(new Event('change')); \
         var q = document.getElementById('f-search'); q.value = 'BUTTON'; q.dispatchEvent(new Event('input')); \
         return [document.getElementById('count').textContent, document.querySelector('.traj.current').dataset.i];",
    )
    .await;
    assert_eq!(searched, json!(["2 of 3 shown", "0"]), "only click-test says 'button'");
    js(&env, "var q = document.getElementById('f-search'); q.value = ''; q.dispatchEvent(new Event('input')); q.blur(); return 0;")
        .await;

    // Keys: ↓ / j next trajectory, ↑ / k previous, → next step.
    let current = "return [document.querySelector('.traj.current').dataset.i, document.querySelector('.step.current').dataset.step, document.getElementById('stepno').textContent];";
    assert_eq!(key(&mut env, "ArrowDown").await, EpisodeStatus::Running);
    assert_eq!(js(&env, current).await[0], json!("1"));
    assert_eq!(key(&mut env, "j").await, EpisodeStatus::Running);
    assert_eq!(js(&env, current).await[0], json!("2"));
    assert_eq!(key(&mut env, "k").await, EpisodeStatus::Running);
    assert_eq!(key(&mut env, "ArrowUp").await, EpisodeStatus::Running);
    assert_eq!(js(&env, current).await, json!(["0", "0", "Step 1 of 1"]));
    assert_eq!(key(&mut env, "ArrowDown").await, EpisodeStatus::Running);
    assert_eq!(key(&mut env, "ArrowDown").await, EpisodeStatus::Running);
    assert_eq!(js(&env, current).await, json!(["2", "0", format!("Step 1 of {}", failed.steps.len())]));
    assert_eq!(key(&mut env, "ArrowLeft").await, EpisodeStatus::Running, "← at the first step stays there");
    let out = env.step(&GuiAction::parse("key(ArrowRight)").unwrap()).await.unwrap();
    assert_eq!(
        out.info.status,
        EpisodeStatus::Success,
        "→ makes the second step current (env error: {:?}, timings: {:?})",
        out.info.env_error,
        out.info.timings
    );
    assert_eq!(js(&env, current).await, json!(["2", "1", format!("Step 2 of {}", failed.steps.len())]));
    std::fs::write("/tmp/viewer.png", encode_png(&out.obs.screenshot)).unwrap();
    env.close().await;
}

#[test]
fn view_of_a_folder_that_is_not_a_trajectory_set_fails_with_the_store_message() {
    let tmp = tempfile::tempdir().unwrap();
    let out = guirl(&["view", s(tmp.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a trajectory set: it has no trajectories.jsonl"), "{err}");
    assert!(!tmp.path().join("view.html").exists(), "nothing is written on failure");

    let out = guirl(&["view", s(&tmp.path().join("nope"))]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope does not exist"), "{err}");

    // A folder of sets (as a bench writes them) names the sets inside.
    let bench = tmp.path().join("bench");
    for task in ["miniwob/click-test", "miniwob/enter-text"] {
        ok(&["run", "--task", task, "--policy", "random", "--episodes", "1", "--max-steps", "1", "--record"]
            .into_iter()
            .chain([s(&bench.join("trajectories").join(task))])
            .collect::<Vec<_>>());
    }
    let out = guirl(&["view", s(&bench)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds trajectory sets in subfolders"), "{err}");
    assert!(err.contains(&bench.join("trajectories/miniwob/click-test").display().to_string()), "{err}");
    // --out in folders that do not exist yet: made; a folder as --out: said.
    let page = tmp.path().join("pages/today/view.html");
    let set = bench.join("trajectories/miniwob/click-test");
    assert_eq!(ok(&["view", s(&set), "--out", s(&page)]).trim(), page.display().to_string());
    assert!(page.is_file());
    let out = guirl(&["view", s(&set), "--out", s(tmp.path())]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a folder: give the page's file name"));
}

/// `stats` and `view` of a training run's folder, a new user's first guess: they say a run
/// keeps its rollouts only with `record_every`, name those it kept, and where its figures are.
#[test]
fn stats_and_view_of_a_training_run_say_where_its_episodes_and_figures_are() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("config.toml"), "").unwrap();
    std::fs::write(run.join("metrics.jsonl"), "").unwrap();
    for cmd in ["stats", "view"] {
        let out = guirl(&[cmd, s(&run)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        for needle in [
            "it is a training run, which keeps its rollouts only with `[rollout] record_every = N`",
            "(this run kept none)",
            "metrics.jsonl and",
            "/plots",
        ] {
            assert!(err.contains(needle), "{cmd} lacks {needle:?}: {err}");
        }
    }
    // a run that kept some: view names them (stats pools them)
    let kept = run.join("rollouts/iter-000003");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("trajectories.jsonl"), "").unwrap();
    let err = String::from_utf8_lossy(&guirl(&["view", s(&run)]).stderr).to_string();
    assert!(err.contains(&format!("(this run kept {})", kept.display())), "{err}");
    let err = String::from_utf8_lossy(&guirl(&["stats", s(&run)]).stderr).to_string();
    assert!(err.contains(&format!("no episode in {}", kept.display())), "{err}");
}

/// An episode that failed at reset (no step, no screen) is drawn with a placeholder's size
/// and says so: it was drawn as a 1×1 frame with a squeezed final card.
#[tokio::test]
async fn an_episode_that_failed_at_reset_is_drawn_readably() {
    use guirl::rollout::{Outcome, Trajectory, TrajectoryWriter};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("set");
    let error = "browser error: chromedriver did not start";
    let outcome =
        Outcome { reward: 0.0, status: EpisodeStatus::EnvError, steps: 0, error: Some(error.into()) };
    TrajectoryWriter::open(&dir)
        .unwrap()
        .append_line(&Trajectory::new("miniwob/click-test", 7, vec![], outcome))
        .unwrap();
    let html = tmp.path().join("x.html");
    ok(&["view", s(&dir), "--out", s(&html)]);
    let spec = crate::common::view_task(tmp.path(), &html);
    let mut env = GuiEnv::new(guirl::tasks::load_task(s(&spec)).unwrap(), EnvConfig::default());
    env.reset(0).await.unwrap();
    let seen = js(
        &env,
        "var c = document.querySelector('#detail .step.final'); \
         return [document.querySelector('#detail .sub').textContent, c.getBoundingClientRect().width, \
                 c.textContent, document.querySelector('#detail').textContent.indexOf('chromedriver did not start') >= 0];",
    )
    .await;
    let sub = seen[0].as_str().unwrap();
    assert!(sub.contains("no screen") && !sub.contains("×"), "{seen}");
    assert!(seen[1].as_f64().unwrap() >= 300.0, "the final card is squeezed: {seen}");
    assert!(seen[2].as_str().unwrap().contains("no frame recorded"), "{seen}");
    assert_eq!(seen[3], json!(true), "the error is shown: {seen}");
    env.close().await;
}
