//! Browsers that cannot be started: a failed relaunch after the collector has worked
//! ends rollouts as `env_error` (after retries with backoff) and the collection finishes;
//! before anything has worked it is a clear error; a WebDriver endpoint that never answers
//! the session request times out with a message naming it and `--command-timeout`.

use guirl::env::{BrowserConfig, EnvConfig, EpisodeStatus, ScreenState};
use guirl::policy::{oracle::OraclePolicy, Decision, Policy};
use guirl::rollout::{Collector, Job};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A chromedriver wrapper that runs the real one `works` times (recording its pid in
/// `DIR/pid`), then exits 1 as a chromedriver that cannot start would.
fn flaky_chromedriver(dir: &Path, works: u32) -> PathBuf {
    let real = BrowserConfig::default().chromedriver_path().unwrap();
    let script = dir.join("chromedriver");
    let count = dir.join("count");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0)\necho $((n + 1)) > {count}\n\
             [ \"$n\" -ge {works} ] && exit 1\necho $$ > {pid}\nexec {real} \"$@\"\n",
            count = count.display(),
            pid = dir.join("pid").display(),
            real = real.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A sandboxed browser's chromedriver runs as an unprivileged user when the tests run
    // as root: it must reach the script and write its count and pid here.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    script
}

/// The oracle; at the start of the second episode it kills the browser, so the next
/// episode needs a relaunch (which the wrapper then refuses).
struct KillSecond {
    pid_file: PathBuf,
    starts: usize,
}

impl Policy for KillSecond {
    fn name(&self) -> String {
        "kill-second".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        if states[0].step == 0 {
            self.starts += 1;
            if self.starts == 2 {
                let driver = std::fs::read_to_string(&self.pid_file)?.trim().to_string();
                std::process::Command::new("pkill").args(["-9", "-P", &driver]).status()?;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        OraclePolicy.act(states)
    }
}

fn env_cfg(chromedriver: PathBuf) -> EnvConfig {
    EnvConfig {
        browser: BrowserConfig { chromedriver: Some(chromedriver), ..Default::default() },
        ..Default::default()
    }
}

fn jobs(n: u64) -> Vec<Job> {
    let task = guirl::tasks::load_task("builtin/click-color-button").unwrap();
    (0..n).map(|seed| Job { task: task.clone(), seed, group: None, prefix: None, stream: None }).collect()
}

#[tokio::test]
async fn a_browser_that_cannot_be_relaunched_ends_rollouts_as_env_error() {
    let dir = tempfile::tempdir().unwrap();
    let driver = flaky_chromedriver(dir.path(), 1);
    let mut collector = Collector::new(1, env_cfg(driver));
    let mut policy = KillSecond { pid_file: dir.path().join("pid"), starts: 0 };
    let t0 = Instant::now();
    let (recs, stats) =
        collector.collect(&mut policy, jobs(4), |_, _| {}).await.expect("the collection finishes");
    let status: Vec<_> = recs.iter().map(|r| r.trajectory.outcome.status).collect();
    assert_eq!(
        status,
        [EpisodeStatus::Success, EpisodeStatus::EnvError, EpisodeStatus::EnvError, EpisodeStatus::EnvError],
        "{:?}",
        recs.iter().map(|r| &r.trajectory.outcome.error).collect::<Vec<_>>()
    );
    assert_eq!(stats.env_errors, 3);
    let err = recs[2].trajectory.outcome.error.clone().unwrap_or_default();
    assert!(err.contains("exited") && err.contains("4 attempts"), "{err}");
    // Each failed relaunch was retried with backoff: 4 attempts, 0.5 + 1 + 2 s apart.
    let count: u32 = std::fs::read_to_string(dir.path().join("count")).unwrap().trim().parse().unwrap();
    assert_eq!(count, 1 + 2 * 4, "one launch that worked, then two jobs of 4 attempts each");
    assert!(t0.elapsed() >= Duration::from_secs(7), "backoff waits: {:?}", t0.elapsed());
    collector.close().await;
}

#[tokio::test]
async fn a_browser_that_never_starts_is_a_clear_error_before_anything_worked() {
    let dir = tempfile::tempdir().unwrap();
    let driver = flaky_chromedriver(dir.path(), 0);
    let mut collector = Collector::new(1, env_cfg(driver.clone()));
    let e = collector.collect(&mut OraclePolicy, jobs(3), |_, _| {}).await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains(&format!("chromedriver {} exited", driver.display())), "{msg}");
    assert!(msg.contains("4 attempts"), "{msg}");
}

#[test]
fn a_webdriver_endpoint_that_never_answers_times_out() {
    // Accepts connections (the kernel's backlog) but never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let t0 = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "builtin/click-color-button", "--policy", "oracle", "--episodes", "1"])
        .args(["--webdriver", &url, "--command-timeout", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for needle in [url.as_str(), "did not answer the new-session request within 1.0s", "--command-timeout"] {
        assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    }
    // Four attempts of 1 s with 3.5 s of backoff between them, not a hang.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    drop(silent);
}
