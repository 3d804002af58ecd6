//! The clients of the serve_speed bench (main.rs): one env each way (in-process, REST, WebSocket;
//! JSON or binary frames), each stepping the same seeded random actions and ending every
//! step with the screenshot's pixels in hand.

use futures::{SinkExt, StreamExt};
use guirl::env::{EnvConfig, GuiEnv};
use guirl::serve::env_server::{frame, shm};
use guirl::tasks::Task;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// A task the bench steps, and how a server session names it.
pub struct Target {
    /// Its name in the tables.
    pub name: &'static str,
    task: Arc<dyn Task>,
    create: Value,
    w: i32,
    h: i32,
}

impl Target {
    /// A MiniWoB++ task (160×210).
    pub fn miniwob() -> Target {
        let id = "miniwob/click-checkboxes";
        Target {
            name: id,
            task: guirl::tasks::load_task(id).unwrap(),
            create: json!({"task": id}),
            w: 160,
            h: 210,
        }
    }
    /// A website page at 1280×720 (environments/websites/newsletter.toml).
    pub fn website() -> Target {
        let text = include_str!("../../environments/websites/newsletter.toml");
        let task = guirl::tasks::website::WebsiteTask::from_text(
            "spec:newsletter".into(),
            text,
            Some((1280, 720)),
            None,
        )
        .unwrap();
        Target {
            name: "website 1280×720",
            task: Arc::new(task),
            create: json!({"task_spec": text, "viewport": {"width": 1280, "height": 720}}),
            w: 1280,
            h: 720,
        }
    }
}

/// How a client reaches its env.
#[derive(Clone, Debug)]
pub enum Path {
    /// `GuiEnv` in this process.
    InProcess,
    /// REST; binary frames or JSON; the screenshot encoding.
    Rest { binary: bool, shot: &'static str },
    /// The WebSocket; binary frames or JSON; the screenshot encoding.
    Ws { binary: bool, shot: &'static str },
    /// The WebSocket in JSON/PNG on a server with Nagle's algorithm on.
    WsNagle,
}

impl Path {
    /// Its name in the tables.
    pub fn label(&self) -> String {
        let form = |b: &bool, s: &str| if *b { format!("binary {s}") } else { format!("JSON, base64 {s}") };
        match self {
            Path::InProcess => "in-process GuiEnv".into(),
            Path::Rest { binary, shot } => format!("REST, {}", form(binary, shot)),
            Path::Ws { binary, shot } => format!("WebSocket, {}", form(binary, shot)),
            Path::WsNagle => "WebSocket, JSON, base64 png, Nagle on (before)".into(),
        }
    }
    /// The latency table's paths (in-process first).
    pub fn latency_rows() -> Vec<Path> {
        vec![
            Path::InProcess,
            Path::Rest { binary: false, shot: "png" },
            Path::Ws { binary: false, shot: "png" },
            Path::WsNagle,
            Path::Rest { binary: true, shot: "raw" },
            Path::Ws { binary: true, shot: "raw" },
            Path::Rest { binary: true, shot: "shm" },
            Path::Ws { binary: true, shot: "shm" },
            Path::Rest { binary: true, shot: "shm copied" },
            Path::Rest { binary: true, shot: "png" },
            Path::Rest { binary: true, shot: "jpeg" },
        ]
    }
}

type Http = hyper_util::client::legacy::Client<HttpConnector, axum::body::Body>;
type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

// A few connections per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Conn {
    InProc(Box<GuiEnv>),
    Rest { http: Http, base: String, id: String, binary: bool },
    Ws { ws: Box<Ws>, binary: bool },
}

/// One env, its random actions and its episode counter.
pub struct Client {
    conn: Conn,
    shm: ShmRead,
    rng: ChaCha8Rng,
    seed: u64,
    episode: u64,
    w: i32,
    h: i32,
}

/// A POST's content type and body.
async fn post(http: &Http, url: &str, body: &Value, binary: bool) -> (String, axum::body::Bytes) {
    let accept = if binary { frame::MEDIA_TYPE } else { "application/json" };
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let resp = http.request(req).await.unwrap();
    let ok = resp.status().is_success();
    let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX).await.unwrap();
    assert!(ok, "{url}: {}", String::from_utf8_lossy(&bytes));
    (ct, bytes)
}

/// How a client takes shared-memory frames: read in place through a mapping it keeps
/// (`shm`, as the Python client's `zero_copy` arrays), or copied out (`shm copied`, the
/// Python client's default: its arrays outlive the next answer).
enum ShmRead {
    Copy,
    InPlace(Option<shm::FrameMap>),
}

