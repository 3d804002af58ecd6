//! Begin-frame control: the headless shell draws a frame only when guirl asks for one.
//!
//! With free-running frames (`--disable-frame-rate-limit`) Chromium keeps drawing back to
//! back for ~30 ms after anything changes, and with several browsers on two cores those idle
//! frames take most of the CPU (measured: a screenshot costs 5.6 ms CPU back to back but
//! 25 ms with 40 ms idle after it). Under begin-frame control the page draws only on
//! `HeadlessExperimental.beginFrame`: the screenshot is such a frame, and while a WebDriver
//! command runs (input events are acknowledged only after a frame) guirl issues frames
//! every few milliseconds. Timers and page scripts run as usual; what waits for a frame
//! (`requestAnimationFrame`, CSS animations) advances when guirl draws. Where page time is
//! virtual ([`super::page_clock`]), each frame's time is the page's clock.
//!
//! It needs the headless shell (the flag does not exist in `chromium --headless`), a
//! browser-level DevTools channel to open the controlled page, and a local chromedriver.

use super::devtools::{CdpError, DevTools};
use super::page_clock::PageClock;
use serde_json::{json, Value};
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// The Chromium flags that put the headless shell under begin-frame control, with the
/// display compositor in the browser process (`--in-process-gpu`; there is no GPU behind
/// `--disable-gpu`): each frame then crosses one process fewer (measured: 4-env steps/s
/// +2-12% over 7 paired runs). Checker imaging (large images decoded off the frame, drawn
/// in a later one) is off, as in Chromium's own headless deterministic mode: with every
/// stage run before draw, a frame that shows a freshly decoded large image (the `guirl
/// view` page) could stay pending for good on a loaded machine, and every later frame was
/// refused ("Another frame is pending"). The new-content timeout is wall-clock based and
/// belongs to free-running frames. Paint holding (the old page kept on screen after a
/// navigation until the new one paints) is off: under frame control a screenshot could
/// show the page a followed link left while the new page's elements were already read.
pub const FLAGS: &[&str] = &[
    "--enable-begin-frame-control",
    "--run-all-compositor-stages-before-draw",
    "--in-process-gpu",
    "--disable-checker-imaging",
    "--disable-new-content-rendering-timeout",
    "--disable-features=PaintHolding",
];

/// Time between frames while a WebDriver command waits: shorter answers input sooner,
/// longer spends less CPU on frames nobody needed (each costs ~0.7 ms CPU). Measured on
/// 2 cores (click-test, steps/s with 1 / 4 envs): 1 ms 69 / 111, 2 ms 84 / 118, 4 ms 71 / 120.
const GAP: Duration = Duration::from_millis(2);

/// The browser's refusal of a frame while the previous one is still being drawn.
const FRAME_PENDING: &str = "Another frame is pending";

/// Wait before asking again for a refused frame.
const RETRY: Duration = Duration::from_millis(3);
/// Failed frames in a row after which a pump gives up (the browser is gone).
const PUMP_FAILURES: u32 = 20;

/// Whether `chromium` is the headless shell (the only build with begin-frame control).
pub fn supported_by(chromium: &Path) -> bool {
    chromium.file_name().is_some_and(|n| n == "chromium-headless-shell")
}

/// What a frame does beyond running the page's frame work (layout, `requestAnimationFrame`,
/// pending input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// Nothing: nobody looks at it (cheapest).
    Nothing,
    /// Commit and draw, so compositor-side changes (wheel scrolls) reach the page.
    Display,
    /// Draw and return a PNG of the viewport (`screenshotData`, base64).
    Screenshot,
}

/// Frames for one page under begin-frame control. One frame at a time: the browser
/// refuses a second while one is pending.
#[derive(Debug, Default)]
pub struct FrameControl {
    busy: tokio::sync::Mutex<()>,
    /// The page's virtual clock, when page time is guirl's (frames then carry its time).
    clock: Option<PageClock>,
}

