//! Talking to one browser session (starting it is in `browser/launch.rs`, clearing a
//! site's stored state in `browser/site_data.rs`).
//!
//! Every WebDriver call goes through [`Browser`], which puts a timeout on it, so a hung
//! or dead browser shows up as an [`EnvError`] instead of a stuck program.

mod launch;
mod site_data;

pub use super::browser_config::{
    BrowserConfig, Pointer, APT_HINT, CHROMIUM_FLAGS, FREE_FRAME_FLAGS, HEADLESS_SHELL, MOUSE_FLAG,
};
use super::devtools::InputEvent;
use super::devtools::{CdpError, DevTools, Navigations};
use super::frames::{self, FrameControl};
use super::page_clock::PageClock;
use super::EnvError;
use fantoccini::actions::Actions;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::Client;
use image::RgbImage;
pub use launch::RELAUNCH_BACKOFF;
use serde_json::{json, Value};
pub use site_data::{origin_of, ClearedBy};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a followed link may take to start its navigation before the page it left is
/// observed as it is (the navigation starts in a task after the click: microseconds on an
/// idle machine; a page whose handler swallowed the navigation costs this much once).
pub const FOLLOW_START: Duration = Duration::from_secs(2);

/// What browser a session runs (see [`Browser::versions`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BrowserVersions {
    /// `chrome`, `chrome-headless-shell`, ...
    pub browser: String,
    /// The browser's version.
    pub browser_version: String,
    /// chromedriver's version (empty for other drivers).
    pub driver_version: String,
    /// Whether Chromium's sandbox is on: `on (as user guirlbrowser)`, or `off: <why>`
    /// (see [`super::sandbox`]); empty in records written before it was recorded.
    #[serde(default)]
    pub sandbox: String,
}

/// One WebDriver session on one browser (the chromedriver it started, if any, and its
/// DevTools channel): every call is bounded by a timeout, so a hung browser is an
/// [`EnvError`], not a stuck program.
pub struct Browser {
    client: Client,
    driver: Option<tokio::process::Child>,
    profile: Option<tempfile::TempDir>,
    /// Current per-command limit in ms (raised while a reset loads pages).
    command_timeout_ms: std::sync::atomic::AtomicU64,
    command_timeout: Duration,
    page_load_timeout: Duration,
    /// Whether Chrome DevTools commands work through this endpoint (fast clipped screenshots).
    cdp: AtomicBool,
    /// The direct DevTools channel for scripts and screenshots, where one can be reached.
    devtools: Option<DevTools>,
    /// Set when the page draws only on request (begin-frame control).
    frames: Option<FrameControl>,
    /// Input actions go over the DevTools channel (see [`super::input`]).
    devtools_input: bool,
    /// How it was started: sandboxed or not, as whom (see [`super::sandbox`]).
    sandbox: super::sandbox::Plan,
    /// chromedriver's and DevTools' ports, closed to pages while this browser lives
    /// (see [`super::local_guard`]).
    reserved: Vec<super::local_guard::Reservation>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("profile", &self.profile_dir()).finish()
    }
}

/// A chromedriver command passed straight to Chrome DevTools (`goog/cdp/execute`).
#[derive(Debug)]
struct CdpCommand {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for CdpCommand {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({ "cmd": self.cmd, "params": self.params });
        (http::Method::POST, Some(body.to_string()))
    }
}

impl Browser {
    /// The browser's name and version and chromedriver's version, as the WebDriver
    /// session reported them (for reproducibility records).
    pub fn versions(&self) -> BrowserVersions {
        let caps = self.client.capabilities();
        let get = |k: &str| caps.and_then(|c| c.get(k)?.as_str().map(str::to_string)).unwrap_or_default();
        let driver = caps
            .and_then(|c| c.get("chrome")?.get("chromedriverVersion")?.as_str())
            .map(|v| v.split(' ').next().unwrap_or(v).to_string())
            .unwrap_or_default();
        BrowserVersions {
            browser: get("browserName"),
            browser_version: get("browserVersion"),
            driver_version: driver,
            sandbox: self.sandbox.note.clone(),
        }
    }

    /// Whether Chromium's sandbox is on in this browser (see [`super::sandbox`]).
    pub fn sandboxed(&self) -> bool {
        self.sandbox.on
    }

