//! What `guirl serve` costs over the in-process env, and whether it holds under load.
//! A plain `main` (`harness = false`) that prints a markdown report and writes
//! `target/serve_speed.json`.
//!
//! ```text
//! cargo bench --bench serve_speed -- [steps=300] [load_sessions=16] [load_steps=200] [--busy] [--latency-only]
//! ```
//!
//! `--help` lists the arguments, each with what it does. The sections:
//!
//! 1. Step latency, one env, the same seeded random actions each way, on a MiniWoB++ task
//!    and on a website page at 1280×720: in-process `GuiEnv`, REST and the WebSocket in
//!    JSON (base64 PNG, OpenEnv's form), in binary frames (raw RGB, PNG, JPEG) and with
//!    raw RGB in shared memory. Every client ends with the screenshot's pixels in hand, as
//!    in-process does. The paths run
//!    in rounds, taking turns, so a change in the machine's load falls on all of them; the
//!    "added" column (latency minus the env's own `info.timings.total_ms`) is what the path
//!    adds, free of how fast each path's own browser happened to be; the last column is
//!    the server's own part of it (`timings.serve_ms`), the rest being the connection's
//!    and the client's.
//!    One row is the WebSocket on a server that leaves Nagle's algorithm on (as before
//!    TCP_NODELAY was set).
//! 2. Aggregate steps/s of 8 envs at once: in-process vs 8 sessions of one server, REST
//!    and WebSocket, raw pixels in binary frames and in shared memory, in 3 rounds each
//!    against the in-process runs either side (the spread over rounds is printed).
//! 3. Load: N sessions x M random steps (half REST, half WebSocket, JSON/PNG) plus clients
//!    that vanish mid-episode (dropped WebSockets, REST connections cut mid-request); then
//!    every request must have had its answer, and no session or browser may be left.

mod clients;

use clap::Parser;
use clients::{Client, Path, Target};
use guirl::serve::env_server::{router, serve, ServeConfig};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `guirl serve` costs over the in-process env, and whether it holds under load: a
/// markdown report, and target/serve_speed.json.
#[derive(Parser)]
#[command(
    name = "serve_speed",
    bin_name = "serve_speed",
    after_help = "From the repository: `cargo bench --bench serve_speed -- [steps=300] [load_sessions=16] \
                  [load_steps=200] [--busy] [--latency-only]`."
)]
struct Cli {
    /// Steps of each path in section 1 (latency); each of section 2's clients takes a
    /// third of them, at least 8. Also written `steps=N`.
    #[arg(long, value_name = "N", default_value_t = 300)]
    steps: usize,
    /// Sessions of section 3's load. Also written `load_sessions=N`.
    #[arg(long, value_name = "N", default_value_t = 16)]
    load_sessions: usize,
    /// Random steps each session of section 3's load takes. Also written `load_steps=N`.
    #[arg(long, value_name = "N", default_value_t = 200)]
    load_steps: usize,
    /// Measure sections 1 and 2 twice: as the machine is, and beside one thread spinning
    /// on a core.
    #[arg(long)]
    busy: bool,
    /// Measure section 1 alone (a quick look, or a profile of the paths) and write no JSON.
    #[arg(long)]
    latency_only: bool,
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

/// The server's router served as axum serves it by default (Nagle's algorithm on): what
/// the WebSocket ran on before `serve` set TCP_NODELAY.
async fn start_with_nagle(
    cfg: ServeConfig,
) -> (String, tokio::task::JoinHandle<()>, Arc<guirl::serve::env_server::Shared>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (app, shared) = router(cfg);
    let h = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        let _ = axum::serve(listener, app).await;
    });
    (base, h, shared)
}

async fn health(base: &str) -> Value {
    let url = format!("{base}/health");
    tokio::task::spawn_blocking(move || ureq::get(&url).call().unwrap().into_json::<Value>().unwrap())
        .await
        .unwrap()
}

/// One latency row.
struct Row {
    target: &'static str,
    path: String,
    median: f64,
    p95: f64,
    overhead: f64,
    /// Median of (latency - the env's own step time): what the path adds, free of how
    /// fast each path's browser happened to be.
    added: f64,
    /// Median of the server's own work around the env (`timings.serve_ms`): the rest of
    /// `added` is the connection's and the client's.
    own: f64,
}

