//! No task page may reach chromedriver or DevTools on this machine's loopback.
//!
//! The attack these tests make: a spec whose start page is guirl's own fixture page, and
//! whose `setup_js` POSTs a WebDriver session (`text/plain`, no-cors, as any page can) to
//! every chromedriver port on the machine. chromedriver accepts a loopback origin, starts
//! a Chromium with `--no-sandbox` and a renderer command prefix, and the prefix runs a
//! shell command outside the sandbox: here it would create a marker file. It must not,
//! and the attempt must show in the blocked URLs; in `run` mode (a `GuiEnv`) and through
//! `guirl serve`, with and without a token. WebSockets, which DevTools does not pause,
//! are refused at the proxy every browser connects through.

use crate::common::env_for;
use crate::server::{self, Server};
use guirl::env::GuiAction;
use guirl::serve::env_server::ServeConfig;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The ports of the chromedrivers this test process started (its children).
fn driver_ports() -> Vec<u16> {
    let me = std::process::id().to_string();
    let mut ports = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the parent is the first field after the name.
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1));
        if ppid != Some(me.as_str()) {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let args: Vec<String> =
            cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if !args.first().is_some_and(|a| a.contains("chromedriver")) {
            continue;
        }
        ports.extend(args.iter().filter_map(|a| a.strip_prefix("--port=")?.parse::<u16>().ok()));
    }
    ports
}

/// A marker file name no earlier run left behind.
fn marker(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("guirl-driver-attack-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The spec: the fixture page, and a setup script that asks each port for a session whose
/// renderer runs `touch MARKER`.
fn attack_spec(ports: &[u16], marker: &Path) -> String {
    let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
        "binary": "/usr/bin/chromium",
        "args": ["--headless", "--no-sandbox",
                 format!("--renderer-cmd-prefix=/bin/sh -c touch$IFS{}", marker.display())],
    }}}});
    let js = format!(
        "for (const p of {ports:?}) for (const h of ['127.0.0.1', 'localhost']) \
         fetch('http://' + h + ':' + p + '/session', {{method: 'POST', mode: 'no-cors', \
         headers: {{'Content-Type': 'text/plain'}}, body: {body:?}}}).catch(() => {{}});",
        body = caps.to_string()
    );
    format!(
        "start_url = \"/fixtures/pages/two-buttons.html\"\ninstruction = \"Click OK\"\nsetup_js = {js:?}\n\
         [success]\njs = \"false\"\n"
    )
}

