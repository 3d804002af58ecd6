//! OpenEnv's WebSocket protocol on `/ws`: one connection is one session; JSON messages
//! `reset`, `step`, `state`, `close` answered by `observation`, `state` or `error`.
//! Observations go as binary frames ([`super::frame`]) to a client that asks with
//! `"binary": true`. Pings catch half-open connections, whose sessions are then freed.

use super::error::ApiError;
use super::frame;
use super::limits;
use super::session::{Session, Transition};
use super::state::{task_from_request, LocalPeer, ServeConfig, Shared};
use super::wire::{self, ImageOverride, OPTION_FIELDS, OVERRIDE_FIELDS};
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;

/// `GET /ws`: upgrade, then serve one session for the connection's life.
pub async fn upgrade(
    State(s): State<Arc<Shared>>,
    LocalPeer(local): LocalPeer,
    ws: WebSocketUpgrade,
) -> Response {
    let max = s.cfg.max_body;
    ws.max_message_size(max).max_frame_size(max).on_upgrade(move |socket| serve(s, socket, local))
}

fn error_message(e: &ApiError) -> String {
    json!({"type": "error", "data": {"code": e.openenv_code(), "error": e.code, "message": e.message}})
        .to_string()
}

/// An `observation` message: JSON text with the screenshot in base64 (OpenEnv's form), or
/// a binary frame of the same JSON with `"screenshot": null` and the image after it.
fn observation_message(t: Transition, binary: bool) -> Message {
    let Transition { observation, image, reward, terminated, truncated, info } = t;
    let observation = match binary {
        true => observation,
        false => observation.map(|o| wire::with_base64(o, image.as_deref())),
    };
    let mut obs = match observation {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    obs.insert("terminated".into(), json!(terminated));
    obs.insert("truncated".into(), json!(truncated));
    obs.insert("info".into(), Value::Object(info));
    let data = json!({"observation": obs, "reward": reward, "done": terminated || truncated});
    let msg = json!({"type": "observation", "data": data});
    match binary {
        true => Message::Binary(frame::encode(&msg, image.as_deref().unwrap_or_default()).into()),
        false => Message::Text(msg.to_string().into()),
    }
}

/// Serve one connection's session; `local`: the peer is on this machine (may take `shm`).
async fn serve(s: Arc<Shared>, mut socket: WebSocket, local: bool) {
    let session = match s.table.open("ws") {
        Ok(session) => session,
        Err(e) => {
            let text = json!({"type": "error", "data": {
                "code": e.openenv_code(), "error": e.code, "message": e.message,
                "active_sessions": s.table.len(), "max_sessions": s.table.max(),
            }})
            .to_string();
            let _ = socket.send(Message::Text(text.into())).await;
            // The code and reason reach a client that writes before it reads (OpenEnv's
            // sends `reset` first, and saw only "1005 no status received").
            let frame = CloseFrame { code: close_code::AGAIN, reason: close_reason(&e.message).into() };
            let _ = socket.send(Message::Close(Some(frame))).await;
            return;
        }
    };
    tracing::debug!(session = %session.id, "websocket session opened");
    let every = s.cfg.ws_ping;
    let mut ping = tokio::time::interval(every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut last_heard = Instant::now();
    // Whether observations go as binary frames (a reset's "binary" sets it for the
    // connection; a step's applies to its own answer).
    let mut binary = false;
    loop {
        tokio::select! {
            msg = socket.recv() => {
                let text = match msg {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(_))) => {
                        let e = ApiError::bad_request("binary frames are not messages: send JSON text");
                        let reply = json!({"type": "error", "data": {"code": "INVALID_JSON", "error": e.code, "message": e.message}});
                        if socket.send(Message::Text(reply.to_string().into())).await.is_err() { break; }
                        continue;
                    }
                    Some(Ok(_)) => { last_heard = Instant::now(); continue; }
                };
                let (reply, close) = handle(&session, &text, &s.cfg, &mut binary, local).await;
                if let Some(reply) = reply {
                    if socket.send(reply).await.is_err() { break; }
                }
                // A slow reset or step is the server's time, not the peer's silence: pongs
                // that arrived meanwhile are still unread.
                last_heard = Instant::now();
                if close { break; }
            }
            _ = ping.tick() => {
                // Two intervals without a pong or a message: the peer is gone (a half-open
                // connection never errors on its own), so free its browser.
                if last_heard.elapsed() > every * 2 {
                    tracing::info!(session = %session.id, "websocket peer stopped answering pings; closing its session");
                    break;
                }
                if s.table.get(&session.id).is_err() {
                    let e = ApiError::unknown_session(&session.id);
                    let _ = socket.send(Message::Text(error_message(&e).into())).await;
                    break;
                }
                if socket.send(Message::Ping(Vec::new().into())).await.is_err() { break; }
            }
        }
    }
    let _ = s.table.close(&session.id).await;
    let _ = socket.send(Message::Close(None)).await;
    tracing::debug!(session = %session.id, "websocket session closed");
}

