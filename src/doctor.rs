//! `guirl doctor`: checks the set-up a run needs, one [`Check`] each, with the fix for
//! every problem found.
//!
//! The browser checks use the environment's own lookup ([`BrowserConfig`]) and launch a
//! real browser through [`GuiEnv`], so a pass here means `guirl run` finds and starts the
//! same binaries. A [`Status::Fail`] is blocking (no browser, no chromedriver, their
//! versions differ, or the browser cannot start): nothing that opens a browser can work.
//! Everything else that is wrong is a [`Status::Warn`].

use crate::env::{BrowserConfig, EnvConfig, GuiAction, GuiEnv};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The task the launch check resets and steps: built into the binary, so it needs neither
/// MiniWoB++'s pages nor a checkout.
pub const LAUNCH_TASK: &str = "builtin/click-color-button";

/// Below this much free space in the run folder a warning (a run keeps checkpoints,
/// trajectories' frames and plots).
pub const LOW_DISK_BYTES: u64 = 5 << 30;

/// How long the launch check may take (launch, reset and one step) before it fails.
const LAUNCH_LIMIT: Duration = Duration::from_secs(90);

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Something is missing or slower than it could be; runs still work.
    Warn,
    /// Blocking: nothing that opens a browser can work until it is fixed.
    Fail,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        })
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// What was checked (`chromium`, `chromedriver`, `versions`, ...).
    pub name: &'static str,
    /// Its outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about it (warn and fail only).
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check { name, status: Status::Ok, detail: detail.into(), fix: None }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

impl std::fmt::Display for Check {
    /// `ok    name  detail`, and `; fix: ...` on a problem's line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:<5} {:<13} {}", self.status.to_string(), self.name, self.detail)?;
        match &self.fix {
            Some(fix) => write!(f, "; fix: {fix}"),
            None => Ok(()),
        }
    }
}

/// Every check, in the order they ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// False when a check failed (a blocking problem).
    pub ok: bool,
    /// The checks.
    pub checks: Vec<Check>,
}

/// What `guirl doctor` checks against.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// The browser set-up to check (the same flags and variables as `guirl run`).
    pub browser: BrowserConfig,
    /// The folder runs are written to (its free space is checked).
    pub runs: PathBuf,
}

/// Run every check. Never fails: a problem is a line of the report.
pub async fn diagnose(opts: &DoctorOptions) -> Report {
    let cfg = &opts.browser;
    let mut checks = Vec::new();
    let local = cfg.webdriver_url.is_none();
    let (driver, browser) = if local {
        let driver = binary_check("chromedriver", cfg.chromedriver_candidate(), driver_source(cfg)).await;
        let browser = binary_check("chromium", cfg.chromium_candidate(), chromium_source(cfg)).await;
        checks.push(driver.0.clone());
        checks.push(browser.0.clone());
        checks.push(versions_check(browser.1.as_deref(), driver.1.as_deref()));
        (driver.0.status, browser.0.status)
    } else {
        let url = cfg.webdriver_url.as_deref().unwrap_or_default();
        checks.push(Check::ok("chromedriver", format!("not needed here: browsers come from {url}")));
        (Status::Ok, Status::Ok)
    };
    checks.push(miniwob_check());
    if local && (driver == Status::Fail || browser == Status::Fail) {
        checks.push(Check::fail(
            "browser",
            "not tried: no chromium or chromedriver to start",
            "fix the lines above, then run guirl doctor again",
        ));
        checks.push(Check::warn("devtools", "not tried: no browser", "fix the browser first"));
        checks.push(sandbox_check(cfg, None));
    } else {
        let (launch, devtools, sandboxed) = launch_check(cfg).await;
        let ran = (launch.status == Status::Ok).then_some(sandboxed);
        checks.push(launch);
        checks.push(devtools);
        checks.push(sandbox_check(cfg, ran));
    }
    checks.push(python_check().await);
    checks.push(disk_check(&opts.runs));
    checks.push(cuda_check());
    Report { ok: checks.iter().all(|c| c.status != Status::Fail), checks }
}

/// Which override chose the chromedriver binary, if one did.
fn driver_source(cfg: &BrowserConfig) -> Option<&'static str> {
    match (&cfg.chromedriver, set("GUIRL_CHROMEDRIVER")) {
        (Some(_), _) => Some("--chromedriver"),
        (None, true) => Some("$GUIRL_CHROMEDRIVER"),
        _ => None,
    }
}