    /// Whether this browser may read a task's local `site` (a browser running as another
    /// user reads only what that user may).
    pub fn can_read(&self, site: Option<&crate::tasks::LocalSite>) -> bool {
        let user = self.sandbox.user.as_ref();
        user.is_none_or(|u| site.is_none_or(|s| super::sandbox::readable_by(s.entry(), u)))
    }

    /// Whether the page draws only when asked (begin-frame control).
    pub fn controls_frames(&self) -> bool {
        self.frames.is_some()
    }

    /// The frame control and the DevTools channel it draws through, under begin-frame control.
    fn frame_control(&self) -> Option<(&FrameControl, &DevTools)> {
        self.frames.as_ref().zip(self.devtools.as_ref())
    }

    /// Put the page's time under guirl's control (see [`super::page_clock`]): `step` of
    /// page time passes after each action and at reset. Needs begin-frame control (frames
    /// must carry the page's time); returns whether the page now runs on virtual time.
    /// Call before the first page loads.
    pub async fn use_page_clock(&mut self, step: Duration) -> Result<bool, EnvError> {
        let (Some(frames), Some(dt)) = (self.frames.as_mut(), self.devtools.as_ref()) else {
            return Ok(false);
        };
        if frames.clock().is_none() {
            let clock = PageClock::start(dt, step, self.command_timeout)
                .await
                .map_err(|e| EnvError::Launch(format!("putting the page on virtual time: {e}")))?;
            *frames = FrameControl::new(Some(clock));
        }
        Ok(true)
    }

    /// The page's virtual clock and the channel it is driven through, if page time is guirl's.
    fn page_clock(&self) -> Option<(&PageClock, &DevTools)> {
        self.frames.as_ref().and_then(FrameControl::clock).zip(self.devtools.as_ref())
    }

    /// Whether page time is virtual (see [`Browser::use_page_clock`]).
    pub fn has_page_clock(&self) -> bool {
        self.page_clock().is_some()
    }

    /// The page time granted after each action and at reset, if page time is virtual.
    pub fn page_time_step(&self) -> Option<Duration> {
        self.page_clock().map(|(c, _)| c.step())
    }

    /// Let page time pass: `ms`, or the step budget if `None`. Returns false (and does
    /// nothing) where the page runs on the wall clock.
    pub async fn pass_time(&self, ms: Option<u64>) -> Result<bool, EnvError> {
        let Some((clock, dt)) = self.page_clock() else { return Ok(false) };
        let ms = ms.unwrap_or(clock.step().as_millis() as u64);
        clock.advance(dt, ms, self.limit()).await.map_err(|e| self.clock_error(e))?;
        Ok(true)
    }

    /// Let the step budget of page time pass after an action (a no-op on the wall clock),
    /// first waiting for the new document if the action started a navigation (`mark`: the
    /// page's navigations before the action, [`Browser::navigation_mark`]).
    pub async fn pass_time_after_input(&self, mark: Option<Navigations>) -> Result<(), EnvError> {
        if let Some((clock, dt)) = self.page_clock() {
            let limit = self.limit();
            clock.advance_after_input(dt, mark, limit).await.map_err(|e| match e {
                CdpError::Stalled(what) => self.navigation_stalled(limit, what),
                e => self.clock_error(e),
            })?;
        }
        Ok(())
    }

