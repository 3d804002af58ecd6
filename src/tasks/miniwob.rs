//! MiniWoB++ tasks, driven through their own in-page protocol (core.js): `Math.seedrandom`
//! then `core.startEpisodeReal()` starts a seeded episode in the loaded page, and the
//! `WOB_*` globals carry reward and done. Whether an ended episode succeeded is the task's
//! [`SuccessRule`] applied to the raw reward (`super::success`), not `reward > 0`.

use super::server::{base_url, miniwob_dir};
use super::success::{self, SuccessRule};
use super::{EnvError, Page};
use super::{EpisodeOptions, EpisodeStart, Task, Viewport};
use async_trait::async_trait;
use serde_json::json;
use std::time::{Duration, Instant};

/// The MiniWoB++ task area: `#wrap`, 160×210 at the page's top-left.
pub const TASK_AREA: (u32, u32) = (160, 210);

/// The in-page timer when the wall clock is off: setTimeout's largest delay (~24 days).
const NO_TIMER_MS: u64 = 2_147_483_647;

/// Task names available in the installed MiniWoB++ html folder (empty if not installed).
pub fn task_names() -> Vec<String> {
    let dir = miniwob_dir().join("miniwob");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name().to_str().and_then(|n| n.strip_suffix(".html")).map(String::from)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Per-task step limits: enough for a careful agent, small enough to end hopeless episodes.
fn default_max_steps(name: &str) -> u32 {
    match name {
        "click-test" | "click-test-2" | "click-button" | "click-link" | "click-dialog" | "focus-text"
        | "click-tab" | "click-color" | "click-shape" | "click-widget" | "identify-shape" | "click-pie"
        | "click-dialog-2" | "focus-text-2" => 5,
        "click-checkboxes-large" => 16,
        n if n.starts_with("enter-") || n.starts_with("click-checkboxes") => 12,
        "login-user" | "login-user-popup" | "choose-list" | "click-option" | "use-autocomplete" => 10,
        n if n.starts_with("book-flight")
            || n.starts_with("email-inbox")
            || n.starts_with("social-media") =>
        {
            30
        }
        _ => 15,
    }
}

/// One MiniWoB++ task page.
#[derive(Debug, Clone)]
pub struct MiniwobTask {
    id: String,
    name: String,
    max_steps: u32,
    rule: SuccessRule,
}

impl MiniwobTask {
    /// The task `name` (e.g. `click-test`); `Ok(None)` if no such page, an error if
    /// MiniWoB++'s pages are not installed at all.
    pub fn new(name: &str) -> Result<Option<MiniwobTask>, EnvError> {
        let dir = miniwob_dir();
        if !dir.join("core").join("core.js").is_file() {
            return Err(EnvError::Setup(format!(
                "MiniWoB++ pages not found in {}: run `scripts/setup.sh` (it extracts the \
                 `miniwob` PyPI package's html folder there) or set GUIRL_MINIWOB_DIR to a \
                 folder holding core/ and miniwob/; `guirl doctor` checks the whole set-up",
                dir.display()
            )));
        }
        if !dir.join("miniwob").join(format!("{name}.html")).is_file() {
            return Ok(None);
        }
        Ok(Some(MiniwobTask {
            id: format!("miniwob/{name}"),
            name: name.into(),
            max_steps: default_max_steps(name),
            rule: success::miniwob_rule(name),
        }))
    }

    /// When an episode of this task counts as a success (from the audit's table).
    pub fn success_rule(&self) -> SuccessRule {
        self.rule
    }

    fn path(&self) -> String {
        format!("/miniwob/miniwob/{}.html", self.name)
    }
}

#[async_trait]
impl Task for MiniwobTask {
    fn id(&self) -> &str {
        &self.id
    }
    fn viewport(&self) -> Viewport {
        Viewport {
            window_width: 320,
            window_height: 240,
            crop_x: 0,
            crop_y: 0,
            width: TASK_AREA.0,
            height: TASK_AREA.1,
        }
    }
    fn max_steps(&self) -> u32 {
        self.max_steps
    }

    async fn reset(
        &self,
        browser: &dyn Page,
        seed: u64,
        opts: &EpisodeOptions,
    ) -> Result<EpisodeStart, EnvError> {
        // Reuse the loaded page when it is this task's (MiniWoB++ itself never reloads);
        // checking and starting the episode is one round trip. MiniWoB++ puts its START
        // cover up for the next episode in the same call that ends one, so the episode's
        // last screen (the viewer's final frame, what a judge or a reward model reads)
        // showed the cover; kept hidden, the last screen is the page the episode left.
        const START: &str = "if (!(typeof core !== 'undefined' && typeof genProblem === 'function' \
             && location.pathname.endsWith(arguments[2]))) return null; \
             if (!core.guirlNoCover) { var cover = core.startEpisode; core.guirlNoCover = true; \
             core.startEpisode = function () { cover(); core.cover_div.style.display = 'none'; }; } \
             core.EPISODE_MAX_TIME = arguments[1]; Math.seedrandom(arguments[0]); \
             core.startEpisodeReal(); return [WOB_TASK_READY === true, core.getUtterance()];";
        let timer = opts.wall_clock_ms.unwrap_or(NO_TIMER_MS).min(NO_TIMER_MS);
        let args = vec![json!(seed), json!(timer), json!(self.path())];
        let mut started = browser.execute(START, args.clone()).await?;
        if started.is_null() {
            let url = format!("{}{}", base_url()?, self.path());
            browser.goto(&url).await?;
            started = browser.execute(START, args).await?;
            if started.is_null() {
                return Err(EnvError::PageLoad {
                    url,
                    reason: "it is not a MiniWoB++ task page (no core.js / genProblem)".into(),
                });
            }
        }
        let mut utterance = started[1].clone();
        // Some tasks build their page asynchronously and say so with WOB_TASK_READY.
        if started[0] != json!(true) {
            let deadline = Instant::now() + Duration::from_secs(5);
            while browser.execute("return WOB_TASK_READY;", vec![]).await? != json!(true) {
                if Instant::now() > deadline {
                    return Err(EnvError::Task(format!("{} did not become ready within 5 s", self.id)));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            utterance = browser.execute("return core.getUtterance();", vec![]).await?;
        }
        Ok(EpisodeStart {
            instruction: utterance.as_str().unwrap_or_default().to_string(),
            status_js: status_js(self.rule),
            url_pattern: None,
        })
    }
}

/// The status expression: the page's reward as it pays it, and success by `rule` on the
/// raw reward (the threshold written as Rust prints it, which JavaScript reads back exactly).
fn status_js(rule: SuccessRule) -> String {
    format!(
        "{{done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, \
         success: WOB_RAW_REWARD_GLOBAL >= {:?}, \
         reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON)}}",
        rule.min_raw_reward()
    )
}
