//! `guirl serve`'s binary frames and screenshot encodings against real browsers: the same
//! screen as JSON/PNG and as binary raw/PNG gives identical pixels (JPEG close), over REST
//! (`Accept: application/octet-stream`) and the WebSocket (`"binary": true`); the JSON
//! form is unchanged; unknown encodings and out-of-range JPEG qualities are refused with
//! a message naming what is accepted. Shared-memory frames give the same pixels, stay
//! private, go with their session and are refused to a client the server cannot see on
//! loopback.

use crate::server;
use futures::{SinkExt, StreamExt};

use guirl::serve::env_server::ServeConfig;
use guirl::serve::env_server::{frame, router, shm};
use image::RgbImage;
use serde_json::{json, Value};
use server::{http_accept, Reply, Server};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const OCTET: &str = "application/octet-stream";
const TASK: &str = "miniwob/click-button";

async fn post(s: &Server, path: &str, body: Value, accept: Option<&str>) -> Reply {
    post_to(&s.base, path, body, accept).await
}

async fn post_to(base: &str, path: &str, body: Value, accept: Option<&str>) -> Reply {
    http_accept("POST", format!("{base}{path}"), Some(body.to_string()), None, accept).await
}

fn error(r: &Reply) -> (u16, &str, &str) {
    let e = &r.body["error"];
    (r.status, e["code"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or("?"))
}

/// The pixels of a JSON observation (base64 PNG, JPEG or raw).
fn json_pixels(obs: &Value) -> RgbImage {
    let bytes = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        obs["screenshot"].as_str().expect("a base64 screenshot"),
    )
    .unwrap();
    pixels(obs, &bytes)
}

/// The pixels of `bytes` in `obs`' screenshot_format.
fn pixels(obs: &Value, bytes: &[u8]) -> RgbImage {
    let (w, h) = (obs["width"].as_u64().unwrap() as u32, obs["height"].as_u64().unwrap() as u32);
    match obs["screenshot_format"].as_str().unwrap() {
        "raw" => RgbImage::from_raw(w, h, bytes.to_vec()).expect("width x height x 3 bytes"),
        _ => image::load_from_memory(bytes).unwrap().to_rgb8(),
    }
}

