//! `guirl serve` against a hostile client, with real browsers: a token that differs only
//! in its last byte, an over-long or malformed request field, a task spec that points at
//! local files or internal hosts. Each is refused with its documented code, and the
//! server goes on serving other sessions.

use guirl::serve::env_server::{serve, ServeConfig};
use serde_json::{json, Value};
use std::time::Duration;

struct Server {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    async fn start(cfg: ServeConfig) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, cfg, async move {
            let _ = rx.await;
        }));
        Server { base, stop: Some(tx), task }
    }
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task).await.expect("stops").unwrap().unwrap();
    }
}

/// One request: its status and JSON body.
async fn http(method: &str, url: String, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
    let (method, token) = (method.to_string(), token.map(str::to_string));
    tokio::task::spawn_blocking(move || {
        let mut req = ureq::request(&method, &url).timeout(Duration::from_secs(60));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let res = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(&b.to_string()),
            None => req.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {url}: {e}"),
        };
        let status = resp.status();
        (status, resp.into_json().unwrap_or(Value::Null))
    })
    .await
    .unwrap()
}

async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    http("POST", format!("{}{path}", s.base), Some(body), None).await
}

fn error(r: &(u16, Value)) -> (u16, &str, &str) {
    let e = &r.1["error"];
    (r.0, e["code"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""))
}

/// A spec on guirl's own fixture page with these extra lines.
fn spec(start_url: &str, success_js: &str) -> String {
    format!("start_url = {start_url:?}\ninstruction = \"Click OK\"\n[success]\njs = {success_js:?}\n")
}

/// A session on MiniWoB++ click-test, reset and stepped once: the server still serves.
async fn still_serves(s: &Server) {
    let r = post(s, "/v1/sessions", json!({"task": "miniwob/click-test"})).await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    let id = r.1["session_id"].as_str().unwrap().to_string();
    let r = post(s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 1})).await;
    assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1);
    let r = post(s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(0)"})).await;
    assert_eq!(r.0, 200, "{:?}", r.1);
    http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_differing_in_its_last_byte_is_refused() {
    let token = "a-long-server-token-0123456789";
    let s = Server::start(ServeConfig { token: Some(token.into()), ..Default::default() }).await;
    let near = format!("{}8", &token[..token.len() - 1]);
    let r = http("GET", format!("{}/v1/tasks", s.base), None, Some(&near)).await;
    assert_eq!(error(&r).0, 401);
    assert_eq!(error(&r).1, "unauthorized");
    let r = http("GET", format!("{}/v1/tasks?token={near}", s.base), None, None).await;
    assert_eq!(error(&r).1, "unauthorized", "nor in the query");
    let r = http("GET", format!("{}/v1/tasks", s.base), None, Some(&token[..token.len() - 1])).await;
    assert_eq!(error(&r).1, "unauthorized", "a prefix is not the token");
    let r = http("GET", format!("{}/v1/tasks", s.base), None, Some(token)).await;
    assert_eq!(r.0, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_long_fields_are_refused_and_malformed_actions_echoed_cut() {
    let s = Server::start(ServeConfig::default()).await;

    // An over-long success.js: 400 field_too_long naming the field, its length, the limit.
    let js = format!("true || '{}'", "x".repeat(20_000));
    let r =
        post(&s, "/v1/sessions", json!({"task_spec": spec("/fixtures/pages/two-buttons.html", &js)})).await;
    let (status, code, msg) = error(&r);
    assert_eq!((status, code), (400, "field_too_long"), "{msg}");
    assert!(
        msg.contains("success.js") && msg.contains(&format!("{} characters", js.chars().count())),
        "{msg}"
    );
    assert!(msg.contains("at most 16384"), "{msg}");
    // The same spec with a short check is served.
    let ok = spec("/fixtures/pages/two-buttons.html", "true");
    let r = post(&s, "/v1/sessions", json!({ "task_spec": ok })).await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    http("DELETE", format!("{}/v1/sessions/{}", s.base, r.1["session_id"].as_str().unwrap()), None, None)
        .await;

    // Other bounded fields.
    let many_vars: String = (0..65).map(|i| format!("v{i} = [\"a\"]\n")).collect();
    let long_choice = format!("v = [\"{}\"]\n", "c".repeat(1001));
    for (body, field) in [
        (json!({"task": format!("miniwob/{}", "a".repeat(300))}), "task is 308 characters"),
        (json!({"task_spec": "#".repeat(70_000)}), "task_spec is 70000 bytes"),
        (
            json!({"task_spec": spec("/fixtures/pages/two-buttons.html", "true")
                .replace("Click OK", &"i".repeat(2001))}),
            "instruction is 2001 characters",
        ),
        (
            json!({"task_spec": format!("{ok}[variables]\n{many_vars}", ok = spec("/x.html", "true"))}),
            "[variables] is 65 entries",
        ),
        (
            json!({"task_spec": format!("{ok}[variables]\n{long_choice}", ok = spec("/x.html", "true"))}),
            "a choice of variables.v is 1001 characters",
        ),
    ] {
        let r = post(&s, "/v1/sessions", body).await;
        let (status, code, msg) = error(&r);
        assert_eq!((status, code), (400, "field_too_long"), "{msg}");
        assert!(msg.contains(field), "{field}: {msg}");
    }

    // A 9 000-character malformed action is a normal invalid step whose error quotes it
    // only in part, marked as cut.
    let r = post(&s, "/v1/sessions", json!({"task": "miniwob/click-test"})).await;
    let id = r.1["session_id"].as_str().unwrap().to_string();
    post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 1})).await;
    for action in [format!("key({})", "k".repeat(8995)), format!("click(1, 2){}", "z".repeat(8989))] {
        assert_eq!(action.chars().count(), 9000);
        let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({ "action": action })).await;
        assert_eq!(r.0, 200, "{:?}", r.1);
        assert_eq!(r.1["info"]["status"], "invalid_action");
        let e = r.1["info"]["action_error"].as_str().unwrap();
        assert!(e.chars().count() < 400, "{} characters: {e}", e.chars().count());
        assert!(e.contains('…') && e.contains("(9000 bytes)"), "{e}");
        assert!(!r.1.to_string().contains(&"k".repeat(100)), "the text is not echoed whole");
        assert!(!r.1.to_string().contains(&"z".repeat(100)), "the text is not echoed whole");
    }
    // An unknown field's name is quoted cut too.
    let mut body = json!({"action": "done()"});
    body["q".repeat(5000).as_str()] = json!(1);
    let r = post(&s, &format!("/v1/sessions/{id}/step"), body).await;
    let (status, code, msg) = error(&r);
    assert_eq!((status, code), (400, "bad_request"));
    assert!(msg.contains("[cut: 5002 characters in all]") && msg.len() < 1000, "{msg}");
    http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;

    still_serves(&s).await;
    s.stop().await;
}
