//! `guirl doctor` on this machine (set up by scripts/setup.sh): every check passes but
//! CUDA's (a CPU build), and a chromedriver that is not there is a blocking failure with
//! its fix.

use serde_json::Value;
use std::process::{Command, Output};

fn doctor(args: &[&str], env: &[(&str, &str)]) -> Output {
    let runs = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_guirl"));
    cmd.arg("doctor").arg("--runs").arg(runs.path().join("runs")).args(args);
    // the checkout's .venv, unless a test activates another
    cmd.env_remove("VIRTUAL_ENV");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn checks(out: &Output) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));
    report["checks"].as_array().expect("a checks array").clone()
}

fn named<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
}

#[test]
fn a_set_up_machine_passes_every_check_but_cuda() {
    let out = doctor(&[], &[]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("ready")).collect();
    // Chromium's sandbox is ok where the kernel allows it (a warning otherwise, not a set-up fault).
    let sandboxed = matches!(guirl::env::sandbox::support(), guirl::env::sandbox::Support::Available { .. });
    let names =
        ["chromedriver", "chromium", "versions", "miniwob", "browser", "devtools", "python client", "disk"];
    for name in names.into_iter().chain(sandboxed.then_some("sandbox")) {
        let line = lines
            .iter()
            .find(|l| l.get(6..).is_some_and(|r| r.starts_with(name)))
            .unwrap_or_else(|| panic!("no {name}:\n{text}"));
        assert!(line.starts_with("ok "), "{name} is not ok:\n{text}");
    }
    // The launch line says how long the real browser took.
    assert!(text.contains("started and reset builtin/click-color-button in"), "{text}");
    assert!(text.contains("cuda"), "{text}");

    let out = doctor(&["--json"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let checks = checks(&out);
    assert_eq!(checks.len(), 10, "{checks:?}");
    for c in &checks {
        let warns =
            (c["name"] == "cuda" && !cfg!(feature = "cuda")) || (c["name"] == "sandbox" && !sandboxed);
        let expected = if warns { "warn" } else { "ok" };
        assert_eq!(c["status"], expected, "{c}");
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
        assert_eq!(c["fix"].is_string(), expected != "ok", "a fix on every problem, none otherwise: {c}");
    }
    assert!(named(&checks, "disk")["detail"].as_str().unwrap().contains("not created yet"));
}

#[test]
fn a_missing_chromedriver_fails_with_its_fix() {
    let out = doctor(&["--json"], &[("GUIRL_CHROMEDRIVER", "/nonexistent/chromedriver")]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let checks = checks(&out);
    let driver = named(&checks, "chromedriver");
    assert_eq!(driver["status"], "fail");
    assert!(driver["detail"].as_str().unwrap().contains("/nonexistent/chromedriver"), "{driver}");
    let fix = driver["fix"].as_str().unwrap();
    assert!(
        fix.contains("$GUIRL_CHROMEDRIVER") && fix.contains("apt-get install -y chromium chromium-driver"),
        "{fix}"
    );
    // No browser can start, and the report says so rather than trying.
    assert_eq!(named(&checks, "browser")["status"], "fail");
    assert_eq!(named(&checks, "chromium")["status"], "ok");

    // The same through --chromedriver, in the text form.
    let out = doctor(&["--chromedriver", "/nonexistent/driver2"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("FAIL  chromedriver")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("/nonexistent/driver2") && line.contains("fix: point --chromedriver"), "{line}");
    assert!(text.contains("blocking problem"), "{text}");
}

#[test]
fn versions_are_read_from_each_binary_s_own_format() {
    use guirl::doctor::version_in;
    let chromium = "Chromium 156.0.8078.108 built on Debian GNU/Linux 12 (bookworm)";
    let driver = "ChromeDriver 156.0.8078.108 (730482a940ce25ae7cf051320d8340e793acf8b9-refs/branch-heads/8078@{#2244})";
    assert_eq!(version_in(chromium).as_deref(), Some("156.0.8078.108"));
    assert_eq!(version_in(driver).as_deref(), Some("156.0.8078.108"));
    assert_eq!(version_in("Google Chrome 120.0.6099.109 ").as_deref(), Some("120.0.6099.109"));
    assert_eq!(version_in("no version here."), None);
}

#[test]
fn a_major_version_mismatch_is_blocking_and_says_how_to_fix_it() {
    use guirl::doctor::{versions_check, Status};
    let c = versions_check(Some("156.0.8078.108"), Some("155.0.7000.1"));
    assert_eq!(c.status, Status::Fail);
    assert!(c.detail.contains("156.0.8078.108") && c.detail.contains("155.0.7000.1"), "{c}");
    assert!(c.fix.as_deref().unwrap().contains("apt-get install"), "{c}");
    // Only the major version has to agree.
    assert_eq!(versions_check(Some("156.0.1.2"), Some("156.0.3.4")).status, Status::Ok);
    assert_eq!(versions_check(None, Some("156.0.3.4")).status, Status::Warn);
}

#[test]
fn a_machine_that_cannot_sandbox_the_browser_is_a_warning_with_its_fix() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: guirl picks a user for the browser only when it runs as root");
        return;
    }
    let out = doctor(&["--json"], &[("GUIRL_BROWSER_USER", "no-such-user-guirl")]);
    assert!(out.status.success(), "the browser still runs: {}", String::from_utf8_lossy(&out.stderr));
    let found = checks(&out);
    let sandbox = named(&found, "sandbox");
    assert_eq!(sandbox["status"], "warn");
    let detail = sandbox["detail"].as_str().unwrap();
    assert!(detail.starts_with("off: GUIRL_BROWSER_USER=no-such-user-guirl names no user"), "{detail}");
    assert!(sandbox["fix"].as_str().unwrap().contains("useradd --system"), "{sandbox}");
    assert_eq!(named(&found, "browser")["status"], "ok");

    let out = doctor(&["--json", "--no-sandbox"], &[]);
    let checks = checks(&out);
    let sandbox = named(&checks, "sandbox");
    assert_eq!(sandbox["status"], "warn");
    assert!(sandbox["detail"].as_str().unwrap().starts_with("off (--no-sandbox"), "{sandbox}");
}

#[test]
fn an_activated_virtual_environment_is_the_python_checked() {
    let venv = tempfile::tempdir().unwrap();
    let out = doctor(&["--json"], &[("VIRTUAL_ENV", venv.path().to_str().unwrap())]);
    let checks = checks(&out);
    let python = named(&checks, "python client");
    assert_eq!(python["status"], "warn", "{python}");
    let detail = python["detail"].as_str().unwrap();
    assert!(detail.contains(&venv.path().join("bin/python").display().to_string()), "{python}");
}
