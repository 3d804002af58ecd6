//! `guirl serve` over both transports against real browsers: episodes, every error case,
//! the capacity limit, the idle reaper, unanswered WebSocket pings, a killed browser, and
//! the token.

use crate::server;
use futures::{SinkExt, StreamExt};

use guirl::serve::env_server::ServeConfig;
use serde_json::{json, Value};
use server::{http, Reply, Server};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

async fn post(s: &Server, path: &str, body: Value) -> Reply {
    http("POST", format!("{}{path}", s.base), Some(body.to_string()), None).await
}

async fn get(s: &Server, path: &str) -> Reply {
    http("GET", format!("{}{path}", s.base), None, None).await
}

fn code(r: &Reply) -> &str {
    r.body["error"]["code"].as_str().unwrap_or_else(|| panic!("an error body: {:?}", r.body))
}

async fn session(s: &Server, task: &str) -> String {
    let r = post(s, "/v1/sessions", json!({ "task": task })).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    r.body["session_id"].as_str().unwrap().to_string()
}

/// The centre of the button whose text the click-button instruction quotes.
fn target_click(obs: &Value) -> String {
    let want = obs["instruction"].as_str().unwrap().split('"').nth(1).unwrap().to_string();
    let el =
        obs["elements"].as_array().unwrap().iter().find(|e| e["text"] == want.as_str()).expect("the button");
    let b = &el["bbox"];
    let (x, y) = (
        b["x"].as_f64().unwrap() + b["w"].as_f64().unwrap() / 2.0,
        b["y"].as_f64().unwrap() + b["h"].as_f64().unwrap() / 2.0,
    );
    format!("click({}, {})", x as i64, y as i64)
}

