//! The `openai:` API policy and `guirl serve-policy`, with real HTTP at both ends and real
//! browsers: a checkpoint through the API acts as it does directly (same seeds, greedy),
//! the server honours `n`, `seed`, `temperature` and `logprobs`, and endpoints that are
//! down, slow, answer garbage, an error or prose mark episodes without stopping a bench.

use crate::common;

use guirl::bench::harness::{self, journal};
use guirl::env::{EnvConfig, EpisodeStatus};
use guirl::policy::api::client::Endpoint;
use guirl::policy::api::coords::CoordMode;
use guirl::policy::api::{ApiConfig, ApiPolicy};
use guirl::policy::vlm::{VlmConfig, VlmPolicy};
use guirl::policy::{Policy, TrainablePolicy};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(3).enable_all().build().unwrap()
}

/// A small random-weight checkpoint that reads the page's elements (so the elements sent
/// as text must arrive intact), saved in `dir`.
fn checkpoint(dir: &Path) -> VlmPolicy {
    let inputs = guirl::policy::vlm::Inputs { elements: Some(32), ..Default::default() };
    let cfg = VlmConfig { word_buckets: 64, inputs, ..VlmConfig::tiny() };
    let p = VlmPolicy::new(cfg, &candle_core::Device::Cpu, 3).unwrap();
    TrainablePolicy::save(&p, dir).unwrap();
    p
}

fn api(model: &str, base: &str, timeout_ms: u64, retries: u32) -> ApiPolicy {
    ApiPolicy::new(ApiConfig {
        model: model.into(),
        endpoint: Endpoint {
            base_url: base.into(),
            api_key: None,
            timeout: Duration::from_millis(timeout_ms),
            retries,
            backoff: Duration::from_millis(50),
        },
        prompt_file: None,
        images: 1,
        coords: Some(CoordMode::Px),
        temperature: 0.0,
        max_tokens: 64,
        seed: 0,
        extra_body: None,
        elements: true,
        concurrency: 4,
    })
    .unwrap()
}

fn options(tasks: &[&str], n: u64, out: &Path, max_steps: u32) -> guirl::bench::harness::BenchOptions {
    common::bench_options(tasks, n, 2, out, EnvConfig { max_steps: Some(max_steps), ..EnvConfig::default() })
}

async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// `guirl serve-policy`'s router over `served` as model `tiny`; its base URL.
async fn serve_policy(
    served: VlmPolicy,
    reads: guirl::policy::observation::Observation,
    access: guirl::serve::policy_server::Access,
) -> String {
    serve(guirl::serve::policy_server::router(Box::new(served), "tiny".into(), reads, access)).await
}

#[test]
fn a_checkpoint_through_the_api_acts_as_it_does_directly() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        let direct_policy = checkpoint(&ckpt);
        let served = VlmPolicy::load(&ckpt, &candle_core::Device::Cpu).unwrap();
        let reads = guirl::policy::observation_of_checkpoint(&ckpt).unwrap();
        let base = serve_policy(served, reads, Default::default()).await;
        let tasks = ["builtin/login-settings", "miniwob/enter-text"];

        let mut direct = VlmPolicy::load(&ckpt, &candle_core::Device::Cpu).unwrap();
        direct.greedy = true;
        harness::run(&options(&tasks, 3, &dir.path().join("direct"), 4), &mut direct).await.unwrap();
        let mut through = api("tiny", &format!("{base}/v1"), 30_000, 0);
        let report =
            harness::run(&options(&tasks, 3, &dir.path().join("api"), 4), &mut through).await.unwrap();

        let (a, b) = (
            common::bench_episodes(&dir.path().join("direct")),
            common::bench_episodes(&dir.path().join("api")),
        );
        assert_eq!(a.len(), 6);
        assert!(a.iter().map(|e| e.4.len()).sum::<usize>() > 6, "several steps per episode: {a:?}");
        assert_eq!(a, b, "the same outcomes and actions, episode by episode");
        assert_eq!(report.all.policy_errors, 0);
        let info = &report.reproducibility.policy_info;
        assert_eq!(info["served_models"], json!(["tiny"]));
        // The server says what its checkpoint reads, so the report can state it.
        assert_eq!(info["served_observation"], "pixels+dom");
        assert_eq!(info["prompt_sha256"].as_str().unwrap().len(), 64);
        drop(direct_policy);
    });
}

