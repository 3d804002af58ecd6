//! Observing the page after a reset or an action: read its state until it has settled
//! (loaded, not leaving, no script animation, no navigation the action requested still in
//! flight), then take the screenshot.

use super::*;
use crate::env::devtools::Navigations;

impl GuiEnv {
    /// Read the page (waiting for it to settle), then screenshot it. `nav_mark`: the page's
    /// navigations before the step's action, to wait for one it requested.
    pub(super) async fn observe(
        &self,
        ep: &Episode,
        nav_mark: Option<Navigations>,
    ) -> Result<(ScreenState, TaskStatus, f64, f64), EnvError> {
        let browser = self.browser.as_ref().expect("browser started");
        let vp = self.task.viewport();
        let t0 = Instant::now();
        let deadline = t0 + self.cfg.browser.page_load_timeout;
        let args = vec![json!([vp.crop_x, vp.crop_y, vp.width, vp.height])];
        let (mut retried, mut via_webdriver) = (false, false);
        // Under virtual time the page changes only while it is granted time: the waits
        // below grant it (a step budget at a time) instead of sleeping.
        let step = browser.page_time_step();
        let clocked = step.is_some();
        let mut extra = Duration::ZERO;
        let shoot = || browser.screenshot(vp.crop_x, vp.crop_y, vp.width, vp.height);
        // Over DevTools the first read goes out together with the screenshot: the capture
        // waits for the next frame anyway, and the read usually finds the page settled,
        // so that frame is the one we want (otherwise it is dropped and taken again).
        let mut early: Option<(Result<RgbImage, EnvError>, f64)> = None;
        let mut first = browser.has_devtools();
        // New documents (and moves within one) since a mark.
        let documents = |m: Option<Navigations>| m.map(|n| n.ended);
        let state: PageState = loop {
            let read = if via_webdriver {
                browser.execute_webdriver(&ep.script, args.clone()).await
            } else if std::mem::take(&mut first) {
                let read = async {
                    let r = browser.execute(&ep.script, args.clone()).await;
                    (r, ms(t0))
                };
                let ((read, read_ms), shot) = tokio::join!(read, shoot());
                early = Some((shot, read_ms));
                read
            } else {
                browser.execute(&ep.script, args.clone()).await
            };
            match read {
                Ok(v) => {
                    let s: PageState = serde_json::from_value(v)
                        .map_err(|e| EnvError::Task(format!("unexpected page state: {e}")))?;
                    // The read's answer comes after the page's events of the action (one
                    // channel): a link it followed is known by now, if not yet left. Each
                    // wait is bounded (one that runs out fails the step, naming the
                    // navigation); a page still navigating past the deadline (one that
                    // redirects itself again and again) fails the step too.
                    if let Some(mark) = nav_mark.filter(|_| !via_webdriver && !clocked) {
                        // A followed link whose navigation has not started yet (it starts
                        // in a task queued after the click, which this read can beat).
                        if browser.wait_navigation_after(mark).await?
                            || (s.following && browser.wait_navigation_start(mark).await?)
                        {
                            if Instant::now() > deadline {
                                return Err(EnvError::Browser(format!(
                                    "the page was still navigating {:.1}s after the action (now at {})",
                                    t0.elapsed().as_secs_f64(),
                                    s.url
                                )));
                            }
                            if documents(browser.navigation_mark()) == documents(Some(mark)) {
                                // It committed nothing (a 204, a download): the page stays,
                                // and is not being left any more.
                                browser.execute(crate::env::page_clock::NOT_LEAVING, vec![]).await?;
                            }
                            early = None;
                            continue;
                        }
                    }
                    // Being left with no navigation seen over DevTools: WebDriver's read
                    // waits for it.
                    if s.leaving && !via_webdriver && browser.has_devtools() && !clocked {
                        via_webdriver = true;
                        early = None;
                        continue;
                    }
                    // Wait out short script animations too, so the frame shows where things
                    // end up (and replays see the same frame); never longer than a second.
                    let animating = s.animating
                        && if clocked {
                            extra < Duration::from_secs(1)
                        } else {
                            t0.elapsed() < Duration::from_secs(1)
                        };
                    let ready = s.ready && !(clocked && s.leaving);
                    if (ready && !animating) || Instant::now() > deadline {
                        break s;
                    }
                    early = None;
                }
                // Our script parses, so a syntax error is the task's check spliced into it
                // (a spec's success.js): no retry or fresh browser mends that.
                Err(e) if e.to_string().contains("SyntaxError") => {
                    return Err(EnvError::Task(format!(
                        "{}: the task's success check does not parse as JavaScript ({e}): fix success.js \
                         (a variable written '{{name}}' whose value holds a quote breaks it: write vars.name)",
                        self.task.id()
                    )));
                }
                // A navigation in flight can swallow one script call; a dead browser fails twice.
                Err(e) if !retried && !e.to_string().contains("did not answer") => {
                    retried = true;
                    early = None;
                    tracing::debug!("page state read failed once ({e}); retrying");
                }
                Err(e) => return Err(e),
            }
            if let Some(step) = step {
                browser.pass_time(None).await?;
                extra += step;
            } else {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        // The first read can find a document that replaced the page after the screenshot
        // sent with it was drawn (a followed link over DevTools input): take it again.
        if nav_mark.is_some() && documents(browser.navigation_mark()) != documents(nav_mark) {
            early = None;
        }
        let (screenshot, settle_ms, screenshot_ms) = match early {
            Some((shot, read_ms)) => (shot?, read_ms, ms(t0) - read_ms),
            None => {
                let settle_ms = ms(t0);
                let t1 = Instant::now();
                (shoot().await?, settle_ms, ms(t1))
            }
        };
        let mut status = state.status.unwrap_or_default();
        status.check_url(ep.url_pattern.as_ref(), &state.url);
        if let Some(err) = status.error.take() {
            warn_check_failed(self.task.id(), &err);
        }
        let obs = ScreenState {
            task_id: self.task.id().to_string(),
            instruction: ep.instruction.clone(),
            url: state.url,
            step: ep.step,
            frame: self.frame(state.scroll),
            elements: state.elements,
            screenshot: std::sync::Arc::new(screenshot),
            history: ep.history.clone(),
            previous_screenshot: (ep.step > 0).then(|| ep.last.screenshot.clone()),
        };
        Ok((obs, status, settle_ms, screenshot_ms))
    }
}

/// Say that a task's success check threw (a typo in a spec's `success.js`, a bad selector,
/// a value that is no bool or number): once per task in this process, since it throws again
/// at every read (a message quoting the offending value changes with it), and every episode
/// then counts as not passed. Later throws are debug lines.
fn warn_check_failed(task: &str, err: &str) {
    static SAID: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::LazyLock::new(Default::default);
    let first = SAID.lock().unwrap_or_else(|e| e.into_inner()).insert(task.to_string());
    if first {
        tracing::warn!(
            "{task}: the task's success check threw ({err}); it counts as not passed at every read that \
             throws (said once; RUST_LOG=guirl=debug shows every throw)"
        );
    } else {
        tracing::debug!(task, "task status expression failed: {err}");
    }
}
