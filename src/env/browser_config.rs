//! How guirl gets a browser: the Chromium flags, where chromedriver and Chromium are
//! found, and [`BrowserConfig`] (start chromedriver here, or attach to a WebDriver URL).

use super::frames;
use super::EnvError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Chromium flags every guirl browser starts with (headless runs add `--headless`;
/// one whose sandbox is off adds `--no-sandbox`, see [`super::sandbox`]).
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--force-device-scale-factor=1",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",
    "--mute-audio",
    // A key scroll (arrows, Page Down, Space) would otherwise animate over many frames, and
    // the step's screenshot would catch it part way, at a place that depends on timing.
    "--disable-smooth-scrolling",
];

/// Added where frames run freely (no begin-frame control): without these, headless
/// Chromium paces frames to a virtual 60 Hz display and every screenshot waits for the
/// next tick (measured: ~38 ms -> ~10 ms per capture).
pub const FREE_FRAME_FLAGS: &[&str] = &["--disable-frame-rate-limit", "--disable-gpu-vsync"];

/// Tells the page it has a mouse ([`Pointer::Mouse`]): a hover-capable, fine pointer, as
/// a person at a desktop has. Headless Chromium otherwise reports none (`(hover: none)`,
/// `(pointer: none)`), so it draws no hover state on native buttons and serves pages'
/// touch styles, where a window under X (`--headful`) reports the mouse.
pub const MOUSE_FLAG: &str =
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4";

/// The pointing device a page is told it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Pointer {
    /// A mouse ([`MOUSE_FLAG`]): hover styles drawn, `(hover: hover)` and `(pointer: fine)`
    /// match, headless as in a window. The default.
    #[default]
    Mouse,
    /// What Chromium reports by itself: none when headless, the mouse in a window. How
    /// trajectories before format version 3 were recorded, so their replays use it.
    Unset,
}

/// The apt-get line that installs what guirl needs to drive a browser.
pub const APT_HINT: &str = "sudo apt-get install -y chromium chromium-driver chromium-headless-shell";

/// Debian's headless shell (package `chromium-headless-shell`): the same Chromium without
/// the browser UI, used for headless runs when installed. Measured on 2 cores against
/// `chromium --headless` the same day: 5-20% more steps/s with 4 envs, 15-35% faster resets.
pub const HEADLESS_SHELL: &str = "/usr/lib/chromium/chromium-headless-shell";

/// How to get a browser: start chromedriver here, or attach to a WebDriver URL.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// chromedriver binary (default: `$GUIRL_CHROMEDRIVER`, then `/usr/bin/chromedriver`, then PATH).
    pub chromedriver: Option<PathBuf>,
    /// Chromium binary (default: `$GUIRL_CHROMIUM`, then for headless runs Debian's headless
    /// shell if installed, then `/usr/bin/chromium`, then PATH).
    pub chromium: Option<PathBuf>,
    /// Attach to this WebDriver endpoint (a chromedriver elsewhere, a Selenium Grid) instead.
    pub webdriver_url: Option<String>,
    /// Show the browser window.
    pub headful: bool,
    /// Limit on any single WebDriver command.
    pub command_timeout: Duration,
    /// Limit on a page load.
    pub page_load_timeout: Duration,
    /// Read the page and take screenshots over a direct DevTools connection where the
    /// endpoint offers one (default; `GUIRL_DEVTOOLS=0` turns it off). Navigation always
    /// goes through WebDriver; input actions too unless [`BrowserConfig::input`] allows.
    pub devtools: bool,
    /// Draw frames only when guirl asks (begin-frame control, see [`super::frames`]) where
    /// the browser is the headless shell started here with the DevTools channel (default;
    /// `GUIRL_FRAME_CONTROL=0` turns it off).
    pub frame_control: bool,
    /// Which channel carries input actions (see [`super::input`]): DevTools events where a
    /// browser started here runs with the DevTools channel and begin-frame control on
    /// (default), or with [`InputPath::WebDriver`] (`GUIRL_INPUT=webdriver`) WebDriver
    /// input actions always.
    pub input: InputPath,
    /// Run Chromium with its sandbox where the machine allows (default; as an unprivileged
    /// user when guirl is root, see [`super::sandbox`]); false starts it with `--no-sandbox`
    /// (`--no-sandbox` on the command line, or `GUIRL_SANDBOX=0`).
    pub sandbox: bool,
    /// Where the browser's pages are on this machine (a task's `file://` start URL;
    /// [`GuiEnv`] fills it from the task). A sandboxed browser started by root runs as
    /// another user: where that user cannot read the start page (or, where a variable names
    /// it, its folder), the browser starts unsandboxed, with a warning.
    ///
    /// [`GuiEnv`]: super::GuiEnv
    pub local_site: Option<crate::tasks::LocalSite>,
    /// The loopback port of the proxy every connection of a browser started here goes
    /// through ([`super::page_proxy`]; [`GuiEnv`] starts it). Not used for a browser
    /// attached through [`BrowserConfig::webdriver_url`].
    ///
    /// [`GuiEnv`]: super::GuiEnv
    pub page_proxy: Option<u16>,
    /// The pointing device pages are told they have.
    pub pointer: Pointer,
}

