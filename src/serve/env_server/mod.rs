//! `guirl serve`: guirl environments for other processes and other languages, over
//! REST (`/v1/sessions`) and OpenEnv's WebSocket protocol (`/ws`), sharing one session
//! table. Each session owns a browser; docs/serve.md and docs/openapi.yaml describe the
//! protocol.

pub mod conn;
pub mod cross_site;
pub mod error;
pub mod frame;
pub mod guard;
pub mod limits;
mod rest;
pub mod session;
pub mod shm;
pub mod wire;
mod ws;

use crate::env::url_policy::UrlPolicy;
use crate::env::EnvConfig;
use crate::tasks::Task;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
pub use error::ApiError;
use serde_json::{json, Map, Value};
pub use session::SessionTable;
use std::sync::Arc;
use std::time::Duration;

/// The REST API's OpenAPI description (served at `/openapi.yaml`).
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

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
    /// The host names and web origins requests may come with (see [`cross_site`]).
    pub cross_site: cross_site::CrossSite,
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
/// address. False where the server was not started with connection info ([`serve`] does).
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
    cfg: ServeConfig,
    tasks: Value,
    /// Whether the sessions' browsers run sandboxed (see [`crate::env::sandbox::describe`]).
    sandbox: Value,
    /// Connections open and shed (see [`conn`]).
    conns: Arc<conn::ConnCounts>,
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

/// The router of a server with `cfg`.
pub fn router(cfg: ServeConfig) -> (Router, Arc<Shared>) {
    let tasks: Vec<Value> = crate::tasks::all_task_ids(None)
        .into_iter()
        .filter_map(|id| {
            let t = crate::tasks::load_task(&id).ok()?;
            let vp = t.viewport();
            let suite = id.split('/').next().unwrap_or("").to_string();
            Some(json!({"id": id, "suite": suite, "width": vp.width, "height": vp.height, "max_steps": t.max_steps()}))
        })
        .collect();
    let shared = Arc::new(Shared {
        table: SessionTable::new(cfg.max_sessions, cfg.env.clone(), cfg.url_policy.clone()),
        sandbox: crate::env::sandbox::describe(&cfg.env.browser),
        cfg: cfg.clone(),
        tasks: json!({ "tasks": tasks }),
        conns: Arc::default(),
    });
    let api = Router::new()
        .route("/v1/tasks", get(|State(s): State<Arc<Shared>>| async move { Json(s.tasks.clone()) }))
        .route("/v1/sessions", post(rest::create).get(rest::list))
        .route("/v1/sessions/{id}", get(rest::state).delete(rest::close))
        .route("/v1/sessions/{id}/reset", post(rest::reset))
        .route("/v1/sessions/{id}/step", post(rest::step))
        .route("/v1/sessions/{id}/render", get(rest::render))
        .route("/ws", get(ws::upgrade))
        .route("/schema", get(schema))
        .route("/metadata", get(metadata))
        .route(
            "/openapi.yaml",
            get(|| async { ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML) }),
        )
        .route_layer(axum::middleware::from_fn_with_state(shared.clone(), auth));
    let router = api
        .route("/health", get(health))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such route: see /openapi.yaml (REST under /v1/sessions, OpenEnv on /ws)",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "bad_request",
                "this route does not take that method: see /openapi.yaml",
            )
        })
        .layer(DefaultBodyLimit::max(cfg.max_body))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), bounded_body))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), cross_site::check))
        .with_state(shared.clone());
    (router, shared)
}

async fn health(State(s): State<Arc<Shared>>) -> Json<Value> {
    use std::sync::atomic::Ordering::Relaxed;
    let (open, max) = (s.conns.open.load(Relaxed), s.cfg.conn.max_connections);
    Json(json!({
        // "shedding": new connections are being refused at the cap right now.
        "status": if open >= max { "shedding" } else { "healthy" },
        "sessions": s.table.len(),
        "max_sessions": s.table.max(),
        "connections": open,
        "max_connections": max,
        "shed_connections": s.conns.shed.load(Relaxed),
        "sandbox": s.sandbox,
    }))
}

/// Every POST body is read whole, within its time and size bounds, before the handler.
async fn bounded_body(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    match conn::read_body(req, s.cfg.max_body, s.cfg.conn.body_timeout).await {
        Ok(req) => next.run(req).await,
        Err(refused) => refused,
    }
}

/// Whether `given` is the server's `token`, in time that does not depend on where they
/// differ: both are hashed first (so their lengths do not show either), then compared
/// with `subtle`'s constant-time equality.
pub fn token_matches(given: &str, token: &str) -> bool {
    use sha2::Digest;
    use subtle::ConstantTimeEq;
    let (a, b) = (sha2::Sha256::digest(given.as_bytes()), sha2::Sha256::digest(token.as_bytes()));
    a.as_slice().ct_eq(b.as_slice()).into()
}

