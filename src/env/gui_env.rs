//! `GuiEnv`: the gymnasium contract over one browser and one task.
//!
//! One env owns one browser session for its whole life; `reset` starts a new episode in it
//! without relaunching. A browser that dies or hangs ends the episode as `env_error`, and
//! the next `reset` starts a fresh one.

use super::browser::{Browser, BrowserConfig};
pub use super::env_config::{EnvConfig, EpisodeRules, DEFAULT_VIRTUAL_TIME_MS};
use super::local_guard::LocalGuard;
pub use super::outcome::{EpisodeStatus, ResetInfo, StepInfo, StepOutcome, StepTimings};
use super::page_proxy::{HostCheck, PageProxy};
use super::{Element, EnvError, Frame, GuiAction, ScreenState};
use crate::tasks::{EpisodeOptions, Task, TaskStatus};
use image::RgbImage;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod observe;

/// Why page time cannot be had: the browser gives no begin-frame control.
const NO_PAGE_CLOCK: &str = "page time (--virtual-time-ms, [env] virtual_time_ms) needs begin-frame control, which \
    this browser lacks (GUIRL_FRAME_CONTROL=0, or GUIRL_CHROMIUM not chrome-headless-shell): use the headless \
    shell scripts/setup.sh installs, or leave page time out to run on the wall clock";

struct Episode {
    seed: u64,
    step: u32,
    instruction: String,
    script: String,
    running: bool,
    last: ScreenState,
    /// The actions taken so far, text form (`ScreenState.history`).
    history: Vec<String>,
    /// The task's URL pattern (see [`crate::tasks::EpisodeStart::url_pattern`]).
    url_pattern: Option<regex::Regex>,
}

/// A browser environment for one task.
pub struct GuiEnv {
    task: Arc<dyn Task>,
    cfg: EnvConfig,
    browser: Option<Browser>,
    episode: Option<Episode>,
    /// The viewport must be refitted before the next episode (the task changed).
    resize: bool,
    /// Why the last browser was dropped after it failed (the next reset's
    /// `replaced_after`).
    lost: Option<String>,
    /// Every request of the browser must pass this (see [`GuiEnv::guard_requests`]).
    request_check: Option<super::devtools::RequestCheck>,
    /// Keeps pages off this machine's loopback services, always (see [`super::local_guard`]).
    local: Arc<LocalGuard>,
    /// The host rule every connection must also pass (see [`GuiEnv::guard_hosts`]).
    host_check: Option<HostCheck>,
    /// Every connection of a browser started here goes through it (see [`super::page_proxy`]).
    proxy: Option<PageProxy>,
}

const OBSERVE_JS: &str = include_str!("observe.js");
/// Keeps native popups shut in headless pages, drawing a `<select>`'s list in the page.
const POPUPS_JS: &str = include_str!("popups.js");

#[derive(Deserialize)]
struct PageState {
    ready: bool,
    #[serde(default)]
    animating: bool,
    #[serde(default)]
    leaving: bool,
    /// The last click (since the previous read) followed a link (see `observe.js`).
    #[serde(default)]
    following: bool,
    url: String,
    scroll: [i32; 2],
    elements: Vec<Element>,
    status: Option<TaskStatus>,
}

impl GuiEnv {
    /// An env for `task`; the browser starts at the first reset.
    pub fn new(task: Arc<dyn Task>, cfg: EnvConfig) -> GuiEnv {
        let local = LocalGuard::for_task(task.as_ref());
        GuiEnv {
            task,
            cfg,
            browser: None,
            episode: None,
            resize: false,
            lost: None,
            request_check: None,
            local,
            host_check: None,
            proxy: None,
        }
    }

    /// Let the browsers this env starts here connect only to hosts `check` allows, checked
    /// at each connection with the addresses the name resolved to then (so DNS rebinding
    /// cannot swap them) and for WebSockets too, which [`GuiEnv::guard_requests`] does not
    /// see. Takes effect at the next browser start. `guirl serve` passes its URL policy.
    pub fn guard_hosts(&mut self, check: HostCheck) {
        self.host_check = Some(check);
        self.proxy = None;
    }