impl BrowserConfig {
    /// This config with the DevTools channel on (if the environment allows) or off.
    pub fn with_devtools(mut self, on: bool) -> Self {
        self.devtools &= on;
        self
    }

    /// This config with begin-frame control on (if the environment allows) or off.
    pub fn with_frame_control(mut self, on: bool) -> Self {
        self.frame_control &= on;
        self
    }

    /// This config with Chromium's sandbox on (where the machine allows) or off.
    pub fn with_sandbox(mut self, on: bool) -> Self {
        self.sandbox &= on;
        self
    }

    /// This config with input over `path` (DevTools only where the session allows it).
    pub fn with_input(mut self, path: InputPath) -> Self {
        self.input = path;
        self
    }

    /// Whether a browser started from this config sends input actions over DevTools
    /// (given that it gets a DevTools channel): not for a remote endpoint (a Grid), not
    /// with free-running frames, and not when asked for WebDriver input.
    pub(crate) fn devtools_input(&self) -> bool {
        self.input == InputPath::DevTools
            && self.devtools
            && self.frame_control
            && self.webdriver_url.is_none()
    }

    /// Whether a browser started from this config with binary `chromium` runs under
    /// begin-frame control.
    pub(crate) fn controls_frames(&self, chromium: &Path) -> bool {
        self.frame_control
            && self.devtools
            && !self.headful
            && self.webdriver_url.is_none()
            && frames::supported_by(chromium)
    }
}

impl Default for BrowserConfig {
    fn default() -> Self {
        BrowserConfig {
            chromedriver: None,
            chromium: None,
            webdriver_url: None,
            headful: false,
            command_timeout: Duration::from_secs(10),
            page_load_timeout: Duration::from_secs(20),
            devtools: std::env::var("GUIRL_DEVTOOLS").map_or(true, |v| v != "0"),
            frame_control: std::env::var("GUIRL_FRAME_CONTROL").map_or(true, |v| v != "0"),
            input: InputPath::from_env(),
            sandbox: std::env::var("GUIRL_SANDBOX").map_or(true, |v| v != "0"),
            local_site: None,
            page_proxy: None,
            pointer: Pointer::Mouse,
        }
    }
}

fn find_binary(explicit: &Option<PathBuf>, env_var: &str, defaults: &[&str]) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.clone());
    }
    if let Some(p) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    for d in defaults {
        let p = Path::new(d);
        if p.is_absolute() && p.exists() {
            return Some(p.to_path_buf());
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| defaults.iter().map(move |d| dir.join(Path::new(d).file_name().unwrap())))
        .find(|p| p.is_file())
}

impl BrowserConfig {
    /// Where the chromedriver binary is looked for (it may be missing there): `--chromedriver`,
    /// `$GUIRL_CHROMEDRIVER`, `/usr/bin/chromedriver`, then PATH.
    pub fn chromedriver_candidate(&self) -> PathBuf {
        find_binary(&self.chromedriver, "GUIRL_CHROMEDRIVER", &["/usr/bin/chromedriver"])
            .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"))
    }

    /// The chromedriver binary to start, or a clear error naming how to install it.
    pub fn chromedriver_path(&self) -> Result<PathBuf, EnvError> {
        let p = self.chromedriver_candidate();
        if p.is_file() {
            Ok(p)
        } else {
            Err(EnvError::Setup(format!(
                "chromedriver not found at {}: install it with `{APT_HINT}`, or pass \
                 --chromedriver PATH / set GUIRL_CHROMEDRIVER, or attach to a running \
                 WebDriver with --webdriver URL",
                p.display()
            )))
        }
    }