/// Require the bearer token (header, or `?token=` for WebSocket clients that cannot set headers).
async fn auth(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let Some(token) = s.cfg.token.as_deref() else {
        return next.run(req).await;
    };
    let header_ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token_matches(t.trim(), token));
    let query_ok = req.uri().query().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "token" && token_matches(&v, token))
    });
    if header_ok || query_ok {
        return next.run(req).await;
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server needs its token: send the header \"Authorization: Bearer <token>\" (or ?token=<token> on /ws)",
    )
    .into_response()
}

async fn schema() -> Json<Value> {
    Json(json!({
        "action": {
            "title": "GuiAction", "type": "object", "required": ["action"],
            "properties": {"action": {"type": "string", "description":
                "guirl's action text in screenshot pixels: click(x, y), double_click(x, y), right_click(x, y), \
                 hover(x, y), drag(x1, y1, x2, y2), scroll(x, y, dx, dy), type(\"text\"), key(Enter), \
                 key(ctrl+a), wait(ms), done()"}},
        },
        "observation": {
            "title": "GuiObservation", "type": "object",
            "properties": {
                "screenshot": {"type": ["string", "null"], "description":
                    "base64 of the screenshot in screenshot_format (raw: RGB8 bytes); null for none \
                     and shm, and in binary frames, where the bytes follow the JSON (docs/serve.md)"},
                "screenshot_format": {"type": "string", "enum": ["png", "jpeg", "raw", "shm", "none"]},
                "screenshot_shm": {"type": "object", "description":
                    "for shm: where the RGB8 pixels are in shared memory (path, offset, bytes, seq; \
                     docs/serve.md)"},
                "width": {"type": "integer"}, "height": {"type": "integer"},
                "instruction": {"type": "string"}, "url": {"type": "string"}, "task_id": {"type": "string"},
                "step": {"type": "integer"}, "frame": {"type": "object"}, "elements": {"type": "array"},
                "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"}, "info": {"type": "object"},
            },
        },
        "state": {
            "title": "GuiState", "type": "object",
            "properties": {
                "episode_id": {"type": "integer"}, "step_count": {"type": "integer"},
                "session_id": {"type": "string"}, "task_id": {"type": ["string", "null"]},
                "seed": {"type": ["integer", "null"]}, "status": {"type": ["string", "null"]},
            },
        },
    }))
}

async fn metadata() -> Json<Value> {
    Json(json!({
        "name": "guirl",
        "description": "GUI tasks (MiniWoB++, built-in, website specs) in a real headless Chromium; \
                        actions are guirl's action text, observations a screenshot with the page's elements",
        "version": env!("CARGO_PKG_VERSION"),
        "author": "guirl",
        "documentation_url": "docs/serve.md",
        "readme_content": null,
    }))
}

/// Serve on `listener` until `shutdown` resolves, reaping idle sessions; every browser
/// is closed before it returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let idle = cfg.idle_timeout;
    // No page of any session may reach the API (see `env::local_guard`).
    let _reserved = listener.local_addr().ok().map(|a| crate::env::local_guard::reserve(a.port()));
    shm::sweep();
    let (app, shared) = router(cfg);
    let reaper = idle.map(|timeout| {
        let shared = shared.clone();
        let every = (timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                shared.table.reap_idle(timeout).await;
            }
        })
    });
    let served = conn::accept(listener, app, shared.cfg.conn, shared.conns.clone(), shutdown).await;
    if let Some(r) = reaper {
        r.abort();
    }
    shared.table.close_all().await;
    served?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{token_matches, LocalPeer};
    use axum::extract::{ConnectInfo, FromRequestParts};

    #[tokio::test]
    async fn only_loopback_peers_are_local() {
        let local = |addr: Option<&str>| {
            let mut req = axum::http::Request::builder();
            if let Some(a) = addr {
                req = req.extension(ConnectInfo(a.parse::<std::net::SocketAddr>().unwrap()));
            }
            let (mut parts, ()) = req.body(()).unwrap().into_parts();
            async move { LocalPeer::from_request_parts(&mut parts, &()).await.unwrap().0 }
        };
        for a in ["127.0.0.1:5000", "127.3.2.1:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000"] {
            assert!(local(Some(a)).await, "{a}");
        }
        for a in ["192.168.1.5:5000", "172.17.0.1:5000", "[2001:db8::1]:5000", "[::ffff:10.0.0.1]:5000"] {
            assert!(!local(Some(a)).await, "{a}");
        }
        assert!(!local(None).await, "no connection info: not known to be local");
    }

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        for other in ["s3cret-tokeN", "s3cret-toke", "s3cret-token ", "", "S3cret-token"] {
            assert!(!token_matches(other, "s3cret-token"), "{other:?}");
        }
    }
}
