//! `guirl serve-policy`: a checkpoint behind an OpenAI-compatible API (`/v1/models`,
//! `/v1/chat/completions`, `/health`), so any harness that speaks to vLLM can evaluate
//! it, and guirl's own `openai:` policy can drive it.
//!
//! A request carries what the `openai:` policy sends: the last user message's text in
//! the layout of [`crate::policy::api::prompt::user_text`] (the instruction, previous
//! actions, the elements) and its last `image_url` part, a base64 PNG or JPEG data URL,
//! as the screenshot (an image part before it is the previous screenshot). The answer is
//! the action in guirl's text form, in screenshot pixels of the image received (`coords =
//! px`). `n`, `seed`, `temperature` (0 = greedy), `logprobs` (per action token) and
//! `stream` (the whole answer in one chunk: it is decided before it is sent) are honoured;
//! errors have the shape vLLM gives them. `/v1/models` says what the checkpoint reads
//! (`observation`), so a client's report can state it.
//!
//! Access is checked first, as `guirl serve` checks it ([`crate::serve::access`]): the
//! token, when one is set, on every route but `/health` (an OpenAI client sends it as its
//! API key), then the `Host` and `Origin` headers and a POST's content type, so that no
//! web page can run the policy.

use crate::env::ScreenState;
use crate::policy::api::prompt::read_user_text;
use crate::policy::observation::Observation;
use crate::policy::{stream_key, Sampling, TrainablePolicy};
use crate::serve::access::{self, CrossSite, Refusal};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Largest request body accepted (screenshots included).
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// Most choices one request may ask for.
pub const MAX_N: u64 = 16;

struct Served {
    policy: Mutex<Box<dyn TrainablePolicy>>,
    model: String,
    observation: Observation,
    created: u64,
}

/// An OpenAI-shaped error response; `code` is the HTTP status, as vLLM sends it.
fn error(status: StatusCode, kind: &str, message: impl Into<String>, param: Option<&str>) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": param, "code": status.as_u16()}});
    (status, Json(body)).into_response()
}

fn bad(message: impl Into<String>, param: Option<&str>) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message, param)
}

/// Who may call the server.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The bearer token every route but `/health` requires; `None`: none (loopback only,
    /// which the CLI enforces).
    pub token: Option<String>,
    /// The host names and web origins requests may come with.
    pub cross_site: CrossSite,
}

/// A refusal in the shape of the server's other errors.
fn refused(r: Refusal) -> Response {
    let kind =
        if r.status == StatusCode::UNAUTHORIZED { "authentication_error" } else { "invalid_request_error" };
    error(r.status, kind, r.message, None)
}

/// The router serving `policy` as model `model` to those `access` lets in; `observation`
/// is what the policy reads (a checkpoint's setting,
/// [`crate::policy::observation_of_checkpoint`]).
pub fn router(
    policy: Box<dyn TrainablePolicy>,
    model: String,
    observation: Observation,
    access: Access,
) -> Router {
    let state = Arc::new(Served { policy: Mutex::new(policy), model, observation, created: unix_now() });
    let access = Arc::new(access);
    let token = access.token.clone();
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(completions))
        .route_layer(axum::middleware::from_fn(move |req: Request, next: Next| {
            let refusal = token.as_deref().and_then(|t| access::token_refusal(&req, t));
            async move {
                match refusal {
                    Some(r) => refused(r),
                    None => next.run(req).await,
                }
            }
        }));
    api.route("/health", get(|| async { Json(json!({"status": "healthy"})) }))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "not_found_error",
                "no such route: use /v1/models, /v1/chat/completions or /health",
                None,
            )
        })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "this route does not take that method: GET /v1/models, POST /v1/chat/completions, GET /health",
                None,
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(move |req: Request, next: Next| {
            let refusal = access.cross_site.refusal(&req);
            async move {
                match refusal {
                    Some(r) => refused(r),
                    None => next.run(req).await,
                }
            }
        }))
        .with_state(state)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Serve `policy` (reading `observation`) on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    policy: Box<dyn TrainablePolicy>,
    model: String,
    observation: Observation,
    access: Access,
) -> anyhow::Result<()> {
    axum::serve(listener, router(policy, model, observation, access)).await?;
    Ok(())
}

async fn models(State(s): State<Arc<Served>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": s.model, "object": "model", "created": s.created, "owned_by": "guirl",
            // Where the answer's coordinates live: pixels of the image received.
            "coordinates": "px",
            // What the checkpoint reads: with `pixels`, the elements a client sends are unused.
            "observation": s.observation.to_string(),
        }],
    }))
}