/// Which override chose the Chromium binary, if one did.
fn chromium_source(cfg: &BrowserConfig) -> Option<&'static str> {
    match (&cfg.chromium, set("GUIRL_CHROMIUM")) {
        (Some(_), _) => Some("BrowserConfig::chromium"),
        (None, true) => Some("$GUIRL_CHROMIUM"),
        _ => None,
    }
}

fn set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// A binary exists at `path` (chosen by the override `source`, or the default lookup):
/// the check and its `--version` version, if it printed one.
async fn binary_check(name: &'static str, path: PathBuf, source: Option<&str>) -> (Check, Option<String>) {
    let apt = crate::env::browser_config::APT_HINT;
    let var = if name == "chromium" { "GUIRL_CHROMIUM" } else { "GUIRL_CHROMEDRIVER" };
    if !path.is_file() {
        let (from, fix) = match source {
            Some(s) => (
                format!("set by {s}"),
                format!("point {s} at an existing {name} (or drop it for the default lookup), or install it with `{apt}`"),
            ),
            None => (
                "the default lookup".to_string(),
                format!("install it with `{apt}` (scripts/setup.sh does), or set {var} to its path"),
            ),
        };
        return (Check::fail(name, format!("not found at {} ({from})", path.display()), fix), None);
    }
    let version = binary_version(&path).await;
    let detail = match &version {
        Some(v) => format!("{} (version {v})", path.display()),
        None => format!("{} (it printed no version for --version)", path.display()),
    };
    (Check::ok(name, detail), version)
}

/// `path --version`'s dotted version number (`156.0.8078.108`).
async fn binary_version(path: &Path) -> Option<String> {
    let run = tokio::process::Command::new(path).arg("--version").kill_on_drop(true).output();
    let out = tokio::time::timeout(Duration::from_secs(20), run).await.ok()?.ok()?;
    version_in(&String::from_utf8_lossy(&out.stdout))
}

