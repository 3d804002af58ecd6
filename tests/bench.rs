//! `guirl bench` over real browsers: the report's numbers on runs whose outcome is known
//! (the oracle on built-in tasks, a random policy that cannot succeed), an env error
//! injected by killing a browser (counted apart and re-run on its seed), resume after a
//! SIGKILL, and the errors a user can cause.

mod common;

use guirl::bench::harness::{self, journal, report};
use guirl::env::{EnvConfig, EpisodeStatus, ScreenState};
use guirl::policy::{oracle::OraclePolicy, random::RandomPolicy, Decision, Policy};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The tests of this file run one at a time: one kills "a browser of this process", which
/// must not be another test's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn guirl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_guirl"))
}

#[test]
fn the_oracle_solves_every_builtin_episode_and_the_files_agree() {
    let _serial = serial();
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench");
        let tasks = ["builtin/login-settings", "builtin/click-color-button"];
        let opts = common::bench_options(&tasks, 3, 2, &out, EnvConfig::default());
        let report = harness::run(&opts, &mut OraclePolicy).await.unwrap();

        assert_eq!(report.tasks.len(), 2);
        for t in &report.tasks {
            assert_eq!((t.episodes, t.completed, t.successes, t.env_errors), (3, 3, 3, 0), "{t:?}");
            assert_eq!(t.success_rate, Some(1.0));
            // Wilson for 3/3: not the zero-width [1, 1] of the Wald interval.
            assert_eq!(t.success_ci95, report::wilson(3, 3, report::Z95));
            assert!(t.success_ci95.0 < 0.5 && t.step_ms_p95 >= t.step_ms_p50 && t.step_ms_p50 > 0.0, "{t:?}");
        }
        assert_eq!((report.all.episodes, report.all.successes), (6, 6));
        let login = &report.tasks[0];
        assert!(login.mean_steps > 3.0, "a multi-page task takes several steps: {login:?}");

        // The journal: one row per episode, seeds 0..2 of each task, each pointing at its trajectory.
        let rows = journal::read_rows(&out.join(journal::RESULTS_FILE)).unwrap();
        assert_eq!(rows.len(), 6);
        for task in tasks {
            let mut seeds: Vec<u64> = rows.iter().filter(|r| r.task == task).map(|r| r.seed).collect();
            seeds.sort();
            assert_eq!(seeds, vec![0, 1, 2]);
            let set = guirl::rollout::TrajectorySet::read(&out.join(harness::trajectory_dir(task))).unwrap();
            for r in rows.iter().filter(|r| r.task == task) {
                let t = &set.trajectories[r.index].trajectory;
                assert_eq!((t.seed, t.outcome.steps, t.outcome.status), (r.seed, r.steps, r.status));
            }
            assert!(out.join(harness::trajectory_dir(task)).join("view.html").is_file());
        }
        // The reports.
        let back = harness::compare::read_report(&out).unwrap();
        assert_eq!(back, report);
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        // (the table's cells are padded to their columns)
        let flat = md.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("| builtin/login-settings | 3 | 0 | 0 | 1.000 |"), "{md}");
        assert!(md.contains("chromedriver: 1") && md.contains("guirl "), "a reproducibility block: {md}");
        let sandbox = &report.reproducibility.sandbox;
        assert!(sandbox.starts_with("on") || sandbox.starts_with("off: "), "{sandbox:?}");
        assert!(md.contains(&format!("- sandbox: {sandbox}\n")), "{md}");
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(
            html.contains("trajectories/builtin/login-settings/view.html#t="),
            "episodes link to the viewer"
        );
        assert!(html.contains("<th>success</th>") && html.contains("addEventListener('click'"), "sortable");
        assert_eq!(std::fs::read_to_string(out.join("errors.md")).unwrap().trim(), "# Errors\n\nNone.");
    });
}

/// A random policy that kills one browser (a chromedriver's child) the first time it acts
/// on a step after the first, so that episode ends as `env_error`.
struct KillOnce {
    inner: RandomPolicy,
    armed: Arc<AtomicBool>,
}

