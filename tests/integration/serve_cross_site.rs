//! `guirl serve` against what a web page, a rebinding name or a slow client can send:
//! each is refused before it costs a session, and the server stays answerable. Requests
//! are written by hand on a TCP socket, as such a client would.

use crate::server::{self, Server};
use guirl::serve::access::CrossSite;
use guirl::serve::conn::ConnLimits;
use guirl::serve::env_server::ServeConfig;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// Send `head` (and `body`) on a new connection; the status and JSON body of the answer,
/// or status 0 when the server closed the connection without one.
async fn raw(s: &Server, head: &str, body: &[u8]) -> (u16, Value) {
    let mut c = TcpStream::connect(addr(s)).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    c.write_all(body).await.unwrap();
    read_reply(&mut c).await
}

async fn read_reply(c: &mut TcpStream) -> (u16, Value) {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(host: &str, path: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn code(r: &(u16, Value)) -> (u16, &str) {
    (r.0, r.1["error"]["code"].as_str().unwrap_or("?"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_web_page_sends_is_refused() {
    let s = Server::start(ServeConfig::default()).await;
    let host = addr(&s);
    let create = r#"{"task": "miniwob/click-test"}"#;
    // A no-cors fetch can only send text/plain (or a form encoding).
    let r = raw(&s, &post(&host, "/v1/sessions", "Content-Type: text/plain\r\n", create), b"").await;
    assert_eq!(code(&r), (415, "unsupported_media_type"), "{:?}", r.1);
    // A page's POST carries its Origin, JSON or not.
    let json = "Content-Type: application/json\r\n";
    let r =
        raw(&s, &post(&host, "/v1/sessions", &format!("{json}Origin: http://127.0.0.1:9\r\n"), create), b"")
            .await;
    assert_eq!(code(&r), (403, "forbidden_origin"), "{:?}", r.1);
    assert!(r.1["error"]["message"].as_str().unwrap().contains("--allow-origins"), "{:?}", r.1);
    // ... and so does its WebSocket handshake.
    let ws = format!(
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Origin: https://attacker.example\r\n\r\n"
    );
    assert_eq!(code(&raw(&s, &ws, b"").await), (403, "forbidden_origin"));
    // A rebinding name: the Host is the attacker's.
    let r =
        raw(&s, "GET /v1/sessions HTTP/1.1\r\nHost: attacker.example:8765\r\nConnection: close\r\n\r\n", b"")
            .await;
    assert_eq!(code(&r), (421, "bad_host"), "{:?}", r.1);
    assert!(r.1["error"]["message"].as_str().unwrap().contains("--host-names attacker.example"), "{:?}", r.1);
    // None of it opened a session; a program's request (JSON, no Origin) still works.
    let r = server::http("GET", format!("{}/v1/sessions", s.base), None, None).await;
    assert_eq!(r.body["sessions"], serde_json::json!([]), "{:?}", r.body);
    let r = raw(&s, &post(&host, "/v1/sessions", json, create), b"").await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_and_host_names_pass() {
    let cross_site = CrossSite {
        host_names: vec!["gpu-box.internal".into()],
        allowed_origins: vec!["https://app.example.com".into()],
    };
    let s = Server::start(ServeConfig { cross_site, ..Default::default() }).await;
    let r = raw(
        &s,
        "GET /v1/tasks HTTP/1.1\r\nHost: gpu-box.internal:8765\r\nOrigin: https://app.example.com\r\n\
         Connection: close\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(r.0, 200, "{:?}", r.1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_oversized_requests_are_answered_or_closed_in_time() {
    let conn = ConnLimits {
        max_connections: 6,
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
    };
    let s = Server::start(ServeConfig { conn, max_body: 4096, ..Default::default() }).await;
    let host = addr(&s);
    let json = "Content-Type: application/json\r\n";
    // A Content-Length of 1 GiB with 31 bytes sent: refused at once.
    let head = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\n{json}Content-Length: 1073741824\r\nConnection: close\r\n\r\n"
    );
    let t = Instant::now();
    let r = raw(&s, &head, br#"{"task": "miniwob/click-test"}  "#).await;
    assert_eq!(code(&r), (413, "body_too_large"), "{:?}", r.1);
    assert!(t.elapsed() < Duration::from_secs(10));
    // A body that stops short: 408 after the body timeout.
    let head = format!("POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\n{json}Content-Length: 100\r\n\r\n");
    let r = raw(&s, &head, b"{\"task\"").await;
    assert_eq!(code(&r), (408, "body_timeout"), "{:?}", r.1);
    // A head that never ends: the connection is closed after the header timeout.
    let t = Instant::now();
    let r = raw(&s, &format!("GET /health HTTP/1.1\r\nHost: {host}\r\nX-Slow: "), b"").await;
    assert!(r.0 == 0 || r.0 == 408, "closed or 408, got {r:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_the_server_sheds_and_says_so() {
    let conn =
        ConnLimits { max_connections: 4, header_timeout: Duration::from_secs(30), ..Default::default() };
    let s = Server::start(ServeConfig { conn, ..Default::default() }).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr(&s)).await.unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
        idle.push(c);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = raw(&s, "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", b"").await;
    assert_eq!((r.0, r.1["status"].as_str()), (503, Some("shedding")), "{:?}", r.1);
    assert_eq!(r.1["error"]["code"], "too_many_connections");
    drop(idle);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = raw(&s, "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", b"").await;
    assert_eq!(r.0, 200, "{:?}", r.1);
    assert_eq!(r.1["status"], "healthy");
    assert_eq!(r.1["shed_connections"], 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_is_bounded_by_what_its_variables_expand_to() {
    let s = Server::start(ServeConfig::default()).await;
    let spec = format!(
        "start_url = \"/fixtures/pages/two-buttons.html\"\ninstruction = \"{}\"\n\
         [variables]\nv = [\"{}\"]\n[success]\njs = \"false\"\n",
        "{v}".repeat(666),
        "x".repeat(1000)
    );
    let body = serde_json::json!({ "task_spec": spec }).to_string();
    let r = raw(&s, &post(&addr(&s), "/v1/sessions", "Content-Type: application/json\r\n", &body), b"").await;
    assert_eq!(code(&r), (400, "field_too_long"), "{:?}", r.1);
    let m = r.1["error"]["message"].as_str().unwrap();
    assert!(m.contains("instruction expands to up to 666000 characters") && m.contains("2000"), "{m}");
    s.stop().await;
}