/// The first dotted version number in `text` (`Chromium 156.0.8078.108 built on ...`).
pub fn version_in(text: &str) -> Option<String> {
    text.split_whitespace()
        .find(|w| {
            w.contains('.') && w.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Chromium and chromedriver must share a major version, or no session opens.
pub fn versions_check(browser: Option<&str>, driver: Option<&str>) -> Check {
    let major = |v: &str| v.split('.').next().unwrap_or(v).to_string();
    match (browser, driver) {
        (Some(b), Some(d)) if major(b) == major(d) => {
            Check::ok("versions", format!("chromium {} and chromedriver {} match", major(b), major(d)))
        }
        (Some(b), Some(d)) => Check::fail(
            "versions",
            format!("chromium {b} but chromedriver {d}: chromedriver only drives its own major version"),
            "install both from one source (`sudo apt-get install -y chromium chromium-driver \
             chromium-headless-shell` upgrades them together), or point GUIRL_CHROMIUM and \
             --chromedriver / GUIRL_CHROMEDRIVER at a matching pair",
        ),
        _ => Check::warn(
            "versions",
            "not compared: a version could not be read",
            "make both binaries answer --version (see the lines above)",
        ),
    }
}

fn miniwob_check() -> Check {
    let dir = crate::tasks::server::miniwob_dir();
    if !dir.join("core").join("core.js").is_file() {
        return Check::warn(
            "miniwob",
            format!(
                "MiniWoB++ pages not found in {} (built-in tasks and website specs still work)",
                dir.display()
            ),
            "run scripts/setup.sh (it extracts the `miniwob` PyPI package's html folder there), \
             or set GUIRL_MINIWOB_DIR to a folder holding core/ and miniwob/",
        );
    }
    let n = crate::tasks::miniwob::task_names().len();
    Check::ok("miniwob", format!("{n} MiniWoB++ tasks in {}", dir.display()))
}

/// Whether Chromium's sandbox is on, given whether the launch check's browser ran with it
/// (`ran`: `None` where no browser ran).
pub fn sandbox_check(cfg: &BrowserConfig, ran: Option<bool>) -> Check {
    use crate::env::sandbox::{self, Support};
    let plan = sandbox::plan(cfg);
    let who = match &plan.user {
        Some(u) => format!("as user {} (uid {})", u.name, u.uid),
        None => "as guirl's own user".to_string(),
    };
    if cfg.webdriver_url.is_some() {
        return Check::ok("sandbox", format!("not checked: {}", plan.note));
    }
    if !cfg.sandbox {
        return Check::warn(
            "sandbox",
            "off (--no-sandbox or GUIRL_SANDBOX=0): a page that exploits the browser gets guirl's user",
            "drop --no-sandbox and unset GUIRL_SANDBOX",
        );
    }
    if let Support::Unavailable(why) = sandbox::support() {
        let fix = if why.contains(sandbox::USER_VAR) || why.contains("no unprivileged user") {
            "create the browser's user with `useradd --system --user-group --no-create-home \
             --shell /usr/sbin/nologin guirlbrowser` (scripts/setup.sh does), or set \
             GUIRL_BROWSER_USER to an existing unprivileged user"
        } else {
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and \
             user.max_user_namespaces > 0; in Docker, a seccomp profile that permits them), or \
             contain guirl itself (a VM, or a container without other secrets)"
        };
        let detail = format!("off: {why}; a page that exploits the browser gets guirl's user");
        return Check::warn("sandbox", detail, fix);
    }
    match ran {
        Some(true) => {
            Check::ok("sandbox", format!("on: the browser ran {who} in Chromium's namespace sandbox"))
        }
        Some(false) => Check::warn("sandbox", plan.note, "see the reason above"),
        None => Check::warn(
            "sandbox",
            format!("not confirmed: the machine allows it ({who}), but no browser ran"),
            "if the browser line blames the sandbox, `guirl doctor --no-sandbox` shows whether the \
             browser starts without it",
        ),
    }
}

/// Start a browser through the env, reset [`LAUNCH_TASK`] and click once; then whether
/// that browser gave guirl a DevTools channel, and whether it ran sandboxed.
async fn launch_check(cfg: &BrowserConfig) -> (Check, Check, bool) {
    let task = match crate::tasks::load_task(LAUNCH_TASK) {
        Ok(t) => t,
        Err(e) => {
            let c = Check::fail("browser", format!("cannot load {LAUNCH_TASK}: {e:#}"), "rebuild guirl");
            return (c, Check::warn("devtools", "not tried", "fix the browser first"), false);
        }
    };
    let mut env = GuiEnv::new(task, EnvConfig { browser: cfg.clone(), ..Default::default() });
    let t0 = Instant::now();
    let result = tokio::time::timeout(LAUNCH_LIMIT, async {
        let (obs, _) = env.reset(0).await?;
        let reset = t0.elapsed();
        let (w, h) = obs.screenshot.dimensions();
        let click = GuiAction::Click { x: w as i32 / 2, y: h as i32 / 2 };
        let t1 = Instant::now();
        env.step(&click).await?;
        Ok::<_, crate::env::EnvError>((reset, t1.elapsed(), w, h))
    })
    .await;
    let versions = env.browser_versions();
    let (devtools, frames, sandboxed) = (env.uses_devtools(), env.uses_frame_control(), env.uses_sandbox());
    env.close().await;
    let launch = match result {
        Ok(Ok((reset, step, w, h))) => {
            let name = versions.map(|v| format!("{} {}", v.browser, v.browser_version)).unwrap_or_default();
            Check::ok(
                "browser",
                format!(
                    "{name} started and reset {LAUNCH_TASK} in {:.2} s; one step (a click) and its {w}x{h} \
                     screenshot in {} ms",
                    reset.as_secs_f64(),
                    step.as_millis()
                ),
            )
        }
        Ok(Err(e)) => Check::fail(
            "browser",
            format!("could not run {LAUNCH_TASK}: {e}"),
            "see the message; `GUIRL_LOG=debug guirl run --task builtin/click-color-button --episodes 1` \
             shows each launch attempt",
        ),
        Err(_) => Check::fail(
            "browser",
            format!("{LAUNCH_TASK} did not reset and step within {} s", LAUNCH_LIMIT.as_secs()),
            "the machine may be overloaded, or the browser hangs at start: try again, and try \
             `GUIRL_LOG=debug guirl run --task builtin/click-color-button --episodes 1`",
        ),
    };
    let devtools = if launch.status != Status::Ok {
        Check::warn("devtools", "not tried: the browser did not run", "fix the browser first")
    } else if !cfg.devtools {
        Check::warn(
            "devtools",
            "turned off (--no-devtools or GUIRL_DEVTOOLS=0): page reads and screenshots go over WebDriver",
            "drop --no-devtools and unset GUIRL_DEVTOOLS for faster steps",
        )
    } else if devtools {
        let frames = if frames { "on" } else { "off" };
        Check::ok(
            "devtools",
            format!("direct DevTools channel for page reads and screenshots; frame control {frames}"),
        )
    } else {
        Check::warn(
            "devtools",
            "the browser offered no DevTools channel: page reads and screenshots go over WebDriver (slower)",
            "a remote WebDriver endpoint may hide it; locally, `GUIRL_LOG=debug` shows why it did not attach",
        )
    };
    (launch, devtools, sandboxed)
}

/// The Python a user's client runs in imports it: the activated virtual environment's
/// (`$VIRTUAL_ENV`) when there is one, else the `.venv` scripts/setup.sh makes in the
/// checkout guirl was built from (or `$GUIRL_ROOT`).
async fn python_check() -> Check {
    let (python, setup) = match std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        Some(venv) => (
            std::path::PathBuf::from(venv).join("bin/python"),
            "pip install clients/python (from guirl's checkout) in the activated environment, or \
             deactivate it to use the checkout's .venv (scripts/setup.sh makes it)",
        ),
        None => (
            crate::tasks::server::project_root().join(".venv/bin/python"),
            "run scripts/setup.sh (it makes .venv with clients/python and its test dependencies)",
        ),
    };
    if !python.is_file() {
        return Check::warn(
            "python client",
            format!("no {} (only Python users need it)", python.display()),
            setup,
        );
    }
    let script = "import sys, guirl_client; print(sys.version.split()[0])";
    let run = tokio::process::Command::new(&python).args(["-c", script]).kill_on_drop(true).output();
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(Ok(out)) if out.status.success() => Check::ok(
            "python client",
            format!(
                "{} (Python {}) imports guirl_client",
                python.display(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
        ),
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("no output").to_string();
            Check::warn(
                "python client",
                format!("{} cannot import guirl_client: {last}", python.display()),
                setup,
            )
        }
        Ok(Err(e)) => Check::warn("python client", format!("cannot run {}: {e}", python.display()), setup),
        Err(_) => {
            Check::warn("python client", format!("{} did not answer within 60 s", python.display()), setup)
        }
    }
}

/// Free space where runs go (the nearest existing folder if `runs` is not there yet).
fn disk_check(runs: &Path) -> Check {
    let existing = runs.ancestors().find(|p| p.is_dir()).unwrap_or(Path::new("."));
    let existing = if existing.as_os_str().is_empty() { Path::new(".") } else { existing };
    let note = if existing == runs { String::new() } else { " (not created yet)".to_string() };
    match rustix::fs::statvfs(existing) {
        Ok(s) => {
            let free = s.f_bavail.saturating_mul(s.f_frsize);
            let detail =
                format!("{:.1} GiB free for {}{note}", free as f64 / (1u64 << 30) as f64, runs.display());
            if free >= LOW_DISK_BYTES {
                Check::ok("disk", detail)
            } else {
                Check::warn(
                    "disk",
                    detail,
                    "free some space, or write runs elsewhere (`[run] dir` in the config, --out, --runs here)",
                )
            }
        }
        Err(e) => Check::warn(
            "disk",
            format!("cannot read the free space of {}: {e}", existing.display()),
            "check that the folder is readable",
        ),
    }
}

fn cuda_check() -> Check {
    if !cfg!(feature = "cuda") {
        return Check::warn(
            "cuda",
            "this binary is CPU-only (built without the `cuda` feature): training runs on the CPU",
            "for a GPU, build with `cargo build --release --features cuda` (docs/cuda.md, which also \
             says how to make that build on a machine without a GPU)",
        );
    }
    match crate::policy::device::cuda(0) {
        Ok(_) => Check::ok("cuda", "CUDA device 0 is available (device = \"cuda\" in a config uses it)"),
        Err(e) => Check::warn(
            "cuda",
            format!("built with CUDA, but device 0 cannot be opened: {e}"),
            "check the GPU and its driver with `nvidia-smi`, and the loader path of the CUDA libraries (docs/cuda.md)",
        ),
    }
}