/// The answer's JSON and the screenshot's pixels' checksum, from JSON (base64), a
/// binary frame or shared memory. Raw pixels in a frame are read in place (as the Python
/// client's array view does); shared-memory pixels as `shm` says; PNG and JPEG are decoded.
fn answer(bytes: &[u8], shm: &mut ShmRead) -> (Value, Option<u64>) {
    let (head, image) = match frame::decode(bytes) {
        Ok((head, image)) => (head, Some(image)),
        Err(_) => (serde_json::from_slice::<Value>(bytes).unwrap(), None),
    };
    let obs =
        head.get("observation").or_else(|| head["data"].get("observation")).cloned().unwrap_or(Value::Null);
    let b64;
    let copied;
    let bytes = match (image, obs["screenshot"].as_str()) {
        _ if obs["screenshot_format"] == "shm" => {
            let at: shm::FrameRef = serde_json::from_value(obs["screenshot_shm"].clone()).unwrap();
            match shm {
                ShmRead::Copy => {
                    copied = shm::read(&at).unwrap();
                    &copied[..]
                }
                ShmRead::InPlace(map) => {
                    let map = match map {
                        Some(m) => m,
                        None => map.insert(shm::FrameMap::open(&at.path).unwrap()),
                    };
                    let f = map.frame(&at).unwrap();
                    let w = obs["width"].as_u64().unwrap() as usize;
                    let i = ((obs["height"].as_u64().unwrap() as usize / 2) * w + w / 2) * 3;
                    let px = (i..i + 3).map(|k| f.get(k).unwrap() as u64).sum();
                    return (head, Some(px));
                }
            }
        }
        (Some(i), _) => i,
        (None, Some(s)) => {
            b64 = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap();
            &b64[..]
        }
        (None, None) => return (head, None),
    };
    let (w, h) = (obs["width"].as_u64().unwrap() as u32, obs["height"].as_u64().unwrap() as u32);
    // One pixel read back proves the image is there without another pass over it.
    let px = match obs["screenshot_format"].as_str() {
        Some("raw") | Some("shm") => {
            image::ImageBuffer::<image::Rgb<u8>, &[u8]>::from_raw(w, h, bytes)
                .unwrap()
                .get_pixel(w / 2, h / 2)
                .0
        }
        _ => image::load_from_memory(bytes).unwrap().to_rgb8().get_pixel(w / 2, h / 2).0,
    };
    (head, Some(px.iter().map(|&c| c as u64).sum()))
}

async fn ws_ask(ws: &mut Ws, v: Value, shm: &mut ShmRead) -> (Value, Option<u64>) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => return answer(t.as_bytes(), shm),
            Some(Ok(Message::Binary(b))) => return answer(&b, shm),
            Some(Ok(_)) => continue,
            other => panic!("the connection ended: {other:?}"),
        }
    }
}

impl Client {
    /// Open an env on `path` for `target` and reset it to `seed`.
    pub async fn open(path: Path, target: &Target, base: &str, seed: u64) -> Client {
        let mut shm = ShmRead::InPlace(None);
        if let Path::Rest { shot: "shm copied", .. } | Path::Ws { shot: "shm copied", .. } = path {
            shm = ShmRead::Copy;
        }
        let mut opts = target.create.clone();
        opts["max_steps"] = json!(10_000);
        let conn = match path {
            Path::InProcess => {
                let cfg = EnvConfig { max_steps: Some(10_000), ..Default::default() };
                Conn::InProc(Box::new(GuiEnv::new(target.task.clone(), cfg)))
            }
            Path::Rest { binary, shot } => {
                let mut c = HttpConnector::new();
                c.set_nodelay(true);
                let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(c);
                opts["screenshot"] = json!(shot.split(' ').next());
                let (_, b) = post(&http, &format!("{base}/v1/sessions"), &opts, false).await;
                let id =
                    serde_json::from_slice::<Value>(&b).unwrap()["session_id"].as_str().unwrap().to_string();
                Conn::Rest { http, base: base.to_string(), id, binary }
            }
            Path::Ws { .. } | Path::WsNagle => {
                let (binary, shot) = match path {
                    Path::Ws { binary, shot } => (binary, shot),
                    _ => (false, "png"),
                };
                let url = base.replace("http://", "ws://") + "/ws";
                let (mut ws, _) =
                    tokio_tungstenite::connect_async_with_config(url, None, true).await.unwrap();
                opts["screenshot"] = json!(shot.split(' ').next());
                opts["binary"] = json!(binary);
                opts["seed"] = json!(seed);
                let (r, _) = ws_ask(&mut ws, json!({"type": "reset", "data": opts}), &mut shm).await;
                assert_eq!(r["type"], "observation", "{r}");
                Conn::Ws { ws: Box::new(ws), binary }
            }
        };
        let mut c = Client {
            conn,
            shm,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seed,
            episode: 0,
            w: target.w,
            h: target.h,
        };
        if !matches!(c.conn, Conn::Ws { .. }) {
            c.reset().await;
        }
        c
    }

