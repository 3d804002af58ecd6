//! `guirl serve` started in-process on a free loopback port, and one HTTP request helper:
//! shared by tests/integration/serve.rs and tests/integration/serve_security.rs.
#![allow(dead_code)]

use guirl::serve::env_server::{serve, ServeConfig};
use serde_json::Value;
use std::time::Duration;

/// A running server.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Start one with `cfg` on a free port.
    pub async fn start(cfg: ServeConfig) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, cfg, async move {
            let _ = rx.await;
        }));
        Server { base, stop: Some(tx), task }
    }
    /// Its WebSocket URL.
    pub fn ws(&self) -> String {
        self.base.replace("http://", "ws://") + "/ws"
    }
    /// Stop it and wait for it to finish cleanly.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task).await.expect("stops").unwrap().unwrap();
    }
}

/// A response: status, `Retry-After`, `Content-Type`, the body as JSON (`Null` if not
/// JSON) and raw.
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<String>,
    pub content_type: Option<String>,
    pub body: Value,
    pub bytes: Vec<u8>,
}

/// One HTTP request (blocking ureq on a blocking thread).
pub async fn http(method: &str, url: String, body: Option<String>, token: Option<&str>) -> Reply {
    http_accept(method, url, body, token, None).await
}

/// One HTTP request with an `Accept` header.
pub async fn http_accept(
    method: &str,
    url: String,
    body: Option<String>,
    token: Option<&str>,
    accept: Option<&str>,
) -> Reply {
    let (method, token, accept) = (method.to_string(), token.map(str::to_string), accept.map(str::to_string));
    tokio::task::spawn_blocking(move || {
        let mut req = ureq::request(&method, &url).timeout(Duration::from_secs(60));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        if let Some(a) = accept {
            req = req.set("Accept", &a);
        }
        let res = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(&b),
            None => req.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {url}: {e}"),
        };
        let status = resp.status();
        let retry_after = resp.header("Retry-After").map(str::to_string);
        let content_type = resp.header("Content-Type").map(str::to_string);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply { status, retry_after, content_type, body, bytes }
    })
    .await
    .unwrap()
}