    /// Let every browser this env starts make only the requests `check` allows (a page's
    /// navigations, frames, scripts, images, fetches); refused ones fail in the page as a
    /// blocked request, and the episode goes on. Takes effect at the next browser start,
    /// so call it before the first reset. `guirl serve` guards every session's browser.
    pub fn guard_requests(&mut self, check: super::devtools::RequestCheck) {
        self.request_check = Some(check);
    }

    /// The requests to this machine's loopback services that pages made since the last
    /// call, refused (at most 20 listed), and how many more (see [`super::local_guard`]).
    pub fn take_blocked_urls(&self) -> (Vec<String>, usize) {
        self.local.take_blocked()
    }

    /// The task this env runs.
    pub fn task(&self) -> &Arc<dyn Task> {
        &self.task
    }

    /// Switch to another task, keeping the browser (resized to the task's viewport at the
    /// next reset). Ends any running episode.
    pub fn set_task(&mut self, task: Arc<dyn Task>) {
        if task.viewport() != self.task.viewport() {
            self.resize = true;
        }
        // A browser running as another user may not read the new task's local pages.
        if self.browser.as_ref().is_some_and(|b| !b.can_read(task.local_site().as_ref())) {
            self.drop_browser();
        }
        self.local.set_task(task.as_ref());
        self.task = task;
        self.episode = None;
    }

    /// Override the task's step limit (`None`: the task's own) from the next reset on.
    pub fn set_max_steps(&mut self, max_steps: Option<u32>) {
        self.cfg.max_steps = max_steps;
    }

    /// The settings besides the step limit that change what an episode does.
    pub fn rules(&self) -> EpisodeRules {
        self.cfg.rules
    }

    /// The step limit in force.
    pub fn max_steps(&self) -> u32 {
        self.cfg.max_steps.unwrap_or_else(|| self.task.max_steps())
    }

    /// The live browser's profile folder (for finding its processes), if one is running.
    pub fn browser_profile_dir(&self) -> Option<std::path::PathBuf> {
        self.browser.as_ref().and_then(|b| b.profile_dir().map(|p| p.to_path_buf()))
    }

    /// The running browser's versions; `None` before it has started.
    pub fn browser_versions(&self) -> Option<super::browser::BrowserVersions> {
        self.browser.as_ref().map(Browser::versions)
    }

    /// Whether page reads and screenshots go over a direct DevTools channel (see
    /// [`BrowserConfig::devtools`]); false until the browser has started.
    pub fn uses_devtools(&self) -> bool {
        self.browser.as_ref().is_some_and(Browser::has_devtools)
    }

    /// Whether actions reach the page as DevTools input events (see
    /// [`super::input`]); false until the browser has started.
    pub fn uses_devtools_input(&self) -> bool {
        self.browser.as_ref().is_some_and(Browser::devtools_input)
    }

    /// Whether the page draws only when guirl asks (see [`BrowserConfig::frame_control`]);
    /// false until the browser has started.
    pub fn uses_frame_control(&self) -> bool {
        self.browser.as_ref().is_some_and(Browser::controls_frames)
    }

    /// Whether Chromium's sandbox is on (see [`super::sandbox`]); false until the browser
    /// has started.
    pub fn uses_sandbox(&self) -> bool {
        self.browser.as_ref().is_some_and(Browser::sandboxed)
    }

    /// Whether page time is virtual (see [`EpisodeRules::virtual_time_ms`]); false until the
    /// browser has started.
    pub fn uses_page_clock(&self) -> bool {
        self.browser.as_ref().is_some_and(Browser::has_page_clock)
    }

    /// Start the browser now (otherwise the first reset does).
    pub async fn start(&mut self) -> Result<(), EnvError> {
        if self.browser.is_none() {
            let vp = self.task.viewport();
            if self.proxy.is_none() && self.cfg.browser.webdriver_url.is_none() {
                let proxy = PageProxy::start(self.local.clone(), self.host_check.clone())
                    .map_err(|e| EnvError::Setup(format!("cannot start the browser's proxy: {e}")))?;
                self.proxy = Some(proxy);
            }
            let cfg = BrowserConfig {
                local_site: self.task.local_site(),
                page_proxy: self.proxy.as_ref().map(PageProxy::port),
                ..self.cfg.browser.clone()
            };
            let mut b = Browser::launch(&cfg, vp.window_width, vp.window_height).await?;
            if let Some(ms) = self.cfg.rules.virtual_time_ms.filter(|&ms| ms > 0) {
                if !b.use_page_clock(Duration::from_millis(ms as u64)).await? {
                    b.close().await;
                    return Err(EnvError::Setup(NO_PAGE_CLOCK.into()));
                }
            }
            if b.has_devtools() || self.request_check.is_some() {
                if let Err(e) = b.guard_requests(self.page_requests_check()).await {
                    b.close().await;
                    return Err(e);
                }
            } else if self.proxy.is_none() {
                tracing::warn!(
                    "a browser attached through a WebDriver URL without a DevTools channel: its pages' \
                     requests are not checked (see docs/security.md)"
                );
            }
            self.browser = Some(b);
            self.resize = false;
        }
        Ok(())
    }

