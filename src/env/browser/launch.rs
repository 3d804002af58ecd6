//! Starting a browser: chromedriver here (or a WebDriver URL), the session request, the
//! DevTools channel, and starting again with backoff when a start fails.

use super::super::browser_config::remote_chromium;
use super::super::devtools::{self, DevTools};
use super::super::frames::{self, FrameControl};
use super::super::local_guard;
use super::super::profiles;
use super::super::sandbox::{self, Plan};
use super::{
    Browser, BrowserConfig, EnvError, Pointer, APT_HINT, CHROMIUM_FLAGS, FREE_FRAME_FLAGS, MOUSE_FLAG,
};
use fantoccini::wd::{Capabilities, WindowHandle};
use fantoccini::{Client, ClientBuilder};
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The waits before starting again after a start failed for what may be a passing reason
/// (a loaded machine, a Grid with no free slot, a browser that crashed while starting):
/// four attempts in all, 3.5 s of waiting at most.
pub const RELAUNCH_BACKOFF: [Duration; 3] =
    [Duration::from_millis(500), Duration::from_millis(1000), Duration::from_millis(2000)];

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A failure after the session exists (setting timeouts, sizing, DevTools) is a failed start.
fn as_launch(e: EnvError) -> EnvError {
    match e {
        EnvError::Browser(m) => EnvError::Launch(m),
        e => e,
    }
}

impl Browser {
    /// Start (or attach to) a browser whose viewport is `width`×`height` CSS pixels.
    ///
    /// A start that fails with [`EnvError::Launch`] is tried again after each wait of
    /// [`RELAUNCH_BACKOFF`]; setup errors (a missing binary) are returned at once.
    pub async fn launch(cfg: &BrowserConfig, width: u32, height: u32) -> Result<Browser, EnvError> {
        let mut waits = RELAUNCH_BACKOFF.iter();
        loop {
            match Browser::launch_once(cfg, width, height).await {
                Err(EnvError::Launch(m)) => match waits.next() {
                    Some(wait) => {
                        tracing::warn!("could not start a browser ({m}); trying again in {wait:?}");
                        tokio::time::sleep(*wait).await;
                    }
                    None => {
                        let n = RELAUNCH_BACKOFF.len() + 1;
                        return Err(EnvError::Launch(format!("{m} ({n} attempts)")));
                    }
                },
                r => return r,
            }
        }
    }