/// The screenshot and text of a request's last user message.
fn read_state(body: &Value) -> Result<ScreenState, String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| "`messages` must be a list".to_string())?;
    let user = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .ok_or_else(|| "no user message".to_string())?;
    let (mut text, mut images) = (String::new(), Vec::new());
    match user.get("content") {
        Some(Value::String(s)) => text = s.clone(),
        Some(Value::Array(parts)) => {
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""));
                        text.push('\n');
                    }
                    Some("image_url") => images.extend(p.pointer("/image_url/url").and_then(Value::as_str)),
                    _ => {}
                }
            }
        }
        _ => return Err("the user message has no content".to_string()),
    }
    let url = *images
        .last()
        .ok_or_else(|| "the last user message has no image_url part: send the screenshot".to_string())?;
    let screenshot = data_url_image(url)?;
    // An image before it is the episode's previous screenshot (the `openai:` policy with
    // `--images 2` or more sends the earlier ones first, oldest first), for policies
    // with `previous_frame`.
    let previous_screenshot = match images.len() {
        0 | 1 => None,
        n => Some(data_url_image(images[n - 2])?.into()),
    };
    let (instruction, elements) = read_user_text(&text).ok_or_else(|| {
        "the user text has no `Instruction: ...` line (see guirl's openai: policy for the layout)".to_string()
    })?;
    // The numbered "Previous actions" are the episode so far: the step, and the history a
    // policy with memory reads (as `Trajectory::state_at` rebuilds it).
    let history: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Previous actions:"))
        .skip(1)
        .map_while(|l| {
            l.split_once(". ").filter(|(n, _)| n.parse::<u32>().is_ok()).map(|(_, a)| a.to_string())
        })
        .collect();
    let step = history.len();
    Ok(ScreenState {
        task_id: String::new(),
        instruction,
        url: String::new(),
        step: step as u32,
        frame: crate::env::Frame {
            width: screenshot.width(),
            height: screenshot.height(),
            ..Default::default()
        },
        elements,
        screenshot: screenshot.into(),
        history,
        previous_screenshot,
    })
}

/// The image of a base64 data URL (PNG or JPEG), or the error to send back.
fn data_url_image(url: &str) -> Result<image::RgbImage, String> {
    let b64 = url
        .split_once(";base64,")
        .filter(|(head, _)| head.starts_with("data:image/"))
        .map(|(_, b)| b)
        .ok_or_else(|| {
            "only base64 data URLs (data:image/png;base64,...) are accepted as images".to_string()
        })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("the image is not valid base64: {e}"))?;
    crate::env::decode_png(&bytes).map_err(|e| format!("the image cannot be decoded: {e}"))
}

async fn completions(
    State(s): State<Arc<Served>>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => return bad(format!("the body is not a JSON request: {e}"), None),
    };
    if let Some(m) = body.get("model").and_then(Value::as_str) {
        if m != s.model {
            return error(
                StatusCode::NOT_FOUND,
                "not_found_error",
                format!("The model `{m}` does not exist; this server serves `{}`", s.model),
                Some("model"),
            );
        }
    }
    let n = body.get("n").and_then(Value::as_u64).unwrap_or(1);
    if n == 0 || n > MAX_N {
        return bad(format!("n must be between 1 and {MAX_N}"), Some("n"));
    }
    let temperature = body.get("temperature").and_then(Value::as_f64).unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return bad("temperature must be between 0 and 2", Some("temperature"));
    }
    let want_logprobs = body.get("logprobs").and_then(Value::as_bool).unwrap_or(false);
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("stream must be true or false", Some("stream")),
    };
    let include_usage = body.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
    let seed = body.get("seed").and_then(Value::as_u64).unwrap_or_else(rand::random);
    let state = match read_state(&body) {
        Ok(st) => st,
        Err(why) => return bad(why, Some("messages")),
    };
    let server = s.clone();
    let result =
        tokio::task::spawn_blocking(move || -> anyhow::Result<(Vec<crate::policy::Decision>, usize)> {
            let mut p = server.policy.lock().map_err(|_| anyhow::anyhow!("the policy lock is poisoned"))?;
            // counted once however many choices, as OpenAI counts it
            let prompt_tokens = p.prompt_tokens(&state)?;
            let before = p.sampling();
            let greedy = temperature == 0.0;
            p.set_sampling(Sampling { temperature: if greedy { 1.0 } else { temperature }, greedy, seed });
            // Choice i draws from its own stream, so n choices are n independent samples; a
            // policy whose answers do not depend on the batch gets them in one call (a Qwen-VL
            // checkpoint then runs the prompt once and decodes the n answers together).
            let out: anyhow::Result<Vec<_>> = if p.batch_invariant() {
                let states = vec![state.clone(); n as usize];
                let keys: Vec<u64> = (0..n as usize).map(|i| stream_key(i, 0)).collect();
                p.act_keyed(&states, &keys)
            } else {
                (0..n as usize)
                    .map(|i| Ok(p.act_keyed(std::slice::from_ref(&state), &[stream_key(i, 0)])?.remove(0)))
                    .collect()
            };
            p.set_sampling(before);
            Ok((out?, prompt_tokens))
        })
        .await;
    let (decisions, prompt_tokens) = match result {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                format!("the policy failed: {e:#}"),
                None,
            )
        }
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                format!("the policy panicked: {e}"),
                None,
            )
        }
    };
    let names = {
        let p = s.policy.lock().expect("not poisoned: the forward pass released it");
        decisions
            .iter()
            .map(|d| d.tokens.iter().map(|&t| p.token_text(t)).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let mut completion_tokens = 0;
    let choices: Vec<Value> = decisions
        .iter()
        .zip(names)
        .enumerate()
        .map(|(i, (d, names))| {
            completion_tokens += d.tokens.len();
            let logprobs = want_logprobs.then(|| {
                let content: Vec<Value> = names
                    .iter()
                    .zip(&d.token_logprobs)
                    .map(|(t, lp)| json!({"token": t, "logprob": lp, "bytes": t.as_bytes(), "top_logprobs": []}))
                    .collect();
                json!({"content": content})
            });
            json!({
                "index": i,
                "message": {"role": "assistant", "content": d.action.to_string()},
                "finish_reason": "stop",
                "logprobs": logprobs,
            })
        })
        .collect();
    let (id, created) = (format!("chatcmpl-{:016x}", rand::random::<u64>()), unix_now());
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                       "total_tokens": prompt_tokens + completion_tokens});
    if stream {
        return event_stream(&id, created, &s.model, &choices, include_usage.then_some(usage));
    }
    Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": s.model,
        "choices": choices,
        "usage": usage,
    }))
    .into_response()
}

