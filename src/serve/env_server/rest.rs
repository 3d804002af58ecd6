//! The REST transport: `/v1/sessions` with explicit session ids, `/v1/tasks`.

use super::error::ApiError;
use super::frame;
use super::session::Transition;
use super::state::{task_from_request, LocalPeer, Shared};
use super::wire::{self, ImageFormat, ImageOverride, SessionOptions, OPTION_FIELDS, OVERRIDE_FIELDS};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

type Body = Result<Bytes, BytesRejection>;

/// Read a body as a JSON object, turning a too-large body into 413.
fn object(body: Body) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than the server's --max-body",
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    wire::body_object(&bytes)
}

/// `POST /v1/sessions`.
pub async fn create(
    State(s): State<Arc<Shared>>,
    LocalPeer(local): LocalPeer,
    body: Body,
) -> Result<Response, ApiError> {
    let obj = object(body)?;
    let mut allowed = vec!["task", "task_spec"];
    allowed.extend(OPTION_FIELDS);
    wire::reject_unknown(&obj, &allowed, "a session request")?;
    let mut opts = SessionOptions::default();
    opts.update(&obj)?;
    ImageOverride { local, ..Default::default() }.allows(opts.screenshot)?;
    let task = task_from_request(&obj, &opts, &s.cfg).await?.ok_or_else(|| {
        ApiError::invalid(
            "missing_task",
            "a session needs \"task\" (a task id such as \"miniwob/click-button\"; GET /v1/tasks lists them) \
             or \"task_spec\" (a website spec's TOML text)",
        )
    })?;
    let session = s.table.open("rest")?;
    let configured = session.configure(Some(task), opts).await;
    if let Err(e) = configured {
        let _ = s.table.close(&session.id).await;
        return Err(e);
    }
    let desc = session.describe().await?;
    Ok((StatusCode::CREATED, Json(desc)).into_response())
}

/// `GET /v1/sessions`.
pub async fn list(State(s): State<Arc<Shared>>) -> Json<Value> {
    let mut out = Vec::new();
    for session in s.table.all() {
        if let Ok(st) = session.state().await {
            out.push(st);
        }
    }
    Json(json!({ "sessions": out, "max_sessions": s.table.max() }))
}

/// `GET /v1/sessions/{id}`.
pub async fn state(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(s.table.get(&id)?.state().await?))
}

/// `DELETE /v1/sessions/{id}`.
pub async fn close(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    s.table.close(&id).await?;
    Ok(Json(json!({ "closed": id })))
}

/// `POST /v1/sessions/{id}/reset`.
pub async fn reset(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    LocalPeer(local): LocalPeer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let session = s.table.get(&id)?;
    let t = async {
        let obj = object(body)?;
        let mut allowed = vec!["seed"];
        allowed.extend(OVERRIDE_FIELDS);
        wire::reject_unknown(&obj, &allowed, "a reset request")?;
        let seed = wire::seed(&obj)?;
        session.reset(seed, ImageOverride::parse(&obj, local)?).await
    }
    .await;
    // A refused reset ends the episode it was to replace (as over WebSocket).
    if t.is_err() {
        session.end_episode().await;
    }
    let t = t?;
    session.touch();
    Ok(answer(t, false, frame::wants_binary(&headers)))
}

/// `POST /v1/sessions/{id}/step`.
pub async fn step(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    LocalPeer(local): LocalPeer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let session = s.table.get(&id)?;
    let obj = object(body)?;
    let mut allowed = vec!["action", "action_str"];
    allowed.extend(OVERRIDE_FIELDS);
    wire::reject_unknown(&obj, &allowed, "a step request")?;
    let action = wire::action(&obj)?;
    let t = session.step(&action, ImageOverride::parse(&obj, local)?).await?;
    session.touch();
    Ok(answer(t, true, frame::wants_binary(&headers)))
}

/// A reset's (`{"observation", "info", "terminated", "truncated"}`) or a step's
/// (`+ "reward"`) answer: JSON with the screenshot in base64, or a binary frame (the same
/// JSON with `"screenshot": null`, the image's bytes after it).
fn answer(t: Transition, step: bool, binary: bool) -> Response {
    let Transition { observation, image, reward, terminated, truncated, info } = t;
    let observation = match binary {
        true => observation,
        false => observation.map(|o| wire::with_base64(o, image.as_deref())),
    };
    let body = if step {
        json!({"observation": observation, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info})
    } else {
        json!({"observation": observation, "info": info, "terminated": terminated, "truncated": truncated})
    };
    if binary {
        // The header and JSON, then the image as its own chunk: the pixels are not copied.
        let head = frame::encode(&body, &[]);
        let len = head.len() + image.as_ref().map_or(0, Bytes::len);
        let chunks =
            [Some(Bytes::from(head)), image].into_iter().flatten().map(Ok::<_, std::convert::Infallible>);
        let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
        (
            [
                (header::CONTENT_TYPE, frame::MEDIA_TYPE.to_string()),
                (header::CONTENT_LENGTH, len.to_string()),
            ],
            body,
        )
            .into_response()
    } else {
        Json(body).into_response()
    }
}

/// `GET /v1/sessions/{id}/render?format=png|jpeg`.
pub async fn render(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let fmt = match q.get("format").map(String::as_str) {
        None | Some("png") => ImageFormat::Png,
        Some("jpeg") | Some("jpg") => ImageFormat::Jpeg,
        Some(other) => {
            return Err(ApiError::invalid(
                "bad_option",
                format!(
                    "format = {}: use png or jpeg (raw pixels come with a step or reset: \"screenshot\": \"raw\" or \"shm\")",
                    wire::short(&format!("{other:?}"))
                ),
            ))
        }
    };
    let session = s.table.get(&id)?;
    let quality = session.options().await?.jpeg_quality;
    let img = session.render().await?;
    let bytes = wire::encode_image(&img, fmt, quality).ok_or_else(|| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "cannot encode the screenshot")
    })?;
    let mime = if fmt == ImageFormat::Jpeg { "image/jpeg" } else { "image/png" };
    Ok(([(header::CONTENT_TYPE, mime)], bytes).into_response())
}