/// Mean absolute difference per channel.
fn mean_diff(a: &RgbImage, b: &RgbImage) -> f64 {
    assert_eq!(a.dimensions(), b.dimensions());
    let sum: u64 = a.as_raw().iter().zip(b.as_raw()).map(|(x, y)| x.abs_diff(*y) as u64).sum();
    sum as f64 / a.as_raw().len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_binary_answers_carry_the_same_pixels() {
    let s = Server::start(ServeConfig::default()).await;
    let r = post(&s, "/v1/sessions", json!({"task": TASK}), None).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["session_id"].as_str().unwrap().to_string();
    let reset = format!("/v1/sessions/{id}/reset");

    // The JSON form is the default, whatever else the client accepts.
    let json_png = post(&s, &reset, json!({"seed": 3}), Some("application/json, */*")).await;
    assert_eq!(json_png.content_type.as_deref(), Some("application/json"));
    let obs = &json_png.body["observation"];
    assert_eq!(obs["screenshot_format"], "png");
    let reference = json_pixels(obs);
    assert_eq!(reference.dimensions(), (160, 210));

    // The same seed as binary frames: raw and png give the same pixels, jpeg close ones.
    for (fmt, quality) in [("raw", None), ("png", None), ("jpeg", Some(90))] {
        let mut body = json!({"seed": 3, "screenshot": fmt});
        if let Some(q) = quality {
            body["jpeg_quality"] = json!(q);
        }
        let r = post(&s, &reset, body, Some(OCTET)).await;
        assert_eq!((r.status, r.content_type.as_deref()), (200, Some(OCTET)), "{fmt}");
        let (head, image) = frame::decode(&r.bytes).unwrap();
        let obs = &head["observation"];
        assert_eq!((obs["screenshot"].clone(), obs["screenshot_format"].as_str()), (Value::Null, Some(fmt)));
        assert_eq!(head["info"]["seed"], 3);
        assert_eq!(head["terminated"], false);
        assert_eq!(obs["instruction"], json_png.body["observation"]["instruction"]);
        let px = pixels(obs, image);
        if fmt == "jpeg" {
            let d = mean_diff(&px, &reference);
            assert!(d > 0.0 && d < 4.0, "jpeg at quality 90 is close to the PNG: mean diff {d}");
        } else {
            assert!(px == reference, "{fmt} over a binary frame gives the PNG's pixels");
        }
        if fmt == "raw" {
            assert_eq!(image.len(), 160 * 210 * 3, "RGB8, no compression");
        }
    }

    // A raw screenshot in the JSON form is base64 of the same RGB bytes.
    let r = post(&s, &reset, json!({"seed": 3, "screenshot": "raw"}), None).await;
    assert!(json_pixels(&r.body["observation"]) == reference);

    // A binary step: the gymnasium 5-tuple's fields in the JSON, the image after it; a
    // session created with `raw` sends raw unless a request says otherwise.
    let r = post(&s, "/v1/sessions", json!({"task": TASK, "screenshot": "raw"}), None).await;
    let raw_id = r.body["session_id"].as_str().unwrap().to_string();
    post(&s, &format!("/v1/sessions/{raw_id}/reset"), json!({"seed": 3}), Some(OCTET)).await;
    let r = post(&s, &format!("/v1/sessions/{raw_id}/step"), json!({"action": "wait(0)"}), Some(OCTET)).await;
    let (head, image) = frame::decode(&r.bytes).unwrap();
    assert_eq!(head["observation"]["screenshot_format"], "raw");
    assert_eq!(head["info"]["status"], "running");
    assert!(head["reward"].is_number() && head["truncated"] == false, "{head}");
    assert_eq!(image.len(), 160 * 210 * 3);
    let r = post(
        &s,
        &format!("/v1/sessions/{raw_id}/step"),
        json!({"action": "wait(0)", "screenshot": "none"}),
        Some(OCTET),
    )
    .await;
    let (head, image) = frame::decode(&r.bytes).unwrap();
    assert_eq!((head["observation"]["screenshot_format"].as_str(), image.len()), (Some("none"), 0));

    // Errors stay JSON bodies with their status, whatever Accept says.
    let step = format!("/v1/sessions/{id}/step");
    for (body, words) in [
        (json!({"action": "wait(0)", "screenshot": "webp"}), ["\"png\"", "\"jpeg\"", "\"raw\"", "WebP"]),
        (
            json!({"action": "wait(0)", "screenshot": "jpeg", "jpeg_quality": 0}),
            ["jpeg_quality = 0", "1 to 100", "", ""],
        ),
        (json!({"action": "wait(0)", "jpeg_quality": 101}), ["jpeg_quality = 101", "1 to 100", "", ""]),
        (
            json!({"action": "wait(0)", "jpeg_quality": "high"}),
            ["jpeg_quality = \"high\"", "1 to 100", "", ""],
        ),
    ] {
        let r = post(&s, &step, body.clone(), Some(OCTET)).await;
        let (status, code, message) = error(&r);
        assert_eq!(
            (status, code, r.content_type.as_deref()),
            (400, "bad_option", Some("application/json")),
            "{body}"
        );
        assert!(words.iter().all(|w| message.contains(w)), "{body}: {message}");
    }
    let r = post(&s, &reset, json!({"seed": 1, "screenshot": "bmp"}), Some(OCTET)).await;
    assert_eq!(error(&r).1, "bad_option");
    let r = post(&s, "/v1/sessions", json!({"task": TASK, "jpeg_quality": 200}), None).await;
    assert_eq!((error(&r).0, error(&r).1), (400, "bad_option"));
    assert!(error(&r).2.contains("1 to 100"), "{}", error(&r).2);
    let r = post(&s, "/v1/sessions", json!({"task": TASK, "screenshot": "webp"}), None).await;
    assert!(error(&r).2.contains("\"raw\""), "{}", error(&r).2);
    s.stop().await;
}

async fn ws_send(ws: &mut (impl SinkExt<Message> + Unpin), v: Value) {
    let _ = ws.send(Message::Text(v.to_string().into())).await;
}

/// The next message: text as JSON (no image), or a binary frame's JSON and image.
async fn ws_recv(
    ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> (Value, Option<Vec<u8>>) {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await.expect("an answer") {
            Some(Ok(Message::Text(t))) => return (serde_json::from_str(&t).unwrap(), None),
            Some(Ok(Message::Binary(b))) => {
                let (head, image) = frame::decode(&b).unwrap();
                return (head, Some(image.to_vec()));
            }
            Some(Ok(Message::Close(_))) | None => return (Value::Null, None),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn websocket_binary_frames_when_asked() {
    let s = Server::start(ServeConfig::default()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    // OpenEnv's form by default: JSON text, base64 PNG.
    ws_send(&mut ws, json!({"type": "reset", "data": {"task": TASK, "seed": 4}})).await;
    let (m, image) = ws_recv(&mut ws).await;
    assert!(image.is_none(), "text by default");
    let reference = json_pixels(&m["data"]["observation"]);

    // "binary" on a reset holds for the connection.
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 4, "binary": true, "screenshot": "raw"}}))
        .await;
    let (m, image) = ws_recv(&mut ws).await;
    assert_eq!(m["type"], "observation", "{m}");
    let obs = &m["data"]["observation"];
    assert_eq!((obs["screenshot"].clone(), obs["screenshot_format"].as_str()), (Value::Null, Some("raw")));
    assert_eq!(obs["info"]["seed"], 4);
    assert!(pixels(obs, &image.unwrap()) == reference, "raw frame = the PNG's pixels");
    ws_send(&mut ws, json!({"type": "step", "data": {"action": "wait(0)"}})).await;
    let (m, image) = ws_recv(&mut ws).await;
    assert_eq!((m["data"]["done"].as_bool(), image.map(|i| i.len())), (Some(false), Some(160 * 210 * 3)));
    // A step may ask for its own encoding, or for text.
    ws_send(&mut ws, json!({"type": "step", "data": {"action": "wait(0)", "screenshot": "png"}})).await;
    let (m, image) = ws_recv(&mut ws).await;
    assert_eq!(m["data"]["observation"]["screenshot_format"], "png");
    assert!(image.unwrap().starts_with(b"\x89PNG"));
    ws_send(&mut ws, json!({"type": "step", "data": {"action": "wait(0)", "binary": false}})).await;
    let (m, image) = ws_recv(&mut ws).await;
    assert!(image.is_none() && m["data"]["observation"]["screenshot_format"] == "raw");
    assert_eq!(json_pixels(&m["data"]["observation"]).dimensions(), (160, 210));
    // State and errors stay text.
    ws_send(&mut ws, json!({"type": "state"})).await;
    let (m, image) = ws_recv(&mut ws).await;
    assert!(image.is_none() && m["type"] == "state");
    for (data, words) in [
        (json!({"action": "wait(0)", "binary": "yes"}), ["binary = \"yes\"", "true"]),
        (json!({"action": "wait(0)", "screenshot": "gif"}), ["\"raw\"", "\"png\""]),
        (json!({"action": "wait(0)", "jpeg_quality": 0}), ["jpeg_quality = 0", "1 to 100"]),
    ] {
        ws_send(&mut ws, json!({"type": "step", "data": data.clone()})).await;
        let (m, image) = ws_recv(&mut ws).await;
        let d = &m["data"];
        assert!(image.is_none(), "{data}");
        assert_eq!(
            (d["code"].as_str(), d["error"].as_str()),
            (Some("VALIDATION_ERROR"), Some("bad_option")),
            "{m}"
        );
        assert!(words.iter().all(|w| d["message"].as_str().unwrap().contains(w)), "{m}");
    }
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 4, "jpeg_quality": 101}})).await;
    assert_eq!(ws_recv(&mut ws).await.0["data"]["error"], "bad_option");
    // The refused reset did not change the connection's choice (it ended the episode, so
    // the next message is a reset).
    ws_send(&mut ws, json!({"type": "reset", "data": {"seed": 4}})).await;
    assert!(ws_recv(&mut ws).await.1.is_some(), "still binary");
    ws_send(&mut ws, json!({"type": "close"})).await;
    s.stop().await;
}

