//! The built-in suite: task pages in `environments/builtin/<name>/`, served by guirl.
//! Each page includes `/builtin/common.js`, which defines `window.guirlTask` with
//! `reset(seed) -> instruction` and `status() -> {done, reward, raw_reward, reason}`;
//! episode state lives in sessionStorage so it survives navigation between pages.

use super::builtin_specs::{BuiltinSpec, BUILTIN_TASKS};
use super::server::base_url;
use super::{EnvError, Page};
use super::{EpisodeOptions, EpisodeStart, Task, Viewport};
use async_trait::async_trait;
use serde_json::json;

/// One built-in task.
#[derive(Debug, Clone)]
pub struct BuiltinTask {
    id: String,
    spec: &'static BuiltinSpec,
}

impl BuiltinTask {
    /// The built-in task `name`, if there is one.
    pub fn new(name: &str) -> Option<BuiltinTask> {
        BUILTIN_TASKS
            .iter()
            .find(|s| s.name == name)
            .map(|spec| BuiltinTask { id: format!("builtin/{name}"), spec })
    }

    /// The task's table entry.
    pub fn spec(&self) -> &'static BuiltinSpec {
        self.spec
    }

    fn start_path(&self) -> String {
        format!("/builtin/{}/index.html", self.spec.name)
    }
}

impl std::fmt::Debug for BuiltinSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

#[async_trait]
impl Task for BuiltinTask {
    fn id(&self) -> &str {
        &self.id
    }
    fn viewport(&self) -> Viewport {
        Viewport::full(self.spec.width, self.spec.height)
    }
    fn max_steps(&self) -> u32 {
        self.spec.max_steps
    }

    async fn reset(
        &self,
        browser: &dyn Page,
        seed: u64,
        _opts: &EpisodeOptions,
    ) -> Result<EpisodeStart, EnvError> {
        let path = self.start_path();
        let on_start = browser
            .execute("return !!window.guirlTask && location.pathname === arguments[0];", vec![json!(path)])
            .await?;
        if on_start != json!(true) {
            let url = format!("{}{}", base_url()?, path);
            browser.goto(&url).await?;
            if browser.execute("return !!window.guirlTask;", vec![]).await? != json!(true) {
                return Err(EnvError::PageLoad {
                    url,
                    reason: "the page does not define window.guirlTask".into(),
                });
            }
        }
        let v = browser
            .execute("window.scrollTo(0, 0); return guirlTask.reset(arguments[0]);", vec![json!(seed)])
            .await?;
        let instruction = v.as_str().map(String::from).ok_or_else(|| {
            EnvError::Task(format!("{}: guirlTask.reset returned {v}, not an instruction", self.id))
        })?;
        Ok(EpisodeStart { instruction, status_js: STATUS_JS.into(), url_pattern: None })
    }
}

const STATUS_JS: &str = "(window.guirlTask ? guirlTask.status() : {done: false, reward: 0, raw_reward: 0, \
         reason: 'the page is not one of the task pages'})";
