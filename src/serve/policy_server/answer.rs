//! The answer to a request: a choice per decision, in the policy's own words where it
//! answers in text (a Qwen-VL checkpoint's answer as it wrote it, in its coordinate frame,
//! so an answer with no action in it reaches the client as it is, and the log-probs spell
//! the content), else the action in guirl's text form; cut at the request's token limit.

use crate::policy::{Decision, TrainablePolicy};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The choices for `decisions` (and the completion tokens they hold), answers cut to
/// `max_tokens` tokens as a decoder stopping there would have cut them.
pub(super) fn choices(
    p: &dyn TrainablePolicy,
    decisions: &[Decision],
    max_tokens: Option<usize>,
    logprobs: bool,
) -> anyhow::Result<(Vec<Value>, usize)> {
    let mut completion_tokens = 0;
    let mut out = Vec::new();
    for (i, d) in decisions.iter().enumerate() {
        let kept = max_tokens.map_or(d.tokens.len(), |m| m.min(d.tokens.len()));
        let cut = kept < d.tokens.len();
        let tokens = &d.tokens[..kept];
        completion_tokens += tokens.len();
        let content = match p.answer_text(tokens)? {
            Some(text) => text,
            // an action cut short, or none, is no action: nothing to say
            None if cut || d.failure.is_some() => String::new(),
            None => d.action.to_string(),
        };
        let finish_reason = if cut || !p.answer_stopped(&d.tokens) { "length" } else { "stop" };
        let logprobs = logprobs.then(|| {
            let content: Vec<Value> = tokens
                .iter()
                .zip(&d.token_logprobs)
                .map(|(&t, lp)| {
                    let text = p.token_text(t);
                    json!({"token": text, "logprob": lp, "bytes": text.as_bytes(), "top_logprobs": []})
                })
                .collect();
            json!({"content": content})
        });
        out.push(json!({
            "index": i,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason,
            "logprobs": logprobs,
        }));
    }
    Ok((out, completion_tokens))
}

/// `stream: true`: the answer as server-sent events of `chat.completion.chunk`s, as OpenAI
/// streams them: per choice a chunk with the whole message (the action is decided before
/// any of it is sent) and one with its finish reason, then the usage if asked, then
/// `[DONE]`.
pub(super) fn event_stream(
    id: &str,
    created: u64,
    model: &str,
    choices: &[Value],
    usage: Option<Value>,
) -> Response {
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
