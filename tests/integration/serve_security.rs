//! `guirl serve` against a hostile client, with real browsers: a token that differs only
//! in its last byte, an over-long or malformed request field, a task spec that points at
//! local files or internal hosts. Each is refused with its documented code, and the
//! server goes on serving other sessions.

use crate::server;

use guirl::serve::env_server::ServeConfig;
use serde_json::{json, Value};
use server::Server;

/// One request: its status and JSON body.
async fn http(method: &str, url: String, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
    let r = server::http(method, url, body.map(|b| b.to_string()), token).await;
    (r.status, r.body)
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
    // The scheme's case does not matter (RFC 9110); some clients send `bearer`.
    let url = format!("{}/v1/tasks", s.base);
    let header = format!("bearer {token}");
    let lower = tokio::task::spawn_blocking(move || {
        ureq::get(&url).set("Authorization", &header).call().map(|r| r.status()).ok()
    })
    .await
    .unwrap();
    assert_eq!(lower, Some(200), "a lowercase scheme is refused");
    s.stop().await;
}

/// The served description names this version and every error code the server sends.
#[test]
fn the_openapi_description_is_of_this_version() {
    let yaml = guirl::serve::env_server::OPENAPI_YAML;
    assert!(
        yaml.contains(&format!("version: {}\n", env!("CARGO_PKG_VERSION"))),
        "openapi.yaml names another version"
    );
    assert!(yaml.contains("missing_task"), "openapi.yaml lacks missing_task");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn task_specs_on_local_files_and_internal_hosts_are_refused() {
    let s = Server::start(ServeConfig::default()).await;
    let spec_vars =
        |url: &str| format!("{}[variables]\nhost = [\"example.com\", \"10.0.0.1\"]\n", spec(url, "true"));
    for (task_spec, why) in [
        (spec("file:///etc/passwd", "true"), "scheme \"file:\""),
        (spec("data:text/html,<h1>hi</h1>", "true"), "scheme \"data:\""),
        (spec("chrome://version", "true"), "scheme \"chrome:\""),
        (spec("view-source:http://example.com/", "true"), "scheme \"view-source:\""),
        (spec("http://10.0.0.5/", "true"), "private address"),
        (spec("http://192.168.1.1:8080/admin", "true"), "private address"),
        (spec("http://169.254.169.254/latest/meta-data/", "true"), "metadata"),
        (spec("http://[fe80::1]/", "true"), "link-local"),
        (spec("http://0xA9FEA9FE/", "true"), "metadata"),
        (spec_vars("http://{host}/"), "not drawn from [variables]"),
    ] {
        let r = post(&s, "/v1/sessions", json!({ "task_spec": task_spec })).await;
        let (status, code, msg) = error(&r);
        assert_eq!((status, code), (400, "refused_url"), "{task_spec}: {msg}");
        assert!(msg.contains("start_url") && msg.contains(why), "{why}: {msg}");
    }
    assert_eq!(get_sessions(&s).await, 0, "no session was opened for them");
    // An empty start_url is told what a server takes, not sent to file:// URLs.
    let r = post(&s, "/v1/sessions", json!({ "task_spec": spec("", "true") })).await;
    let (status, _, msg) = error(&r);
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("start_url is empty") && msg.contains("a server refuses them"), "{msg}");

    // Over the WebSocket too.
    let ws_url = s.base.replace("http://", "ws://") + "/ws";
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    use futures::{SinkExt, StreamExt};
    let msg = json!({"type": "reset", "data": {"task_spec": spec("file:///etc/passwd", "true")}});
    ws.send(tokio_tungstenite::tungstenite::Message::Text(msg.to_string().into())).await.unwrap();
    let reply = loop {
        match ws.next().await.unwrap().unwrap() {
            tokio_tungstenite::tungstenite::Message::Text(t) => {
                break serde_json::from_str::<Value>(&t).unwrap()
            }
            _ => continue,
        }
    };
    assert_eq!(
        (reply["data"]["code"].as_str(), reply["data"]["error"].as_str()),
        (Some("VALIDATION_ERROR"), Some("refused_url")),
        "{reply}"
    );
    drop(ws);

    // A loopback URL (guirl's own task server, spelled out) and a variable in the path pass.
    let base = guirl::tasks::server::base_url().unwrap();
    let page = format!("{base}/fixtures/pages/{{page}}.html");
    let ok = format!("{}[variables]\npage = [\"two-buttons\"]\n", spec(&page, "true"));
    let r = post(&s, "/v1/sessions", json!({ "task_spec": ok })).await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    let id = r.1["session_id"].as_str().unwrap().to_string();
    let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1);
    assert!(r.1["observation"]["url"].as_str().unwrap().ends_with("/fixtures/pages/two-buttons.html"));
    http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;

    still_serves(&s).await;
    s.stop().await;
}

