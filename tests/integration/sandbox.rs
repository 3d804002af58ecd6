//! Chromium's sandbox (`src/env/sandbox.rs`), checked on real browsers: where the machine
//! allows it the browser runs without `--no-sandbox`, as an unprivileged user when the
//! tests run as root, and its renderers sit in namespaces of their own under seccomp;
//! where it does not (here: no such user), guirl says so once and runs unsandboxed; a
//! sandboxed start that fails names the way out; a `file://` page the browser's user
//! cannot read turns the sandbox off for that browser, with its reason.

use guirl::env::sandbox::{self, Support};
use guirl::env::{BrowserConfig, EnvConfig, GuiEnv};
use std::path::Path;

/// A field of `/proc/<pid>/status` (`Uid`, `Seccomp`): its first value.
fn status_field(pid: i32, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap_or_default();
    line.split_whitespace().nth(1).unwrap_or_default().to_string()
}

fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The browser process of profile folder `profile` (the one whose command line names it
/// without a `--type=`), and every process below it.
fn browser_tree(profile: &Path) -> (i32, Vec<i32>) {
    let named = profile.display().to_string();
    let all = pids();
    let browser = *all
        .iter()
        .find(|&&p| {
            let c = cmdline(p);
            c.contains(&named) && c.contains("--user-data-dir") && !c.contains("--type=")
        })
        .expect("the browser process of the env's profile");
    let mut tree = vec![browser];
    let mut grew = true;
    while grew {
        grew = false;
        for &p in &all {
            if !tree.contains(&p) && parent(p).is_some_and(|pp| tree.contains(&pp)) {
                tree.push(p);
                grew = true;
            }
        }
    }
    (browser, tree)
}

/// Whether the page shows its Go button (it loaded).
fn go_shown(env: &GuiEnv) -> bool {
    env.last_observation().is_some_and(|o| o.elements.iter().any(|e| e.text == "Go"))
}

fn env_for(task: &str, browser: BrowserConfig) -> GuiEnv {
    GuiEnv::new(guirl::tasks::load_task(task).unwrap(), EnvConfig { browser, ..Default::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_runs_sandboxed_where_the_machine_allows() {
    let mut env = env_for("builtin/click-color-button", BrowserConfig::default());
    env.reset(0).await.unwrap();
    let versions = env.browser_versions().unwrap();
    let (browser, tree) = browser_tree(&env.browser_profile_dir().unwrap());
    let user = match sandbox::support() {
        Support::Unavailable(why) => {
            // The machine cannot: the browser runs as before, and the record says why.
            assert!(!env.uses_sandbox());
            assert!(cmdline(browser).contains("--no-sandbox"));
            assert_eq!(versions.sandbox, format!("off: {why}"));
            env.close().await;
            return;
        }
        Support::Available { user } => user.clone(),
    };
    assert!(env.uses_sandbox(), "{versions:?}");
    assert!(!cmdline(browser).contains("--no-sandbox"), "{}", cmdline(browser));
    let uid: u32 = status_field(browser, "Uid").parse().unwrap();
    match &user {
        Some(u) => {
            assert!(unsafe { libc::geteuid() } == 0, "guirl switches user only as root");
            assert_eq!(uid, u.uid, "the browser runs as {}", u.name);
            assert_ne!(uid, 0);
            assert_eq!(versions.sandbox, format!("on (as user {})", u.name));
        }
        None => assert_eq!(uid, unsafe { libc::geteuid() }),
    }
    // Every renderer: seccomp-filtered, in a user namespace other than the browser's.
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/user")).unwrap();
    let renderers: Vec<i32> =
        tree.iter().copied().filter(|&p| cmdline(p).contains("--type=renderer")).collect();
    assert!(!renderers.is_empty(), "a loaded page has a renderer: {tree:?}");
    for r in renderers {
        assert_eq!(status_field(r, "Seccomp"), "2", "renderer {r} runs under a seccomp filter");
        assert_ne!(ns(r), ns(browser), "renderer {r} has its own user namespace");
        assert_ne!(status_field(r, "Uid"), "0");
    }
    // The episode works as ever: a step and a screenshot.
    let out = env.step(&guirl::env::GuiAction::Click { x: 10, y: 10 }).await.unwrap();
    assert!(out.obs.screenshot.width() > 0);
    env.close().await;
}

/// Runs `guirl run` on a built-in task with `vars` set: (success, stderr).
fn run_guirl(args: &[&str], vars: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "builtin/click-color-button", "--policy", "oracle"])
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_machine_without_a_user_for_the_browser_says_so_once_and_runs_unsandboxed() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: guirl picks a user for the browser only when it runs as root");
        return;
    }
    let (ok, err) =
        run_guirl(&["--episodes", "3", "--envs", "2"], &[(sandbox::USER_VAR, "no-such-user-guirl")]);
    assert!(ok, "{err}");
    let warning = "Chromium's sandbox is off on this machine: GUIRL_BROWSER_USER=no-such-user-guirl \
                   names no user on this machine";
    assert_eq!(err.matches(warning).count(), 1, "said once for two browsers: {err}");
    assert!(err.contains("gets guirl's user (root)"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_start_that_fails_names_the_user_and_the_way_out() {
    let Support::Available { user: Some(user) } = sandbox::support() else {
        eprintln!("skipped: the browser switches user only as root on a machine that sandboxes");
        return;
    };
    // chromedriver behind a folder only root may enter (as in /root/...): the browser's
    // user cannot start it.
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("chromedriver");
    std::os::unix::fs::symlink(BrowserConfig::default().chromedriver_path().unwrap(), &link).unwrap();
    let cfg = BrowserConfig { chromedriver: Some(link), ..Default::default() };
    let mut env = env_for("builtin/click-color-button", cfg.clone());
    let err = env.reset(0).await.unwrap_err().to_string();
    let says = format!("the browser could not start sandboxed as user {}", user.name);
    assert!(err.contains(&says) && err.contains("--no-sandbox") && err.contains("GUIRL_SANDBOX=0"), "{err}");
    // The opt-out starts it (as root, which may enter the folder).
    let mut env = env_for("builtin/click-color-button", cfg.with_sandbox(false));
    env.reset(0).await.unwrap();
    assert!(!env.uses_sandbox());
    let versions = env.browser_versions().unwrap();
    assert_eq!(versions.sandbox, "off: turned off (--no-sandbox or GUIRL_SANDBOX=0)");
    env.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_page_the_browser_user_cannot_read_turns_the_sandbox_off_for_that_browser() {
    let Support::Available { user: Some(user) } = sandbox::support() else {
        eprintln!("skipped: the browser switches user only as root on a machine that sandboxes");
        return;
    };
    let spec = |dir: &Path| {
        let page = dir.join("page.html");
        std::fs::write(&page, "<button onclick=\"window.done = 1\">Go</button>").unwrap();
        let toml = format!(
            "start_url = \"file://{}\"\ninstruction = \"Press Go\"\nmax_steps = 3\n[success]\njs = \"window.done === 1\"\n",
            page.display()
        );
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        dir.join("task.toml").display().to_string()
    };
    // A page in a folder every user may read: sandboxed.
    let shared = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = env_for(&spec(shared.path()), BrowserConfig::default());
    env.reset(0).await.unwrap();
    assert!(env.uses_sandbox(), "{:?}", env.browser_versions());
    assert!(go_shown(&env), "the page loaded");
    // The same page in a private folder (0700, root's), switched to in the same env: its
    // browser starts again, unsandboxed, and says why.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    env.set_task(guirl::tasks::load_task(&spec(private.path())).unwrap());
    env.reset(0).await.unwrap();
    assert!(!env.uses_sandbox());
    let why = env.browser_versions().unwrap().sandbox;
    let says = format!("not readable by user {}", user.name);
    assert!(why.starts_with("off: the task's page") && why.contains(&says), "{why}");
    assert!(go_shown(&env), "the page loaded");
    env.close().await;
}

#[test]
fn a_temp_folder_the_browser_user_cannot_enter_keeps_the_sandbox() {
    let Support::Available { user: Some(_) } = sandbox::support() else {
        eprintln!("skipped: the browser switches user only as root on a machine that sandboxes");
        return;
    };
    // A private $TMPDIR (as `mktemp -d` makes): the profile goes where the user can write.
    let private = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["doctor", "--json"])
        .env("TMPDIR", private.path())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |name: &str| report["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned();
    assert_eq!(check("browser").unwrap()["status"], "ok", "{report}");
    let sandbox = check("sandbox").unwrap();
    assert!(sandbox["detail"].as_str().unwrap().starts_with("on: the browser ran as user"), "{sandbox}");
}
