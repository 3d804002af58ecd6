//! Steps whose action starts a navigation that ends unusually, in a real browser: a double
//! click on a link (two requests, one new document), a link that commits nothing (a 204, a
//! download), and one whose server never answers. Each step must end within the command
//! limit: the first two as ordinary steps, the last as an `env_error` that names the
//! navigation. A double click on a link once made `guirl bench` wait forever (the second,
//! replaced request was counted as still in flight, and the step waited for it again and
//! again).

use crate::common;

use common::{env_with, repo};
use guirl::env::{BrowserConfig, EnvConfig, EpisodeStatus, GuiAction, GuiEnv, StepOutcome};
use guirl::tasks::website::WebsiteTask;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Wall clock and page clock: the two paths that wait for a navigation after an action.
fn configs(command_timeout: Duration) -> [(&'static str, EnvConfig); 2] {
    let browser = BrowserConfig { command_timeout, ..BrowserConfig::default() };
    let wall = EnvConfig { browser: browser.clone(), ..EnvConfig::default() };
    let clock = EnvConfig {
        browser,
        rules: guirl::env::EpisodeRules {
            virtual_time_ms: Some(guirl::env::gui_env::DEFAULT_VIRTUAL_TIME_MS),
            ..Default::default()
        },
        ..EnvConfig::default()
    };
    [("wall clock", wall), ("page clock", clock)]
}

/// One step, failing the test instead of hanging if it does not return in a minute;
/// returns the outcome and how long the step took.
async fn step(env: &mut GuiEnv, action: &str, what: &str) -> (StepOutcome, Duration) {
    let t0 = Instant::now();
    let a = GuiAction::parse(action).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), env.step(&a))
        .await
        .unwrap_or_else(|_| panic!("{what}: {action} did not return within a minute"))
        .unwrap();
    (out, t0.elapsed())
}

/// A double click on a link of fixtures/pages/links.html (page 1 and 2 link to each
/// other) requests two navigations and commits one: every such step ends on the other
/// page, well within the command limit, on both clocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_click_on_a_link_is_observed_on_the_page_it_led_to() {
    let limit = Duration::from_secs(6);
    let task = repo("fixtures/tasks/links.toml");
    for (name, cfg) in configs(limit) {
        let mut env = env_with(task.to_str().unwrap(), cfg);
        let (first, _) = env.reset(0).await.unwrap();
        assert!(first.url.contains("p=1"), "{name}: {}", first.url);
        let mut page = 1;
        for i in 0..4 {
            let (out, took) = step(&mut env, "double_click(100, 16)", name).await;
            page = 3 - page;
            assert_eq!(out.info.status, EpisodeStatus::Running, "{name}, double click {i}: {:?}", out.info);
            assert!(
                out.obs.url.contains(&format!("p={page}"))
                    && out.obs.elements.iter().any(|e| e.id == format!("page{page}")),
                "{name}, double click {i}: not on page {page} but {}",
                out.obs.url
            );
            assert!(took < limit, "{name}, double click {i}: the step took {took:?} (a wait ran out)");
        }
        env.close().await;
    }
}

/// A loopback server for one test: `/` links to a 204, a download and a URL that never
/// answers; `/other` is a second page. Each connection gets a thread; `/hang` holds its
/// connection open without answering until the process ends.
fn serve() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn));
        }
    });
    base
}

const HOME: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>links</title><style>\
    body { margin: 0; font: 14px sans-serif; } a { display: block; height: 30px; }</style></head><body>\
    <a id=\"nothing\" href=\"/204\">no content</a><a id=\"file\" href=\"/download\">a file</a>\
    <a id=\"hang\" href=\"/hang\">never answers</a><a id=\"other\" href=\"/other\">another page</a>\
    </body></html>";