    /// A visible browser started on this machine needs a display: the error saying so
    /// (and how to get a virtual one) when `$DISPLAY` and `$WAYLAND_DISPLAY` are unset, or
    /// when `$DISPLAY` names a local X display whose socket is not there (the browser would
    /// fail to start, and the launch error would not say why).
    pub fn check_display(&self) -> Result<(), EnvError> {
        let set = |v: &str| std::env::var_os(v).is_some_and(|d| !d.is_empty());
        if !self.headful || self.webdriver_url.is_some() || set("WAYLAND_DISPLAY") {
            return Ok(());
        }
        if let Ok(display) = std::env::var("DISPLAY") {
            // ":N" or ":N.S" is this machine's display N, served on /tmp/.X11-unix/XN
            let local = display.strip_prefix(':').map(|n| n.split('.').next().unwrap_or(n));
            return match local {
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    let socket = format!("/tmp/.X11-unix/X{n}");
                    if std::path::Path::new(&socket).exists() {
                        return Ok(());
                    }
                    Err(EnvError::Setup(format!(
                        "--headful: DISPLAY={display} names no running X server ({socket} does not exist): \
                         start one (`Xvfb :{n} &`), fix DISPLAY, or run under `xvfb-run -a guirl ...`"
                    )))
                }
                // a remote or other display: its own to check
                _ if !display.is_empty() => Ok(()),
                _ => Err(no_display()),
            };
        }
        Err(no_display())
    }

    /// Where the Chromium binary is looked for (it may be missing there): `chromium`,
    /// `$GUIRL_CHROMIUM`, for headless runs Debian's headless shell, `/usr/bin/chromium`,
    /// then PATH.
    pub fn chromium_candidate(&self) -> PathBuf {
        let mut defaults = vec!["/usr/bin/chromium", "chromium"];
        if !self.headful {
            defaults.insert(0, HEADLESS_SHELL);
        }
        find_binary(&self.chromium, "GUIRL_CHROMIUM", &defaults)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
    }

    /// The Chromium binary to start, or a clear error naming how to install it.
    pub fn chromium_path(&self) -> Result<PathBuf, EnvError> {
        let p = self.chromium_candidate();
        if p.is_file() {
            Ok(p)
        } else {
            Err(EnvError::Setup(format!(
                "chromium not found at {}: install it with `{APT_HINT}`, or set GUIRL_CHROMIUM",
                p.display()
            )))
        }
    }
}

/// The Chromium binary to ask a remote endpoint for: the config's `chromium` or
/// `$GUIRL_CHROMIUM` if given, else Debian's `/usr/bin/chromium` when the endpoint is on
/// this machine (a Grid node would otherwise look for Google Chrome), else the endpoint's
/// default.
pub(crate) fn remote_chromium(cfg: &BrowserConfig, url: &str) -> Option<PathBuf> {
    if let Some(p) = cfg
        .chromium
        .clone()
        .or_else(|| std::env::var_os("GUIRL_CHROMIUM").filter(|s| !s.is_empty()).map(PathBuf::from))
    {
        return Some(p);
    }
    let host = url::Url::parse(url).ok()?.host_str()?.to_string();
    let local = ["127.0.0.1", "localhost", "::1", "[::1]"].contains(&host.as_str());
    let debian = Path::new("/usr/bin/chromium");
    (local && debian.is_file()).then(|| debian.to_path_buf())
}

/// Which channel carries input actions (see [`super::input`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputPath {
    /// DevTools `Input.dispatch*` events where the session allows, else WebDriver (default).
    #[default]
    DevTools,
    /// WebDriver input actions (through chromedriver or a Grid) always.
    WebDriver,
}

impl InputPath {
    /// The path's name, as `--input` and `GUIRL_INPUT` take it.
    pub fn name(self) -> &'static str {
        match self {
            InputPath::DevTools => "devtools",
            InputPath::WebDriver => "webdriver",
        }
    }

    /// `GUIRL_INPUT` if set to a known path, else DevTools (an unknown value is named in
    /// a warning rather than silently ignored).
    pub fn from_env() -> InputPath {
        match std::env::var("GUIRL_INPUT") {
            Ok(v) => v.parse().unwrap_or_else(|e: String| {
                tracing::warn!("GUIRL_INPUT: {e}; using devtools input");
                InputPath::default()
            }),
            Err(_) => InputPath::default(),
        }
    }
}

impl std::str::FromStr for InputPath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "devtools" | "cdp" => Ok(InputPath::DevTools),
            "webdriver" => Ok(InputPath::WebDriver),
            _ => Err(format!("unknown input path {s:?}: expected devtools or webdriver")),
        }
    }
}

/// The error of a visible browser with no display named at all.
fn no_display() -> EnvError {
    EnvError::Setup(
        "--headful shows the browser window, but there is no display ($DISPLAY is not set): \
         run on a desktop, or in a virtual X display with `xvfb-run -a guirl ...` (Xvfb, \
         installed by `sudo apt-get install -y xvfb`)"
            .into(),
    )
}
