//! The loopback HTTP server that serves task pages: MiniWoB++'s html folder, the built-in
//! tasks (embedded in the binary, or `$GUIRL_ROOT/environments/builtin/`), and the example
//! and test pages in `environments/` and `fixtures/`.
//!
//! It runs on its own thread and runtime so it outlives any one caller's runtime
//! (each `#[tokio::test]` has its own), and starts once per process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where guirl's own files (environments/, fixtures/) live: `$GUIRL_ROOT`, else the
/// source checkout this binary was built from.
pub fn project_root() -> PathBuf {
    root_override().unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `$GUIRL_ROOT`, if set.
fn root_override() -> Option<PathBuf> {
    std::env::var_os("GUIRL_ROOT").filter(|s| !s.is_empty()).map(PathBuf::from)
}

/// Answer `/builtin/PATH` from the pages embedded in the binary.
async fn embedded_builtin(
    axum::extract::Path(path): axum::extract::Path<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match super::embedded::builtin_file(&path) {
        Some(bytes) => {
            let kind = super::embedded::content_type(if path.ends_with('/') { "index.html" } else { &path });
            ([(http::header::CONTENT_TYPE, kind)], bytes).into_response()
        }
        None => http::StatusCode::NOT_FOUND.into_response(),
    }
}

/// The MiniWoB++ html folder: `$GUIRL_MINIWOB_DIR`, else `~/.cache/guirl/miniwob/html`.
pub fn miniwob_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GUIRL_MINIWOB_DIR").filter(|s| !s.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("guirl").join("miniwob").join("html")
}

static SERVER: OnceLock<Result<SocketAddr, String>> = OnceLock::new();

/// The base URL browsers use to reach the task server, starting it on first use:
/// `http://127.0.0.1:PORT`, or `$GUIRL_SERVE_URL` when browsers run on other hosts (a Grid
/// spanning machines; then bind a reachable address with `$GUIRL_SERVE_BIND`, e.g.
/// `0.0.0.0:8800`, and set `GUIRL_SERVE_URL=http://THIS_HOST:8800`).
pub fn base_url() -> Result<String, super::EnvError> {
    let addr = SERVER.get_or_init(start).as_ref().map_err(|e| super::EnvError::Setup(e.clone()))?;
    match std::env::var("GUIRL_SERVE_URL") {
        Ok(u) if !u.is_empty() => Ok(u.trim_end_matches('/').to_string()),
        _ => Ok(format!("http://{addr}")),
    }
}

fn start() -> Result<SocketAddr, String> {
    use tower_http::services::ServeDir;
    let root = project_root();
    let bind =
        std::env::var("GUIRL_SERVE_BIND").ok().filter(|b| !b.is_empty()).unwrap_or("127.0.0.1:0".into());
    let listener = std::net::TcpListener::bind(&bind)
        .map_err(|e| format!("cannot open the task server's port {bind}: {e} (check GUIRL_SERVE_BIND)"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // The built-in pages come from the binary, so an installed guirl needs no checkout;
    // `$GUIRL_ROOT` serves them from disk (to edit them without rebuilding).
    let builtin = match root_override() {
        Some(r) => {
            axum::Router::new().nest_service("/builtin", ServeDir::new(r.join("environments/builtin")))
        }
        None => axum::Router::new().route("/builtin/{*path}", axum::routing::get(embedded_builtin)),
    };
    let app = builtin
        .nest_service("/miniwob", ServeDir::new(miniwob_dir()))
        .nest_service("/environments", ServeDir::new(root.join("environments")))
        .nest_service("/fixtures", ServeDir::new(root.join("fixtures")));
    std::thread::Builder::new()
        .name("guirl-task-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("task server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!("task server stopped: {e}");
                }
            });
        })
        .map_err(|e| format!("cannot start the task server thread: {e}"))?;
    Ok(addr)
}