fn browser_alive(profile: &str) -> bool {
    std::process::Command::new("pgrep")
        .arg("-f")
        .arg(format!("user-data-dir={profile}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_episode_and_every_error_case() {
    let s = Server::start(ServeConfig { max_body: 16384, ..Default::default() }).await;
    let h = get(&s, "/health").await;
    assert_eq!(h.body["status"], "healthy");
    // Whether the sessions' browsers run sandboxed, and why not where they do not.
    let (on, detail) = (&h.body["sandbox"]["on"], h.body["sandbox"]["detail"].as_str().unwrap_or_default());
    let expected = if on == true { "on" } else { "off: " };
    assert!(on.is_boolean() && detail.starts_with(expected), "{}", h.body);
    let tasks = get(&s, "/v1/tasks").await;
    assert!(tasks.body["tasks"].as_array().unwrap().iter().any(|t| t["id"] == "miniwob/click-button"));

    // Bad session requests.
    let r = post(&s, "/v1/sessions", json!({"task": "miniwob/clik-button"})).await;
    assert_eq!((r.status, code(&r)), (400, "unknown_task"));
    assert!(r.body["error"]["message"].as_str().unwrap().contains("miniwob/click-button"), "suggests the id");
    let r = post(&s, "/v1/sessions", json!({"task": "/etc/passwd.toml"})).await;
    assert_eq!((r.status, code(&r)), (400, "unknown_task"), "paths on the server are refused");
    // No task at all is not an unknown one: a client branching on the code can tell.
    let r = post(&s, "/v1/sessions", json!({})).await;
    assert_eq!((r.status, code(&r)), (400, "missing_task"));
    assert!(r.body["error"]["message"].as_str().unwrap().contains("GET /v1/tasks lists them"), "{}", r.body);
    let r = post(&s, "/v1/sessions", json!({"task": "miniwob/click-button", "max_step": 3})).await;
    assert_eq!(code(&r), "bad_request");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("max_step"));
    let r = post(&s, "/v1/sessions", json!({"task": "miniwob/click-button", "max_steps": 0})).await;
    assert_eq!(code(&r), "bad_option");
    let r = post(
        &s,
        "/v1/sessions",
        json!({"task": "miniwob/click-button", "viewport": {"width": 300, "height": 300}}),
    )
    .await;
    assert_eq!(code(&r), "bad_option");
    let r = post(&s, "/v1/sessions", json!({"task_spec": "start_url = 3"})).await;
    assert_eq!(code(&r), "bad_option");
    let r = http("POST", format!("{}/v1/sessions", s.base), Some("{not json".into()), None).await;
    assert_eq!((r.status, code(&r)), (400, "bad_request"));
    let big = json!({"task": "miniwob/click-button", "task_spec": "x".repeat(20000)}).to_string();
    let r = http("POST", format!("{}/v1/sessions", s.base), Some(big), None).await;
    assert_eq!((r.status, code(&r)), (413, "body_too_large"));
    let r = get(&s, "/v1/sessions/nope").await;
    assert_eq!((r.status, code(&r)), (404, "unknown_session"));
    let r = post(&s, "/v1/sessions/nope/step", json!({"action": "done()"})).await;
    assert_eq!((r.status, code(&r)), (404, "unknown_session"));
    let r = get(&s, "/v2/anything").await;
    assert_eq!((r.status, code(&r)), (404, "not_found"));

    let id = session(&s, "miniwob/click-button").await;
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "done()"})).await;
    assert_eq!((r.status, code(&r)), (409, "no_episode"), "step before reset");
    let r = get(&s, &format!("/v1/sessions/{id}/render")).await;
    assert_eq!((r.status, code(&r)), (409, "no_episode"), "render before reset");
    for bad in [json!(-1), json!("7"), json!(1.5), json!(9_223_372_036_854_775_808u64)] {
        let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({ "seed": bad })).await;
        assert_eq!((r.status, code(&r)), (400, "bad_seed"), "seed {bad}");
    }

    // An episode: same seed, same start; an invalid action is a normal step; success ends it.
    let a = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 5})).await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let b = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 5})).await;
    assert_eq!(a.body["observation"]["instruction"], b.body["observation"]["instruction"]);
    assert_eq!(
        a.body["observation"]["screenshot"], b.body["observation"]["screenshot"],
        "same seed, same screen"
    );
    let obs = &b.body["observation"];
    assert_eq!((obs["width"].as_u64(), obs["height"].as_u64()), (Some(160), Some(210)));
    let png = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        obs["screenshot"].as_str().unwrap(),
    )
    .unwrap();
    let img = image::load_from_memory(&png).unwrap();
    assert_eq!((img.width(), img.height()), (160, 210));
    assert_eq!(b.body["info"]["seed"], 5);

    for (body, want) in [
        (json!({}), "malformed_action"),
        (json!({"action": 5}), "malformed_action"),
        (json!({"action": "done()", "screenshot": "gif"}), "bad_option"),
        (json!({"action": "done()", "extra": 1}), "bad_request"),
    ] {
        let r = post(&s, &format!("/v1/sessions/{id}/step"), body).await;
        assert_eq!((r.status, code(&r)), (400, want), "{:?}", r.body);
    }
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "clik(1, 2)"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["info"]["status"], "invalid_action");
    assert_eq!(r.body["info"]["valid_action"], false);
    assert!(r.body["info"]["action_error"].as_str().unwrap().contains("click"));
    // An over-long answer is an invalid step too (an agent's runaway output), not a 400.
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "x".repeat(12000)})).await;
    assert_eq!((r.status, r.body["info"]["status"].as_str()), (200, Some("invalid_action")), "{:?}", r.body);
    assert!(r.body["info"]["action_error"]
        .as_str()
        .unwrap()
        .contains("12000 characters long; at most 10000"));
    assert_eq!((r.body["terminated"].as_bool(), r.body["truncated"].as_bool()), (Some(false), Some(false)));
    let r = post(
        &s,
        &format!("/v1/sessions/{id}/step"),
        json!({"action": "click(500, 500)", "screenshot": "jpeg"}),
    )
    .await;
    assert_eq!(r.body["info"]["status"], "invalid_action", "outside the screenshot");
    assert_eq!(r.body["observation"]["screenshot_format"], "jpeg");
    let act = target_click(&r.body["observation"]);
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({ "action": act })).await;
    assert_eq!(r.body["info"]["status"], "success", "{:?}", r.body["info"]);
    assert_eq!(r.body["reward"], 1.0);
    assert_eq!(r.body["terminated"], true);
    assert_eq!(r.body["info"]["step"], 4);
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "done()"})).await;
    assert_eq!((r.status, code(&r)), (409, "no_episode"), "step after the end");
    let r = get(&s, &format!("/v1/sessions/{id}/render?format=png")).await;
    assert_eq!(r.status, 200);
    assert_eq!(image::load_from_memory(&r.bytes).unwrap().width(), 160);
    let r = get(&s, &format!("/v1/sessions/{id}/render?format=bmp")).await;
    assert_eq!(code(&r), "bad_option");
    let st = get(&s, &format!("/v1/sessions/{id}")).await.body;
    assert_eq!((st["episode_id"].as_u64(), st["step_count"].as_u64()), (Some(2), Some(4)));
    let profile = st["browser_profile_dir"].as_str().unwrap().to_string();
    assert!(browser_alive(&profile));
    let r = http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;
    assert_eq!(r.status, 200);
    assert!(!browser_alive(&profile), "closing kills the browser");
    let r = http("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None).await;
    assert_eq!(code(&r), "unknown_session");
    s.stop().await;
}