    /// The loopback rule, then the caller's check (if any).
    fn page_requests_check(&self) -> super::devtools::RequestCheck {
        let (local, outer) = (self.local.clone(), self.request_check.clone());
        Arc::new(move |url: String| {
            let (local, outer) = (local.clone(), outer.clone());
            Box::pin(async move {
                if !local.allows(&url).await {
                    return false;
                }
                match outer {
                    Some(check) => check(url).await,
                    None => true,
                }
            })
        })
    }

    fn frame(&self, scroll: [i32; 2]) -> Frame {
        let vp = self.task.viewport();
        Frame {
            width: vp.width,
            height: vp.height,
            origin_x: vp.crop_x,
            origin_y: vp.crop_y,
            scroll_x: scroll[0],
            scroll_y: scroll[1],
        }
    }

    /// Start a new episode of the task for `seed`.
    pub async fn reset(&mut self, seed: u64) -> Result<(ScreenState, ResetInfo), EnvError> {
        let t0 = Instant::now();
        self.episode = None;
        let mut started = false;
        // (a browser that failed in the last episode's step was dropped then)
        let mut replaced_after = self.lost.take();
        // A browser that died since the last episode gets one fresh replacement.
        for attempt in 0..2 {
            if self.browser.is_none() {
                self.start().await?;
                started = true;
            }
            match self.try_reset(seed).await {
                Ok(ep) => {
                    let obs = ep.last.clone();
                    self.episode = Some(ep);
                    let info = ResetInfo {
                        task_id: self.task.id().to_string(),
                        seed,
                        max_steps: self.max_steps(),
                        browser_started: started,
                        replaced_after,
                        reset_ms: ms(t0),
                    };
                    return Ok((obs, info));
                }
                Err(e) if e.needs_restart() && attempt == 0 && !matches!(e, EnvError::PageLoad { .. }) => {
                    tracing::warn!(
                        task = self.task.id(),
                        "browser failed at reset ({e}); starting a fresh one"
                    );
                    replaced_after = Some(e.to_string());
                    self.drop_browser();
                }
                Err(e) => {
                    // A page that did not load is not retried here (a fresh browser seldom
                    // helps), but the next reset gets one, as after a failed step.
                    if e.needs_restart() {
                        self.lose_browser(&e);
                    }
                    return Err(e);
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    async fn try_reset(&mut self, seed: u64) -> Result<Episode, EnvError> {
        let browser = self.browser.as_ref().expect("browser started");
        let opts = EpisodeOptions { wall_clock_ms: self.cfg.rules.wall_clock_ms };
        browser.set_patient(true);
        if self.resize {
            let vp = self.task.viewport();
            browser.fit_viewport(vp.window_width, vp.window_height).await?;
            self.resize = false;
        }
        super::input::clear_state(browser).await?;
        let mut start = self.task.reset(browser, seed, &opts).await;
        if start.is_ok() {
            // The episode's first page time: the same budget as after an action.
            if let Err(e) = browser.pass_time(None).await {
                start = Err(e);
            }
        }
        browser.set_patient(false);
        let start = start?;
        let mut script = OBSERVE_JS.replace("__STATUS__", &start.status_js);
        // A visible browser draws and runs its native popups itself.
        if !self.cfg.browser.headful {
            script = format!("{POPUPS_JS}\n{script}");
        }
        let mut ep = Episode {
            seed,
            step: 0,
            instruction: start.instruction,
            script,
            running: true,
            history: Vec::new(),
            url_pattern: start.url_pattern,
            last: ScreenState {
                task_id: self.task.id().to_string(),
                instruction: String::new(),
                url: String::new(),
                step: 0,
                frame: Frame::default(),
                elements: vec![],
                screenshot: Arc::new(RgbImage::new(1, 1)),
                history: Vec::new(),
                previous_screenshot: None,
            },
        };
        let (obs, _, _, _) = self.observe(&ep, None).await?;
        ep.last = obs;
        Ok(ep)
    }

    /// Parse `text` as an action and step with it; malformed text is an invalid action.
    pub async fn step_text(&mut self, text: &str) -> Result<StepOutcome, EnvError> {
        match GuiAction::parse(text) {
            Ok(a) => self.step(&a).await,
            Err(e) => self.step_invalid(e.to_string()).await,
        }
    }

    /// Take one action.
    pub async fn step(&mut self, action: &GuiAction) -> Result<StepOutcome, EnvError> {
        self.remember(action);
        match self.check_action(action).await {
            Some(p) => self.step_invalid(p).await,
            None => self.step_inner(Some(action), true).await,
        }
    }

    /// A step for `action`, already done in the page (by a person, see [`super::capture`]):
    /// not executed, but observed and scored by the task exactly as in [`GuiEnv::step`].
    pub async fn record_step(&mut self, action: &GuiAction) -> Result<StepOutcome, EnvError> {
        self.remember(action);
        self.step_inner(Some(action), false).await
    }

    /// The episode's memory has every action taken, executable or not (as trajectories do).
    fn remember(&mut self, action: &GuiAction) {
        if let Some(ep) = self.episode.as_mut().filter(|e| e.running) {
            ep.history.push(action.to_string());
        }
    }

    /// Take a step that executes nothing because the agent's answer was not an action
    /// (`error` says why): it counts against the step limit like any invalid action.
    pub async fn step_unparsed(&mut self, error: String) -> Result<StepOutcome, EnvError> {
        self.step_invalid(error).await
    }

    async fn step_invalid(&mut self, error: String) -> Result<StepOutcome, EnvError> {
        let mut out = self.step_inner(None, false).await?;
        if out.info.status == EpisodeStatus::Running && self.cfg.rules.strict_actions {
            out.info.status = EpisodeStatus::InvalidAction;
            out.terminated = true;
            if let Some(ep) = self.episode.as_mut() {
                ep.running = false;
            }
        }
        out.info.action_error = Some(error);
        Ok(out)
    }

    /// Why `action` cannot be executed in the current state, if it cannot.
    async fn check_action(&self, action: &GuiAction) -> Option<String> {
        let ep = self.episode.as_ref()?;
        let f = ep.last.frame;
        for (x, y) in action.points() {
            if !f.contains(x, y) {
                return Some(format!(
                    "{action} is outside the {}x{} screenshot (x must be in 0..{}, y in 0..{})",
                    f.width, f.height, f.width, f.height
                ));
            }
        }
        if let GuiAction::Type { .. } = action {
            let focus = self
                .browser
                .as_ref()?
                .execute("var a = document.activeElement; return !!a && a !== document.body && a !== document.documentElement;", vec![])
                .await;
            if focus.ok() == Some(json!(false)) {
                return Some(format!(
                    "{action} went nowhere: nothing has keyboard focus (click an input first)"
                ));
            }
        }
        None
    }

    /// One step with `action` (`None`: an invalid one), executed if `run`.
    async fn step_inner(&mut self, action: Option<&GuiAction>, run: bool) -> Result<StepOutcome, EnvError> {
        let t0 = Instant::now();
        let max_steps = self.max_steps();
        let Some(ep) = self.episode.as_mut().filter(|e| e.running) else {
            return Err(EnvError::Task("step() needs a running episode: call reset(seed) first".into()));
        };
        ep.step += 1;
        let frame = ep.last.frame;
        let mut timings = StepTimings::default();
        let browser = self.browser.as_ref().expect("browser");
        let nav_mark = browser.navigation_mark();
        let exec = match action.filter(|_| run) {
            Some(a) => {
                let r = super::input::execute(browser, a, &frame).await;
                timings.action_ms = ms(t0);
                r
            }
            None => Ok(()),
        };
        // Page time moves on by the step's budget, whatever the action (none included).
        let exec = match exec {
            Ok(()) => browser.pass_time_after_input(nav_mark).await,
            e => e,
        };
        let ep = self.episode.take().expect("episode");
        let observed = match exec {
            Ok(()) => self.observe(&ep, nav_mark).await,
            Err(e) => Err(e),
        };
        let mut ep = ep;
        let (obs, status) = match observed {
            Ok((obs, status, settle, shot)) => {
                timings.settle_ms = settle;
                timings.screenshot_ms = shot;
                (obs, status)
            }
            Err(e) => {
                // The browser failed: end the episode as an infrastructure failure.
                tracing::warn!(task = self.task.id(), seed = ep.seed, "env error: {e}");
                if e.needs_restart() {
                    self.lose_browser(&e);
                }
                ep.running = false;
                let mut obs = ep.last.clone();
                obs.step = ep.step;
                timings.total_ms = ms(t0);
                let info = StepInfo {
                    status: EpisodeStatus::EnvError,
                    raw_reward: 0.0,
                    decayed_reward: 0.0,
                    reason: None,
                    action_error: None,
                    env_error: Some(e.to_string()),
                    timings,
                };
                self.episode = Some(ep);
                return Ok(StepOutcome { obs, reward: 0.0, terminated: false, truncated: true, info });
            }
        };
        let gave_up = matches!(action, Some(GuiAction::Done));
        let (status_now, terminated, truncated) = if status.done || (gave_up && self.task.rewards_on_done()) {
            let s = if status.is_success() { EpisodeStatus::Success } else { EpisodeStatus::Fail };
            (s, true, false)
        } else if gave_up {
            (EpisodeStatus::Fail, true, false)
        } else if ep.step >= max_steps {
            (EpisodeStatus::Truncated, false, true)
        } else {
            (EpisodeStatus::Running, false, false)
        };
        let ended = terminated || truncated;
        let (raw, decayed) = if status.done || (gave_up && self.task.rewards_on_done()) {
            (status.raw_reward, status.reward)
        } else {
            (0.0, 0.0)
        };
        let reward = if self.cfg.rules.wall_clock_ms.is_some() { decayed } else { raw };
        let reason = status.reason.clone().or_else(|| {
            (gave_up && !status.done && !self.task.rewards_on_done())
                .then(|| "the agent declared done() before the task was complete".to_string())
        });
        ep.running = !ended;
        ep.last = obs.clone();
        self.episode = Some(ep);
        timings.total_ms = ms(t0);
        Ok(StepOutcome {
            obs,
            reward,
            terminated,
            truncated,
            info: StepInfo {
                status: status_now,
                raw_reward: raw,
                decayed_reward: decayed,
                reason,
                action_error: None,
                env_error: None,
                timings,
            },
        })
    }

    /// A fresh screenshot of the task's viewport (or the last one if the browser is gone).
    pub async fn render(&self) -> Result<RgbImage, EnvError> {
        let vp = self.task.viewport();
        match &self.browser {
            Some(b) => b.screenshot(vp.crop_x, vp.crop_y, vp.width, vp.height).await,
            // An episode without a browser: it failed and was closed (no current screen).
            None if self.episode.is_some() => {
                Err(EnvError::Browser("the browser failed and was closed; reset() starts a new one".into()))
            }
            None => Err(EnvError::Task("render() before reset(): nothing to show".into())),
        }
    }

    /// The last observation of the current episode, if any.
    pub fn last_observation(&self) -> Option<&ScreenState> {
        self.episode.as_ref().map(|e| &e.last)
    }

    /// Close the browser.
    pub async fn close(&mut self) {
        self.episode = None;
        if let Some(b) = self.browser.take() {
            b.close().await;
        }
    }

    /// Drop a browser that failed with `e`; the next reset starts a fresh one and says why.
    fn lose_browser(&mut self, e: &EnvError) {
        self.drop_browser();
        self.lost = Some(e.to_string());
    }

    fn drop_browser(&mut self) {
        // Dropping kills chromedriver and the browser processes of its profile.
        self.browser = None;
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// A value helper for tests and tools: the raw JSON of a script's result.
pub async fn eval(env: &GuiEnv, script: &str) -> Result<Value, EnvError> {
    match &env.browser {
        Some(b) => b.execute(script, vec![]).await,
        None => Err(EnvError::Task("no browser: call reset first".into())),
    }
}