impl Policy for KillOnce {
    fn name(&self) -> String {
        "random".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        if states.iter().any(|s| s.step >= 1) && self.armed.swap(false, Ordering::SeqCst) {
            let children = |pid: u32| -> Vec<u32> {
                let out = Command::new("pgrep").args(["-P", &pid.to_string()]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
            };
            let browser =
                children(std::process::id()).into_iter().flat_map(children).next().expect("a browser");
            Command::new("kill").args(["-9", &browser.to_string()]).status()?;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        self.inner.act(states)
    }
}

#[test]
fn a_killed_browser_is_counted_apart_and_rerun_and_random_fails() {
    let _serial = serial();
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench");
        // Logging in, opening settings and saving cannot happen in 3 random steps.
        let env = EnvConfig { max_steps: Some(3), ..EnvConfig::default() };
        let opts = common::bench_options(&["builtin/login-settings"], 4, 1, &out, env);
        let mut policy = KillOnce { inner: RandomPolicy::new(0), armed: Arc::new(AtomicBool::new(true)) };
        let report = harness::run(&opts, &mut policy).await.unwrap();

        let rows = journal::read_rows(&out.join(journal::RESULTS_FILE)).unwrap();
        let errored: Vec<_> = rows.iter().filter(|r| r.status == EpisodeStatus::EnvError).collect();
        assert_eq!(errored.len(), 1, "{rows:?}");
        let seed = errored[0].seed;
        assert!(errored[0].env_error.is_some());
        let rerun: Vec<_> = rows.iter().filter(|r| r.seed == seed && r.attempt == 1).collect();
        assert_eq!(rerun.len(), 1, "the errored seed ran again: {rows:?}");
        assert_ne!(rerun[0].status, EpisodeStatus::EnvError);

        let t = &report.tasks[0];
        assert_eq!((t.episodes, t.completed, t.env_errors, t.env_errors_final), (4, 4, 1, 0), "{t:?}");
        assert_eq!(t.successes, 0);
        let (lo, hi) = t.success_ci95;
        assert_eq!(lo, 0.0);
        assert!(
            (hi - report::wilson(0, 4, report::Z95).1).abs() < 1e-12 && hi > 0.4,
            "not zero-width at 0 %"
        );
        let errors = std::fs::read_to_string(out.join("errors.md")).unwrap();
        assert!(
            errors.contains("## env_error (1 episode)") && errors.contains(&format!("seeds {seed}")),
            "{errors}"
        );
    });
}

fn rows_of(path: &Path) -> Vec<journal::ResultRow> {
    journal::read_rows(path).unwrap_or_default()
}