async fn get_sessions(s: &Server) -> u64 {
    http("GET", format!("{}/health", s.base), None, None).await.1["sessions"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_allow_list_refuses_a_listed_name_that_resolves_to_loopback() {
    use guirl::env::url_policy::{HostPattern, UrlPolicy};
    let pats = |p: &[&str]| p.iter().map(|p| HostPattern::parse(p).unwrap()).collect::<Vec<_>>();
    let base = guirl::tasks::server::base_url().unwrap();
    let port = base.rsplit(':').next().unwrap().to_string();
    let by_name = spec(&format!("http://localhost:{port}/fixtures/pages/two-buttons.html"), "true");

    // "localhost" is listed, but what it resolves to is not: refused, saying how to allow it.
    let s = Server::start(ServeConfig {
        url_policy: UrlPolicy::only(pats(&["localhost"])),
        ..Default::default()
    })
    .await;
    let r = post(&s, "/v1/sessions", json!({ "task_spec": by_name })).await;
    let (status, code, msg) = error(&r);
    assert_eq!((status, code), (400, "refused_url"), "{msg}");
    assert!(
        msg.contains("resolves to") && msg.contains("loopback") && msg.contains("--allow-hosts"),
        "{msg}"
    );
    // A public address that is not listed is refused too; guirl's own pages still work.
    let r = post(&s, "/v1/sessions", json!({"task_spec": spec("http://93.184.216.34/", "true")})).await;
    assert_eq!(error(&r).1, "refused_url", "{:?}", r.1);
    let r = post(&s, "/v1/sessions", json!({"task_spec": spec("/fixtures/pages/two-buttons.html", "true")}))
        .await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    still_serves(&s).await;
    s.stop().await;

    // With its addresses listed as well, the same spec runs.
    let policy = UrlPolicy::only(pats(&["localhost", "127.0.0.0/8", "::1"]));
    let s = Server::start(ServeConfig { url_policy: policy, ..Default::default() }).await;
    let r = post(&s, "/v1/sessions", json!({ "task_spec": by_name })).await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    let id = r.1["session_id"].as_str().unwrap().to_string();
    let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1);
    s.stop().await;
}

/// `guirl serve`'s first lines, then the process is ended.
fn serve_banner(args: &[&str]) -> (Option<i32>, String, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .arg("serve")
        .args(args)
        .env_remove("GUIRL_SERVE_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        match lines.next() {
            Some(Ok(l)) => out.push_str(&(l + "\n")),
            _ => break,
        }
    }
    let _ = child.kill();
    let done = child.wait_with_output().unwrap();
    (done.status.code(), out, String::from_utf8_lossy(&done.stderr).into_owned())
}

