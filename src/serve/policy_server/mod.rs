//! `guirl serve-policy`: a checkpoint behind an OpenAI-compatible API (`/v1/models`,
//! `/v1/chat/completions`, `/health`), so any harness that speaks to vLLM can evaluate
//! it, and guirl's own `openai:` policy can drive it.
//!
//! A request carries what the `openai:` policy sends: the last user message's text in
//! the layout of [`crate::policy::api::prompt::user_text`] (the instruction, previous
//! actions, the elements) and its last `image_url` part, a base64 PNG or JPEG data URL,
//! as the screenshot (an image part before it is the previous screenshot). The answer is
//! what the model wrote, as vLLM would serve it: a Qwen-VL checkpoint's text in its own
//! coordinate frame; the small policy's action in guirl's text form, in screenshot pixels.
//! `/v1/models` names that frame (`coordinates`) and what the checkpoint reads
//! (`observation`), so a client parses the answer as the policy itself does and its
//! report can say what was read. `n`, `seed`, `temperature` (0 = greedy), `logprobs` (per
//! token), `max_tokens` and `stream` (the whole answer in one chunk: it is decided before
//! it is sent) are honoured, and a parameter of the wrong type is refused
//! (`request.rs`); errors have the shape vLLM gives them.
//!
//! Access is checked first, as `guirl serve` checks it ([`crate::serve::access`]): the
//! token, when one is set, on every route but `/health` (an OpenAI client sends it as its
//! API key), then the `Host` and `Origin` headers and a POST's content type, so that no
//! web page can run the policy.

mod answer;
mod request;

use crate::policy::observation::Observation;
use crate::policy::{stream_key, Sampling, TrainablePolicy};
use crate::serve::access::{self, CrossSite, Refusal};
use crate::serve::conn::{self, ConnLimits};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

pub use request::MAX_N;

/// Largest request body accepted (screenshots included).
pub const MAX_BODY_BYTES: usize = 32 << 20;

struct Served {
    policy: Mutex<Box<dyn TrainablePolicy>>,
    model: String,
    observation: Observation,
    /// The coordinate frame of the answers' clicks.
    frame: String,
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
    let frame = policy.answer_frame().to_string();
    let state =
        Arc::new(Served { policy: Mutex::new(policy), model, observation, frame, created: unix_now() });
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

/// Serve `policy` (reading `observation`) on `listener` until the process ends, each
/// connection held to `limits` ([`conn`]) as `guirl serve` holds them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    policy: Box<dyn TrainablePolicy>,
    model: String,
    observation: Observation,
    access: Access,
    limits: ConnLimits,
) -> anyhow::Result<()> {
    let app = router(policy, model, observation, access).layer(axum::middleware::from_fn(
        move |req: Request, next: Next| async move {
            match conn::read_body(req, MAX_BODY_BYTES, limits.body_timeout).await {
                Ok(req) => next.run(req).await,
                Err(refused) => error(refused.status(), "invalid_request_error", refused.message(), None),
            }
        },
    ));
    let counts = Arc::new(conn::ConnCounts::default());
    conn::accept(listener, app, limits, counts, shed_body, std::future::pending()).await?;
    Ok(())
}

/// The answer to a connection past the cap, in OpenAI's error shape.
fn shed_body(max: usize) -> String {
    json!({"error": {"message": conn::shed_message(max), "type": "server_error", "param": null, "code": 503}})
        .to_string()
}

async fn models(State(s): State<Arc<Served>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": s.model, "object": "model", "created": s.created, "owned_by": "guirl",
            // The frame of the answer's coordinates, which a client must read them in.
            "coordinates": s.frame,
            // What the checkpoint reads: with `pixels`, the elements a client sends are unused.
            "observation": s.observation.to_string(),
        }],
    }))
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
    let params = match request::params(&body) {
        Ok(p) => p,
        Err((name, message)) => return bad(message, Some(name)),
    };
    let state = match request::read_state(&body) {
        Ok(st) => st,
        Err(why) => return bad(why, Some("messages")),
    };
    let server = s.clone();
    let request::Params { n, temperature, seed, logprobs, stream, include_usage, max_tokens } = params;
    type Answered = (Vec<Value>, usize, usize);
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Answered> {
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
        let (choices, completion_tokens) = answer::choices(p.as_ref(), &out?, max_tokens, logprobs)?;
        Ok((choices, prompt_tokens, completion_tokens))
    })
    .await;
    let (choices, prompt_tokens, completion_tokens) = match result {
        Ok(Ok(answered)) => answered,
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
    let (id, created) = (format!("chatcmpl-{:016x}", rand::random::<u64>()), unix_now());
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                       "total_tokens": prompt_tokens + completion_tokens});
    if stream {
        return answer::event_stream(&id, created, &s.model, &choices, include_usage.then_some(usage));
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