#[test]
fn resume_after_sigkill_loses_no_finished_episode_and_repeats_none() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let args = |extra: &[&str]| {
        let mut c = guirl();
        c.args(["bench", "--tasks", "miniwob/click-test,miniwob/click-button", "--policy", "oracle"])
            .args(["--episodes-per-task", "25", "--out"])
            .arg(&out)
            .args(extra);
        c
    };
    let mut child =
        args(&[]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let journal_path = out.join(journal::RESULTS_FILE);
    let t0 = std::time::Instant::now();
    while rows_of(&journal_path).len() < 8 {
        assert!(t0.elapsed().as_secs() < 120, "the bench never got going");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = rows_of(&journal_path);
    assert!(before.len() < 50, "killed mid-bench");

    // A folder holding a bench is not silently reused, and resuming another bench is refused.
    let o = args(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("already holds a bench") && err.contains("--resume"), "{err}");
    let o = guirl()
        .args(["bench", "--tasks", "miniwob/click-test", "--policy", "random", "--resume", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("policy: oracle → random") && err.contains("tasks:"), "{err}");
    // page time changes outcomes: another clock is another bench
    let o = args(&["--resume", "--virtual-time-ms", "100"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("these differ: env:") && err.contains("\"virtual_time_ms\":100"), "{err}");

    let o = args(&["--resume"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = rows_of(&journal_path);
    assert_eq!(&after[..before.len()], &before[..], "finished rows are kept as they were");
    let (settled, unsettled) = journal::settle(&after);
    assert_eq!(settled.len(), 50, "every episode ran: {after:?}");
    assert!(unsettled.is_empty());
    // Nothing settled before the kill ran again (an env error may re-run its own seed).
    let (done_before, _) = journal::settle(&before);
    for r in &after[before.len()..] {
        assert!(!done_before.iter().any(|d| (&d.task, d.seed) == (&r.task, r.seed)), "{r:?} ran twice");
    }
    let report = harness::compare::read_report(&out).unwrap();
    assert_eq!((report.all.episodes, report.all.successes), (50, 50));
    // With no --seed, the CLI measures the test split, and the report says so.
    let first = guirl::train::seeds::TEST_SEEDS;
    assert!(after.iter().all(|r| (first..first + 25).contains(&r.seed)), "{after:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(&format!("seeds: {first}..{} per task (test split)", first + 24)), "{md}");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("nothing ran"));
    // A finished bench resumed runs nothing and says so.
    let o = args(&["--resume"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("already in") && err.contains("nothing ran"), "{err}");
    assert_eq!(rows_of(&journal_path), after);
}

#[test]
fn user_errors_name_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = guirl().args(args).arg("--out").arg(dir.path().join("b")).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = run(&["bench", "--tasks", "miniwob/clik-test"]);
    assert!(e.contains("unknown task \"miniwob/clik-test\"") && e.contains("miniwob/click-test"), "{e}");
    let e = run(&[
        "bench",
        "--tasks",
        "miniwob/click-test",
        "--policy",
        "openai:m@http://127.0.0.1:9/v1",
        "--coords",
        "bogus",
    ]);
    assert!(
        e.contains("px") && e.contains("smart_resize") && e.contains("rel1000") && e.contains("rel1"),
        "{e}"
    );
    let e = run(&["bench", "--tasks", "miniwob/click-test", "--policy", "nonsense"]);
    assert!(e.contains("openai:MODEL@BASE_URL") && e.contains("oracle"), "{e}");
    let e = run(&["bench", "--resume", "--tasks", "miniwob/click-test"]);
    assert!(e.contains("holds no bench to continue"), "{e}");
    // A folder of other files is not taken for a bench's.
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    std::fs::write(dir.path().join("b").join("notes.txt"), "mine").unwrap();
    let e = run(&["bench", "--tasks", "builtin/counter", "--policy", "random"]);
    assert!(e.contains("holds 1 other file(s) and no bench") && e.contains("--out"), "{e}");
    let e = run(&["bench"]);
    assert!(e.contains("--suite") && e.contains("--tasks"), "{e}");
    let o = guirl().args(["bench", "compare", "/nonexistent/a", "/nonexistent/b"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("report.json") && e.contains("guirl bench"), "{e}");
}

#[test]
fn compare_flags_disjoint_intervals() {
    let row = |task: &str, seed, status| journal::ResultRow {
        task: task.into(),
        seed,
        attempt: 0,
        status,
        reward: if status == EpisodeStatus::Success { 1.0 } else { -1.0 },
        steps: 1,
        step_ms_mean: 1.0,
        step_ms: vec![1.0],
        policy_error: None,
        env_error: None,
        judge_error: None,
        invalid_steps: 0,
        first_action_error: None,
        instruction: String::new(),
        trajectory: String::new(),
        index: 0,
    };
    let order = vec!["a".to_string(), "b".to_string()];
    let mk = |a_ok: u64, b_ok: u64| {
        let mut rows = Vec::new();
        for s in 0..20 {
            rows.push(row("a", s, if s < a_ok { EpisodeStatus::Success } else { EpisodeStatus::Fail }));
            rows.push(row("b", s, if s < b_ok { EpisodeStatus::Success } else { EpisodeStatus::Fail }));
        }
        report::Report::build(&order, &rows, Default::default(), 1.0)
    };
    // a: 2/20 → 19/20 (intervals [0.03, 0.30] and [0.76, 0.99] are disjoint); b: 10 → 12.
    let (x, y) = (mk(2, 10), mk(19, 12));
    let d = harness::compare::compare(&x, &y);
    assert!(d[0].significant && !d[1].significant, "{d:?}");
    assert!((d[0].delta.unwrap() - 0.85).abs() < 1e-12);
    assert_eq!((d[0].a_episodes, d[0].b_episodes), (20, 20));
    let table = harness::compare::table(&d);
    assert!(table.lines().nth(1).unwrap().contains("intervals do not overlap"), "{table}");
    assert!(table.lines().nth(1).unwrap().contains("0.100 (20)"), "{table}");
    // Two runs on the same seeds have nothing to note; other seeds or another observation
    // setting are said, since the rates then do not compare the same task instances.
    assert!(harness::compare::notes(&x, &y).is_empty());
    let mut z = mk(19, 12);
    z.reproducibility.seed = 2_000_000;
    z.reproducibility.episodes_per_task = 10;
    z.reproducibility.observation = "pixels+dom".into();
    let mut x = x;
    x.reproducibility.observation = "pixels".into();
    let notes = harness::compare::notes(&x, &z);
    assert!(
        notes.len() == 2 && notes[0].contains("A ran 0..") && notes[0].contains("B 2000000..2000009"),
        "{notes:?}"
    );
    assert!(notes[1].contains("A pixels, B pixels+dom"), "{notes:?}");
    // A scripted policy reads nothing: a checkpoint against random has no such note.
    let mut r = mk(2, 10);
    r.reproducibility.observation = "n/a".into();
    assert!(harness::compare::notes(&r, &x).is_empty());
    // Another task set: the pooled row pools different tasks, and the notes say so first.
    let mut w = mk(19, 12);
    w.tasks.retain(|t| t.task == "a");
    let notes = harness::compare::notes(&y, &w);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("tasks differ: only A ran b; [ALL TASKS] pools"), "{notes:?}");
}

/// A sampled policy's episode depends on its task and seed alone: a task benched beside
/// another, or alone, plays the same actions on each seed (the draws were keyed by the
/// episode's place among the jobs, so a task list or a resume changed them).
#[test]
fn a_random_episode_is_the_same_whichever_tasks_share_the_bench() {
    let _serial = serial();
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let env = || EnvConfig { max_steps: Some(4), ..EnvConfig::default() };
        let played = |out: &Path| {
            let set = guirl::rollout::TrajectorySet::read(&out.join("trajectories/builtin/counter")).unwrap();
            let mut eps: Vec<(u64, Vec<String>, String)> = set
                .trajectories
                .iter()
                .map(|t| {
                    let t = &t.trajectory;
                    let actions = t.steps.iter().map(|s| s.action.clone()).collect();
                    (t.seed, actions, format!("{:?} {}", t.outcome.status, t.outcome.reward))
                })
                .collect();
            eps.sort();
            eps
        };
        let (both, alone) = (dir.path().join("both"), dir.path().join("alone"));
        let opts =
            common::bench_options(&["builtin/click-color-button", "builtin/counter"], 3, 2, &both, env());
        harness::run(&opts, &mut RandomPolicy::new(5)).await.unwrap();
        let opts = common::bench_options(&["builtin/counter"], 3, 2, &alone, env());
        harness::run(&opts, &mut RandomPolicy::new(5)).await.unwrap();
        let (a, b) = (played(&both), played(&alone));
        assert_eq!(a.len(), 3);
        assert!(a.iter().any(|(_, actions, _)| actions.len() > 1), "random steps were played: {a:?}");
        assert_eq!(a, b, "the same seeds played differently beside another task");
    });
}

#[test]
fn a_task_whose_page_does_not_load_is_named_and_the_others_run() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("site.toml");
    // Port 9 (discard) refuses: the browser shows its error page at once.
    let dead = "start_url = \"http://127.0.0.1:9/shop.html\"\ninstruction = \"Buy\"\nmax_steps = 3\n[success]\nurl_pattern = \"done\"\n";
    std::fs::write(&spec, dead).unwrap();
    let out = dir.path().join("b");
    let tasks = format!("{},builtin/counter", spec.display());
    let bench = |extra: &[&str]| {
        guirl()
            .args([
                "bench",
                "--tasks",
                &tasks,
                "--policy",
                "random",
                "--episodes-per-task",
                "2",
                "--envs",
                "2",
            ])
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    // Both envs start on the dead task: it is named, and the other task still runs.
    let o = bench(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let id = spec.display().to_string();
    assert!(
        err.contains(&format!("no rate for {id}: its first page did not load"))
            && err.contains("measured 1 of its 2 tasks")
            && err.contains("--resume"),
        "{err}"
    );
    let report = harness::compare::read_report(&out).unwrap();
    assert_eq!(report.macro_success_rate, None, "no mean over a task left out");
    assert_eq!(report.unrated, vec![id.clone()]);
    assert_eq!(report.unreachable.len(), 1);
    assert_eq!((report.tasks[0].episodes, report.tasks[0].success_rate), (0, None));
    assert_eq!((report.tasks[1].task.as_str(), report.tasks[1].episodes), ("builtin/counter", 2));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(json["macro_success_rate"].is_null() && json["tasks"][0]["success_rate"].is_null(), "{json}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("n/a (1 of 2 tasks have no completed episode") && md.contains("Not run: "), "{md}");
    let errors = std::fs::read_to_string(out.join("errors.md")).unwrap();
    assert!(errors.contains("## Tasks not run") && errors.contains(&format!("- {id}: page ")), "{errors}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<p>Not run: ") && html.contains(&format!("<tr><td>{id}</td>")), "{html}");
    // Its URL fixed (a spec none of whose episodes ran may change), --resume runs it.
    let fixed = concat!(env!("CARGO_MANIFEST_DIR"), "/environments/websites/newsletter.toml");
    std::fs::copy(fixed, &spec).unwrap();
    let o = bench(&["--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = harness::compare::read_report(&out).unwrap();
    assert!(report.unrated.is_empty() && report.unreachable.is_empty(), "{report:?}");
    assert_eq!(report.all.episodes, 4);
    assert!(report.macro_success_rate.is_some());
}

#[test]
fn a_stopped_bench_says_what_it_kept_and_how_to_go_on() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b");
    let child = guirl()
        .args(["bench", "--tasks", "builtin/counter", "--policy", "random", "--episodes-per-task", "200"])
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let journal_path = out.join(journal::RESULTS_FILE);
    let t0 = std::time::Instant::now();
    while rows_of(&journal_path).len() < 3 {
        assert!(t0.elapsed().as_secs() < 120, "the bench never got going");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let kept = journal::settle(&rows_of(&journal_path)).0.len();
    assert!(
        err.contains(&format!("guirl: {kept} of 200 episodes are in "))
            && err.contains("with --resume to continue"),
        "{kept}: {err}"
    );
}
