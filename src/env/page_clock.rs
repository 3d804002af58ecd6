//! Page time under guirl's control (DevTools virtual time): the page's clock moves only
//! when guirl lets it, by fixed amounts, never while the policy thinks.
//!
//! With the wall clock, what a page shows at the screenshot (a countdown, a counter on a
//! `setInterval`, `Date.now()`) depends on how long the policy took to answer. Under
//! virtual time the page's timers, `Date.now()` and `performance.now()` read a clock that
//! is paused except while guirl grants it a budget: after each action and at reset
//! ([`PageClock::advance`]), for a `wait(ms)` action, and through a navigation until the
//! new page has loaded. While a budget runs Chromium skips idle time (a 100 ms budget on a
//! page with a 50 ms interval takes ~1-2 ms of wall time) and stops the clock while a
//! network fetch is pending (`pauseIfNetworkFetchesPending`), so a slow server does not
//! eat into the page's time either (except in the budget after a navigation that
//! committed nothing, where Chromium may count a fetch that never ends). Measured with the
//! headless shell 156: page loads, input and DevTools scripts all work while the clock is
//! paused, but a page does not parse or run its scripts until time is granted, so every
//! navigation is followed by one.
//!
//! Frames (see [`super::frames`]) carry the virtual time as their frame time, so CSS
//! animations and `requestAnimationFrame` timestamps follow the same clock. Chromium hangs
//! on a frame whose time is not later than the previous one's (seen: the frame never
//! completes, and every later one is refused as "Another frame is pending"), so frames
//! drawn while the clock is paused (input needs them) step forward by 10 µs each.

use super::devtools::{CdpError, DevTools, Navigations};
use serde_json::json;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// What `Date.now()` reads when a page's clock starts: 2024-01-01 00:00:00 UTC, the same in
/// every browser, so a page that shows the date shows the same one in every run.
pub const EPOCH_S: f64 = 1_704_067_200.0;

/// Frame-time step between frames drawn while the clock is paused (ms): far below any
/// budget, so the screenshot after a budget is drawn at exactly the budget's end. A
/// microsecond is too little: Chromium truncates the time to whole microseconds, two
/// frames could get the same one, and the second hung (measured).
const FRAME_EPSILON_MS: f64 = 0.01;

/// Each budget runs this much past its end (ms). A timer due at the budget's last instant
/// (a 50 ms interval started at a budget's start) was otherwise left queued when the clock
/// paused, and ran at some point after: a frame drawn meanwhile showed the page without
/// it while a read after it saw it (seen under load; once in three runs of
/// tests/integration/page_clock.rs). Past the end, every timer due at it runs within the budget. The
/// page's clock thus gains 10 µs a step (1 ms of `Date.now()` in 100 steps), the same in
/// every run.
const OVERRUN_MS: f64 = 0.01;

#[derive(Debug)]
struct State {
    /// Virtual time granted so far, ms.
    elapsed_ms: f64,
    /// Frame time of the last frame drawn, in the renderer's time ticks (ms).
    last_frame_ms: f64,
}

/// The virtual clock of one page.
#[derive(Debug)]
pub struct PageClock {
    /// Virtual time granted after each action and at reset.
    step: Duration,
    /// The renderer's time ticks (ms) at which virtual time started.
    base_ms: f64,
    state: Mutex<State>,
    /// Held while a budget runs and while a frame is drawn ([`PageClock::gate`]).
    gate: tokio::sync::Mutex<()>,
}

impl PageClock {
    /// Put `dt`'s page under virtual time, paused at [`EPOCH_S`]; `step` is the budget of
    /// [`PageClock::advance_step`]. Call before the page loads anything.
    pub async fn start(dt: &DevTools, step: Duration, limit: Duration) -> Result<PageClock, String> {
        let r = dt
            .call(
                "Emulation.setVirtualTimePolicy",
                json!({ "policy": "pause", "initialVirtualTime": EPOCH_S }),
                limit,
            )
            .await
            .map_err(|e| format!("Emulation.setVirtualTimePolicy: {e}"))?;
        let base_ms = r["virtualTimeTicksBase"]
            .as_f64()
            .ok_or_else(|| format!("Emulation.setVirtualTimePolicy gave no virtualTimeTicksBase ({r})"))?;
        let state = Mutex::new(State { elapsed_ms: 0.0, last_frame_ms: 0.0 });
        Ok(PageClock { step, base_ms, state, gate: Default::default() })
    }