#[test]
fn the_url_policy_is_printed_at_start_and_bad_patterns_refused() {
    let (_, out, _) = serve_banner(&["--bind", "0.0.0.0:0", "--token", "t"]);
    assert!(out.contains("guirl's own pages only") && out.contains("--allow-hosts"), "off loopback: {out}");
    let (_, out, _) = serve_banner(&["--bind", "127.0.0.1:0"]);
    assert!(out.contains("loopback and public hosts"), "{out}");
    let (_, out, _) =
        serve_banner(&["--bind", "0.0.0.0:0", "--token", "t", "--allow-hosts", "*.corp.test,10.0.0.0/8"]);
    assert!(out.contains("these hosts only: *.corp.test, 10.0.0.0/8"), "{out}");
    let (_, out, _) = serve_banner(&["--bind", "127.0.0.1:0", "--allow-any-host"]);
    assert!(out.contains("--allow-any-host") && out.contains("ANY host"), "{out}");
    let (code, _, err) = serve_banner(&["--bind", "127.0.0.1:0", "--allow-hosts", "exa mple.com"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--allow-hosts \"exa mple.com\": not a host name"), "{err}");
    let (code, _, err) = serve_banner(&["--allow-hosts", "a.com", "--allow-any-host"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_cannot_frame_or_redirect_its_way_to_a_refused_host() {
    let s = Server::start(ServeConfig::default()).await;
    // guirl's own page, which at load frames a private host and draws a metadata URL as an
    // image, then navigates itself to a private host.
    let setup = "var f = document.createElement('iframe'); f.src = 'http://10.0.0.1/admin'; \
                 document.body.appendChild(f); \
                 var i = new Image(); i.src = 'http://169.254.169.254/latest/meta-data/'; \
                 setTimeout(function () { location.href = 'http://192.168.0.1/router'; }, 300);";
    let task_spec = format!("setup_js = {setup:?}\n{}", spec("/fixtures/pages/two-buttons.html", "false"));
    let r = post(&s, "/v1/sessions", json!({ "task_spec": task_spec })).await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    let id = r.1["session_id"].as_str().unwrap().to_string();
    let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1);
    let mut blocked: Vec<String> = serde_json::from_value(r.1["info"]["blocked_urls"].clone()).unwrap();
    // The navigation comes 300 ms in: a step that waits sees it blocked, and goes on.
    let r =
        post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(800)", "screenshot": "none"}))
            .await;
    assert_eq!(r.0, 200, "{:?}", r.1);
    assert_eq!(
        (r.1["terminated"].as_bool(), r.1["truncated"].as_bool()),
        (Some(false), Some(false)),
        "{:?}",
        r.1
    );
    assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1["info"]);
    blocked.extend(serde_json::from_value::<Vec<String>>(r.1["info"]["blocked_urls"].clone()).unwrap());
    for url in
        ["http://10.0.0.1/admin", "http://169.254.169.254/latest/meta-data/", "http://192.168.0.1/router"]
    {
        assert!(blocked.iter().any(|b| b == url), "{url} blocked: {blocked:?}");
    }
    // Nothing new is reported twice; the next step reports none.
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(0)", "screenshot": "none"}))
        .await;
    assert_eq!(r.1["info"]["blocked_urls"], json!([]), "{:?}", r.1["info"]);
    http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;
    still_serves(&s).await;
    s.stop().await;
}

/// A loopback HTTP server that counts the requests for `/secret` it answers.
async fn secret_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let h = h.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                if String::from_utf8_lossy(&buf[..n]).starts_with("GET /secret") {
                    h.fetch_add(1, Ordering::SeqCst);
                }
                let body = "<h1>internal secret</h1>";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_host_the_machine_reaches_gets_no_request() {
    use guirl::env::url_policy::{HostRule, UrlPolicy};
    use std::sync::atomic::Ordering;
    let (port, hits) = secret_server().await;
    let setup = format!(
        "var f = document.createElement('iframe'); f.src = 'http://localhost:{port}/secret'; \
         document.body.appendChild(f);"
    );
    let task_spec = format!("setup_js = {setup:?}\n{}", spec("/fixtures/pages/two-buttons.html", "false"));
    let run = |policy: UrlPolicy| {
        let task_spec = task_spec.clone();
        async move {
            let s = Server::start(ServeConfig { url_policy: policy, ..Default::default() }).await;
            let r = post(&s, "/v1/sessions", json!({ "task_spec": task_spec })).await;
            assert_eq!(r.0, 201, "{:?}", r.1);
            let id = r.1["session_id"].as_str().unwrap().to_string();
            let r =
                post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
            assert_eq!(r.1["info"]["status"], "running", "{:?}", r.1);
            let reset_blocked = r.1["info"]["blocked_urls"].clone();
            post(
                &s,
                &format!("/v1/sessions/{id}/step"),
                json!({"action": "wait(500)", "screenshot": "none"}),
            )
            .await;
            s.stop().await;
            reset_blocked
        }
    };
    // Allowing only guirl's own pages, the frame's request never reaches the server (the
    // frame is another site than the page, so it runs in a process of its own).
    let blocked = run(UrlPolicy::only(vec![])).await;
    assert_eq!(blocked, json!([format!("http://localhost:{port}/secret")]));
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the refused host got a request");
    // With --allow-any-host the URL policy lets it pass, and the loopback rule still holds:
    // a page reaches no service on this machine but guirl's task server and its own start
    // page (docs/security.md), so the secret server is still not reached.
    run(UrlPolicy { hosts: HostRule::Any }).await;
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a page reached another service on loopback");
}
