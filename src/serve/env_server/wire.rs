//! What crosses the wire: request fields read by hand (so every mistake gets a message
//! naming the field), and observations as JSON with the screenshot encoded apart (base64
//! inside the JSON, or the bytes after it in a binary frame, see [`super::frame`]).

use super::error::ApiError;
use super::limits::{self, MAX_ECHO_CHARS};
use crate::env::{ScreenState, StepInfo};
use axum::body::Bytes;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Longest action text accepted.
pub const MAX_ACTION_CHARS: usize = 10_000;

/// How screenshots travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageFormat {
    /// Base64 PNG (lossless; the default).
    #[default]
    Png,
    /// JPEG at the session's quality (lossy, the smallest).
    Jpeg,
    /// Uncompressed RGB8, row by row, width × height × 3 bytes: no encoding cost, the
    /// fastest on loopback (meant for binary frames; base64 in JSON works too).
    Raw,
    /// Uncompressed RGB8 in a file in shared memory that the answer names
    /// (`screenshot_shm`): no pixels cross the socket. For clients on the server's machine
    /// only ([`super::shm`]).
    Shm,
    /// No screenshot (text-only agents, or clients that call render themselves).
    None,
}

impl ImageFormat {
    /// Read a `screenshot` field.
    pub fn parse(v: &Value) -> Result<ImageFormat, ApiError> {
        match v.as_str() {
            Some("png") => Ok(ImageFormat::Png),
            Some("jpeg") | Some("jpg") => Ok(ImageFormat::Jpeg),
            Some("raw") => Ok(ImageFormat::Raw),
            Some("shm") => Ok(ImageFormat::Shm),
            Some("none") => Ok(ImageFormat::None),
            _ => Err(ApiError::invalid(
                "bad_option",
                format!(
                    "screenshot = {}: use \"png\", \"jpeg\", \"raw\" (RGB8 bytes), \"shm\" (RGB8 in \
                     shared memory, clients on this machine) or \"none\" (WebP is not offered: \
                     docs/serve.md says why)",
                    short(&v.to_string())
                ),
            )),
        }
    }
    /// The name written in observations.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Raw => "raw",
            ImageFormat::Shm => "shm",
            ImageFormat::None => "none",
        }
    }
}

/// What a client chose for its session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOptions {
    /// Override of the task's step limit.
    pub max_steps: Option<u32>,
    /// An action that cannot be executed ends the episode.
    pub strict_actions: bool,
    /// Enforce the task's in-page time limit (ms).
    pub wall_clock_ms: Option<u64>,
    /// How screenshots travel.
    pub screenshot: ImageFormat,
    /// JPEG quality, 1 to 100.
    pub jpeg_quality: u8,
    /// Whether observations list the page's elements.
    pub elements: bool,
    /// Viewport of a website spec (width, height).
    pub viewport: Option<(u32, u32)>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_steps: None,
            strict_actions: false,
            wall_clock_ms: None,
            screenshot: ImageFormat::Png,
            jpeg_quality: 80,
            elements: true,
            viewport: None,
        }
    }
}

/// The option fields a session takes.
pub const OPTION_FIELDS: [&str; 7] =
    ["max_steps", "strict_actions", "wall_clock_ms", "screenshot", "jpeg_quality", "elements", "viewport"];