/// The pixels an observation's `screenshot_shm` names.
fn shm_pixels(obs: &Value) -> RgbImage {
    assert_eq!((obs["screenshot_format"].as_str(), &obs["screenshot"]), (Some("shm"), &Value::Null), "{obs}");
    let at: shm::FrameRef = serde_json::from_value(obs["screenshot_shm"].clone()).unwrap();
    let (w, h) = (obs["width"].as_u64().unwrap() as u32, obs["height"].as_u64().unwrap() as u32);
    RgbImage::from_raw(w, h, shm::read(&at).unwrap()).expect("width x height x 3 bytes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_memory_frames_carry_the_same_pixels_and_go_with_their_session() {
    let s = Server::start(ServeConfig::default()).await;
    let r = post(&s, "/v1/sessions", json!({"task": TASK, "screenshot": "shm"}), None).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["session_id"].as_str().unwrap().to_string();
    // The file exists from creation, so a client can check it opens it before a frame.
    let path = std::path::PathBuf::from(r.body["screenshot_shm"]["path"].as_str().expect("the file's path"));
    let folder = path.parent().unwrap().to_path_buf();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "the owner's only");
    assert_eq!(std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777, 0o700);
    let reset = format!("/v1/sessions/{id}/reset");
    let png = post(&s, &reset, json!({"seed": 3, "screenshot": "png"}), None).await;
    let reference = json_pixels(&png.body["observation"]);

    // JSON and binary answers name the file; a binary frame then has no image part.
    let r = post(&s, &reset, json!({"seed": 3}), None).await;
    let obs = &r.body["observation"];
    assert_eq!(obs["screenshot_shm"]["path"].as_str(), path.to_str());
    assert!(shm_pixels(obs) == reference, "shm gives the PNG's pixels");
    let first: shm::FrameRef = serde_json::from_value(obs["screenshot_shm"].clone()).unwrap();
    // A client that maps the file reads the same pixels in place.
    let mut map = shm::FrameMap::open(&first.path).unwrap();
    assert_eq!(map.frame(&first).unwrap().to_vec(), reference.as_raw().clone(), "read in place");
    let r = post(&s, &format!("/v1/sessions/{id}/step"), json!({"action": "wait(0)"}), Some(OCTET)).await;
    let (head, image) = frame::decode(&r.bytes).unwrap();
    assert!(image.is_empty(), "no pixels cross the socket");
    assert_eq!(head["observation"]["screenshot_shm"]["seq"], first.seq + 1);
    assert_eq!(shm_pixels(&head["observation"]).dimensions(), (160, 210));
    // The server's own share of the step (the shm write in it) is reported beside the env's.
    let t = &head["info"]["timings"];
    let (own, env) = (t["serve_ms"].as_f64().expect("serve_ms"), t["total_ms"].as_f64().unwrap());
    assert!(own > 0.0 && env > 0.0, "{t}");
    let stale = shm::read(&first).unwrap_err().0;
    assert!(stale.contains("overwritten"), "a frame read after the next answer is refused: {stale}");
    assert!(map.frame(&first).is_err(), "in place too");
    let next: shm::FrameRef = serde_json::from_value(head["observation"]["screenshot_shm"].clone()).unwrap();
    assert_eq!(map.frame(&next).unwrap().to_vec(), shm_pixels(&head["observation"]).into_raw());

    // A WebSocket session has its own file.
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws()).await.unwrap();
    let reset_ws =
        json!({"type": "reset", "data": {"task": TASK, "seed": 3, "screenshot": "shm", "binary": true}});
    ws_send(&mut ws, reset_ws).await;
    let (m, image) = ws_recv(&mut ws).await;
    let obs = &m["data"]["observation"];
    assert_eq!(image.map(|i| i.len()), Some(0));
    assert!(shm_pixels(obs) == reference);
    let ws_path = std::path::PathBuf::from(obs["screenshot_shm"]["path"].as_str().unwrap());
    assert_ne!(ws_path, path);

    // Closing a session removes its file; stopping the server, the folder.
    let r = http_accept("DELETE", format!("{}/v1/sessions/{id}", s.base), None, None, None).await;
    assert_eq!(r.status, 200);
    assert!(!path.exists(), "the closed session's file is gone");
    ws_send(&mut ws, json!({"type": "close"})).await;
    let _ = ws_recv(&mut ws).await;
    for _ in 0..100 {
        if !ws_path.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!ws_path.exists(), "the closed connection's file is gone");
    s.stop().await;
    assert!(!folder.exists(), "the server's frame folder is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_memory_frames_are_refused_to_a_client_not_seen_on_loopback() {
    // Served without connection info, the server cannot tell where a client is: it then
    // treats every client as remote, as it does one from another address.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (app, shared) = router(ServeConfig::default());
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let refused = |r: &Reply| {
        let (status, code, message) = error(r);
        assert_eq!((status, code), (400, "bad_option"), "{:?}", r.body);
        assert!(message.contains("loopback") && message.contains("\"raw\""), "{message}");
    };
    refused(&post_to(&base, "/v1/sessions", json!({"task": TASK, "screenshot": "shm"}), None).await);
    let r = post_to(&base, "/v1/sessions", json!({"task": TASK, "screenshot": "raw"}), None).await;
    let id = r.body["session_id"].as_str().unwrap().to_string();
    let reset = format!("/v1/sessions/{id}/reset");
    refused(&post_to(&base, &reset, json!({"seed": 1, "screenshot": "shm"}), Some(OCTET)).await);
    let r = post_to(&base, &reset, json!({"seed": 1}), Some(OCTET)).await;
    assert_eq!(r.status, 200, "the session goes on with raw");
    refused(
        &post_to(
            &base,
            &format!("/v1/sessions/{id}/step"),
            json!({"action": "wait(0)", "screenshot": "shm"}),
            None,
        )
        .await,
    );
    let (mut ws, _) =
        tokio_tungstenite::connect_async(base.replace("http://", "ws://") + "/ws").await.unwrap();
    ws_send(&mut ws, json!({"type": "reset", "data": {"task": TASK, "screenshot": "shm"}})).await;
    let (m, _) = ws_recv(&mut ws).await;
    assert_eq!(m["data"]["error"], "bad_option", "{m}");
    assert!(m["data"]["message"].as_str().unwrap().contains("\"raw\""), "{m}");
    ws_send(&mut ws, json!({"type": "close"})).await;
    served.abort();
    shared.table.close_all().await;
}