    async fn launch_once(cfg: &BrowserConfig, width: u32, height: u32) -> Result<Browser, EnvError> {
        let started = Instant::now();
        // before the sandbox's plan, whose warning about a visible browser would come first
        cfg.check_display()?;
        let plan = sandbox::plan(cfg);
        let profile = tempfile::Builder::new()
            .prefix(profiles::PREFIX)
            .tempdir_in(sandbox::profile_parent(plan.user.as_ref()))
            .map_err(|e| EnvError::Setup(format!("cannot create a browser profile folder: {e}")))?;
        // held until the session is open (the end of this function): see `profiles::Starts`
        let _starting = match cfg.webdriver_url {
            Some(_) => None,
            None => Some(
                profiles::starting()
                    .ok_or_else(|| EnvError::Setup("guirl is stopping: no browser starts any more".into()))?,
            ),
        };
        if cfg.webdriver_url.is_none() {
            profiles::register(profile.path())
                .map_err(|e| EnvError::Setup(format!("cannot write into the browser profile folder: {e}")))?;
        }
        if let Some(u) = &plan.user {
            // chromedriver, running as the user, makes the browser's profile in here.
            std::os::unix::fs::chown(profile.path(), Some(u.uid), Some(u.gid)).map_err(|e| {
                EnvError::Setup(format!("cannot give the browser profile folder to user {}: {e}", u.name))
            })?;
        }
        let mut reserved = Vec::new();
        let (url, mut driver, chromium) = match &cfg.webdriver_url {
            Some(u) => (u.clone(), None, remote_chromium(cfg, u)),
            None => {
                // It scans /proc and may sleep: off the async threads.
                let _ = tokio::task::spawn_blocking(profiles::sweep_stale).await;
                let driver_bin = cfg.chromedriver_path()?;
                let chromium = cfg.chromium_path()?;
                let port = free_port().map_err(|e| EnvError::Setup(format!("no free port: {e}")))?;
                let mut cmd = tokio::process::Command::new(&driver_bin);
                if let Some(u) = &plan.user {
                    // The browser inherits this user and environment: a home it can write
                    // (caches, crash reports), none of root's per-user folders.
                    cmd.uid(u.uid).gid(u.gid).env("HOME", profile.path());
                    for var in ["XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"] {
                        cmd.env_remove(var);
                    }
                }
                // If guirl dies without cleaning up (SIGKILL), chromedriver goes with it.
                #[cfg(target_os = "linux")]
                unsafe {
                    cmd.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                        Ok(())
                    });
                }
                // A page that finds chromedriver's port must not be able to name a command:
                // they are all under a secret path (see `local_guard`). Without
                // `--allowed-ips` chromedriver listens on loopback alone.
                let secret = format!("/guirl-{:032x}", rand::random::<u128>());
                reserved.push(local_guard::reserve(port));
                let child = cmd
                    // chromedriver makes the browser's profile in its temp folder: ours. (Given
                    // a --user-data-dir it opens no first page, which the headless shell needs.)
                    .env("TMPDIR", profile.path())
                    .arg(format!("--port={port}"))
                    .arg(format!("--url-base={secret}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    // Its own process group: a Ctrl-C in the terminal goes to guirl alone, which
                    // finishes the iteration and closes its browsers itself (see `profiles`).
                    .process_group(0)
                    .spawn()
                    .map_err(|e| {
                        let m = format!(
                            "could not start chromedriver {}: {e}; install it with `{APT_HINT}`",
                            driver_bin.display()
                        );
                        sandboxed_failure(&plan, EnvError::Setup(m))
                    })?;
                // the trailing slash: WebDriver paths (`session`, ...) are joined under it
                (format!("http://127.0.0.1:{port}{secret}/"), Some((child, driver_bin)), Some(chromium))
            }
        };
        let controlled = chromium.as_deref().is_some_and(|c| cfg.controls_frames(c));
        let caps = capabilities(cfg, chromium, controlled, plan.on, width, height);

        let session = open_session(&url, &caps, cfg.command_timeout, started, driver.as_mut()).await;
        let client = match session {
            Ok(c) => c,
            Err(e) => {
                let e = sandboxed_failure(&plan, e);
                // Kill chromedriver (on drop) and whatever browser it had begun to start.
                drop(driver);
                if let Some(done) = profiles::release(profile.keep()) {
                    let _ = done.await;
                }
                return Err(e);
            }
        };
        let mut b = Browser {
            client,
            driver: driver.map(|(child, _)| child),
            profile: Some(profile),
            command_timeout_ms: std::sync::atomic::AtomicU64::new(cfg.page_load_timeout.as_millis() as u64),
            command_timeout: cfg.command_timeout,
            page_load_timeout: cfg.page_load_timeout,
            cdp: AtomicBool::new(true),
            devtools: None,
            frames: None,
            devtools_input: cfg.devtools_input(),
            sandbox: plan,
            reserved,
        };
        b.guard("setting timeouts", async {
            b.client
                .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                    Some(b.command_timeout),
                    Some(b.page_load_timeout),
                    Some(Duration::ZERO),
                ))
                .await
        })
        .await
        .map_err(as_launch)?;
        b.devtools = b.open_devtools(cfg, controlled).await?;
        if let Some(port) = b.devtools.as_ref().and_then(DevTools::port) {
            b.reserved.push(local_guard::reserve(port));
        }
        if controlled {
            // `open_devtools` fails when a controlled browser has no channel.
            b.frames = Some(FrameControl::default());
        }
        b.fit_viewport(width, height).await.map_err(as_launch)?;
        b.set_patient(false);
        tracing::debug!(ms = started.elapsed().as_millis() as u64, %url, "browser started");
        Ok(b)
    }

    /// Attach the direct DevTools channel (if `cfg.devtools`); `None` where the endpoint
    /// does not expose one, and the browser then works over WebDriver alone. A browser
    /// started under begin-frame control (`controlled`) needs it: the session moves to a
    /// page opened through it.
    async fn open_devtools(
        &self,
        cfg: &BrowserConfig,
        controlled: bool,
    ) -> Result<Option<DevTools>, EnvError> {
        let dt = self.attach_devtools(cfg, controlled).await;
        match dt {
            Err(e) if controlled => Err(EnvError::Launch(format!(
                "the headless shell started under begin-frame control, but {e}; \
                 set GUIRL_FRAME_CONTROL=0 (or pass --free-frames) to run without it"
            ))),
            Err(e) => {
                tracing::warn!("no direct DevTools channel ({e}); scripts and screenshots go over WebDriver");
                Ok(None)
            }
            Ok(dt) => Ok(dt),
        }
    }

    async fn attach_devtools(
        &self,
        cfg: &BrowserConfig,
        controlled: bool,
    ) -> Result<Option<DevTools>, String> {
        if !cfg.devtools {
            return Ok(None);
        }
        // chromedriver names the profile it made (inside ours); a remote one's is not on this disk.
        let caps = self.client.capabilities();
        let user_data = cfg
            .webdriver_url
            .is_none()
            .then(|| caps.and_then(|c| c.get("chrome")?.get("userDataDir")?.as_str()).map(PathBuf::from))
            .flatten();
        let Some(url) = devtools::endpoint(caps, user_data.as_deref()) else {
            return if controlled { Err("its DevTools port could not be found".into()) } else { Ok(None) };
        };
        let limit = Duration::from_secs(5);
        let mut dt = DevTools::open(&url, limit).await?;
        let first: String = self
            .guard("reading the window handle", self.client.window())
            .await
            .map_err(|e| e.to_string())?
            .into();
        let target = if controlled {
            // Move the session to a page under frame control; close the one it started on.
            let page = frames::open_page(&dt, limit).await?;
            let handle =
                WindowHandle::try_from(page.clone()).map_err(|e| format!("bad target id {page}: {e}"))?;
            self.guard("switching to the controlled page", self.client.switch_to_window(handle))
                .await
                .map_err(|e| e.to_string())?;
            dt.browser_call("Target.closeTarget", json!({ "targetId": first }), limit)
                .await
                .map_err(|e| format!("closing the first page: {e}"))?;
            page
        } else {
            first
        };
        dt.attach(&target, limit).await?;
        Ok(Some(dt))
    }
}

