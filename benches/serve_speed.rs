//! What `guirl serve` costs over the in-process env, and whether it holds under load.
//! A plain `main` (`harness = false`) that prints a markdown report and writes
//! `target/serve_speed.json`.
//!
//! ```text
//! cargo bench --bench serve_speed -- [steps=300] [load_sessions=16] [load_steps=200]
//! ```
//!
//! 1. Median step latency on one task, the same random actions: in-process `GuiEnv`,
//!    REST (keep-alive HTTP), OpenEnv WebSocket, and REST without screenshots.
//! 2. Aggregate steps/s of 8 envs at once: in-process vs 8 REST clients of one server.
//! 3. Load: N sessions x M random steps (half REST, half WebSocket) plus clients that
//!    vanish mid-episode (dropped WebSockets, REST connections cut mid-request); then
//!    every request must have had its answer, and no session or browser may be left.

use futures::{SinkExt, StreamExt};
use guirl::env::{EnvConfig, GuiEnv};
use guirl::serve::env_server::{serve, ServeConfig};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const TASK: &str = "miniwob/click-checkboxes";
const W: i32 = 160;
const H: i32 = 210;

/// A random action inside the screenshot (clicks mostly, some scrolls and waits).
fn random_action(rng: &mut impl Rng) -> String {
    let (x, y) = (rng.gen_range(0..W), rng.gen_range(0..H));
    match rng.gen_range(0..10) {
        0 => format!("scroll({x}, {y}, 0, 40)"),
        1 => "wait(0)".into(),
        _ => format!("click({x}, {y})"),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn p95(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get((v.len() as f64 * 0.95) as usize).copied().unwrap_or(f64::NAN)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Step latencies of the in-process env.
async fn in_process(steps: usize, seed: u64) -> Vec<f64> {
    let cfg = EnvConfig { max_steps: Some(10_000), ..Default::default() };
    let mut env = GuiEnv::new(guirl::tasks::load_task(TASK).unwrap(), cfg);
    env.reset(seed).await.unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::with_capacity(steps);
    let mut episode = 0;
    while lat.len() < steps {
        let a = random_action(&mut rng);
        let t = Instant::now();
        let out = env.step_text(&a).await.unwrap();
        lat.push(ms(t));
        if out.terminated || out.truncated {
            episode += 1;
            env.reset(seed + episode).await.unwrap();
        }
    }
    env.close().await;
    lat
}

/// Step latencies over REST (blocking client on its own thread, keep-alive).
fn rest_client(
    base: String,
    steps: usize,
    seed: u64,
    screenshot: &'static str,
    answered: Arc<AtomicU64>,
) -> Vec<f64> {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
    let created: Value = agent
        .post(&format!("{base}/v1/sessions"))
        .send_json(json!({"task": TASK, "max_steps": 10_000, "screenshot": screenshot}))
        .unwrap()
        .into_json()
        .unwrap();
    let id = created["session_id"].as_str().unwrap().to_string();
    let reset = |s: u64| {
        let r: Value = agent
            .post(&format!("{base}/v1/sessions/{id}/reset"))
            .send_json(json!({"seed": s}))
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(r["info"]["status"], "running", "{r}");
    };
    reset(seed);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::with_capacity(steps);
    let mut episode = 0;
    while lat.len() < steps {
        let a = random_action(&mut rng);
        let t = Instant::now();
        let r: Value = agent
            .post(&format!("{base}/v1/sessions/{id}/step"))
            .send_json(json!({"action": a}))
            .unwrap()
            .into_json()
            .unwrap();
        lat.push(ms(t));
        answered.fetch_add(1, Ordering::Relaxed);
        assert!(r["info"]["status"].is_string(), "{r}");
        if r["terminated"] == true || r["truncated"] == true {
            episode += 1;
            reset(seed + episode);
        }
    }
    agent.delete(&format!("{base}/v1/sessions/{id}")).call().unwrap();
    lat
}

/// Step latencies over the OpenEnv WebSocket.
async fn ws_client(base: String, steps: usize, seed: u64, answered: Arc<AtomicU64>) -> Vec<f64> {
    let (mut ws, _) =
        tokio_tungstenite::connect_async(base.replace("http://", "ws://") + "/ws").await.unwrap();
    async fn ask(
        ws: &mut (impl SinkExt<Message>
                  + StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
                  + Unpin),
        v: Value,
    ) -> Value {
        let _ = ws.send(Message::Text(v.to_string().into())).await;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
                Some(Ok(_)) => continue,
                other => panic!("the connection ended: {other:?}"),
            }
        }
    }
    let r = ask(&mut ws, json!({"type": "reset", "data": {"task": TASK, "seed": seed, "max_steps": 10_000}}))
        .await;
    assert_eq!(r["type"], "observation", "{r}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::with_capacity(steps);
    let mut episode = 0;
    while lat.len() < steps {
        let a = random_action(&mut rng);
        let t = Instant::now();
        let r = ask(&mut ws, json!({"type": "step", "data": {"action": a}})).await;
        lat.push(ms(t));
        answered.fetch_add(1, Ordering::Relaxed);
        assert_eq!(r["type"], "observation", "{r}");
        if r["data"]["done"] == true {
            episode += 1;
            ask(&mut ws, json!({"type": "reset", "data": {"seed": seed + episode}})).await;
        }
    }
    let _ = ws.send(Message::Text(json!({"type": "close"}).to_string().into())).await;
    lat
}

/// Processes of browsers guirl started (their profile folders are guirl-chromium-*).
fn browser_processes() -> usize {
    std::process::Command::new("pgrep")
        .args(["-c", "-f", "guirl-chromium-"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0))
        .unwrap_or(0)
}

async fn start(
    cfg: ServeConfig,
) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let h = tokio::spawn(serve(listener, cfg, async move {
        let _ = rx.await;
    }));
    (base, tx, h)
}

async fn health(base: &str) -> Value {
    let url = format!("{base}/health");
    tokio::task::spawn_blocking(move || ureq::get(&url).call().unwrap().into_json::<Value>().unwrap())
        .await
        .unwrap()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<usize> =
        std::env::args().skip(1).filter(|a| !a.starts_with("--")).map(|a| a.parse().unwrap()).collect();
    let steps = args.first().copied().unwrap_or(300);
    let load_sessions = args.get(1).copied().unwrap_or(16);
    let load_steps = args.get(2).copied().unwrap_or(200);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("# guirl serve: speed and load ({TASK}, {cores} cores, random actions)\n");
    let browsers_before = browser_processes();
    let none = Arc::new(AtomicU64::new(0));
    let (base, stop, server) =
        start(ServeConfig { max_sessions: load_sessions + 8, ..Default::default() }).await;

    // 1. One env at a time, the same action sequence each way.
    let mut rows = Vec::new();
    let mut lat = in_process(steps, 1).await;
    rows.push(("in-process GuiEnv", median(&mut lat), p95(&mut lat)));
    let b = base.clone();
    let n = none.clone();
    let mut lat = tokio::task::spawn_blocking(move || rest_client(b, steps, 1, "png", n)).await?;
    rows.push(("REST (PNG screenshot)", median(&mut lat), p95(&mut lat)));
    let mut lat = ws_client(base.clone(), steps, 1, none.clone()).await;
    rows.push(("OpenEnv WebSocket (PNG screenshot)", median(&mut lat), p95(&mut lat)));
    let b = base.clone();
    let n = none.clone();
    let mut lat = tokio::task::spawn_blocking(move || rest_client(b, steps, 1, "none", n)).await?;
    rows.push(("REST (screenshot none)", median(&mut lat), p95(&mut lat)));
    println!("## Step latency, one env, {steps} steps each\n\n| path | median ms | p95 ms |\n|---|---|---|");
    for (name, m, p) in &rows {
        println!("| {name} | {m:.2} | {p:.2} |");
    }

    // 2. Eight at once.
    let per = steps / 2;
    let t = Instant::now();
    let lats = futures::future::join_all((0..8).map(|i| in_process(per, 100 + i))).await;
    let inproc_sps = lats.iter().map(Vec::len).sum::<usize>() as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (b, n) = (base.clone(), none.clone());
            tokio::task::spawn_blocking(move || rest_client(b, per, 100 + i, "png", n))
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.await?.len();
    }
    let rest_sps = total as f64 / t.elapsed().as_secs_f64();
    println!(
        "\n## 8 envs at once, {per} steps each\n\n| path | steps/s |\n|---|---|\n| 8 in-process GuiEnvs | {inproc_sps:.1} |\n| 8 REST sessions of one server | {rest_sps:.1} |"
    );
    let _ = stop.send(());
    server.await??;

    // 3. Load, with clients that vanish.
    let (base, stop, server) = start(ServeConfig {
        max_sessions: load_sessions + 8,
        idle_timeout: Some(Duration::from_secs(3)),
        ws_ping: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let answered = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut rest = Vec::new();
    let mut ws = Vec::new();
    for i in 0..load_sessions {
        let (b, n) = (base.clone(), answered.clone());
        if i % 2 == 0 {
            rest.push(tokio::task::spawn_blocking(move || {
                rest_client(b, load_steps, 1000 + i as u64, "png", n)
            }));
        } else {
            ws.push(tokio::spawn(ws_client(b, load_steps, 1000 + i as u64, n)));
        }
    }
    // Two WebSocket clients drop their connection mid-episode; two REST clients cut a
    // step request off before it is answered.
    let mut vanished = Vec::new();
    for i in 0..2u64 {
        let b = base.clone();
        vanished.push(tokio::spawn(async move {
            let (mut ws, _) =
                tokio_tungstenite::connect_async(b.replace("http://", "ws://") + "/ws").await.unwrap();
            let _ = ws
                .send(Message::Text(
                    json!({"type": "reset", "data": {"task": TASK, "seed": i}}).to_string().into(),
                ))
                .await;
            let _ = ws.next().await;
            let _ = ws
                .send(Message::Text(
                    json!({"type": "step", "data": {"action": "click(5, 5)"}}).to_string().into(),
                ))
                .await;
            drop(ws);
        }));
        let b = base.clone();
        vanished.push(tokio::task::spawn_blocking(move || {
            let created: Value = ureq::post(&format!("{b}/v1/sessions")).send_json(json!({"task": TASK})).unwrap().into_json().unwrap();
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
    // Sample the browser processes while the load runs.
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let running = running.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while running.load(Ordering::Relaxed) {
                peak = peak.max(browser_processes());
                std::thread::sleep(Duration::from_millis(250));
            }
            peak
        })
    };
    for h in rest {
        h.await?;
    }
    for h in ws {
        h.await?;
    }
    for h in vanished {
        h.await?;
    }
    let load_secs = t.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    let peak_browsers = sampler.join().expect("sampler");
    let expected = (load_sessions * load_steps) as u64;
    // The abandoned REST sessions wait for the idle reaper (3 s here).
    let t0 = Instant::now();
    while health(&base).await["sessions"] != 0 && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left_sessions = health(&base).await["sessions"].as_u64().unwrap_or(u64::MAX);
    let reaped_after = t0.elapsed().as_secs_f64();
    let _ = stop.send(());
    server.await??;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let browsers_after = browser_processes();
    println!(
        "\n## Load: {load_sessions} sessions x {load_steps} random steps (half REST, half WebSocket) + 4 clients vanishing mid-episode\n\n\
         | figure | value |\n|---|---|\n| wall-clock | {load_secs:.1} s |\n| steps answered / sent | {} / {expected} |\n\
         | aggregate steps/s | {:.1} |\n| guirl browser processes at peak | {peak_browsers} |\n\
         | sessions left after the reaper | {left_sessions} (after {reaped_after:.1} s) |\n\
         | browser processes before / after | {browsers_before} / {browsers_after} |",
        answered.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed) as f64 / load_secs,
    );
    let report = json!({
        "task": TASK, "cores": cores, "steps": steps,
        "latency_ms": rows.iter().map(|(n, m, p)| json!({"path": n, "median": m, "p95": p})).collect::<Vec<_>>(),
        "eight_envs_steps_per_s": {"in_process": inproc_sps, "rest": rest_sps},
        "load": {"sessions": load_sessions, "steps_each": load_steps, "wall_s": load_secs,
                 "answered": answered.load(Ordering::Relaxed), "sent": expected,
                 "sessions_left": left_sessions, "browsers_before": browsers_before, "browsers_after": browsers_after,
                 "peak_browser_processes": peak_browsers},
    });
    std::fs::write("target/serve_speed.json", serde_json::to_string_pretty(&report)?)?;
    let ok = answered.load(Ordering::Relaxed) == expected
        && left_sessions == 0
        && browsers_after <= browsers_before;
    println!(
        "\n{}",
        if ok { "no lost answers, no leaked sessions or browsers" } else { "FAILED: see the table" }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