/// Section 1 for one target: every path's step latencies, the paths taking turns.
async fn latency(target: &Target, paths: &[Path], steps: usize, base: &str, nagle_base: &str) -> Vec<Row> {
    const ROUNDS: usize = 6;
    let mut clients = Vec::new();
    for p in paths {
        let b = if matches!(p, Path::WsNagle) { nagle_base } else { base };
        clients.push(Client::open(p.clone(), target, b, 1).await);
    }
    let mut lat: Vec<Vec<f64>> = vec![Vec::with_capacity(steps); paths.len()];
    let mut added: Vec<Vec<f64>> = vec![Vec::with_capacity(steps); paths.len()];
    let mut own: Vec<Vec<f64>> = vec![Vec::with_capacity(steps); paths.len()];
    for round in 0..ROUNDS {
        for k in 0..clients.len() {
            let i = (k + round) % clients.len();
            let n = steps / ROUNDS + usize::from(round < steps % ROUNDS);
            for _ in 0..n {
                let (ms, env_ms, own_ms) = clients[i].step().await;
                lat[i].push(ms);
                added[i].push(ms - env_ms);
                own[i].push(own_ms);
            }
        }
    }
    for c in clients {
        c.close().await;
    }
    let inproc = median(&mut lat[0].clone());
    paths
        .iter()
        .zip(lat.iter_mut().zip(added.iter_mut()).zip(own.iter_mut()))
        .map(|(p, ((l, a), o))| {
            let m = median(l);
            Row {
                target: target.name,
                path: p.label(),
                median: m,
                p95: p95(l),
                overhead: m - inproc,
                added: median(a),
                own: median(o),
            }
        })
        .collect()
}

/// Section 2: steps/s of `n` clients of `path` at once, `per` steps each (sessions opened
/// and reset before the clock starts).
async fn throughput(target: &Target, path: Path, n: usize, per: usize, base: &str) -> f64 {
    let mut clients = Vec::new();
    for i in 0..n {
        clients.push(Client::open(path.clone(), target, base, 100 + i as u64).await);
    }
    let t = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                for _ in 0..per {
                    c.step().await;
                }
                c
            })
        })
        .collect();
    let mut done = Vec::new();
    for h in handles {
        done.push(h.await.expect("a client"));
    }
    let sps = (n * per) as f64 / t.elapsed().as_secs_f64();
    for c in done {
        c.close().await;
    }
    sps
}