fn answer(mut conn: std::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let (status, headers, body): (&str, &str, &str) = match path {
        "/hang" => {
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        "/204" => ("204 No Content", "", ""),
        "/download" => (
            "200 OK",
            "Content-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=guirl-download-check.bin\r\n",
            "0123456789",
        ),
        "/other" => {
            ("200 OK", "Content-Type: text/html\r\n", "<!doctype html><title>other</title><p>other</p>")
        }
        _ => ("200 OK", "Content-Type: text/html\r\n", HOME),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}

/// A task whose start page is the server's `/` (its port is then the task's, which pages
/// may reach).
fn task_at(base: &str) -> Arc<dyn guirl::tasks::Task> {
    let spec = format!(
        "start_url = \"{base}/\"\ninstruction = \"Follow the links\"\nmax_steps = 20\n\
         [viewport]\nwidth = 200\nheight = 160\n[success]\njs = \"false\"\n"
    );
    Arc::new(WebsiteTask::from_text("navigation-ends".into(), &spec, None, None).unwrap())
}

/// Links whose navigation commits no document (a 204, a download) leave the page as it
/// was, and the step does not wait out the command limit for a document that never comes;
/// a link followed afterwards still leads to its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_commits_nothing_keeps_the_page_without_waiting() {
    let limit = Duration::from_secs(6);
    let base = serve();
    for (name, cfg) in configs(limit) {
        let mut env = GuiEnv::new(task_at(&base), cfg);
        env.reset(0).await.unwrap();
        for (what, y) in [("a 204", 15), ("a download", 45)] {
            let (out, took) = step(&mut env, &format!("click(50, {y})"), name).await;
            assert_eq!(out.info.status, EpisodeStatus::Running, "{name}, {what}: {:?}", out.info);
            assert_eq!(out.obs.url, format!("{base}/"), "{name}, {what}: the page stays");
            assert!(took < limit, "{name}, {what}: the step took {took:?} (a wait ran out)");
        }
        let (out, _) = step(&mut env, "click(50, 105)", name).await;
        assert_eq!(out.info.status, EpisodeStatus::Running, "{name}: {:?}", out.info);
        assert_eq!(out.obs.url, format!("{base}/other"), "{name}: the link leads to its page");
        env.close().await;
    }
}

/// A page's download writes nothing on the host. Without the sandbox's user the browser
/// could write where guirl runs (chromedriver saves a headless browser's downloads in its
/// working directory, this test's): the file the link offers must not appear there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_writes_nothing_on_the_host() {
    let file = std::env::current_dir().unwrap().join("guirl-download-check.bin");
    let _ = std::fs::remove_file(&file);
    let base = serve();
    let [(name, mut cfg), _] = configs(Duration::from_secs(6));
    cfg.browser.sandbox = false;
    let mut env = GuiEnv::new(task_at(&base), cfg);
    env.reset(0).await.unwrap();
    let (out, _) = step(&mut env, "click(50, 45)", name).await;
    assert_eq!(out.info.status, EpisodeStatus::Running, "{:?}", out.info);
    // Time for a download that was not refused to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.close().await;
    assert!(!file.exists(), "the page's download was saved to {}", file.display());
}

/// A navigation whose server never answers ends the episode as `env_error` within the
/// command limit (plus the observation's own), with a message naming the navigation; the
/// next episode starts normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_navigation_that_never_ends_is_an_env_error_within_the_limit() {
    let limit = Duration::from_secs(3);
    let base = serve();
    for (name, cfg) in configs(limit) {
        let mut env = GuiEnv::new(task_at(&base), cfg);
        env.reset(0).await.unwrap();
        let (out, took) = step(&mut env, "click(50, 75)", name).await;
        assert_eq!(out.info.status, EpisodeStatus::EnvError, "{name}: {:?}", out.info);
        assert!(out.truncated && !out.terminated, "{name}");
        let err = out.info.env_error.clone().unwrap_or_default();
        assert!(
            err.contains("3.0s") && err.contains(&format!("navigation to {base}/hang")),
            "{name}: the error names the wait and the navigation: {err}"
        );
        assert!(took < 3 * limit, "{name}: the step took {took:?}");
        let (again, _) = env.reset(1).await.unwrap();
        assert_eq!(again.url, format!("{base}/"), "{name}: the next episode starts");
        let (out, _) = step(&mut env, "click(50, 105)", name).await;
        assert_eq!(out.info.status, EpisodeStatus::Running, "{name}: {:?}", out.info);
        env.close().await;
    }
}
