//! Episode lifecycle in a real browser: seeding, resets that keep the browser and page,
//! and recovery from a killed or hung browser.

use crate::common;

use common::{env_for, env_with, repo};
use guirl::env::gui_env::eval;
use guirl::env::{BrowserConfig, EnvConfig, EpisodeStatus, GuiAction};
use std::time::Duration;

#[tokio::test]
async fn same_seed_same_instance_and_reset_reuses_browser_and_page() {
    let mut env = env_for("miniwob/click-test-2");
    let (a, info) = env.reset(11).await.unwrap();
    assert!(info.browser_started);
    assert_eq!((a.screenshot.width(), a.screenshot.height()), (160, 210));
    eval(&env, "window.__guirl_marker = 42; return null;").await.unwrap();
    let (b, info) = env.reset(12).await.unwrap();
    assert!(!info.browser_started, "a reset must not relaunch the browser");
    let (c, _) = env.reset(11).await.unwrap();
    assert_eq!(a.instruction, c.instruction);
    assert_eq!(a.screenshot, c.screenshot, "same seed, same screenshot");
    assert_eq!(a.elements, c.elements);
    assert_ne!(a.screenshot, b.screenshot, "another seed, another layout");
    let marker = eval(&env, "return window.__guirl_marker;").await.unwrap();
    assert_eq!(marker, 42, "MiniWoB++ episodes start in the loaded page, without a reload");
    env.close().await;
}

#[tokio::test]
async fn switching_to_a_task_with_another_viewport_keeps_the_browser() {
    // Under begin-frame control the window resize once stalled until the page-load limit,
    // and the env then replaced its browser at every such switch (a bench over mixed suites).
    let mut env = env_for("builtin/click-color-button");
    let (a, info) = env.reset(1).await.unwrap();
    assert!(info.browser_started);
    for (task, size) in [("miniwob/click-test", (160, 210)), ("builtin/counter", a.screenshot.dimensions())] {
        env.set_task(guirl::tasks::load_task(task).unwrap());
        let (s, info) = env.reset(2).await.unwrap();
        assert!(
            !info.browser_started,
            "{task}: the switch must not relaunch the browser (it failed: {:?})",
            info.replaced_after
        );
        assert_eq!(s.screenshot.dimensions(), size, "{task}");
        let out = env.step(&GuiAction::Wait { ms: 0 }).await.unwrap();
        assert_ne!(out.info.status, EpisodeStatus::EnvError, "{task}");
    }
    env.close().await;
}

/// A task's page is laid out at its own viewport whatever ran in the browser before:
/// after a wider task the window shrinks back (it once only grew, so a 240-px task was laid
/// out 320 px wide after click-test, and its frames depended on the task before it).
#[tokio::test]
async fn a_task_looks_the_same_whatever_task_the_browser_ran_before() {
    let probe = "return [innerWidth, innerHeight];";
    let mut fresh = env_for("builtin/fill-form");
    let (want, _) = fresh.reset(0).await.unwrap();
    let want_inner = eval(&fresh, probe).await.unwrap();
    fresh.close().await;
    let mut env = env_for("builtin/counter");
    env.reset(0).await.unwrap();
    for task in ["miniwob/click-test", "builtin/counter", "builtin/fill-form"] {
        env.set_task(guirl::tasks::load_task(task).unwrap());
        env.reset(0).await.unwrap();
    }
    let (got, _) = env.reset(0).await.unwrap();
    assert_eq!(eval(&env, probe).await.unwrap(), want_inner, "the viewport of a fresh browser");
    assert_eq!(got.elements, want.elements, "the same layout");
    assert_eq!(got.screenshot, want.screenshot, "the same frame");
    env.close().await;
}

#[tokio::test]
async fn builtin_and_website_tasks_are_seeded_too() {
    for task in ["builtin/login-settings", repo("environments/websites/newsletter.toml").to_str().unwrap()] {
        let mut env = env_for(task);
        let (a, _) = env.reset(5).await.unwrap();
        let (_, _) = env.reset(6).await.unwrap();
        let (b, _) = env.reset(5).await.unwrap();
        assert_eq!(a.instruction, b.instruction, "{task}");
        assert_eq!(a.screenshot, b.screenshot, "{task}");
        if task.ends_with("newsletter.toml") {
            // Form controls carry their accessible name: a `for=` label and a wrapping one.
            let label = |id: &str| a.elements.iter().find(|e| e.id == id).map(|e| e.label.clone());
            assert_eq!(label("email").as_deref(), Some("Email"), "{:?}", a.elements);
            assert_eq!(label("daily").as_deref(), Some("Daily digest instead"), "{:?}", a.elements);
        }
        env.close().await;
    }
}