    /// A `wait(ms)` action: `ms` of page time under virtual time, else of wall time.
    pub async fn wait(&self, ms: u64) -> Result<(), EnvError> {
        if !self.pass_time(Some(ms)).await? {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(())
    }

    fn clock_error(&self, e: CdpError) -> EnvError {
        match e {
            CdpError::Timeout => {
                self.no_answer(self.limit(), "letting page time pass (a script that never ends?)")
            }
            e => EnvError::Browser(format!("letting page time pass: {e}")),
        }
    }

    /// Let the browser make only the requests `check` allows (see
    /// [`DevTools::filter_requests`]); an error where there is no DevTools channel.
    pub async fn guard_requests(&self, check: super::devtools::RequestCheck) -> Result<(), EnvError> {
        let dt = self.devtools.as_ref().ok_or_else(|| {
            EnvError::Setup(
                "the browser's requests cannot be checked without a direct DevTools channel".into(),
            )
        })?;
        dt.filter_requests(check, self.command_timeout)
            .await
            .map_err(|e| EnvError::Browser(format!("turning on request checks: {e}")))
    }

    /// The page's navigations so far over DevTools (see [`DevTools::navigations`]); `None`
    /// without a DevTools channel.
    pub fn navigation_mark(&self) -> Option<Navigations> {
        self.devtools.as_ref().map(DevTools::navigations)
    }

    /// Wait (at most the command limit) for a navigation the page requested after `mark`
    /// to end (see [`DevTools::wait_navigation_after`]); whether one was pending. One that
    /// does not end in time is an error naming it: the page is stuck between documents.
    pub async fn wait_navigation_after(&self, mark: Navigations) -> Result<bool, EnvError> {
        let Some(dt) = &self.devtools else { return Ok(false) };
        let limit = self.limit();
        dt.wait_navigation_after(mark, limit).await.map_err(|e| self.navigation_error(dt, limit, e))
    }

    /// After a click that followed a link: wait (at most [`FOLLOW_START`]) for the page to
    /// request a navigation after `mark`, then (at most the command limit) for it to end;
    /// whether one was requested.
    pub async fn wait_navigation_start(&self, mark: Navigations) -> Result<bool, EnvError> {
        let Some(dt) = &self.devtools else { return Ok(false) };
        let limit = self.limit();
        dt.wait_navigation_start(mark, FOLLOW_START, limit)
            .await
            .map_err(|e| self.navigation_error(dt, limit, e))
    }

    fn navigation_error(&self, dt: &DevTools, limit: Duration, e: CdpError) -> EnvError {
        match e {
            CdpError::Timeout => {
                self.navigation_stalled(limit, format!("the end of the navigation to {}", dt.requested_url()))
            }
            e => EnvError::Browser(format!("waiting for the page's navigation: {e}")),
        }
    }

    /// A wait for `what` that ran out of time.
    fn navigation_stalled(&self, limit: Duration, what: String) -> EnvError {
        EnvError::Browser(format!("timed out after {:.1}s waiting for {what}", limit.as_secs_f64()))
    }

    /// Whether scripts and screenshots go over the direct DevTools channel.
    pub fn has_devtools(&self) -> bool {
        self.devtools.is_some()
    }

    /// Make the viewport `width`×`height`: the window size includes the browser's own
    /// chrome (143 px high in headless Chromium 156), so resize by the difference until the
    /// inner size matches, narrower as well as wider: a page laid out in a wider window
    /// than its task's would look different after a wider task ran in the same browser.
    /// Where a browser keeps windows wider than asked (headful Chromium keeps them at least
    /// 500 px wide), the viewport stays wider and the screenshot is cropped from the
    /// top-left.
    pub async fn fit_viewport(&self, width: u32, height: u32) -> Result<(), EnvError> {
        let mut inner = (0, 0);
        for _ in 0..4 {
            let v = self.execute("return [window.innerWidth, window.innerHeight];", vec![]).await?;
            inner = (v[0].as_i64().unwrap_or(0), v[1].as_i64().unwrap_or(0));
            let (dw, dh) = (width as i64 - inner.0, height as i64 - inner.1);
            if dw == 0 && dh == 0 {
                return Ok(());
            }
            let (ow, oh) = self.guard("reading the window size", self.client.get_window_size()).await?;
            let (nw, nh) = ((ow as i64 + dw).max(1) as u32, (oh as i64 + dh).max(1) as u32);
            // Under begin-frame control a resize completes in a drawn frame (pumping empty
            // frames measured a 20 s stall at each task switch to another viewport size).
            let resize = self.client.set_window_size(nw, nh);
            self.guard_drawing(self.limit(), "resizing the window", frames::Draw::Display, resize).await?;
        }
        if inner.0 < width as i64 || inner.1 < height as i64 {
            return Err(EnvError::Setup(format!(
                "could not size the browser viewport to {width}x{height} (got {}x{})",
                inner.0, inner.1
            )));
        }
        Ok(())
    }

    /// Patient mode allows every command the page-load limit instead of the command
    /// limit: a fresh browser or page can take seconds to answer its first script on a
    /// loaded machine, while a step must notice a hung page quickly.
    pub fn set_patient(&self, patient: bool) {
        let limit =
            if patient { self.page_load_timeout.max(self.command_timeout) } else { self.command_timeout };
        self.command_timeout_ms.store(limit.as_millis() as u64, Ordering::Relaxed);
    }

    /// Run a WebDriver call under the command timeout, turning failures into `EnvError`.
    async fn guard<T, F>(&self, doing: &str, fut: F) -> Result<T, EnvError>
    where
        F: Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        self.guard_for(self.limit(), doing, fut).await
    }