#[test]
fn serve_policy_honours_n_seed_temperature_and_logprobs() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut direct = checkpoint(&dir.path().join("ckpt"));
        let served = VlmPolicy::load(&dir.path().join("ckpt"), &candle_core::Device::Cpu).unwrap();
        let reads = guirl::policy::observation::Observation::PixelsDom;
        let base = serve_policy(served, reads, Default::default()).await;
        // A real observation to send.
        let mut env = guirl::env::GuiEnv::new(
            guirl::tasks::load_task("miniwob/click-button").unwrap(),
            EnvConfig::default(),
        );
        let (state, _) = env.reset(4).await.unwrap();
        env.close().await;

        let png = guirl::env::encode_png(&state.screenshot);
        use base64::Engine;
        let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
        let text = guirl::policy::api::prompt::user_text(&state, &[], true);
        let body = |extra: Value| {
            let mut b = json!({"model": "tiny", "messages": [{"role": "user", "content": [
                {"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            b
        };
        let ep = Endpoint {
            base_url: format!("{base}/v1"),
            api_key: None,
            timeout: Duration::from_secs(30),
            retries: 0,
            backoff: Duration::from_millis(10),
        };
        let ask = |extra: Value| {
            let ep = ep.clone();
            let b = body(extra);
            std::thread::spawn(move || ep.call("chat/completions", Some(&b))).join().unwrap()
        };

        // Greedy with log-probs: the same action and per-token log-probs as the policy itself.
        direct.greedy = true;
        let d = direct.act(std::slice::from_ref(&state)).unwrap().remove(0);
        let v = ask(json!({"temperature": 0, "logprobs": true})).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], d.action.to_string());
        let lps = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
        assert_eq!(lps.len(), d.token_logprobs.len());
        for (got, want) in lps.iter().zip(&d.token_logprobs) {
            assert!((got["logprob"].as_f64().unwrap() - f64::from(*want)).abs() < 1e-5, "{got} vs {want}");
            assert!(!got["token"].as_str().unwrap().is_empty());
        }
        // n samples; the same seed gives the same samples.
        let x = ask(json!({"temperature": 1.5, "n": 4, "seed": 11})).unwrap();
        let y = ask(json!({"temperature": 1.5, "n": 4, "seed": 11})).unwrap();
        assert_eq!(x["choices"].as_array().unwrap().len(), 4);
        assert_eq!(x["choices"], y["choices"]);
        assert_eq!(x["usage"]["completion_tokens"], y["usage"]["completion_tokens"]);
        // The prompt is what the policy read (image tokens, instruction, elements), counted
        // once however many choices; the total adds the answers.
        let prompt = direct.prompt_tokens(&state).unwrap();
        assert!(prompt > direct.config().image_tokens(), "{prompt}: the text and elements count too");
        assert_eq!(
            (v["usage"]["prompt_tokens"].as_u64(), x["usage"]["prompt_tokens"].as_u64()),
            (Some(prompt as u64), Some(prompt as u64))
        );
        let (p, c) = (
            x["usage"]["prompt_tokens"].as_u64().unwrap(),
            x["usage"]["completion_tokens"].as_u64().unwrap(),
        );
        assert_eq!(x["usage"]["total_tokens"].as_u64(), Some(p + c));

        // `stream: true`: server-sent chunks that put the same answer back together.
        let url = format!("{base}/v1/chat/completions");
        let b = body(json!({"temperature": 0, "stream": true, "stream_options": {"include_usage": true}}));
        let sse = std::thread::spawn(move || ureq::post(&url).send_json(b).unwrap().into_string().unwrap())
            .join()
            .unwrap();
        let events: Vec<&str> = sse.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect();
        assert_eq!(events.last(), Some(&"[DONE]"), "{sse}");
        let chunks: Vec<Value> =
            events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"), "{sse}");
        let content: String = chunks
            .iter()
            .filter_map(|c| c["choices"].get(0)?.pointer("/delta/content")?.as_str().map(str::to_string))
            .collect();
        assert_eq!(content, d.action.to_string());
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], d.tokens.len());
        let e = ask(json!({"stream": "yes"})).unwrap_err();
        assert_eq!((e.status, e.message.contains("stream must be")), (Some(400), true), "{e}");

        // OpenAI-shaped errors.
        let e = ask(json!({"model": "other"})).unwrap_err();
        assert_eq!(e.status, Some(404));
        assert!(e.message.contains("does not exist"), "{e}");
        let e = ask(json!({"n": 0})).unwrap_err();
        assert_eq!(e.status, Some(400));
        let e = ask(json!({"messages": [{"role": "user", "content": "Instruction: x"}]})).unwrap_err();
        assert!(e.message.contains("image_url"), "{e}");
        let health = Endpoint { base_url: base.clone(), ..ep.clone() };
        let h = std::thread::spawn(move || health.call("health", None)).join().unwrap().unwrap();
        assert_eq!(h["status"], "healthy");
    });
}