    /// The budget granted after each action and at reset.
    pub fn step(&self) -> Duration {
        self.step
    }

    /// Virtual time granted so far.
    pub fn elapsed_ms(&self) -> f64 {
        self.state.lock().expect("clock").elapsed_ms
    }

    /// Hold this while a frame is drawn: budgets and frames take turns. A frame drawn while
    /// a budget runs would carry the budget's start as its time, and whether one does
    /// depends on the wall clock (frames are pumped every few ms while a command runs): a
    /// CSS animation the page starts in the budget took that frame's time as its start,
    /// and its later frames differed between runs (seen under load).
    pub async fn gate(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.gate.lock().await
    }

    /// The frame time for the next frame: the page's current virtual time, or a microsecond
    /// after the last frame if that is not earlier (the clock has not moved since).
    pub fn next_frame_time(&self) -> f64 {
        let mut s = self.state.lock().expect("clock");
        let now = self.base_ms + s.elapsed_ms;
        let t = now.max(s.last_frame_ms + FRAME_EPSILON_MS);
        s.last_frame_ms = t;
        t
    }

    /// Let `ms` of page time pass (timers due in it fire, `Date.now()` moves on), then
    /// pause again. Waits at most `limit` of wall time (a page busy in a script, or a
    /// network fetch that never ends, keeps the budget from running out).
    pub async fn advance(&self, dt: &DevTools, ms: u64, limit: Duration) -> Result<(), CdpError> {
        self.advance_under(dt, ms, Policy::PauseForFetches, limit).await
    }

    /// [`PageClock::advance`] under `policy`.
    async fn advance_under(
        &self,
        dt: &DevTools,
        ms: u64,
        policy: Policy,
        limit: Duration,
    ) -> Result<(), CdpError> {
        if ms == 0 {
            // Chromium announces no expiry for an empty budget.
            return Ok(());
        }
        let _turn = tokio::time::timeout(limit, self.gate.lock()).await.map_err(|_| CdpError::Timeout)?;
        let mut expiries = dt.budget_expiries();
        let granted = ms as f64 + OVERRUN_MS;
        set_budget(dt, granted, policy, limit).await?;
        match tokio::time::timeout(limit, expiries.changed()).await {
            Ok(Ok(())) => {
                self.add(granted);
                Ok(())
            }
            Ok(Err(_)) => Err(CdpError::Closed),
            Err(_) => Err(CdpError::Timeout),
        }
    }

    /// [`PageClock::advance`] by the step budget.
    pub async fn advance_step(&self, dt: &DevTools, limit: Duration) -> Result<(), CdpError> {
        self.advance(dt, self.step_ms(), limit).await
    }

    fn add(&self, ms: f64) {
        self.state.lock().expect("clock").elapsed_ms += ms;
    }

