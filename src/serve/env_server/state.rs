//! What every handler of the env server shares: how the server runs ([`ServeConfig`]), its
//! sessions ([`Shared`]), whether a request came from this machine ([`LocalPeer`]) and the
//! task a request names ([`task_from_request`]).

use super::error::ApiError;
use super::session::SessionTable;
use super::{limits, wire};
use crate::env::url_policy::UrlPolicy;
use crate::env::EnvConfig;
use crate::serve::access::CrossSite;
use crate::serve::conn;
use crate::tasks::Task;
use axum::extract::{ConnectInfo, FromRequestParts};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Sessions (both transports) open at once.
    pub max_sessions: usize,
    /// Close sessions idle for this long (None: never).
    pub idle_timeout: Option<Duration>,
    /// Bearer token every route but `/health` requires.
    pub token: Option<String>,
    /// WebSocket ping interval; two without an answer close the connection.
    pub ws_ping: Duration,
    /// Largest request body and incoming WebSocket message, in bytes.
    pub max_body: usize,
    /// The env every session starts from (browser, timeouts).
    pub env: EnvConfig,
    /// The folder whose reward models a `task_spec` may name (`reward = "model:NAME"`);
    /// None: a spec with a reward model is refused.
    pub reward_models: Option<std::path::PathBuf>,
    /// Which URLs a `task_spec`'s `start_url` may name (task ids and paths on guirl's own
    /// task server always pass).
    pub url_policy: UrlPolicy,
    /// The host names and web origins requests may come with (see [`crate::serve::access`]).
    pub cross_site: CrossSite,
    /// Time and count bounds on connections (see [`conn`]).
    pub conn: conn::ConnLimits,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_sessions: 8,
            idle_timeout: Some(Duration::from_secs(300)),
            token: None,
            ws_ping: Duration::from_secs(20),
            max_body: 1 << 20,
            env: EnvConfig::default(),
            reward_models: None,
            url_policy: UrlPolicy::default(),
            cross_site: Default::default(),
            conn: Default::default(),
        }
    }
}

/// Whether a request came from the server's machine: its connection's peer is a loopback
/// address. False where the server was not started with connection info ([`super::serve`] does).
#[derive(Debug, Clone, Copy)]
pub struct LocalPeer(pub bool);

impl<S: Send + Sync> FromRequestParts<S> for LocalPeer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<std::net::SocketAddr>>();
        Ok(LocalPeer(peer.is_some_and(|c| c.0.ip().to_canonical().is_loopback())))
    }
}

/// What every handler shares.
pub struct Shared {
    /// The sessions.
    pub table: SessionTable,
    pub(super) cfg: ServeConfig,
    pub(super) tasks: Value,
    /// Whether the sessions' browsers run sandboxed (see [`crate::env::sandbox::describe`]).
    pub(super) sandbox: Value,
    /// Connections open and shed (see [`conn`]).
    pub(super) conns: Arc<conn::ConnCounts>,
}

/// A task named by a request: `task` (an id) or `task_spec` (a website spec's TOML text).
/// Paths on the server's disk are refused: a client names tasks, it does not read files;
/// a spec's `start_url` must pass the server's URL policy.
pub async fn task_from_request(
    obj: &Map<String, Value>,
    opts: &wire::SessionOptions,
    cfg: &ServeConfig,
) -> Result<Option<Arc<dyn Task>>, ApiError> {
    let reward_models = cfg.reward_models.as_deref();
    let unknown = |m: String| ApiError::invalid("unknown_task", m);
    let task = match (obj.get("task"), obj.get("task_spec")) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give \"task\" or \"task_spec\", not both")),
        (None, None) => None,
        (Some(Value::String(id)), None) => {
            limits::task_id(id)?;
            if !(id.starts_with("miniwob/") || id.starts_with("builtin/")) {
                return Err(unknown(format!(
                    "unknown task {id:?}: use a task id such as \"miniwob/click-button\" or \"builtin/...\" \
                     (GET /v1/tasks lists them), or send a website spec's text as \"task_spec\""
                )));
            }
            Some(crate::tasks::load_task(id).map_err(|e| {
                // The library's message points at the CLI; a client lists tasks over HTTP.
                let m = e.to_string();
                let m = m.split(" Run `guirl tasks`").next().unwrap_or(&m).to_string();
                unknown(format!("{m} GET /v1/tasks lists them."))
            })?)
        }
        (None, Some(Value::String(text))) => {
            use sha2::Digest;
            limits::task_spec_text(text)?;
            let digest = sha2::Sha256::digest(text.as_bytes());
            let id =
                format!("spec:{}", digest.iter().take(6).map(|b| format!("{b:02x}")).collect::<String>());
            let t = crate::tasks::website::WebsiteTask::from_text(id, text, opts.viewport, reward_models)
                .map_err(|e| ApiError::invalid("bad_option", format!("task_spec: {e:#}")))?;
            limits::spec(t.spec())?;
            check_start_url(&t.spec().start_url, &cfg.url_policy).await?;
            Some(Arc::new(t) as Arc<dyn Task>)
        }
        (Some(v), _) | (_, Some(v)) => {
            return Err(ApiError::bad_request(format!("\"task\" and \"task_spec\" must be strings, got {v}")))
        }
    };
    if opts.viewport.is_some() && !matches!(obj.get("task_spec"), Some(Value::String(_))) {
        return Err(ApiError::invalid(
            "bad_option",
            "viewport can only be set with a task_spec: MiniWoB++ and built-in pages have fixed sizes",
        ));
    }
    Ok(task)
}

/// Check a spec's `start_url` template against `policy`. A path is a page of guirl's own
/// task server; otherwise the scheme and host must be written out (not drawn from
/// `[variables]`, which could make any seed's URL another host) and pass the policy.
pub async fn check_start_url(template: &str, policy: &UrlPolicy) -> Result<(), ApiError> {
    let refused = |m: String| ApiError::invalid("refused_url", format!("task_spec: start_url: {m}"));
    if template.starts_with('/') {
        return Ok(());
    }
    let scheme = template.split(':').next().unwrap_or("");
    let http = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    let head_end = template
        .find("://")
        .map(|i| i + 3)
        .map(|s| template[s..].find(['/', '?', '#']).map_or(template.len(), |j| s + j))
        .unwrap_or(template.len());
    // An http(s) URL's host ends at its first '/', '?' or '#'; anything else is refused
    // for its scheme, so only a scheme drawn from a variable needs catching here.
    let checked = if http { &template[..head_end] } else { template };
    if (http && checked.contains('{')) || scheme.contains('{') {
        return Err(refused(format!(
            "{}: its scheme and host must be written out, not drawn from [variables]; \
             put variables in the path or query",
            wire::short(template)
        )));
    }
    policy.check(checked).await.map_err(|e| refused(e.0))
}
