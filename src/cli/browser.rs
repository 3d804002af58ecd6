//! The browser options every command that opens a browser takes.

use crate::env as guirl_env;
use std::path::PathBuf;

/// Where the browser comes from (shared by every command that opens one).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Browser")]
pub struct BrowserArgs {
    /// chromedriver binary to start (default: $GUIRL_CHROMEDRIVER, then /usr/bin/chromedriver, then
    /// PATH).
    #[arg(long, value_name = "PATH")]
    pub chromedriver: Option<PathBuf>,
    /// Attach to this WebDriver endpoint instead (a chromedriver elsewhere, a Selenium Grid).
    #[arg(long, value_name = "URL")]
    pub webdriver: Option<String>,
    /// Show the browser window instead of running headless.
    #[arg(long)]
    pub headful: bool,
    /// Limit on any single WebDriver command, in seconds (at least 1).
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = at_least_a_second)]
    pub command_timeout: f64,
    /// Send everything through WebDriver (no direct DevTools channel for page reads and
    /// screenshots; slower, for comparison and for endpoints that misbehave).
    #[arg(long)]
    pub no_devtools: bool,
    /// Let the headless shell draw freely instead of only when guirl asks for a frame
    /// (begin-frame control; slower with several envs, for comparison).
    #[arg(long)]
    pub free_frames: bool,
    /// How actions reach the page: `devtools` (DevTools input events, where guirl started
    /// the browser with its DevTools channel and frame control; the default, about 1.6x
    /// faster a step: see src/env/input.rs) or `webdriver` (WebDriver input actions
    /// through chromedriver; always with --webdriver, --free-frames and --no-devtools).
    /// Default: $GUIRL_INPUT, else devtools.
    #[arg(long, value_name = "CHANNEL", value_parser = ["devtools", "webdriver"])]
    pub input: Option<String>,
    /// Start Chromium with --no-sandbox. By default its sandbox is on wherever the machine
    /// allows; when guirl runs as root the browser then runs as an unprivileged user
    /// ($GUIRL_BROWSER_USER, else guirlbrowser, else nobody). For machines where the
    /// sandboxed start fails; GUIRL_SANDBOX=0 does the same.
    #[arg(long)]
    pub no_sandbox: bool,
}

/// `--command-timeout`: a browser cannot even start under a second.
fn at_least_a_second(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 1.0 && v.is_finite() => Ok(v),
        Ok(_) => Err("at least 1 (seconds); the default is 10".into()),
        Err(_) => Err(format!("{s:?} is not a number of seconds")),
    }
}

impl BrowserArgs {
    /// The library's browser config for these arguments.
    pub fn config(&self) -> guirl_env::BrowserConfig {
        guirl_env::BrowserConfig {
            chromedriver: self.chromedriver.clone(),
            webdriver_url: self.webdriver.clone(),
            headful: self.headful,
            command_timeout: std::time::Duration::from_secs_f64(self.command_timeout),
            ..Default::default()
        }
        .with_devtools(!self.no_devtools)
        .with_frame_control(!self.free_frames)
        .with_sandbox(!self.no_sandbox)
        .with_input(
            self.input.as_deref().and_then(|p| p.parse().ok()).unwrap_or_else(guirl_env::InputPath::from_env),
        )
    }
}