/// Whether `marker` appears within a few seconds (the shell runs when the renderer starts).
async fn appears(marker: &Path) -> bool {
    for _ in 0..20 {
        if marker.exists() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    false
}

fn session_url(ports: &[u16]) -> String {
    format!("http://127.0.0.1:{}/session", ports[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_cannot_reach_chromedriver_in_run_mode() {
    let mut env = env_for("miniwob/click-test");
    env.start().await.expect("browser");
    let ports = driver_ports();
    assert!(!ports.is_empty(), "this test's chromedriver is a child of the test process");
    let m = marker("run");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("attack.toml");
    std::fs::write(&spec, attack_spec(&ports, &m)).unwrap();
    env.set_task(guirl::tasks::load_task(spec.to_str().unwrap()).unwrap());
    env.reset(0).await.expect("reset");
    env.step(&GuiAction::Wait { ms: 1500 }).await.expect("step");
    assert!(!appears(&m).await, "a page started a WebDriver session and ran a command");
    let (blocked, _) = env.take_blocked_urls();
    assert!(blocked.contains(&session_url(&ports)), "the attempt is listed: {blocked:?}");
    env.close().await;
}

async fn attack_through_serve(token: Option<&str>) {
    let s = Server::start(ServeConfig { token: token.map(String::from), ..Default::default() }).await;
    let post = |path: String, body: Value| {
        let url = format!("{}{path}", s.base);
        async move { server::http("POST", url, Some(body.to_string()), token).await }
    };
    // A first session's browser: its chromedriver is one of the targets.
    let r = post("/v1/sessions".into(), json!({"task": "miniwob/click-test"})).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let first = r.body["session_id"].as_str().unwrap().to_string();
    let r = post(format!("/v1/sessions/{first}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.body["info"]["status"], "running", "{:?}", r.body);
    let ports = driver_ports();
    assert!(!ports.is_empty());
    let m = marker(if token.is_some() { "serve-token" } else { "serve" });
    let r = post("/v1/sessions".into(), json!({"task_spec": attack_spec(&ports, &m)})).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["session_id"].as_str().unwrap().to_string();
    let r = post(format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.body["info"]["status"], "running", "{:?}", r.body);
    let mut blocked: Vec<String> = serde_json::from_value(r.body["info"]["blocked_urls"].clone()).unwrap();
    let r =
        post(format!("/v1/sessions/{id}/step"), json!({"action": "wait(1500)", "screenshot": "none"})).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    blocked.extend(serde_json::from_value::<Vec<String>>(r.body["info"]["blocked_urls"].clone()).unwrap());
    assert!(!appears(&m).await, "a page started a WebDriver session and ran a command");
    assert!(blocked.contains(&session_url(&ports)), "the attempt is listed: {blocked:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_cannot_reach_chromedriver_through_serve() {
    attack_through_serve(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_cannot_reach_chromedriver_through_serve_with_a_token() {
    attack_through_serve(Some("a-long-server-token-0123456789")).await;
}

/// A loopback listener that counts the connections it accepts.
fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    (port, n)
}

/// A spec on the fixture page whose setup script opens WebSockets to each `url`, and asks
/// a STUN server at each of `udp` (`host:port`) for its address over WebRTC and opens a
/// WebTransport session (HTTP/3, UDP) there.
fn socket_spec(urls: &[String], udp: &[String]) -> String {
    let js = format!(
        "for (const u of {urls:?}) {{ try {{ new WebSocket(u); }} catch (e) {{}} }} \
         for (const s of {udp:?}) {{ try {{ const pc = new RTCPeerConnection({{iceServers: [{{urls: 'stun:' + s}}]}}); \
         pc.createDataChannel('x'); pc.createOffer().then(o => pc.setLocalDescription(o)); window.__pcs = (window.__pcs || []).concat([pc]); }} catch (e) {{}} \
         try {{ new WebTransport('https://' + s + '/').ready.catch(() => {{}}); }} catch (e) {{}} }}"
    );
    format!(
        "start_url = \"/fixtures/pages/two-buttons.html\"\ninstruction = \"Click OK\"\nsetup_js = {js:?}\n\
         [success]\njs = \"false\"\n"
    )
}

/// WebSocket handshakes are not paused by DevTools: the proxy every browser connects
/// through refuses them to loopback services, chromedriver's own port included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_cannot_open_a_websocket_to_a_loopback_service() {
    let (port, reached) = counting_listener();
    // A STUN server's port: WebRTC's UDP must not leave the browser but through the proxy.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
    let stun = vec![udp.local_addr().unwrap().to_string()];
    let mut env = env_for("miniwob/click-test");
    env.start().await.expect("browser");
    let driver = driver_ports()[0];
    let urls = vec![
        format!("ws://127.0.0.1:{port}/"),
        format!("ws://localhost:{port}/"),
        format!("wss://127.0.0.1:{port}/"),
        format!("ws://127.0.0.1:{driver}/session"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("sockets.toml");
    std::fs::write(&spec, socket_spec(&urls, &stun)).unwrap();
    env.set_task(guirl::tasks::load_task(spec.to_str().unwrap()).unwrap());
    env.reset(0).await.expect("reset: the page itself loads through the proxy");
    env.step(&GuiAction::Wait { ms: 1000 }).await.expect("step");
    let (blocked, _) = env.take_blocked_urls();
    assert_eq!(
        reached.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a socket reached the service: {blocked:?}"
    );
    assert!(udp.recv(&mut [0u8; 512]).is_err(), "WebRTC or WebTransport sent UDP to a loopback port");
    for target in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("127.0.0.1:{driver}")] {
        assert!(
            blocked.iter().any(|b| b.starts_with(&format!("CONNECT {target} "))),
            "{target} not listed: {blocked:?}"
        );
    }
    env.close().await;
}

/// Under `guirl serve`'s URL policy, a socket to an internal address is refused at the
/// proxy (the page's own URL passed: the socket is all it tries).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_served_page_cannot_open_a_websocket_to_an_internal_address() {
    let s = Server::start(ServeConfig::default()).await;
    let post = |path: String, body: Value| {
        let url = format!("{}{path}", s.base);
        async move { server::http("POST", url, Some(body.to_string()), None).await }
    };
    let spec = socket_spec(&["ws://169.254.169.254/latest".into(), "wss://10.255.255.1:8443/".into()], &[]);
    let r = post("/v1/sessions".into(), json!({"task_spec": spec})).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["session_id"].as_str().unwrap().to_string();
    let r = post(format!("/v1/sessions/{id}/reset"), json!({"seed": 0, "screenshot": "none"})).await;
    assert_eq!(r.body["info"]["status"], "running", "{:?}", r.body);
    let mut blocked: Vec<String> = serde_json::from_value(r.body["info"]["blocked_urls"].clone()).unwrap();
    let r =
        post(format!("/v1/sessions/{id}/step"), json!({"action": "wait(1000)", "screenshot": "none"})).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    blocked.extend(serde_json::from_value::<Vec<String>>(r.body["info"]["blocked_urls"].clone()).unwrap());
    for target in ["169.254.169.254:80", "10.255.255.1:8443"] {
        assert!(
            blocked.iter().any(|b| b.starts_with(&format!("CONNECT {target} "))),
            "{target} not listed: {blocked:?}"
        );
    }
    s.stop().await;
}

/// A task's `file://` start page reaches the files of its own folder and no other: a link
/// to a file outside it (a secret beside the folder) does not load, a frame of it stays
/// empty, and both are listed; a page beside the start page still opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_page_reaches_only_the_files_of_its_own_folder() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "SECRET-TOKEN-4711").unwrap();
    let secret_url = format!("file://{}", secret.display());
    std::fs::write(
        site.join("index.html"),
        format!(
            "<body style='margin:0'><a id=out href='{secret_url}' style='display:block;height:40px'>out</a>\
             <a id=near href='next.html' style='display:block;height:40px'>near</a>\
             <iframe id=f src='../secret.txt' style='width:300px;height:60px'></iframe></body>"
        ),
    )
    .unwrap();
    std::fs::write(site.join("next.html"), "<p id=next>next page</p>").unwrap();
    let spec = dir.path().join("local.toml");
    std::fs::write(
        &spec,
        format!(
            "start_url = \"file://{}\"\ninstruction = \"x\"\n[success]\njs = \"false\"\n",
            site.join("index.html").display()
        ),
    )
    .unwrap();
    let mut env = env_for(spec.to_str().unwrap());
    env.reset(0).await.expect("reset");
    let frame_text = "return document.getElementById('f').contentDocument?.body?.innerText ?? 'unreadable';";
    let framed = guirl::env::gui_env::eval(&env, frame_text).await.unwrap();
    assert!(!framed.to_string().contains("SECRET"), "the frame shows the file: {framed}");
    let (blocked, _) = env.take_blocked_urls();
    assert!(blocked.iter().any(|u| u.ends_with("secret.txt")), "the frame's load is listed: {blocked:?}");
    let out = env.step(&GuiAction::parse("click(20, 20)").unwrap()).await.unwrap();
    assert!(!out.obs.url.contains("secret.txt"), "the link opened the file: {}", out.obs.url);
    let text = guirl::env::gui_env::eval(&env, "return document.body ? document.body.innerText : '';")
        .await
        .unwrap();
    assert!(!text.to_string().contains("SECRET"), "the page shows the file: {text}");
    let (blocked, _) = env.take_blocked_urls();
    assert!(blocked.iter().any(|u| u.ends_with("secret.txt")), "the link's load is listed: {blocked:?}");
    env.reset(0).await.expect("reset");
    let out = env.step(&GuiAction::parse("click(20, 60)").unwrap()).await.unwrap();
    assert!(out.obs.url.ends_with("/site/next.html"), "a page of its own folder opens: {}", out.obs.url);
    env.close().await;
}

/// A start page whose folder is a template variable (`file:///…/sites/{site}/index.html`)
/// opens the page each draw names, and its pages still reach nothing above the folder the
/// variable is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_page_named_by_a_variable_opens_and_stays_in_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let sites = dir.path().join("sites");
    std::fs::create_dir_all(sites.join("north")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "SECRET-TOKEN-4711").unwrap();
    std::fs::write(
        sites.join("north/index.html"),
        "<p id=p>north site</p><iframe id=f src='../../secret.txt'></iframe>",
    )
    .unwrap();
    let spec = dir.path().join("local.toml");
    let url = format!("file://{}/{{site}}/index.html", sites.display());
    let text = format!(
        "start_url = \"{url}\"\ninstruction = \"x\"\n[variables]\nsite = [\"north\"]\n[success]\njs = \"false\"\n"
    );
    std::fs::write(&spec, text).unwrap();
    let mut env = env_for(spec.to_str().unwrap());
    env.reset(0).await.expect("reset");
    let shown =
        guirl::env::gui_env::eval(&env, "return document.getElementById('p')?.innerText ?? 'no page';")
            .await
            .unwrap();
    assert_eq!(shown, "north site", "the drawn page opens");
    let frame_text = "return document.getElementById('f').contentDocument?.body?.innerText ?? 'unreadable';";
    let framed = guirl::env::gui_env::eval(&env, frame_text).await.unwrap();
    assert!(!framed.to_string().contains("SECRET"), "the frame shows the file: {framed}");
    let (blocked, _) = env.take_blocked_urls();
    assert!(blocked.iter().any(|u| u.ends_with("secret.txt")), "the frame's load is listed: {blocked:?}");
    env.close().await;
}