    async fn guard_for<T, F>(&self, limit: Duration, doing: &str, fut: F) -> Result<T, EnvError>
    where
        F: Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        self.guard_drawing(limit, doing, frames::Draw::Nothing, fut).await
    }

    /// [`Browser::guard_for`], issuing frames that do `draw` while the command runs.
    async fn guard_drawing<T, F>(
        &self,
        limit: Duration,
        doing: &str,
        draw: frames::Draw,
        fut: F,
    ) -> Result<T, EnvError>
    where
        F: Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        let timed = tokio::time::timeout(limit, fut);
        // Under begin-frame control input is acknowledged after a frame: draw while it waits.
        // A page on virtual time loads only while it is granted time: grant it to a page
        // the command navigates to.
        let answer = match (self.frame_control(), self.page_clock()) {
            (Some((f, dt)), Some((clock, _))) => {
                f.pumped(dt, draw, limit, clock.through(dt, limit, timed)).await
            }
            (Some((f, dt)), None) => f.pumped(dt, draw, limit, timed).await,
            (None, _) => timed.await,
        };
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(EnvError::from_cmd(doing, e)),
            Err(_) => Err(self.no_answer(limit, doing)),
        }
    }

    /// Run JavaScript in the page (a function body; `arguments` holds `args`).
    ///
    /// Goes over DevTools where it can (a thrown error or a hang is final); when the
    /// channel fails otherwise (the page is between documents, the socket closed), the
    /// WebDriver session runs it, waiting out navigations as WebDriver does.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, EnvError> {
        const DOING: &str = "running a script in the page";
        if let Some(dt) = &self.devtools {
            match dt.run_script(script, &args, false, self.limit()).await {
                Ok(v) => return Ok(v),
                Err(CdpError::Timeout) => return Err(self.no_answer(self.limit(), DOING)),
                Err(CdpError::Protocol(m)) if m.starts_with("javascript error") => {
                    return Err(EnvError::Browser(format!("{DOING}: {m}")))
                }
                Err(e) => tracing::debug!("DevTools script failed ({e}); using WebDriver"),
            }
        }
        self.execute_webdriver(script, args).await
    }

    /// Run `script` over WebDriver only: it waits for a navigation in flight to finish.
    pub async fn execute_webdriver(&self, script: &str, args: Vec<Value>) -> Result<Value, EnvError> {
        self.guard("running a script in the page", self.client.execute(script, args)).await
    }

    fn limit(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms.load(Ordering::Relaxed))
    }

    fn no_answer(&self, limit: Duration, doing: &str) -> EnvError {
        // Under begin-frame control a page whose navigation is in flight (its server has
        // not answered) answers no script: name the navigation, the likelier culprit.
        let navigating = self
            .devtools
            .as_ref()
            .filter(|dt| dt.navigations().pending_since(Navigations::default()))
            .map(|dt| format!(", with the page's navigation to {} not ended", dt.requested_url()))
            .unwrap_or_default();
        EnvError::Browser(format!(
            "the browser did not answer within {:.1}s while {doing}{navigating}",
            limit.as_secs_f64()
        ))
    }

    /// Wait for the page to draw two more frames (wheel scrolls and drags are applied
    /// asynchronously; reading the page right away can see the old positions).
    pub async fn next_frames(&self) -> Result<(), EnvError> {
        if let Some((f, dt)) = self.frame_control() {
            for _ in 0..2 {
                f.frame(dt, frames::Draw::Display, self.limit()).await.map_err(|e| match e {
                    CdpError::Timeout => self.no_answer(self.limit(), "drawing a frame"),
                    e => EnvError::Browser(format!("drawing a frame: {e}")),
                })?;
            }
            return Ok(());
        }
        if let Some(dt) = &self.devtools {
            let js = "return new Promise(function (r) { requestAnimationFrame(function () { requestAnimationFrame(r); }); });";
            match dt.run_script(js, &[], true, self.limit()).await {
                Ok(_) => return Ok(()),
                Err(CdpError::Timeout) => {
                    return Err(self.no_answer(self.limit(), "waiting for the page to draw"))
                }
                Err(e) => tracing::debug!("DevTools frame wait failed ({e}); using WebDriver"),
            }
        }
        let js = "var done = arguments[arguments.length - 1]; \
                  requestAnimationFrame(function () { requestAnimationFrame(function () { done(null); }); });";
        self.guard("waiting for the page to draw", self.client.execute_async(js, vec![])).await?;
        Ok(())
    }

    /// The current URL.
    pub async fn current_url(&self) -> Result<String, EnvError> {
        Ok(self.guard("reading the URL", self.client.current_url()).await?.to_string())
    }

    /// Whether input actions go as DevTools events (see [`super::input`]).
    pub fn devtools_input(&self) -> bool {
        self.devtools_input && self.devtools.is_some()
    }

    /// Send DevTools input events in order, drawing frames that do `draw` under
    /// begin-frame control while they wait (a lone pointer move is handled at the next
    /// frame). Pointer events go out together, except that of two moves in a row the
    /// second waits for the first (moves sent together would be coalesced into one); a
    /// run of key events goes at once, as
    /// chromedriver's typing reaches the page: the keys arrive before the page's timers
    /// run (an autocomplete's 0 ms search fires once, after the last key).
    pub async fn dispatch(&self, events: &[InputEvent], draw: frames::Draw) -> Result<(), EnvError> {
        const DOING: &str = "sending input events";
        let Some(dt) = &self.devtools else {
            return Err(EnvError::Browser(format!("{DOING}: no DevTools channel")));
        };
        let limit = self.limit();
        let send = async {
            // Events of one kind go out together and are awaited together, as chromedriver
            // does (the browser handles a session's commands in order), except two pointer
            // moves in a row: Chromium merges moves that reach a frame together, so a drag's
            // page would see one move instead of eight; each such move is awaited (it is
            // answered at the next frame, which the pump gives). A move followed by a press
            // goes out with it: the renderer dispatches queued moves in order before a
            // press, without waiting for a frame, so a click takes no frame (measured on
            // click-test: the action phase 6.4 -> 2.1 ms).
            let moves = |e: &InputEvent| e.1["type"] == "mouseMoved";
            for run in events.chunk_by(|a, b| a.0 == b.0 && !(moves(a) && moves(b))) {
                let calls = run.iter().map(|(method, params)| dt.call(method, params.clone(), limit));
                futures::future::try_join_all(calls).await?;
            }
            Ok(())
        };
        let sent = match self.frame_control() {
            Some((f, dt)) => f.pumped(dt, draw, limit, send).await,
            None => send.await,
        };
        sent.map_err(|e| match e {
            CdpError::Timeout => self.no_answer(limit, DOING),
            e => EnvError::Browser(format!("{DOING}: {e}")),
        })
    }

    /// Perform WebDriver input actions, then release all keys and buttons. `scrolls`: the
    /// input is a wheel scroll, which under begin-frame control only happens in frames
    /// that are drawn.
    pub async fn perform(&self, actions: Actions, scrolls: bool) -> Result<(), EnvError> {
        let draw = if scrolls { frames::Draw::Display } else { frames::Draw::Nothing };
        let doing = "performing input actions";
        self.guard_drawing(self.limit(), doing, draw, self.client.perform_actions(actions)).await
    }

    /// A screenshot of viewport rectangle (x, y, w, h), in CSS pixels, as RGB.
    ///
    /// Uses DevTools' capture of the viewport where the endpoint forwards it (chromedriver
    /// does) and crops here: a `clip` makes Chromium re-layout with an emulated viewport,
    /// which measured 3-5x slower. Falls back to WebDriver's screenshot.
    pub async fn screenshot(&self, x: i32, y: i32, w: u32, h: u32) -> Result<RgbImage, EnvError> {
        const DOING: &str = "taking a screenshot";
        let params = json!({ "format": "png", "optimizeForSpeed": true });
        if let Some((f, dt)) = self.frame_control() {
            // Under begin-frame control the capture is a frame of its own. A page that has
            // just been navigated to can have nothing to show yet: draw again shortly.
            let deadline = Instant::now() + self.limit();
            loop {
                match f.frame(dt, frames::Draw::Screenshot, self.limit()).await {
                    Ok(v) if v.get("screenshotData").is_some() || Instant::now() > deadline => {
                        return screenshot_data(&v, "screenshotData").map(|img| crop(img, x, y, w, h))
                    }
                    Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    Err(CdpError::Timeout) => return Err(self.no_answer(self.limit(), DOING)),
                    Err(e) => return Err(EnvError::Browser(format!("{DOING}: {e}"))),
                }
            }
        }
        if let Some(dt) = &self.devtools {
            match dt.call("Page.captureScreenshot", params.clone(), self.limit()).await {
                Ok(v) => return screenshot_data(&v, "data").map(|img| crop(img, x, y, w, h)),
                Err(CdpError::Timeout) => return Err(self.no_answer(self.limit(), DOING)),
                Err(e) => tracing::debug!("DevTools screenshot failed ({e}); using WebDriver"),
            }
        }
        if self.cdp.load(Ordering::Relaxed) {
            let cmd = CdpCommand { cmd: "Page.captureScreenshot", params };
            match self.guard(DOING, self.client.issue_cmd(cmd)).await {
                Ok(v) if v.get("data").is_some() => {
                    return screenshot_data(&v, "data").map(|img| crop(img, x, y, w, h))
                }
                Ok(_) => tracing::warn!("DevTools screenshot gave no data; using WebDriver's"),
                Err(EnvError::Browser(m)) if m.contains("did not answer") => {
                    return Err(EnvError::Browser(m))
                }
                Err(e) => tracing::warn!("DevTools screenshot unavailable ({e}); using WebDriver's"),
            }
            self.cdp.store(false, Ordering::Relaxed);
        }
        let png = self.guard(DOING, self.client.screenshot()).await?;
        let full =
            super::decode_png(&png).map_err(|e| EnvError::Browser(format!("bad screenshot PNG: {e}")))?;
        Ok(crop(full, x, y, w, h))
    }

    /// The temporary folder of a browser we started: chromedriver's temp folder, which holds
    /// the browser's profile (`--user-data-dir`).
    pub fn profile_dir(&self) -> Option<&Path> {
        self.profile.as_ref().map(|p| p.path())
    }

    /// End the session and stop chromedriver (best effort, bounded in time); returns once
    /// the profile folder is gone.
    pub async fn close(mut self) {
        let closed = tokio::time::timeout(Duration::from_secs(5), self.client.clone().close()).await;
        if matches!(closed, Ok(Ok(()))) {
            if let Some(mut d) = self.driver.take() {
                let _ = d.kill().await;
            }
        }
        // Closed or not, kill what is left of the browser and delete its profile.
        if let Some(done) = self.profile.take().and_then(|p| super::profiles::release(p.keep())) {
            let _ = done.await;
        }
    }
}

