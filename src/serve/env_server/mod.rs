//! `guirl serve`: guirl environments for other processes and other languages, over
//! REST (`/v1/sessions`) and OpenEnv's WebSocket protocol (`/ws`), sharing one session
//! table. Each session owns a browser; docs/serve.md and docs/openapi.yaml describe the
//! protocol.

pub mod error;
pub mod frame;
pub mod guard;
pub mod limits;
mod rest;
pub mod session;
pub mod shm;
mod state;
pub mod wire;
mod ws;

use crate::serve::access::{self, CrossSite};
use crate::serve::conn;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
pub use error::ApiError;
use serde_json::{json, Value};
pub use session::SessionTable;
pub use state::{check_start_url, task_from_request, LocalPeer, ServeConfig, Shared};
use std::sync::Arc;
use std::time::Duration;

/// The REST API's OpenAPI description (served at `/openapi.yaml`).
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

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
        .layer(axum::middleware::from_fn_with_state(Arc::new(cfg.cross_site.clone()), cross_site))
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
        Err(refused) => {
            let (code, hint) = match refused {
                conn::BodyRefusal::TooLarge { .. } => ("body_too_large", " (--max-body)"),
                conn::BodyRefusal::Timeout { .. } => ("body_timeout", ""),
            };
            ApiError::new(refused.status(), code, format!("{}{hint}", refused.message())).into_response()
        }
    }
}

/// Require the bearer token (header, or `?token=` for WebSocket clients that cannot set headers).
async fn auth(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    match s.cfg.token.as_deref().and_then(|token| access::token_refusal(&req, token)) {
        Some(r) => refused(r),
        None => next.run(req).await,
    }
}

/// Requests a web page could send, refused before anything else runs ([`access`]).
async fn cross_site(State(rules): State<Arc<CrossSite>>, req: Request, next: Next) -> Response {
    match rules.refusal(&req) {
        Some(r) => refused(r),
        None => next.run(req).await,
    }
}

fn refused(r: access::Refusal) -> Response {
    ApiError::new(r.status, r.code, r.message).into_response()
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

/// The answer to a connection past the cap, in this server's error shape.
fn shed_body(max: usize) -> String {
    json!({"status": "shedding", "error": {"code": "too_many_connections", "message": conn::shed_message(max)}})
        .to_string()
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
    let served =
        conn::accept(listener, app, shared.cfg.conn, shared.conns.clone(), shed_body, shutdown).await;
    if let Some(r) = reaper {
        r.abort();
    }
    shared.table.close_all().await;
    served?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LocalPeer;
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
}