    /// Run `work` (a WebDriver command); if a new document replaces the page while it
    /// runs (the command navigates, or its input starts a navigation), grant it step
    /// budgets until it has loaded: it cannot load while the clock is paused, and
    /// chromedriver waits for the load before it answers. Time is granted from the commit
    /// on, not while the request is in flight: Chromium's pause for pending fetches does
    /// not cover the navigation request itself (seen: a budget with `waitForNavigation`
    /// ran out before the new document arrived), and the old page would get time for as
    /// long as the server took.
    pub async fn through<T>(&self, dt: &DevTools, limit: Duration, work: impl Future<Output = T>) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        let mut commits = dt.commits();
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                out = &mut work => return out,
                changed = commits.changed() => {
                    // A closed channel or a failed grant fails `work` too; it reports why.
                    if changed.is_err() {
                        return work.await;
                    }
                    // `about:blank` has nothing to load; a fresh page's own first commit
                    // of it can arrive late, during the first navigation (seen under load:
                    // the task page then started 100 ms later on the page clock).
                    if *commits.borrow_and_update() {
                        continue;
                    }
                    if let Err(e) = self.load(dt, deadline).await {
                        tracing::debug!("granting time to a page being loaded failed: {e}");
                        return work.await;
                    }
                }
            }
        }
    }

    /// After an action, grant the step budget; if the action started a navigation that
    /// has not replaced the page yet (the page being left has seen `beforeunload`, see
    /// `observe.js`, or the page requested one since `mark`, see
    /// [`DevTools::wait_navigation_after`]), wait for the new document first, clock
    /// paused, for the reason given at [`PageClock::through`].
    /// Either wait is bounded by `limit`; one that runs out is [`CdpError::Stalled`].
    /// After a navigation that committed nothing, the budget does not stop for pending
    /// fetches (see `Policy::Advance`).
    pub async fn advance_after_input(
        &self,
        dt: &DevTools,
        mark: Option<Navigations>,
        limit: Duration,
    ) -> Result<(), CdpError> {
        let mark = mark.unwrap_or_else(|| dt.navigations());
        // The script's answer comes after the page's events of the action (one channel).
        let committed_nothing =
            if dt.run_script(LEAVING, &[], false, limit).await == Ok(serde_json::Value::Bool(true)) {
                let over = dt.wait_document_or_stop(mark, limit).await.map_err(|e| match e {
                    // Named as the other path names it: which wait ran out is timing, not news.
                    CdpError::Timeout => CdpError::Stalled(format!(
                        "the end of the navigation to {} (a new document or the end of loading)",
                        dt.requested_url()
                    )),
                    e => e,
                })?;
                let nothing = over.ended == mark.ended;
                if nothing {
                    // A navigation that committed nothing (a download, a 204): the old page
                    // stays, and is not being left any more.
                    dt.run_script(NOT_LEAVING, &[], false, limit).await?;
                }
                nothing
            } else {
                let waited = dt.wait_navigation_after(mark, limit).await.map_err(|e| match e {
                    CdpError::Timeout => {
                        CdpError::Stalled(format!("the end of the navigation to {}", dt.requested_url()))
                    }
                    e => e,
                })?;
                waited && dt.navigations().ended == mark.ended
            };
        let policy = if committed_nothing { Policy::Advance } else { Policy::PauseForFetches };
        self.advance_under(dt, self.step_ms(), policy, limit).await
    }

    fn step_ms(&self) -> u64 {
        self.step.as_millis() as u64
    }

    /// Grant step budgets until the page's document has loaded.
    async fn load(&self, dt: &DevTools, deadline: tokio::time::Instant) -> Result<(), CdpError> {
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.advance_step(dt, left).await?;
            if loaded(dt, left).await {
                return Ok(());
            }
            tracing::debug!("the page is still loading after a {:?} budget; granting another", self.step);
        }
    }
}

/// True in a document that has seen `beforeunload` (the flag is `observe.js`'s).
const LEAVING: &str = "return window.__guirlLeaving === true;";
/// Clears that flag in a document that stays.
pub(crate) const NOT_LEAVING: &str = "window.__guirlLeaving = false; return null;";

/// How a budget treats the page's network fetches.
#[derive(Debug, Clone, Copy)]
enum Policy {
    /// The clock stops while a fetch is pending (every budget but the one below).
    PauseForFetches,
    /// The clock runs regardless: the budget after a navigation that committed nothing (a
    /// 204, a download). Chromium sometimes still counts such a navigation as a pending
    /// fetch, and a budget that waits for fetches then never runs out (measured with the
    /// headless shell: 22 of 40 runs of a download link, 2 of 40 of a 204).
    Advance,
}

/// Grant `ms` of page time from now.
async fn set_budget(dt: &DevTools, ms: f64, policy: Policy, limit: Duration) -> Result<(), CdpError> {
    let policy = match policy {
        Policy::PauseForFetches => "pauseIfNetworkFetchesPending",
        Policy::Advance => "advance",
    };
    let params = json!({ "policy": policy, "budget": ms });
    dt.call("Emulation.setVirtualTimePolicy", params, limit).await.map(|_| ())
}

/// Whether the page's document has loaded (false while it is between documents).
async fn loaded(dt: &DevTools, limit: Duration) -> bool {
    let r = dt.run_script("return document.readyState;", &[], false, limit.min(Duration::from_secs(2))).await;
    matches!(r, Ok(v) if v == "complete")
}