impl SessionOptions {
    /// Apply the option fields present in `obj` on top of `self`.
    pub fn update(&mut self, obj: &Map<String, Value>) -> Result<(), ApiError> {
        let bad = |k: &str, v: &Value, want: &str| {
            ApiError::invalid("bad_option", format!("{k} = {}: {want}", short(&v.to_string())))
        };
        for (k, v) in obj {
            match k.as_str() {
                "max_steps" => {
                    self.max_steps = match v {
                        Value::Null => None,
                        _ => Some(v.as_u64().filter(|n| (1..=10_000).contains(n)).ok_or_else(|| {
                            bad(k, v, "use an integer from 1 to 10000, or null for the task's own")
                        })? as u32),
                    }
                }
                "strict_actions" => {
                    self.strict_actions = v.as_bool().ok_or_else(|| bad(k, v, "use true or false"))?
                }
                "elements" => self.elements = v.as_bool().ok_or_else(|| bad(k, v, "use true or false"))?,
                "wall_clock_ms" => {
                    self.wall_clock_ms =
                        match v {
                            Value::Null => None,
                            _ => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                                bad(k, v, "use a positive number of milliseconds, or null")
                            })?),
                        }
                }
                "screenshot" => self.screenshot = ImageFormat::parse(v)?,
                "jpeg_quality" => self.jpeg_quality = jpeg_quality(v)?,
                "viewport" => {
                    let dim = |f: &str| v.get(f).and_then(Value::as_u64).filter(|n| (50..=4000).contains(n));
                    self.viewport = match v {
                        Value::Null => None,
                        _ => match (dim("width"), dim("height")) {
                            (Some(w), Some(h)) => Some((w as u32, h as u32)),
                            _ => {
                                return Err(bad(
                                    k,
                                    v,
                                    "use {\"width\": W, \"height\": H} with 50 to 4000 pixels each",
                                ))
                            }
                        },
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A `jpeg_quality` field: an integer from 1 to 100.
fn jpeg_quality(v: &Value) -> Result<u8, ApiError> {
    v.as_u64().filter(|q| (1..=100).contains(q)).map(|q| q as u8).ok_or_else(|| {
        ApiError::invalid(
            "bad_option",
            format!("jpeg_quality = {}: use an integer from 1 to 100", short(&v.to_string())),
        )
    })
}

/// A reset's or step's own choice of screenshot encoding, over the session's for that
/// answer only (`screenshot`, `jpeg_quality`), and whether the client may have it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ImageOverride {
    /// The encoding (`screenshot`).
    pub format: Option<ImageFormat>,
    /// The JPEG quality.
    pub jpeg_quality: Option<u8>,
    /// Whether the request came from the server's machine (over loopback), so that
    /// `shm` frames are readable where the client is.
    pub local: bool,
}

/// The request fields an [`ImageOverride`] reads.
pub const OVERRIDE_FIELDS: [&str; 2] = ["screenshot", "jpeg_quality"];

impl ImageOverride {
    /// Read the override fields of a request that came from this machine or not (`local`).
    pub fn parse(obj: &Map<String, Value>, local: bool) -> Result<ImageOverride, ApiError> {
        Ok(ImageOverride {
            format: obj.get("screenshot").map(ImageFormat::parse).transpose()?,
            jpeg_quality: obj.get("jpeg_quality").map(jpeg_quality).transpose()?,
            local,
        })
    }
    /// Refuse `shm` frames to a client that is not on the server's machine (the session
    /// checks the encoding in force, its own or this override, before it acts).
    pub fn allows(&self, fmt: ImageFormat) -> Result<(), ApiError> {
        if fmt == ImageFormat::Shm && !self.local {
            return Err(ApiError::invalid(
                "bad_option",
                "screenshot = \"shm\" puts frames in this machine's shared memory, and this client \
                 did not connect over loopback: ask for \"raw\" (with binary frames) instead",
            ));
        }
        Ok(())
    }
    /// `opts` with this override on top.
    pub fn apply(self, mut opts: SessionOptions) -> SessionOptions {
        opts.screenshot = self.format.unwrap_or(opts.screenshot);
        opts.jpeg_quality = self.jpeg_quality.unwrap_or(opts.jpeg_quality);
        opts
    }
}

/// The fields of `obj` not in `allowed`, as an error naming them and the allowed ones.
pub fn reject_unknown(obj: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), ApiError> {
    let unknown: Vec<&str> = obj.keys().map(String::as_str).filter(|k| !allowed.contains(k)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "unknown field{} {} in {what}: the fields are {}",
        if unknown.len() > 1 { "s" } else { "" },
        unknown.iter().map(|k| short(&format!("{k:?}"))).collect::<Vec<_>>().join(", "),
        allowed.join(", ")
    )))
}

/// Parse a request body as a JSON object (an empty body is an empty object).
pub fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ApiError::bad_request(format!(
            "the body must be a JSON object, got {}",
            short(&other.to_string())
        ))),
        Err(e) => Err(ApiError::bad_request(format!("the body is not valid JSON: {e}"))),
    }
}

/// A seed field: absent or null means "pick one".
pub fn seed(obj: &Map<String, Value>) -> Result<Option<u64>, ApiError> {
    match obj.get("seed") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|s| *s < 1 << 63).map(Some).ok_or_else(|| {
            ApiError::invalid(
                "bad_seed",
                format!("seed = {}: use an integer from 0 to 2^63-1", short(&v.to_string())),
            )
        }),
    }
}

/// What a step request asks the env to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepAction {
    /// Action text to parse and execute.
    Text(String),
    /// Action text over [`MAX_ACTION_CHARS`] (its length): an invalid step, as an
    /// unparsable one is, so that an agent's over-long answer costs a step, not the
    /// client's loop.
    TooLong(usize),
}