fn kill_browser(env: &guirl::env::GuiEnv) {
    let dir = env.browser_profile_dir().expect("a local browser");
    let status = std::process::Command::new("pkill")
        .arg("-9")
        .arg("-f")
        .arg(format!("user-data-dir={}", dir.display()))
        .status()
        .unwrap();
    assert!(status.success(), "found and killed the chromium processes");
}

#[tokio::test]
async fn killed_browser_ends_the_episode_as_env_error_and_next_reset_works() {
    let mut env = env_for("miniwob/click-test");
    env.reset(1).await.unwrap();
    kill_browser(&env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = env.step(&GuiAction::Click { x: 80, y: 100 }).await.unwrap();
    assert_eq!(out.info.status, EpisodeStatus::EnvError);
    assert!(out.truncated);
    assert!(out.info.env_error.as_deref().unwrap_or("").contains("browser"), "{:?}", out.info.env_error);
    // Told at once that the channel closed, not after a command's whole time limit.
    assert!(
        !out.info.env_error.as_deref().unwrap_or("").contains("did not answer"),
        "{:?}",
        out.info.env_error
    );
    let (obs, info) = env.reset(1).await.expect("the next reset starts a fresh browser");
    assert!(info.browser_started);
    assert_eq!(obs.instruction, "Click the button.");
    let out = env.step(&GuiAction::Wait { ms: 1 }).await.unwrap();
    assert_eq!(out.info.status, EpisodeStatus::Running);
    env.close().await;
}

/// Kill the chromedriver that drives `env`'s browser: the parent, or an ancestor, of a
/// chromium process of its profile.
fn kill_driver(env: &guirl::env::GuiEnv) {
    let dir = env.browser_profile_dir().expect("a local browser");
    let out = std::process::Command::new("pgrep")
        .arg("-f")
        .arg(format!("user-data-dir={}", dir.display()))
        .output()
        .unwrap();
    let mut pid: u32 =
        String::from_utf8_lossy(&out.stdout).lines().next().expect("a chromium").parse().unwrap();
    while pid > 1 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The parent is the second field after the command name's closing parenthesis.
        pid = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1).unwrap().parse().unwrap();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "chromedriver" {
            let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
            assert!(killed.success());
            return;
        }
    }
    panic!("no chromedriver above the browser of {}", dir.display());
}