/// Answers in the OpenAI response shape.
fn answer(content: Value) -> Value {
    json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": content, "finish_reason": "stop"}]})
}

#[test]
fn failing_endpoints_mark_episodes_and_the_bench_goes_on() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::routing::post;
    runtime().block_on(async {
        let flaky_calls = Arc::new(AtomicUsize::new(0));
        let calls = flaky_calls.clone();
        let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<Vec<u8>>::new()));
        // Endpoints that misbehave the ways real ones do.
        let router = axum::Router::new()
            .route("/garbage/v1/chat/completions", post(|_: axum::body::Bytes| async { "<html>Bad Gateway</html>" }))
            .route(
                "/slow/v1/chat/completions",
                post(|_: axum::body::Bytes| async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    axum::Json(answer(json!({"role": "assistant", "content": "done()"})))
                }),
            )
            .route(
                "/old-error/v1/chat/completions",
                post(|_: axum::body::Bytes| async {
                    let body = json!({"object": "error", "message": "At most 1 image(s) may be provided in one request.", "type": "BadRequestError", "param": null, "code": 400});
                    (StatusCode::BAD_REQUEST, axum::Json(body))
                }),
            )
            .route(
                "/prose/v1/chat/completions",
                post(|_: axum::body::Bytes| async { axum::Json(answer(json!({"role": "assistant", "content": "I am not sure which button to press."}))) }),
            )
            .route(
                "/flaky/v1/chat/completions",
                // (Every handler reads the request body, as real servers do: answering
                // before it is read makes the client's write fail with a broken pipe.)
                // 429 the first time a request is seen, an answer when it comes again: by
                // its body, not by a call count, since the two envs' calls interleave.
                post(move |body: axum::body::Bytes| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let first_time = seen.lock().unwrap().insert(body.to_vec());
                    async move {
                        if first_time {
                            let headers = [("Retry-After", "0")];
                            (StatusCode::TOO_MANY_REQUESTS, headers, axum::Json(json!({"error": {"message": "slow down"}}))).into_response()
                        } else {
                            let tool = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "computer_use", "arguments": "{\"action\": \"left_click\", \"coordinate\": [3, 4]}"}}]});
                            (StatusCode::OK, [("Retry-After", "0")], axum::Json(answer(tool))).into_response()
                        }
                    }
                }),
            );
        let base = serve(router).await;
        let dir = tempfile::tempdir().unwrap();
        let mut results = std::collections::HashMap::new();
        for (name, url, timeout_ms) in [
            ("down", "http://127.0.0.1:1/v1".to_string(), 2000),
            ("garbage", format!("{base}/garbage/v1"), 2000),
            ("slow", format!("{base}/slow/v1"), 300),
            ("old-error", format!("{base}/old-error/v1"), 2000),
            ("prose", format!("{base}/prose/v1"), 2000),
            ("flaky", format!("{base}/flaky/v1"), 2000),
        ] {
            let out = dir.path().join(name);
            let mut p = api("m", &url, timeout_ms, 1);
            let report = harness::run(&options(&["miniwob/click-test"], 2, &out, 2), &mut p).await.unwrap();
            let rows = journal::read_rows(&out.join(journal::RESULTS_FILE)).unwrap();
            assert!(out.join("report.md").is_file(), "{name}: the bench finished");
            results.insert(name, (report, rows, out));
        }
        for name in ["down", "garbage", "slow", "old-error"] {
            let (report, rows, out) = &results[name];
            assert_eq!(report.all.policy_errors, 2, "{name}: {rows:?}");
            assert_eq!((report.all.completed, report.all.env_errors), (0, 0), "{name}: not the agent's, not the env's");
            assert!(rows.iter().all(|r| r.status == EpisodeStatus::PolicyError && r.steps == 0), "{name}");
            let errors = std::fs::read_to_string(out.join("errors.md")).unwrap();
            assert!(errors.contains("## policy_error (2 episodes)"), "{name}: {errors}");
        }
        let msg = |name: &str| results[name].1[0].policy_error.clone().unwrap();
        assert!(msg("down").contains("Connection refused") || msg("down").contains("onnect"), "{}", msg("down"));
        assert!(msg("garbage").contains("not JSON") && msg("garbage").contains("Bad Gateway"), "{}", msg("garbage"));
        assert!(msg("slow").contains("timed out") || msg("slow").contains("imeout"), "{}", msg("slow"));
        assert!(msg("old-error").contains("HTTP 400") && msg("old-error").contains("At most 1 image"), "{}", msg("old-error"));

        // Prose: invalid steps, the episode goes on to its limit, the answer is kept.
        let (report, rows, out) = &results["prose"];
        assert_eq!(report.all.policy_errors, 0);
        assert!(rows.iter().all(|r| r.status == EpisodeStatus::Truncated && r.invalid_steps == 2), "{rows:?}");
        let set = guirl::rollout::TrajectorySet::read(&out.join(&rows[0].trajectory)).unwrap();
        let step = &set.trajectories[0].trajectory.steps[0];
        assert_eq!(step.answer.as_deref(), Some("I am not sure which button to press."));
        assert!(step.action_error.as_deref().unwrap().contains("mouse_click"), "the error lists the accepted forms");

        // 429 then an answer: retried; the tool call is read.
        let (report, rows, out) = &results["flaky"];
        assert_eq!(report.all.policy_errors, 0, "{rows:?}");
        assert!(flaky_calls.load(Ordering::SeqCst) >= 8, "each step was retried once");
        let set = guirl::rollout::TrajectorySet::read(&out.join(&rows[0].trajectory)).unwrap();
        assert_eq!(set.trajectories[0].trajectory.steps[0].action, "click(3, 4)");
    });
}

