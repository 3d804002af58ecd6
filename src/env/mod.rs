//! The browser environment: a real Chromium behind WebDriver, wrapped in the gymnasium
//! contract (`GuiEnv::reset` / `step` / `render` / `close`).

pub mod action;
pub mod browser;
pub mod browser_config;
pub mod devtools;
pub mod frames;
pub mod gui_env;
pub mod observation;
pub mod profiles;
pub mod server;

pub use action::{GuiAction, KeyCombo, Modifier, ParseActionError};
pub use browser::{Browser, BrowserConfig};
pub use gui_env::{EnvConfig, EpisodeStatus, GuiEnv, ResetInfo, StepInfo, StepOutcome, StepTimings};
pub use observation::{decode_png, encode_png, BBox, Element, Frame, ScreenState};

/// What can go wrong in the environment. `Browser` errors end the episode as `env_error`
/// and make the env start a fresh browser at the next reset.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// Something the user must install or configure (chromedriver, chromium, task pages).
    #[error("{0}")]
    Setup(String),
    /// The browser or WebDriver endpoint failed, hung or died.
    #[error("browser error: {0}")]
    Browser(String),
    /// A page did not load.
    #[error("page {url} did not load: {reason}")]
    PageLoad {
        /// The URL that failed.
        url: String,
        /// Why.
        reason: String,
    },
    /// The task's page did not behave as its protocol says.
    #[error("task error: {0}")]
    Task(String),
}

impl EnvError {
    pub(crate) fn from_cmd(doing: &str, e: fantoccini::error::CmdError) -> EnvError {
        EnvError::Browser(format!("{doing}: {e}"))
    }

    /// Whether this error means the browser must be restarted.
    pub fn needs_restart(&self) -> bool {
        matches!(self, EnvError::Browser(_) | EnvError::PageLoad { .. })
    }
}