/// A dead chromedriver fails the next navigation, which must start a fresh browser and
/// driver rather than be taken for a page that did not load (which kept the dead driver:
/// every later episode of a run was an env error).
#[tokio::test]
async fn a_dead_chromedriver_is_replaced_at_the_next_reset() {
    let mut env = env_for("builtin/shop-checkout");
    env.reset(1).await.unwrap();
    // As after an episode that followed a link: the next reset navigates back (the
    // task's own page would be reused), and that navigation is the first command that
    // needs the driver.
    eval(&env, "history.pushState({}, '', '/elsewhere'); return 1;").await.unwrap();
    kill_driver(&env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (obs, info) = env.reset(2).await.expect("the reset starts a fresh browser and driver");
    assert!(info.browser_started);
    let why = info.replaced_after.unwrap_or_default();
    assert!(why.contains("webdriver"), "{why}");
    assert!(!obs.instruction.is_empty());
    let out = env.step(&GuiAction::Wait { ms: 1 }).await.unwrap();
    assert_eq!(out.info.status, EpisodeStatus::Running);
    env.close().await;
}

#[tokio::test]
async fn hung_page_is_detected_by_the_command_timeout() {
    let browser = BrowserConfig { command_timeout: Duration::from_secs(3), ..Default::default() };
    let cfg = EnvConfig { browser, ..Default::default() };
    let mut env = env_with(repo("fixtures/tasks/actions.toml").to_str().unwrap(), cfg);
    let (obs, _) = env.reset(0).await.unwrap();
    let (x, y) = obs.elements.iter().find(|e| e.id == "hang").unwrap().bbox.center();
    let t0 = std::time::Instant::now();
    let mut out = env.step(&GuiAction::Click { x, y }).await.unwrap();
    // The click's handler hangs the page from a `setTimeout(0)`: a page read and frame
    // issued the moment the input is acknowledged (begin-frame control) can run before
    // it, and the hang then shows at the next step.
    if out.info.status == EpisodeStatus::Running {
        out = env.step(&GuiAction::Wait { ms: 10 }).await.unwrap();
    }
    assert_eq!(out.info.status, EpisodeStatus::EnvError, "{:?}", out.info);
    assert!(out.info.env_error.unwrap().contains("did not answer"));
    assert!(t0.elapsed() < Duration::from_secs(30));
    env.reset(0).await.expect("a fresh browser after the hang");
    env.close().await;
}

#[tokio::test]
async fn devtools_frame_control_and_webdriver_paths_see_the_same_page() {
    // The fast paths (page reads and screenshots over DevTools; frames drawn only on
    // request) and plain WebDriver must observe identical states, including across a page
    // navigation (multi-page task).
    let mut seen = Vec::new();
    let devtools_allowed = std::env::var("GUIRL_DEVTOOLS").map_or(true, |v| v != "0");
    let frames_allowed = std::env::var("GUIRL_FRAME_CONTROL").map_or(true, |v| v != "0")
        && std::env::var_os("GUIRL_CHROMIUM").is_none();
    for (devtools, frames) in [(true, true), (true, false), (false, false)] {
        let browser = BrowserConfig::default().with_devtools(devtools).with_frame_control(frames);
        let mut env = env_with("builtin/login-settings", EnvConfig { browser, ..Default::default() });
        let (obs, _) = env.reset(3).await.unwrap();
        if devtools && devtools_allowed {
            assert!(env.uses_devtools(), "a local chromedriver session gets the DevTools channel");
        } else if !devtools {
            assert!(!env.uses_devtools());
        }
        let shell = std::path::Path::new(guirl::env::browser::HEADLESS_SHELL).is_file();
        if devtools && frames && devtools_allowed && frames_allowed && shell {
            assert!(env.uses_frame_control(), "the headless shell runs under begin-frame control");
        } else if !frames {
            assert!(!env.uses_frame_control());
        }
        let mut oracle = guirl::policy::oracle::OraclePolicy;
        let mut states = vec![obs.clone()];
        let mut o = obs;
        for _ in 0..env.max_steps() {
            use guirl::policy::Policy;
            let d = oracle.act(std::slice::from_ref(&o)).unwrap().remove(0);
            let out = env.step(&d.action).await.unwrap();
            o = out.obs;
            states.push(o.clone());
            if out.terminated || out.truncated {
                assert_eq!(out.info.status, EpisodeStatus::Success, "{:?}", out.info);
                break;
            }
        }
        seen.push(states);
        env.close().await;
    }
    for other in &seen[1..] {
        assert_eq!(seen[0].len(), other.len());
        for (a, b) in seen[0].iter().zip(other) {
            assert_eq!(a.url, b.url);
            assert_eq!(a.elements, b.elements, "step {}", a.step);
            assert_eq!(a.screenshot, b.screenshot, "step {} on {}", a.step, a.url);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_env_on_a_multi_threaded_runtime_removes_its_browser() {
    // The cleanup (/proc scans, waits) runs on the runtime's blocking pool, not on the
    // worker thread that dropped the env: it finishes shortly after the drop.
    let mut env = env_for("builtin/counter");
    env.reset(0).await.unwrap();
    let dir = env.browser_profile_dir().expect("a local browser");
    let running = |dir: &std::path::Path| {
        std::process::Command::new("pgrep")
            .args(["-f", &dir.display().to_string()])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    };
    assert!(dir.exists() && running(&dir));
    drop(env);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while dir.exists() || running(&dir) {
        if std::time::Instant::now() > deadline {
            let ps = std::process::Command::new("pgrep").args(["-fa", &dir.display().to_string()]).output();
            let ps = ps.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            let sh = |c: &str| {
                std::process::Command::new("sh")
                    .args(["-c", c])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            let ls = sh(&format!("ls -la --time-style=full-iso {} {}/*; date; ps -eo pid,ppid,pgid,stat,lstart,comm | tail -30", dir.display(), dir.display()));
            panic!(
                "profile {} (exists: {}) or its browser left behind: {ps}\n{ls}",
                dir.display(),
                dir.exists()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A browser that failed in a step is dropped then; the next reset starts a fresh one and
/// says why, as when the failure shows at the reset itself.
#[tokio::test]
async fn a_reset_after_a_failed_step_says_why_it_started_a_browser() {
    let mut env = env_for("builtin/shop-checkout");
    env.reset(1).await.unwrap();
    kill_browser(&env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = env.step(&GuiAction::Wait { ms: 1 }).await.unwrap();
    assert_eq!(out.info.status, EpisodeStatus::EnvError);
    let (_, info) = env.reset(2).await.unwrap();
    assert!(info.browser_started);
    assert!(info.replaced_after.as_deref().is_some_and(|w| !w.is_empty()), "{info:?}");
    // and only then
    let (_, info) = env.reset(3).await.unwrap();
    assert!(!info.browser_started && info.replaced_after.is_none(), "{info:?}");
    env.close().await;
}