#[test]
fn a_bench_whose_endpoint_was_down_has_no_score_and_resume_asks_again() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::routing::post;
    use std::sync::atomic::AtomicBool;
    runtime().block_on(async {
        let up = Arc::new(AtomicBool::new(false));
        let state = up.clone();
        let router = axum::Router::new().route(
            "/v1/chat/completions",
            post(move |_: axum::body::Bytes| {
                let up = state.load(Ordering::SeqCst);
                async move {
                    if up {
                        axum::Json(answer(json!({"role": "assistant", "content": "done()"}))).into_response()
                    } else {
                        let body = json!({"error": {"message": "model is loading"}});
                        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
                    }
                }
            }),
        );
        let base = format!("{}/v1", serve(router).await);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b");
        let mut opts = options(&["miniwob/click-test"], 2, &out, 2);
        let report = harness::run(&opts, &mut api("m", &base, 2000, 0)).await.unwrap();
        assert_eq!(report.all.policy_errors, 2);
        // No episode completed: no rate, no mean, and the bench says it is incomplete.
        assert_eq!((report.tasks[0].success_rate, report.macro_success_rate), (None, None));
        let why = report.incomplete().expect("incomplete");
        assert!(
            why.contains("miniwob/click-test: no episode the agent completed")
                && why.contains("2 policy errors"),
            "{why}"
        );
        // The endpoint back, --resume runs the policy's failed episodes again.
        up.store(true, Ordering::SeqCst);
        opts.resume = true;
        let report = harness::run(&opts, &mut api("m", &base, 2000, 0)).await.unwrap();
        let rows = journal::read_rows(&out.join(journal::RESULTS_FILE)).unwrap();
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert!(rows[2..].iter().all(|r| r.attempt == 1 && r.status == EpisodeStatus::Fail), "{rows:?}");
        assert_eq!((report.all.policy_errors, report.all.completed), (0, 2));
        assert_eq!(report.macro_success_rate, Some(0.0));
        assert!(report.incomplete().is_none());
    });
}