/// The action text of a step request (`action`, or BrowserGym's `action_str`).
pub fn action(obj: &Map<String, Value>) -> Result<StepAction, ApiError> {
    let v = obj.get("action").or_else(|| obj.get("action_str"));
    let malformed = |m: String| ApiError::invalid("malformed_action", m);
    match v {
        None => Err(malformed(
            "the step has no \"action\": send {\"action\": \"click(10, 20)\"} (guirl's action text)".into(),
        )),
        Some(Value::String(s)) if s.chars().count() > MAX_ACTION_CHARS => {
            Ok(StepAction::TooLong(s.chars().count()))
        }
        Some(Value::String(s)) => Ok(StepAction::Text(s.clone())),
        Some(other) => Err(malformed(format!(
            "\"action\" must be a string of guirl's action text like \"click(10, 20)\", got {}",
            short(&other.to_string())
        ))),
    }
}

/// A client's text as quoted back: at most [`MAX_ECHO_CHARS`] characters, marked when cut.
pub fn short(s: &str) -> String {
    limits::cut(s, MAX_ECHO_CHARS)
}

/// Encode a screenshot in `fmt` (None for `ImageFormat::None`).
pub fn encode_image(img: &image::RgbImage, fmt: ImageFormat, quality: u8) -> Option<Vec<u8>> {
    match fmt {
        ImageFormat::None => None,
        ImageFormat::Raw | ImageFormat::Shm => Some(img.as_raw().clone()),
        ImageFormat::Png => Some(crate::env::encode_png(img)),
        ImageFormat::Jpeg => {
            let mut out = Vec::new();
            let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality);
            img.write_with_encoder(enc).ok()?;
            Some(out)
        }
    }
}

/// An observation: its JSON with `"screenshot": null`, and the screenshot encoded in
/// `opts`' format (None for `none`). The transport puts the bytes in the JSON as base64
/// ([`with_base64`]) or after it in a binary frame; the session writes `shm`'s pixels to
/// shared memory. `obs` is taken so that `raw` and `shm` hand on its shared frame instead
/// of copying the pixels.
pub fn observation(obs: ScreenState, opts: &SessionOptions) -> (Value, Option<Bytes>) {
    let json = json!({
        "screenshot": Value::Null,
        "screenshot_format": opts.screenshot.as_str(),
        "width": obs.screenshot.width(),
        "height": obs.screenshot.height(),
        "instruction": obs.instruction,
        "url": obs.url,
        "task_id": obs.task_id,
        "step": obs.step,
        "frame": obs.frame,
        "elements": if opts.elements { json!(obs.elements) } else { json!([]) },
    });
    let image = match opts.screenshot {
        // The env keeps the frame (the next observation's previous one): shared, not copied.
        ImageFormat::Raw | ImageFormat::Shm => Some(Bytes::from_owner(RawPixels(obs.screenshot))),
        fmt => encode_image(&obs.screenshot, fmt, opts.jpeg_quality).map(Bytes::from),
    };
    (json, image)
}

/// A frame's RGB bytes as the owner of a [`Bytes`].
struct RawPixels(Arc<image::RgbImage>);

impl AsRef<[u8]> for RawPixels {
    fn as_ref(&self) -> &[u8] {
        self.0.as_raw()
    }
}

/// `observation` with the screenshot's bytes put in as base64: the JSON form (the same
/// bytes as before binary frames existed: the keys are sorted, so where the screenshot is
/// put in does not show).
pub fn with_base64(mut observation: Value, image: Option<&[u8]>) -> Value {
    if let (Some(obj), Some(bytes)) = (observation.as_object_mut(), image) {
        obj.insert("screenshot".into(), json!(base64::engine::general_purpose::STANDARD.encode(bytes)));
    }
    observation
}

/// The `info` of a step.
pub fn step_info(info: &StepInfo) -> Map<String, Value> {
    let v = json!({
        "status": info.shown_status(),
        "valid_action": info.action_error.is_none(),
        // The error quotes the action (a part of it already), which may be a model's
        // runaway answer: bound the whole message too.
        "action_error": info.action_error.as_deref().map(|m| limits::cut(m, limits::MAX_MESSAGE_CHARS)),
        "env_error": info.env_error,
        "reason": info.reason,
        "raw_reward": info.raw_reward,
        "decayed_reward": info.decayed_reward,
        "timings": info.timings,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object"),
    }
}