/// `stream: true`: the answer as server-sent events of `chat.completion.chunk`s, as OpenAI
/// streams them: per choice a chunk with the whole message (the action is decided before
/// any of it is sent) and one with its finish reason, then the usage if asked, then
/// `[DONE]`.
fn event_stream(id: &str, created: u64, model: &str, choices: &[Value], usage: Option<Value>) -> Response {
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": choices});
        if let Some(u) = usage {
            c["usage"] = u.clone();
        }
        format!("data: {c}\n\n")
    };
    let mut body = String::new();
    for c in choices {
        let delta = json!({"role": "assistant", "content": c["message"]["content"]});
        let mut first = json!({"index": c["index"], "delta": delta, "finish_reason": null});
        if !c["logprobs"].is_null() {
            first["logprobs"] = c["logprobs"].clone();
        }
        body.push_str(&chunk(json!([first]), None));
        body.push_str(&chunk(
            json!([{"index": c["index"], "delta": {}, "finish_reason": c["finish_reason"]}]),
            None,
        ));
    }
    if let Some(u) = &usage {
        body.push_str(&chunk(json!([]), Some(u)));
    }
    body.push_str("data: [DONE]\n\n");
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/event-stream"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    /// The request's numbered previous actions become the state's history (what a policy
    /// with memory reads) and its step; an image before the last is the previous frame.
    #[test]
    fn previous_actions_are_the_history() {
        let mut state = crate::policy::vlm::speed::square_state(40, 30, 0, 0, 4, [9, 9, 9], "Add \"milk\"");
        let png = crate::env::encode_png(&state.screenshot);
        let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
        let previous = ["click(3, 4)".to_string(), "type(\"milk. now\")".to_string()];
        state.elements.clear();
        let text = crate::policy::api::prompt::user_text(&state, &previous, true);
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
        let read = read_state(&body).unwrap();
        assert_eq!(read.history, previous);
        assert_eq!(read.step, 2);
        assert_eq!(read.instruction, "Add \"milk\"");
        assert!(read.previous_screenshot.is_none(), "one image: no previous frame");

        // With an earlier screenshot first (as `--images 2` sends it), that is the previous one.
        let before = crate::policy::vlm::speed::square_state(40, 30, 20, 10, 4, [200, 9, 9], "x").screenshot;
        let before_url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(crate::env::encode_png(&before))
        );
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "Screenshot 1 step(s) ago:"},
            {"type": "image_url", "image_url": {"url": before_url}},
            {"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
        let read = read_state(&body).unwrap();
        assert_eq!(read.previous_screenshot.as_ref(), Some(&before));
        assert_eq!(read.screenshot, state.screenshot);
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
        assert!(read_state(&body).unwrap_err().contains("only base64 data URLs"));
    }
}
