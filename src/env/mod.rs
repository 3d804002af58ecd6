//! The browser environment: a real Chromium behind WebDriver, wrapped in the gymnasium
//! contract (`GuiEnv::reset` / `step` / `render` / `close`).

pub mod action;
pub mod browser;
pub mod browser_config;
pub mod capture;
pub mod devtools;
pub mod env_config;
pub mod frames;
pub mod gui_env;
pub mod input;
pub mod local_guard;
pub mod observation;
pub mod outcome;
pub mod page_clock;
pub mod page_proxy;
pub mod profiles;
pub mod sandbox;
pub mod url_policy;

pub use action::{GuiAction, KeyCombo, Modifier, ParseActionError};
pub use browser::{Browser, BrowserConfig, BrowserVersions, Pointer};
pub use gui_env::{
    EnvConfig, EpisodeRules, EpisodeStatus, GuiEnv, ResetInfo, StepInfo, StepOutcome, StepTimings,
};
pub use input::InputPath;
pub use observation::{decode_png, encode_png, BBox, Element, Frame, ScreenState};

/// The environment's error type; defined beside the task interface it crosses
/// ([`crate::tasks::page`]), so tasks need nothing from this module.
pub use crate::tasks::page::EnvError;

impl EnvError {
    pub(crate) fn from_cmd(doing: &str, e: fantoccini::error::CmdError) -> EnvError {
        EnvError::Browser(format!("{doing}: {e}"))
    }
}