/// Ask `url` for a session, retrying while a chromedriver we started (`driver`) is not
/// listening yet (for 20 s from `started`). Each request has the command timeout `limit`:
/// an endpoint that accepts the connection but never answers must not hang the run.
async fn open_session(
    url: &str,
    caps: &Capabilities,
    limit: Duration,
    started: Instant,
    mut driver: Option<&mut (tokio::process::Child, PathBuf)>,
) -> Result<Client, EnvError> {
    let deadline = started + Duration::from_secs(20);
    loop {
        // Nagle off, as on the DevTools socket: chromedriver's commands are small writes.
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.set_nodelay(true);
        let mut builder = ClientBuilder::new(http);
        builder.capabilities(caps.clone());
        let request = builder.connect(url);
        let msg = match tokio::time::timeout(limit, request).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => e.to_string(),
            Err(_) => {
                return Err(EnvError::Launch(format!(
                    "the WebDriver endpoint {url} did not answer the new-session request within \
                     {:.1}s; check that a WebDriver server (chromedriver, a Selenium Grid) listens \
                     there and is not overloaded, or raise --command-timeout",
                    limit.as_secs_f64()
                )))
            }
        };
        if let Some((child, bin)) = driver.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(EnvError::Launch(format!(
                    "chromedriver {} exited ({status}) before it opened a session; run it by \
                     hand to see why",
                    bin.display()
                )));
            }
        }
        // A chromedriver we started needs a moment to listen.
        let not_up = msg.contains("onnect") || msg.contains("refused");
        if !(not_up && driver.is_some()) || Instant::now() > deadline {
            return Err(EnvError::Launch(format!(
                "could not open a browser session at {url}: {msg}. Is chromium installed \
                 (`{APT_HINT}`) and does its version match chromedriver's? (`guirl doctor` \
                 checks both)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A failed start of a browser that was to run sandboxed as another user, said so, with
/// the way out.
fn sandboxed_failure(plan: &Plan, e: EnvError) -> EnvError {
    let Some(user) = &plan.user else { return e };
    let say = |m: String| {
        format!(
            "the browser could not start sandboxed as user {}: {m}; run with --no-sandbox (or \
             GUIRL_SANDBOX=0) to start it without Chromium's sandbox, set {} to another user, \
             and see `guirl doctor`",
            user.name,
            sandbox::USER_VAR
        )
    };
    match e {
        EnvError::Launch(m) => EnvError::Launch(say(m)),
        EnvError::Setup(m) => EnvError::Setup(say(m)),
        e => e,
    }
}

/// The session's capabilities: Chromium's flags and binary, and WebDriver's behaviour.
fn capabilities(
    cfg: &BrowserConfig,
    chromium: Option<PathBuf>,
    controlled: bool,
    sandboxed: bool,
    width: u32,
    height: u32,
) -> Capabilities {
    let frame_flags = if controlled { frames::FLAGS } else { FREE_FRAME_FLAGS };
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().chain(frame_flags).map(|s| s.to_string()).collect();
    if !sandboxed {
        args.push("--no-sandbox".into());
    }
    if !cfg.headful {
        args.push("--headless".into());
    }
    if cfg.pointer == Pointer::Mouse {
        args.push(MOUSE_FLAG.into());
    }
    args.push(format!("--window-size={width},{height}"));
    if let (Some(port), None) = (cfg.page_proxy, &cfg.webdriver_url) {
        args.extend(super::super::page_proxy::PageProxy::chromium_flags(port));
    }
    // Extra flags for experiments and odd setups, space-separated.
    if let Ok(extra) = std::env::var("GUIRL_CHROMIUM_ARGS") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    let mut chrome_opts = json!({ "args": args });
    if let Some(bin) = &chromium {
        chrome_opts["binary"] = json!(bin.display().to_string());
    }
    let mut caps = Capabilities::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert("goog:chromeOptions".into(), chrome_opts);
    caps.insert("unhandledPromptBehavior".into(), json!("accept"));
    caps.insert("pageLoadStrategy".into(), json!("normal"));
    caps
}