impl FrameControl {
    /// Frame control for a page whose time is `clock`'s (`None`: the wall clock).
    pub fn new(clock: Option<PageClock>) -> FrameControl {
        FrameControl { busy: Default::default(), clock }
    }

    /// The page's virtual clock, if its time is guirl's.
    pub fn clock(&self) -> Option<&PageClock> {
        self.clock.as_ref()
    }

    /// Issue one frame.
    pub async fn frame(&self, dt: &DevTools, draw: Draw, limit: Duration) -> Result<Value, CdpError> {
        let mut params = match draw {
            Draw::Nothing => json!({ "noDisplayUpdates": true }),
            Draw::Display => json!({}),
            Draw::Screenshot => json!({ "screenshot": { "format": "png", "optimizeForSpeed": true } }),
        };
        // The wait for our turn counts against the limit too: the frame before ours is
        // bounded by its own limit, but nothing here may wait unbounded.
        let deadline = tokio::time::Instant::now() + limit;
        let _one =
            tokio::time::timeout_at(deadline, self.busy.lock()).await.map_err(|_| CdpError::Timeout)?;
        let _turn = match &self.clock {
            Some(c) => {
                let turn =
                    tokio::time::timeout_at(deadline, c.gate()).await.map_err(|_| CdpError::Timeout)?;
                params["frameTimeTicks"] = json!(c.next_frame_time());
                Some(turn)
            }
            None => None,
        };
        // The compositor can still be finishing the previous frame (an image decoding, a
        // loaded machine: seen under CPU contention), and then refuses a new one with
        // "Another frame is pending". That frame ends by itself: ask again shortly, within
        // the limit, rather than fail the step (the refusal stopped the pump, and the
        // input command waited out its whole timeout for a frame).
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match dt.call("HeadlessExperimental.beginFrame", params.clone(), left).await {
                Err(CdpError::Protocol(m)) if m.contains(FRAME_PENDING) => {
                    if tokio::time::Instant::now() + RETRY > deadline {
                        return Err(CdpError::Protocol(m));
                    }
                    tokio::time::sleep(RETRY).await;
                }
                answer => return answer,
            }
        }
    }

    /// Run `work` (a WebDriver command) while issuing a frame every few milliseconds, so
    /// input events and `requestAnimationFrame` callbacks it waits for go through. A frame
    /// in flight when `work` ends is finished first (a half-issued frame would block the next).
    pub async fn pumped<T>(
        &self,
        dt: &DevTools,
        draw: Draw,
        limit: Duration,
        work: impl Future<Output = T>,
    ) -> T {
        let done = tokio::sync::Notify::new();
        let work = async {
            let out = work.await;
            done.notify_one();
            out
        };
        let pump = async {
            let mut failed = 0;
            loop {
                tokio::select! {
                    _ = done.notified() => break,
                    _ = tokio::time::sleep(GAP) => {}
                }
                match self.frame(dt, draw, limit).await {
                    Ok(_) => failed = 0,
                    // One refused frame must not stop the pump: `work` would then wait out
                    // its whole limit for a frame. A dead browser fails `work` too, which
                    // reports it; the pump stops after a run of failures.
                    Err(e) => {
                        tracing::debug!("frame during a WebDriver command failed: {e}");
                        failed += 1;
                        if failed >= PUMP_FAILURES {
                            break;
                        }
                        tokio::time::sleep(RETRY).await;
                    }
                }
            }
        };
        tokio::join!(work, pump).0
    }
}

/// Open a blank page under begin-frame control; its DevTools target id (which is also
/// its WebDriver window handle).
pub async fn open_page(dt: &DevTools, limit: Duration) -> Result<String, String> {
    let created = dt
        .browser_call(
            "Target.createTarget",
            json!({ "url": "about:blank", "enableBeginFrameControl": true }),
            limit,
        )
        .await
        .map_err(|e| format!("opening a page under frame control: {e}"))?;
    Ok(created["targetId"].as_str().unwrap_or_default().to_string())
}