/// Answer one text message; the flag says whether to close the connection after it.
async fn handle(
    session: &Arc<Session>,
    text: &str,
    cfg: &ServeConfig,
    binary: &mut bool,
    local: bool,
) -> (Option<Message>, bool) {
    let text_reply = |v: Value| Some(Message::Text(v.to_string().into()));
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let reply = json!({"type": "error", "data": {"code": "INVALID_JSON", "error": "bad_request", "message": format!("Invalid JSON: {e}")}});
            return (text_reply(reply), false);
        }
    };
    let kind = msg.get("type").and_then(Value::as_str).unwrap_or("");
    let data = match msg.get("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            let e = ApiError::bad_request(format!(
                "\"data\" must be an object, got {}",
                wire::short(&other.to_string())
            ));
            return (Some(Message::Text(error_message(&e).into())), false);
        }
    };
    let result = match kind {
        "reset" => match binary_field(&data) {
            Ok(b) => reset(session, &data, cfg, local).await.map(|t| {
                *binary = b.unwrap_or(*binary);
                observation_message(t, *binary)
            }),
            Err(e) => Err(e),
        },
        "step" => match binary_field(&data) {
            Ok(b) => step(session, &data, local).await.map(|t| observation_message(t, b.unwrap_or(*binary))),
            Err(e) => Err(e),
        },
        "state" => session
            .state()
            .await
            .map(|st| Message::Text(json!({"type": "state", "data": st}).to_string().into())),
        "close" => return (None, true),
        other => {
            let reply = json!({"type": "error", "data": {"code": "UNKNOWN_TYPE", "error": "bad_request",
                "message": format!("Unknown message type: {}: use reset, step, state or close", wire::short(&format!("{other:?}")))}});
            return (text_reply(reply), false);
        }
    };
    session.touch();
    match result {
        Ok(reply) => (Some(reply), false),
        Err(e) => {
            let gone = e.code == "unknown_session";
            (Some(Message::Text(error_message(&e).into())), gone)
        }
    }
}

/// A message's `binary` field: whether observations come as binary frames.
fn binary_field(data: &Map<String, Value>) -> Result<Option<bool>, ApiError> {
    match data.get("binary") {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            "bad_option",
            format!(
                "binary = {}: use true (observations as binary frames: docs/serve.md) or false (JSON text)",
                wire::short(&v.to_string())
            ),
        )),
    }
}

/// A reset; a refused one ends the episode it was to replace, so that a client's next
/// step cannot land in the old episode by mistake.
async fn reset(
    session: &Session,
    data: &Map<String, Value>,
    cfg: &ServeConfig,
    local: bool,
) -> Result<Transition, ApiError> {
    let result = try_reset(session, data, cfg, local).await;
    if result.is_err() {
        session.end_episode().await;
    }
    result
}

async fn try_reset(
    session: &Session,
    data: &Map<String, Value>,
    cfg: &ServeConfig,
    local: bool,
) -> Result<Transition, ApiError> {
    let mut allowed = vec!["seed", "episode_id", "task", "task_spec", "binary"];
    allowed.extend(OPTION_FIELDS);
    wire::reject_unknown(data, &allowed, "a reset message")?;
    limits::extra("episode_id", data.get("episode_id"))?;
    let seed = wire::seed(data)?;
    let mut opts = session.options().await?;
    opts.update(data)?;
    let own = ImageOverride { local, ..Default::default() };
    own.allows(opts.screenshot)?;
    let task = task_from_request(data, &opts, cfg).await?;
    session.configure(task, opts).await?;
    session.reset(seed, own).await
}

async fn step(session: &Session, data: &Map<String, Value>, local: bool) -> Result<Transition, ApiError> {
    let mut allowed = vec!["action", "action_str", "metadata", "request_id", "binary"];
    allowed.extend(OVERRIDE_FIELDS);
    wire::reject_unknown(data, &allowed, "a step message")?;
    limits::extra("metadata", data.get("metadata"))?;
    limits::extra("request_id", data.get("request_id"))?;
    let action = wire::action(data)?;
    let image = ImageOverride::parse(data, local)?;
    session.step(&action, image).await
}

/// A close frame's reason: at most 123 bytes (RFC 6455), so a longer message ends at a
/// word with "…" (the whole message went out in the error before it).
fn close_reason(message: &str) -> String {
    if message.len() <= 123 {
        return message.to_string();
    }
    let mut end = 0;
    for (i, c) in message.char_indices() {
        if i + c.len_utf8() > 119 {
            break;
        }
        if c == ' ' {
            end = i;
        }
    }
    format!("{}…", message[..end].trim_end_matches([',', ':', ';']))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_close_reason_ends_at_a_word_within_the_protocol_limit() {
        let full = super::ApiError::capacity(8, 8).message;
        assert!(full.len() > 123, "{full}");
        let r = super::close_reason(&full);
        assert!(r.len() <= 123 && r.ends_with('…') && full.starts_with(r.trim_end_matches('…')), "{r}");
        assert!(!r.trim_end_matches('…').ends_with(' '), "{r}");
        assert_eq!(super::close_reason("short"), "short");
    }
}
