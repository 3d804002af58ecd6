//! What a chat-completions request asks for: its sampling parameters, checked as OpenAI
//! types them (a wrong type is a 400 that names the field, not a silent default), and the
//! screen state its last user message carries.

use crate::env::{GuiAction, ScreenState};
use crate::policy::api::prompt::read_user_text;
use base64::Engine;
use serde_json::Value;

/// Most choices one request may ask for.
pub const MAX_N: u64 = 16;

/// A request's sampling parameters.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Params {
    /// Choices to answer.
    pub n: u64,
    /// 0 is greedy.
    pub temperature: f64,
    /// The sampling streams' seed.
    pub seed: u64,
    /// Per-token log-probs in the answer.
    pub logprobs: bool,
    /// Server-sent events.
    pub stream: bool,
    /// The usage as a last event of a stream.
    pub include_usage: bool,
    /// Tokens an answer may have at most (`max_completion_tokens`, else `max_tokens`).
    pub max_tokens: Option<usize>,
}

/// A field the request got wrong: its name and what to send.
pub(super) type Wrong = (&'static str, String);

fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

fn integer(
    body: &Value,
    name: &'static str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, Wrong> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => match v.as_u64().filter(|n| range.contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err((
                name,
                format!("{name} must be an integer from {} to {}, got {v}", range.start(), range.end()),
            )),
        },
    }
}

fn boolean(body: &Value, name: &'static str) -> Result<bool, Wrong> {
    match field(body, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err((name, format!("{name} must be true or false, got {v}"))),
    }
}

/// The sampling parameters of `body`, or the field it got wrong.
pub(super) fn params(body: &Value) -> Result<Params, Wrong> {
    let n = integer(body, "n", 1..=MAX_N)?.unwrap_or(1);
    let temperature = match field(body, "temperature") {
        None => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|t| (0.0..=2.0).contains(t))
            .ok_or(("temperature", format!("temperature must be a number from 0 to 2, got {v}")))?,
    };
    // OpenAI's seed is any 64-bit integer; a negative one names the stream of its bits.
    let seed = match field(body, "seed") {
        None => rand::random(),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_i64().map(|i| i as u64))
            .ok_or(("seed", format!("seed must be an integer, got {v}")))?,
    };
    if integer(body, "top_logprobs", 0..=20)?.is_some_and(|k| k > 0) {
        return Err((
            "top_logprobs",
            "top_logprobs is not served: guirl keeps the log-prob of each token it drew, not of the \
             others; leave it out or send 0"
                .into(),
        ));
    }
    let limit = 1..=u64::from(u32::MAX);
    let max_tokens = match integer(body, "max_completion_tokens", limit.clone())? {
        Some(m) => Some(m),
        None => integer(body, "max_tokens", limit)?,
    };
    let include_usage = match body.get("stream_options").filter(|v| !v.is_null()) {
        None => false,
        Some(o @ Value::Object(_)) => {
            boolean(o, "include_usage").map_err(|(_, m)| ("stream_options", format!("stream_options.{m}")))?
        }
        Some(v) => return Err(("stream_options", format!("stream_options must be an object, got {v}"))),
    };
    Ok(Params {
        n,
        temperature,
        seed,
        logprobs: boolean(body, "logprobs")?,
        stream: boolean(body, "stream")?,
        include_usage,
        max_tokens: max_tokens.map(|m| m as usize),
    })
}

/// The screenshot and text of a request's last user message.
pub(super) fn read_state(body: &Value) -> Result<ScreenState, String> {
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
    let numbered: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Previous actions:"))
        .skip(1)
        .map_while(|l| {
            l.split_once(". ").filter(|(n, _)| n.parse::<u32>().is_ok()).map(|(_, a)| a.to_string())
        })
        .collect();
    // Every line is a step taken; only actions enter the history, as the env records it (a
    // client's note of an answer with no action in it, `(no action: …)`, is no action).
    let step = numbered.len();
    let history: Vec<String> = numbered.into_iter().filter(|a| a.parse::<GuiAction>().is_ok()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use serde_json::json;

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

    #[test]
    fn parameters_of_the_wrong_type_are_named_not_defaulted() {
        let p = params(&json!({"n": 2, "temperature": 0, "seed": -3, "logprobs": true, "max_tokens": 8}))
            .unwrap();
        assert_eq!(
            (p.n, p.temperature, p.seed, p.logprobs, p.max_tokens),
            (2, 0.0, (-3i64) as u64, true, Some(8))
        );
        let p = params(&json!({"max_tokens": 8, "max_completion_tokens": 5, "top_logprobs": 0})).unwrap();
        assert_eq!((p.n, p.temperature, p.max_tokens), (1, 1.0, Some(5)));
        let null = params(&json!({"n": null, "temperature": null, "stream": null})).unwrap();
        assert_eq!((null.n, null.temperature, null.stream), (1, 1.0, false));
        for (body, name, says) in [
            (json!({"temperature": "hot"}), "temperature", "a number from 0 to 2, got \"hot\""),
            (json!({"temperature": 3}), "temperature", "from 0 to 2"),
            (json!({"n": "2"}), "n", "an integer from 1 to 16, got \"2\""),
            (json!({"n": 1.5}), "n", "an integer"),
            (json!({"seed": "7"}), "seed", "an integer"),
            (json!({"logprobs": 1}), "logprobs", "true or false"),
            (json!({"stream": "yes"}), "stream", "true or false"),
            (json!({"stream_options": {"include_usage": "y"}}), "stream_options", "include_usage must be"),
            (json!({"top_logprobs": 3}), "top_logprobs", "not served"),
            (json!({"top_logprobs": 50}), "top_logprobs", "from 0 to 20"),
            (json!({"max_tokens": 0}), "max_tokens", "from 1"),
        ] {
            let (got, message) = params(&body).unwrap_err();
            assert_eq!(got, name, "{body}");
            assert!(message.contains(says), "{body}: {message}");
        }
    }

    /// A client's note of an answer with no action counts as a step, not as an action.
    #[test]
    fn a_noted_answer_with_no_action_is_a_step_but_no_history() {
        let state = crate::policy::vlm::speed::square_state(40, 30, 0, 0, 4, [9, 9, 9], "Go");
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(crate::env::encode_png(&state.screenshot))
        );
        let previous =
            ["click(3, 4)".to_string(), "(no action: 4, 66)".to_string(), "key(Enter)".to_string()];
        let text = crate::policy::api::prompt::user_text(&state, &previous, false);
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
        let read = read_state(&body).unwrap();
        assert_eq!((read.step, read.history), (3, vec!["click(3, 4)".to_string(), "key(Enter)".to_string()]));
    }
}