#[test]
fn serve_policy_asks_for_its_token_and_refuses_web_pages() {
    use guirl::serve::policy_server::Access;
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(&dir.path().join("ckpt"));
        let served = VlmPolicy::load(&dir.path().join("ckpt"), &candle_core::Device::Cpu).unwrap();
        let access = Access { token: Some("s3cret".into()), ..Default::default() };
        let reads = guirl::policy::observation::Observation::PixelsDom;
        let base = serve_policy(served, reads, access).await;
        // (status, body) of a request with these headers, from a blocking client.
        let call = |method: &'static str, path: &'static str, headers: Vec<(&'static str, &'static str)>| {
            let url = format!("{base}{path}");
            std::thread::spawn(move || {
                let mut req = ureq::request(method, &url);
                for (k, v) in headers {
                    req = req.set(k, v);
                }
                let resp = match req.call() {
                    Ok(r) => r,
                    Err(ureq::Error::Status(_, r)) => r,
                    Err(e) => panic!("{e}"),
                };
                let status = resp.status();
                (status, resp.into_json::<Value>().unwrap_or(Value::Null))
            })
            .join()
            .unwrap()
        };
        let (status, body) = call("GET", "/v1/models", vec![]);
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["type"], "authentication_error", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("Bearer"), "{body}");
        assert_eq!(call("GET", "/v1/models", vec![("Authorization", "Bearer wrong")]).0, 401);
        let (status, body) = call("GET", "/v1/models", vec![("Authorization", "Bearer s3cret")]);
        assert_eq!((status, body["data"][0]["id"].as_str()), (200, Some("tiny")), "{body}");
        assert_eq!(call("GET", "/health", vec![]).0, 200, "health needs no token");
        // A page's request (an Origin header), or one by a rebinding name, is refused even
        // with the token.
        let auth = ("Authorization", "Bearer s3cret");
        let (status, body) = call("GET", "/v1/models", vec![auth, ("Origin", "http://evil.example")]);
        assert_eq!(status, 403, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("--allow-origins"), "{body}");
        let (status, body) = call("GET", "/v1/models", vec![auth, ("Host", "evil.example:8000")]);
        assert_eq!(status, 421, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("--host-names"), "{body}");
        // A wrong method gets an error body too.
        let (status, body) = call("GET", "/v1/chat/completions", vec![auth]);
        assert_eq!(status, 405);
        assert!(body["error"]["message"].as_str().unwrap().contains("POST /v1/chat/completions"), "{body}");
    });
}

/// `serve-policy` holds slow and greedy clients to the bounds `guirl serve` has: a body
/// that stalls is a 408, one declared too large a 413 at once, a head that never ends is
/// closed, and past the connection cap a new one gets a 503, each in OpenAI's error shape.
#[test]
fn serve_policy_bounds_slow_clients_and_connections() {
    use guirl::serve::conn::ConnLimits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(&dir.path().join("ckpt"));
        let served = VlmPolicy::load(&dir.path().join("ckpt"), &candle_core::Device::Cpu).unwrap();
        let limits = ConnLimits {
            max_connections: 4,
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let reads = guirl::policy::observation::Observation::PixelsDom;
        tokio::spawn(guirl::serve::policy_server::serve(
            listener,
            Box::new(served),
            "tiny".into(),
            reads,
            Default::default(),
            limits,
        ));
        // (status, JSON body) of what the server answers on a connection sent `bytes`.
        let raw = |bytes: String| {
            let addr = addr.clone();
            async move {
                let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
                c.write_all(bytes.as_bytes()).await.unwrap();
                let mut buf = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut buf)).await;
                let text = String::from_utf8_lossy(&buf).to_string();
                let status: u16 = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
                (status, serde_json::from_str::<Value>(body).unwrap_or(Value::Null))
            }
        };
        let head = |length: u64| {
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Content-Length: {length}\r\nConnection: close\r\n\r\n"
            )
        };
        let t = std::time::Instant::now();
        let (status, body) = raw(format!("{}{{\"model\"", head(1 << 30))).await;
        assert_eq!((status, body["error"]["code"].as_u64()), (413, Some(413)), "{body}");
        assert!(t.elapsed() < Duration::from_secs(10));
        let (status, body) = raw(format!("{}{{\"model\"", head(100))).await;
        assert_eq!((status, body["error"]["type"].as_str()), (408, Some("invalid_request_error")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("did not arrive within 1 s"), "{body}");
        let t = std::time::Instant::now();
        let (status, _) = raw(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ")).await;
        assert!(status == 0 || status == 408, "closed or 408, got {status}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // Four idle connections fill the cap: the fifth is told, in OpenAI's shape.
        let mut idle = Vec::new();
        for _ in 0..4 {
            let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
            c.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
            idle.push(c);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) =
            raw("GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".into()).await;
        assert_eq!((status, body["error"]["code"].as_u64()), (503, Some(503)), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("4 connections open"), "{body}");
        drop(idle);
    });
}