/// A thread spinning on a core until `stop` (the "busy core" of `--busy`).
fn spin(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    // `cargo bench` adds `--bench`; `KEY=N`, as the docs write the counts, is `--KEY N` to
    // clap (`load_sessions=16`: `--load-sessions 16`)
    let args = std::env::args().filter(|a| a != "--bench").map(|a| match a.split_once('=') {
        Some((key @ ("steps" | "load_sessions" | "load_steps"), n)) => {
            format!("--{}={n}", key.replace('_', "-"))
        }
        _ => a,
    });
    let Cli { steps, load_sessions, load_steps, busy, latency_only } = Cli::parse_from(args);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("# guirl serve: speed and load ({cores} cores, random actions)\n");
    let browsers_before = browser_processes();
    let targets = [Target::miniwob(), Target::website()];
    // A client waits unpolled while the other paths take their turn, so it cannot answer
    // pings: a long interval keeps the server from closing it as a vanished peer.
    let cfg = ServeConfig {
        max_sessions: load_sessions + 16,
        ws_ping: Duration::from_secs(3600),
        ..Default::default()
    };
    let (base, stop, server) = start(cfg.clone()).await;
    let (nagle_base, nagle_server, nagle_shared) = start_with_nagle(cfg).await;

    let mut report = Vec::new();
    for loaded in if busy { vec![false, true] } else { vec![false] } {
        let spin_stop = Arc::new(AtomicBool::new(false));
        let spinner = loaded.then(|| spin(spin_stop.clone()));
        let load = if loaded { "beside a busy core" } else { "as the machine is" };
        println!("## Step latency, one env, {steps} steps each, {load}\n");
        println!("| target | path | median ms | p95 ms | median over in-process | median added to the env's step | of which the server's own |\n|---|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for t in &targets {
            let paths = Path::latency_rows();
            for r in latency(t, &paths, steps, &base, &nagle_base).await {
                println!(
                    "| {} | {} | {:.2} | {:.2} | {:+.2} | {:.2} | {:.2} |",
                    r.target, r.path, r.median, r.p95, r.overhead, r.added, r.own
                );
                rows.push(r);
            }
        }
        // In-process first and again after each round of the served paths: a served run's
        // reference is the mean of the in-process runs either side of it, so the machine's
        // drift over minutes falls on both, and the rounds give the spread.
        const ROUNDS: usize = 3;
        let per = (steps / 3).max(8);
        let mut eight = Vec::new();
        for t in targets.iter().filter(|_| !latency_only) {
            if eight.is_empty() {
                println!("\n## 8 envs at once, {per} steps each, {ROUNDS} rounds, {load}\n\n| target | path | steps/s, median of rounds | × in-process, median [min–max] |\n|---|---|---|---|");
            }
            let paths: Vec<Path> = ["shm", "raw"]
                .into_iter()
                .flat_map(|shot| [Path::Rest { binary: true, shot }, Path::Ws { binary: true, shot }])
                .collect();
            let mut inproc = vec![throughput(t, Path::InProcess, 8, per, &base).await];
            let mut served: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
            for _ in 0..ROUNDS {
                for (k, path) in paths.iter().enumerate() {
                    served[k].push(throughput(t, path.clone(), 8, per, &base).await);
                }
                inproc.push(throughput(t, Path::InProcess, 8, per, &base).await);
            }
            let refs: Vec<f64> = inproc.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
            let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" / ");
            println!(
                "| {} | in-process ({} runs: {}) | {:.1} | 1 |",
                t.name,
                inproc.len(),
                fmt(&inproc),
                median(&mut inproc.clone())
            );
            let mut rows = serde_json::Map::new();
            for (path, sps) in paths.iter().zip(&served) {
                let ratios: Vec<f64> = sps.iter().zip(&refs).map(|(s, r)| s / r).collect();
                let (lo, hi) = ratios.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
                println!(
                    "| {} | {} | {:.1} | {:.3} [{lo:.3}–{hi:.3}] |",
                    t.name,
                    path.label(),
                    median(&mut sps.clone()),
                    median(&mut ratios.clone())
                );
                rows.insert(path.label(), json!({"steps_per_s": sps, "ratios": ratios}));
            }
            eight.push(json!({"target": t.name, "in_process": inproc, "served": rows}));
        }
        println!();
        spin_stop.store(true, Ordering::Relaxed);
        if let Some(s) = spinner {
            let _ = s.join();
        }
        report.push(json!({
            "load": load,
            "latency_ms": rows.iter().map(|r| json!({"target": r.target, "path": r.path, "median": r.median, "p95": r.p95, "over_in_process": r.overhead, "added_to_env_step": r.added, "servers_own": r.own})).collect::<Vec<_>>(),
            "eight_envs_steps_per_s": eight,
        }));
    }
    nagle_server.abort();
    nagle_shared.table.close_all().await;
    let _ = stop.send(());
    server.await??;
    if latency_only {
        return Ok(());
    }

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
    let target = Arc::new(Target::miniwob());
    let mut load = Vec::new();
    for i in 0..load_sessions {
        let (b, n, tg) = (base.clone(), answered.clone(), target.clone());
        let path = if i % 2 == 0 {
            Path::Rest { binary: false, shot: "png" }
        } else {
            Path::Ws { binary: false, shot: "png" }
        };
        load.push(tokio::spawn(async move {
            let rest = matches!(path, Path::Rest { .. });
            let mut c = Client::open(path, &tg, &b, 1000 + i as u64).await;
            let mut lat = Vec::with_capacity(load_steps);
            for _ in 0..load_steps {
                lat.push(c.step().await.0);
                n.fetch_add(1, Ordering::Relaxed);
            }
            c.close().await;
            (rest, lat)
        }));
    }
    let vanished = clients::vanishing(&base, 2);
    // Sample the browser processes while the load runs.
    let running = Arc::new(AtomicBool::new(true));
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
    // Both transports at once, so the machine's load falls on both alike.
    let (mut rest_lat, mut ws_lat) = (Vec::new(), Vec::new());
    for h in load {
        let (rest, lat) = h.await?;
        if rest {
            rest_lat.extend(lat)
        } else {
            ws_lat.extend(lat)
        }
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
    let got = answered.load(Ordering::Relaxed);
    println!(
        "## Load: {load_sessions} sessions x {load_steps} random steps (half REST, half WebSocket) + 4 clients vanishing mid-episode\n\n\
         | figure | value |\n|---|---|\n| wall-clock | {load_secs:.1} s |\n| steps answered / sent | {got} / {expected} |\n\
         | aggregate steps/s | {:.1} |\n| median / p95 step, REST (JSON, png) | {:.1} / {:.1} ms |\n\
         | median / p95 step, WebSocket (JSON, png) | {:.1} / {:.1} ms |\n| guirl browser processes at peak | {peak_browsers} |\n\
         | sessions left after the reaper | {left_sessions} (after {reaped_after:.1} s) |\n\
         | browser processes before / after | {browsers_before} / {browsers_after} |",
        got as f64 / load_secs,
        median(&mut rest_lat),
        p95(&mut rest_lat),
        median(&mut ws_lat),
        p95(&mut ws_lat),
    );
    let out = json!({
        "cores": cores, "steps": steps, "phases": report,
        "load": {"sessions": load_sessions, "steps_each": load_steps, "wall_s": load_secs,
                 "answered": got, "sent": expected,
                 "median_ms": {"rest": median(&mut rest_lat), "ws": median(&mut ws_lat)},
                 "sessions_left": left_sessions, "browsers_before": browsers_before, "browsers_after": browsers_after,
                 "peak_browser_processes": peak_browsers},
    });
    std::fs::write("target/serve_speed.json", serde_json::to_string_pretty(&out)?)?;
    let ok = got == expected && left_sessions == 0 && browsers_after <= browsers_before;
    println!(
        "\n{}",
        if ok { "no lost answers, no leaked sessions or browsers" } else { "FAILED: see the table" }
    );
    std::io::stdout().flush()?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
