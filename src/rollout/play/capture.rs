//! `guirl play --capture`: what a person does in the visible browser window becomes the
//! episode's steps (see [`crate::env::capture`] for how input becomes actions).
//!
//! Each captured action is recorded with [`crate::env::GuiEnv::record_step`]: not executed
//! again, but observed and scored by the task exactly as a stepped action, so the
//! trajectory set has the format of `guirl run --record` and `guirl replay` re-executes it.
//!
//! The frame kept *before* a captured action is the env's observation after the previous
//! action (or the reset): the page settled, read and screenshotted once guirl noticed
//! that action, which is what a policy stepping the env would have seen, and what a
//! replay compares against. guirl notices an action within one poll (100 ms) after it
//! completes; a click completes 350 ms after its release (a second press would make it a
//! double click), a typing run 300 ms after its last key. When the person begins the
//! next action before that observation is taken, the frame may show its start: guirl
//! detects this and says so in a `note` naming the step.

use super::{CaptureState, Play};
use crate::env::capture;
use serde_json::json;
use std::io::Write;

/// Polls in a row that may fail (a navigation in flight) before guirl says so.
const QUIET_FAILURES: u32 = 20;

impl Play {
    /// After a reset: install the capture in the page, drop whatever it held from before,
    /// and say where the page is on the screen.
    pub(super) async fn start_capture(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        let d = capture::poll(&self.env).await?;
        self.capture = CaptureState::default();
        // The screenshot's origin within the viewport, in the page's screen coordinates.
        let f = self.current.as_ref().map(|c| c.obs.frame).unwrap_or_default();
        let x = (d.screen[0] + f64::from(f.origin_x)).round() as i64;
        let y = (d.screen[1] + f64::from(f.origin_y)).round() as i64;
        self.emit(
            out,
            json!({"event": "capture", "screen": [x, y]}),
            format!(
                "capture: recording what you do in the browser window (the screenshot's top-left \
                 is at screen pixel ({x}, {y})); `:done` ends the episode"
            ),
        )
    }

    /// Take what the page captured since the last poll and record each action as a step
    /// (call every 100 ms or so while capturing). Input after the episode's end, and
    /// input outside the task's screenshot, is not recorded (a note says so).
    pub async fn poll_capture(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        if self.current.is_none() {
            return Ok(());
        }
        let mut drained = match capture::poll(&self.env).await {
            Ok(d) => d,
            Err(e) => return self.poll_failed(&e.to_string(), out),
        };
        self.capture.failures = 0;
        while !drained.actions.is_empty() {
            let n = drained.actions.len();
            for (i, captured) in std::mem::take(&mut drained.actions).into_iter().enumerate() {
                if let Some(why) = self.closed() {
                    if !std::mem::replace(&mut self.capture.said_over, true) {
                        self.note(out, &format!("not recorded: {why}"), None)?;
                    }
                    continue;
                }
                let frame = self.current.as_ref().expect("an episode").obs.frame;
                let action = match captured.to_action(&frame) {
                    Ok(a) => a,
                    Err(why) => {
                        self.note(out, &format!("not recorded: {why}"), None)?;
                        continue;
                    }
                };
                self.apply(action, true, out).await?;
                // Later input was already there when this step's observation was taken.
                let more = i + 1 < n || drained.pending;
                let seq = drained.seq;
                if self.closed().is_none() && (more || self.acted_since(seq).await) {
                    self.overlap(out)?;
                }
            }
            // Whatever completed while the batch was being recorded.
            drained = match capture::poll(&self.env).await {
                Ok(d) => d,
                Err(e) => return self.poll_failed(&e.to_string(), out),
            };
        }
        Ok(())
    }

    /// Whether the page saw input after the poll that reported `seq` events.
    async fn acted_since(&self, seq: u64) -> bool {
        // Peek without taking: a poll hands over actions, so only its count is read here.
        let v =
            crate::env::gui_env::eval(&self.env, "var c = window.__guirl_capture; return c ? c.seq : null;")
                .await;
        v.ok().and_then(|v| v.as_u64()).is_some_and(|now| now > seq)
    }

    /// Say that the frame after the last step may show the next action's start.
    fn overlap(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        let step = self.current.as_ref().map_or(0, |c| c.rec.trajectory.steps.len());
        let msg = format!(
            "more input began before guirl looked at the page after step {step}: the screenshot \
             before step {} may show its start (leave ~0.5 s between actions)",
            step + 1
        );
        self.note(out, &msg, Some(step))
    }

    fn note(&self, out: &mut dyn Write, msg: &str, step: Option<usize>) -> anyhow::Result<()> {
        self.emit(out, json!({"event": "note", "message": msg, "step": step}), format!("note: {msg}"))
    }

    fn poll_failed(&mut self, e: &str, out: &mut dyn Write) -> anyhow::Result<()> {
        self.capture.failures += 1;
        tracing::debug!("capture poll failed: {e}");
        if self.capture.failures.is_multiple_of(QUIET_FAILURES) {
            self.error(out, &format!("cannot read what the window captured: {e}"))?;
        }
        Ok(())
    }
}