    async fn reset(&mut self) {
        let seed = self.seed + self.episode;
        match &mut self.conn {
            Conn::InProc(env) => {
                env.reset(seed).await.unwrap();
            }
            Conn::Rest { http, base, id, binary } => {
                let (_, b) =
                    post(http, &format!("{base}/v1/sessions/{id}/reset"), &json!({"seed": seed}), *binary)
                        .await;
                assert_eq!(answer(&b, &mut self.shm).0["info"]["status"], "running");
            }
            Conn::Ws { ws, .. } => {
                let (r, _) =
                    ws_ask(ws, json!({"type": "reset", "data": {"seed": seed}}), &mut self.shm).await;
                assert_eq!(r["type"], "observation", "{r}");
            }
        }
    }

    /// One random action: its latency as the client sees it, the env's own step time
    /// (`info.timings.total_ms`) and the server's own work around it (`serve_ms`, 0
    /// in-process), all in ms; latency less the env's time is what the path adds. The
    /// reset after an episode's end is not timed.
    pub async fn step(&mut self) -> (f64, f64, f64) {
        let (x, y) = (self.rng.gen_range(0..self.w), self.rng.gen_range(0..self.h));
        let action = match self.rng.gen_range(0..10) {
            0 => format!("scroll({x}, {y}, 0, 40)"),
            1 => "wait(0)".into(),
            _ => format!("click({x}, {y})"),
        };
        let t = Instant::now();
        let (done, env_ms, own_ms) = match &mut self.conn {
            Conn::InProc(env) => {
                let out = env.step_text(&action).await.unwrap();
                std::hint::black_box(out.obs.screenshot.get_pixel(self.w as u32 / 2, self.h as u32 / 2));
                (out.terminated || out.truncated, out.info.timings.total_ms, 0.0)
            }
            Conn::Rest { http, base, id, binary } => {
                let url = format!("{base}/v1/sessions/{id}/step");
                let (_, b) = post(http, &url, &json!({"action": action}), *binary).await;
                let (r, px) = answer(&b, &mut self.shm);
                assert!(std::hint::black_box(px).is_some() && r["info"]["status"].is_string(), "{r}");
                let t = &r["info"]["timings"];
                (
                    r["terminated"] == true || r["truncated"] == true,
                    t["total_ms"].as_f64().unwrap(),
                    t["serve_ms"].as_f64().unwrap(),
                )
            }
            Conn::Ws { ws, binary } => {
                let msg = json!({"type": "step", "data": {"action": action}});
                let (r, px) = ws_ask(ws, msg, &mut self.shm).await;
                assert!(
                    r["type"] == "observation" && std::hint::black_box(px).is_some(),
                    "{r} (binary {binary})"
                );
                let t = &r["data"]["observation"]["info"]["timings"];
                (r["data"]["done"] == true, t["total_ms"].as_f64().unwrap(), t["serve_ms"].as_f64().unwrap())
            }
        };
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if done {
            self.episode += 1;
            self.reset().await;
        }
        (ms, env_ms, own_ms)
    }

    /// Close the env (and its session).
    pub async fn close(self) {
        match self.conn {
            Conn::InProc(mut env) => env.close().await,
            Conn::Rest { http, base, id, .. } => {
                let req = http::Request::delete(format!("{base}/v1/sessions/{id}"))
                    .body(axum::body::Body::empty())
                    .unwrap();
                assert!(http.request(req).await.unwrap().status().is_success());
            }
            Conn::Ws { mut ws, .. } => {
                let _ = ws.send(Message::Text(json!({"type": "close"}).to_string().into())).await;
            }
        }
    }
}

/// `n` WebSocket clients that drop their connection mid-episode and `n` REST clients that
/// cut a step request off before it is answered.
pub fn vanishing(base: &str, n: u64) -> Vec<tokio::task::JoinHandle<()>> {
    let task = "miniwob/click-checkboxes";
    let mut out = Vec::new();
    for i in 0..n {
        let b = base.to_string();
        out.push(tokio::spawn(async move {
            let (mut ws, _) =
                tokio_tungstenite::connect_async(b.replace("http://", "ws://") + "/ws").await.unwrap();
            let reset = json!({"type": "reset", "data": {"task": task, "seed": i}});
            let _ = ws.send(Message::Text(reset.to_string().into())).await;
            let _ = ws.next().await;
            let step = json!({"type": "step", "data": {"action": "click(5, 5)"}});
            let _ = ws.send(Message::Text(step.to_string().into())).await;
            drop(ws);
        }));
        let b = base.to_string();
        out.push(tokio::task::spawn_blocking(move || {
            let created: Value =
                ureq::post(&format!("{b}/v1/sessions")).send_json(json!({"task": task})).unwrap().into_json().unwrap();
            let id = created["session_id"].as_str().unwrap().to_string();
            ureq::post(&format!("{b}/v1/sessions/{id}/reset")).send_json(json!({"seed": i})).unwrap();
            let addr = b.trim_start_matches("http://").to_string();
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let body = json!({"action": "click(5, 5)"}).to_string();
            let _ = write!(
                s,
                "POST /v1/sessions/{id}/step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            drop(s);
        }));
    }
    out
}