/// The image in field `key` of a DevTools screenshot result.
fn screenshot_data(v: &Value, key: &str) -> Result<RgbImage, EnvError> {
    use base64::Engine;
    let Some(data) = v.get(key).and_then(Value::as_str) else {
        return Err(EnvError::Browser(format!("the browser returned no screenshot ({v})")));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| EnvError::Browser(format!("bad screenshot data: {e}")))?;
    super::decode_png(&bytes).map_err(|e| EnvError::Browser(format!("bad screenshot PNG: {e}")))
}

/// Cut the w×h rectangle at (x, y) out of a viewport screenshot, padding with white
/// where the viewport is smaller, so frames always match their `Frame`.
fn crop(full: RgbImage, x: i32, y: i32, w: u32, h: u32) -> RgbImage {
    if (x, y, full.width(), full.height()) == (0, 0, w, h) {
        return full;
    }
    let (cx, cy) = (x.max(0) as u32, y.max(0) as u32);
    let cw = w.min(full.width().saturating_sub(cx));
    let ch = h.min(full.height().saturating_sub(cy));
    let part = image::imageops::crop_imm(&full, cx, cy, cw, ch).to_image();
    let mut out = RgbImage::from_pixel(w, h, image::Rgb([255, 255, 255]));
    image::imageops::replace(&mut out, &part, 0, 0);
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closed or not (a crash, a hang), kill whatever still runs for our profile folder
        // (a helper exiting late would write into it) and delete it, on the runtime's
        // blocking pool when there is one (see `profiles::release`).
        if let Some(p) = self.profile.take() {
            super::profiles::release(p.keep());
        }
    }
}