async fn ws_send(ws: &mut (impl SinkExt<Message> + Unpin), v: Value) {
    let _ = ws.send(Message::Text(v.to_string().into())).await;
}

async fn ws_recv(
    ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await.expect("an answer") {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
            Some(Ok(Message::Close(_))) | None => return Value::Null,
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn websocket_episode_and_every_error_case() {
    let s = Server::start(ServeConfig::default()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    let err = |v: &Value| {
        (
            v["type"].as_str().unwrap().to_string(),
            v["data"]["code"].as_str().unwrap_or("").to_string(),
            v["data"]["error"].as_str().unwrap_or("").to_string(),
        )
    };

    ws.send(Message::Text("{oops".into())).await.unwrap();
    assert_eq!(err(&ws_recv(&mut ws).await).1, "INVALID_JSON");
    ws_send(&mut ws, json!({"type": "jump"})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).1, "UNKNOWN_TYPE");
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 1}})).await;
    assert_eq!(
        err(&ws_recv(&mut ws).await),
        ("error".into(), "VALIDATION_ERROR".into(), "missing_task".into())
    );
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 1, "task": "miniwob/nope"}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "unknown_task");
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": -3, "task": "miniwob/click-button"}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "bad_seed");
    ws_send(&mut ws, json!({"type": "reset", "data": {"sed": 3, "task": "miniwob/click-button"}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "bad_request");
    ws_send(&mut ws, json!({"type": "step", "data": {"action": "done()"}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await), ("error".into(), "EXECUTION_ERROR".into(), "no_episode".into()));

    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 2, "task": "miniwob/click-button"}})).await;
    let r = ws_recv(&mut ws).await;
    assert_eq!(r["type"], "observation", "{r}");
    assert_eq!((r["data"]["reward"].as_f64(), r["data"]["done"].as_bool()), (Some(0.0), Some(false)));
    let obs = r["data"]["observation"].clone();
    assert!(obs["screenshot"].as_str().unwrap().len() > 1000);
    ws_send(&mut ws, json!({"type": "step", "data": {"action": 7}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "malformed_action");
    ws_send(&mut ws, json!({"type": "step", "data": {"action": "type(\"x\")"}})).await;
    let r = ws_recv(&mut ws).await;
    assert_eq!(r["data"]["observation"]["info"]["status"], "invalid_action", "{r}");
    assert_eq!(r["data"]["done"], false);
    // A refused reset ends the episode it was to replace: a client that asked for a new
    // episode must not step on in the old one by mistake.
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 2, "task": "miniwob/nope"}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "unknown_task");
    ws_send(&mut ws, json!({"type": "step", "data": {"action": target_click(&obs)}})).await;
    assert_eq!(err(&ws_recv(&mut ws).await).2, "no_episode");
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 2}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "observation", "the task stays the one before");
    ws_send(&mut ws, json!({"type": "step", "data": {"action": target_click(&obs)}})).await;
    let r = ws_recv(&mut ws).await;
    assert_eq!((r["data"]["reward"].as_f64(), r["data"]["done"].as_bool()), (Some(1.0), Some(true)), "{r}");
    assert_eq!(r["data"]["observation"]["terminated"], true);
    ws_send(&mut ws, json!({"type": "state"})).await;
    let st = ws_recv(&mut ws).await;
    assert_eq!(
        (st["type"].as_str(), st["data"]["episode_id"].as_u64(), st["data"]["step_count"].as_u64()),
        (Some("state"), Some(2), Some(1))
    );
    let profile = st["data"]["browser_profile_dir"].as_str().unwrap().to_string();
    assert_eq!(get(&s, "/health").await.body["sessions"], 1, "a connection is a session");
    ws_send(&mut ws, json!({"type": "close"})).await;
    assert_eq!(ws_recv(&mut ws).await, Value::Null, "the server closes the connection");
    assert_eq!(get(&s, "/health").await.body["sessions"], 0);
    assert!(!browser_alive(&profile), "close kills the browser");

    // A client that vanishes mid-episode frees its session.
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    ws_send(&mut ws, json!({"type": "reset", "data": {"task": "miniwob/click-test"}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "observation");
    drop(ws);
    let t0 = Instant::now();
    while get(&s, "/health").await.body["sessions"] != 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "a dropped connection frees its session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capacity_limit_holds_over_both_transports() {
    let s = Server::start(ServeConfig { max_sessions: 2, ..Default::default() }).await;
    let a = session(&s, "miniwob/click-test").await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    ws_send(&mut ws, json!({"type": "state"})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "state");
    let r = post(&s, "/v1/sessions", json!({"task": "miniwob/click-test"})).await;
    assert_eq!((r.status, code(&r)), (503, "capacity_reached"));
    assert_eq!(r.retry_after.as_deref(), Some("5"));
    let (mut full, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    let m = ws_recv(&mut full).await;
    assert_eq!(
        (m["data"]["code"].as_str(), m["data"]["max_sessions"].as_u64()),
        (Some("CAPACITY_REACHED"), Some(2)),
        "{m}"
    );
    // then closed with 1013 (try again later) and the reason, which a client that sends
    // before it reads gets
    let closed = tokio::time::timeout(Duration::from_secs(60), full.next()).await.expect("a close");
    let Some(Ok(Message::Close(Some(frame)))) = closed else { panic!("{closed:?}") };
    assert_eq!(u16::from(frame.code), 1013);
    assert!(frame.reason.contains("sessions are in use"), "{}", frame.reason);
    http("DELETE", format!("{}/v1/sessions/{a}", s.base), None, None).await;
    session(&s, "miniwob/click-test").await;
    drop(ws);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_sessions_are_reaped_and_their_browsers_killed() {
    let s =
        Server::start(ServeConfig { idle_timeout: Some(Duration::from_secs(2)), ..Default::default() }).await;
    let id = session(&s, "miniwob/click-test").await;
    let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 1})).await;
    assert_eq!(r.status, 200);
    let profile = get(&s, &format!("/v1/sessions/{id}")).await.body["browser_profile_dir"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(browser_alive(&profile));
    // Use keeps it: a step every second for 3 s.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(0)"})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    // Reading its state (a monitor polling) does not.
    let t0 = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if get(&s, &format!("/v1/sessions/{id}")).await.status == 404 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the reaper closes an idle session");
    }
    assert!(t0.elapsed() >= Duration::from_millis(1000), "not before its timeout");
    assert_eq!(code(&get(&s, &format!("/v1/sessions/{id}")).await), "unknown_session");
    assert!(!browser_alive(&profile), "its browser is killed");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unanswered_pings_free_a_websocket_session() {
    let s = Server::start(ServeConfig { ws_ping: Duration::from_millis(300), ..Default::default() }).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    ws_send(&mut ws, json!({"type": "reset", "data": {"task": "miniwob/click-test", "seed": 1}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "observation");
    assert_eq!(get(&s, "/health").await.body["sessions"], 1);
    // From here the client never reads, so it never answers a ping: like a peer whose
    // network went away without closing the connection.
    let t0 = Instant::now();
    while get(&s, "/health").await.body["sessions"] != 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the silent connection is closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(ws);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_browser_is_env_error_and_the_next_reset_works() {
    let s = Server::start(ServeConfig::default()).await;
    let id = session(&s, "miniwob/click-test").await;
    post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 1})).await;
    let profile = get(&s, &format!("/v1/sessions/{id}")).await.body["browser_profile_dir"]
        .as_str()
        .unwrap()
        .to_string();
    let killed = std::process::Command::new("pkill")
        .arg("-9")
        .arg("-f")
        .arg(format!("user-data-dir={profile}"))
        .status()
        .unwrap();
    assert!(killed.success());
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "click(10, 10)"})).await;
    assert_eq!(r.status, 200, "a browser failure is a normal answer: {:?}", r.body);
    assert_eq!(r.body["info"]["status"], "env_error");
    assert_eq!((r.body["truncated"].as_bool(), r.body["reward"].as_f64()), (Some(true), Some(0.0)));
    assert!(r.body["info"]["env_error"].as_str().is_some());
    // No screen to show until a reset starts a browser: not the last one, as if alive.
    let r = get(&s, &format!("/v1/sessions/{id}/render")).await;
    assert_eq!((r.status, code(&r)), (502, "env_error"));
    assert!(r.body["error"]["message"].as_str().unwrap().contains("reset"), "{:?}", r.body);
    let r = post(&s, &format!("/v1/sessions/{id}/reset"), json!({"seed": 2})).await;
    assert_eq!(r.body["info"]["status"], "running", "{:?}", r.body);
    assert_eq!(r.body["info"]["browser_started"], true, "a fresh browser");
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(10)"})).await;
    assert_eq!(r.body["info"]["status"], "running", "{:?}", r.body["info"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_guards_every_route_but_health() {
    let s = Server::start(ServeConfig { token: Some("s3cret".into()), ..Default::default() }).await;
    assert_eq!(get(&s, "/health").await.status, 200);
    let r = get(&s, "/v1/tasks").await;
    assert_eq!((r.status, code(&r)), (401, "unauthorized"));
    let r = http("GET", format!("{}/v1/tasks", s.base), None, Some("wrong")).await;
    assert_eq!(r.status, 401);
    assert_eq!(http("GET", format!("{}/v1/tasks", s.base), None, Some("s3cret")).await.status, 200);
    assert!(tokio_tungstenite::connect_async(s.ws()).await.is_err(), "no token, no upgrade");
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}?token=s3cret", s.ws())).await.unwrap();
    ws_send(&mut ws, json!({"type": "state"})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "state");
    drop(ws);
    s.stop().await;
}

#[test]
fn serving_beyond_loopback_without_a_token_is_refused() {
    // serve-policy too: the policy would run for anyone who reaches it.
    for (args, names) in [
        (&["serve", "--bind", "0.0.0.0:0"][..], "--token"),
        (&["serve-policy", "/nonexistent/run", "--bind", "0.0.0.0:0"][..], "API key"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
            .args(args)
            .env_remove("GUIRL_SERVE_TOKEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("without a token") && err.contains(names), "{err}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["serve", "--max-sessions", "0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-sessions must be at least 1"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["serve", "--bind", "127.0.0.1:0", "--reward-models", "/nonexistent/models"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--reward-models /nonexistent/models: not a folder")
    );
}

/// A bad `--bind` says which part is wrong (it asked whether the port was taken).
#[test]
fn a_bad_bind_says_which_part_is_wrong() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    // (serve-policy listens through the same code.)
    let cases: [(&str, &str, &str); 5] = [
        ("serve", "localhost:abc", "the port \"abc\" is not a number"),
        ("serve", "8765", "is not ADDR:PORT"),
        ("serve", "no-such-host.invalid:8765", "does not resolve"),
        ("serve", "192.0.2.1:8765", "this machine has no address 192.0.2.1"),
        ("serve", &taken, "the port is taken"),
    ];
    for (cmd, bind, said) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl"))
            .args([cmd, "--bind", bind])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd} --bind {bind}: {err}");
        assert!(err.contains(said) && !err.contains("is the port taken"), "{cmd} --bind {bind}: {err}");
    }
}
