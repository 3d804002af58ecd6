//! What a task needs from the browser: the [`Page`] it drives at reset, and the
//! [`EnvError`] its calls return.
//!
//! Both live here, below the environment, so the arrow points one way (`env` → `tasks`):
//! `env::Browser` implements `Page`, and `env` re-exports `EnvError` as its own error.

use async_trait::async_trait;
use serde_json::Value;

/// What can go wrong in the environment. `Browser` errors end the episode as `env_error`
/// and make the env start a fresh browser at the next reset.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// Something the user must install or configure (chromedriver, chromium, task pages).
    #[error("{0}")]
    Setup(String),
    /// A browser could not be started or attached (chromedriver exited, the endpoint
    /// refused or did not answer the session request, DevTools did not attach), after
    /// retries. On a collector's first launch it is reported like a setup error; once the
    /// collector has worked, it ends that rollout as `env_error`.
    #[error("could not start a browser: {0}")]
    Launch(String),
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
    /// Whether this error means the browser must be restarted.
    pub fn needs_restart(&self) -> bool {
        matches!(self, EnvError::Browser(_) | EnvError::PageLoad { .. } | EnvError::Launch(_))
    }
}

/// The browser page a task starts its episodes in (implemented by `env::Browser`).
#[async_trait]
pub trait Page: Send + Sync {
    /// Navigate to `url` and wait for its load event.
    async fn goto(&self, url: &str) -> Result<(), EnvError>;
    /// Run JavaScript in the page (a function body; `arguments` holds `args`) and return
    /// its JSON result.
    async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, EnvError>;
    /// Delete what pages of `url`'s origin stored in this browser: cookies, localStorage,
    /// sessionStorage, IndexedDB, Cache Storage, service workers. May leave any page
    /// loaded (`about:blank`, `url`): navigate to `url` afterwards.
    async fn clear_site_data(&self, url: &str) -> Result<(), EnvError>;
}
