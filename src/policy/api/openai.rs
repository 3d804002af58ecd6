//! `openai:MODEL@BASE_URL`: any model behind an OpenAI-compatible chat-completions
//! endpoint as a policy. Each state becomes one request: the system prompt, then a user
//! turn with the text of [`super::prompt::user_text`] and the screenshot as a base64 PNG
//! data URL (after at most `images − 1` earlier screenshots of the episode). The answer
//! is read by [`super::parse`]; an answer with no action is an `invalid_action` step, an
//! endpoint that fails (after retries) ends the episode as `policy_error`.

use super::client::{ApiError, Endpoint, ServedModel};
use super::coords::CoordMode;
use super::parse;
use super::prompt;
use crate::env::{encode_png, GuiAction, ScreenState};
use crate::policy::{Decision, Policy, PolicyFailure};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

/// The `--policy` prefix of API policies.
pub const PREFIX: &str = "openai:";

/// Settings of an API policy.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Model name sent in each request.
    pub model: String,
    /// The endpoint.
    pub endpoint: Endpoint,
    /// A system prompt file replacing the built-in one (`{frame}` is filled in).
    pub prompt_file: Option<PathBuf>,
    /// Screenshots per request, the current one included (vLLM's default limit is 1).
    pub images: usize,
    /// The coordinate frame of the model's answers; `None`: the one its server names
    /// (`coordinates` in `/v1/models`, as `guirl serve-policy` says it), else screenshot pixels.
    pub coords: Option<CoordMode>,
    /// Sampling temperature.
    pub temperature: f64,
    /// Answer length limit.
    pub max_tokens: u32,
    /// Base of the per-request `seed` (each request gets its own, from its episode and step).
    pub seed: u64,
    /// Extra top-level request fields (e.g. `{"chat_template_kwargs": {...}}`), merged in.
    pub extra_body: Option<Value>,
    /// Send the page's interactive elements as text.
    pub elements: bool,
    /// Requests in flight at once.
    pub concurrency: usize,
}

impl ApiConfig {
    /// Split `openai:MODEL@BASE_URL` (or `openai:MODEL`, using `$OPENAI_BASE_URL`, else
    /// OpenAI's) into model and base URL. The model may contain `@` (the last one splits).
    pub fn parse_spec(spec: &str) -> anyhow::Result<(String, String)> {
        let rest = spec
            .strip_prefix(PREFIX)
            .ok_or_else(|| anyhow::anyhow!("{spec:?} does not start with {PREFIX}"))?;
        let (model, base) = match rest.rsplit_once('@') {
            Some((m, b)) if b.starts_with("http://") || b.starts_with("https://") => {
                (m.to_string(), b.to_string())
            }
            _ => (
                rest.to_string(),
                std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".to_string()),
            ),
        };
        if model.is_empty() {
            anyhow::bail!("{spec:?} names no model: write openai:MODEL@http://HOST:PORT/v1");
        }
        Ok((model, base))
    }
}

/// What the policy remembers of one episode.
#[derive(Default)]
struct Episode {
    actions: Vec<String>,
    shots: VecDeque<Vec<u8>>,
}

/// A model behind an OpenAI-compatible endpoint.
pub struct ApiPolicy {
    cfg: ApiConfig,
    /// The frame answers are read in: the one asked for, or the server's.
    coords: CoordMode,
    template: String,
    template_hash: String,
    served: Result<Vec<ServedModel>, ApiError>,
    episodes: HashMap<u64, Episode>,
}

impl ApiPolicy {
    /// A policy for `cfg`. Asks the endpoint which models it serves (for the report); an
    /// endpoint that is down is not an error here, each episode will say so.
    pub fn new(cfg: ApiConfig) -> anyhow::Result<ApiPolicy> {
        let template = match &cfg.prompt_file {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read the prompt file {}: {e}", p.display()))?,
            None => prompt::DEFAULT_PROMPT.to_string(),
        };
        if cfg.images == 0 {
            anyhow::bail!("--images must be at least 1 (the current screenshot)");
        }
        let quick = Endpoint {
            retries: 0,
            timeout: cfg.endpoint.timeout.min(Duration::from_secs(10)),
            ..cfg.endpoint.clone()
        };
        let served = quick.models();
        match &served {
            Ok(models) if !models.iter().any(|m| m.id == cfg.model) => tracing::warn!(
                "{} serves {:?}, not {:?}: requests may fail",
                cfg.endpoint.base_url,
                models.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
                cfg.model
            ),
            Err(e) => tracing::warn!("cannot list the models of {}: {e}", cfg.endpoint.base_url),
            _ => {}
        }
        let said = served.as_ref().ok().and_then(|ms| ms.iter().find(|m| m.id == cfg.model)?.coordinates);
        let coords = match (cfg.coords, said) {
            (Some(asked), Some(said)) if asked != said => anyhow::bail!(
                "{} says {:?} answers in the {said} frame; --coords {asked} would misread its clicks: leave \
                 --coords out (the server's frame is used) or pass --coords {said}",
                cfg.endpoint.base_url,
                cfg.model
            ),
            (Some(c), _) | (None, Some(c)) => c,
            (None, None) => CoordMode::Px,
        };
        Ok(ApiPolicy {
            coords,
            template_hash: prompt::prompt_hash(&template),
            template,
            served,
            cfg,
            episodes: HashMap::new(),
        })
    }

    /// The request body for `state` with the episode's memory.
    fn request(&self, state: &ScreenState, ep: &Episode, png: &[u8], key: Option<u64>) -> Value {
        let (w, h) = state.screenshot.dimensions();
        let system = prompt::system_prompt(&self.template, &self.coords.describe(w, h));
        let data_url = |bytes: &[u8]| {
            format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
        };
        let mut content = Vec::new();
        let earlier = self.cfg.images - 1;
        let shown: Vec<&Vec<u8>> = ep.shots.iter().rev().take(earlier).collect();
        for (i, shot) in shown.iter().rev().enumerate() {
            let ago = shown.len() - i;
            content.push(json!({"type": "text", "text": format!("Screenshot {ago} step(s) ago:")}));
            content.push(json!({"type": "image_url", "image_url": {"url": data_url(shot)}}));
        }
        content
            .push(json!({"type": "text", "text": prompt::user_text(state, &ep.actions, self.cfg.elements)}));
        content.push(json!({"type": "image_url", "image_url": {"url": data_url(png)}}));
        let mut body = json!({
            "model": self.cfg.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": content},
            ],
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
        });
        if let Some(k) = key {
            // One seed per (episode, step), so a bench is reproducible where the server is.
            body["seed"] = json!(mix(self.cfg.seed, k) & 0x7fff_ffff);
        }
        if let Some(Value::Object(extra)) = &self.cfg.extra_body {
            for (k, v) in extra {
                body[k] = v.clone();
            }
        }
        body
    }

    /// Ask for and read one action.
    fn decide(&self, state: &ScreenState, ep: &Episode, png: &[u8], key: Option<u64>) -> Decision {
        let body = self.request(state, ep, png, key);
        let answer = match self.cfg.endpoint.call("chat/completions", Some(&body)) {
            Ok(v) => v,
            Err(e) => return Decision::failed(PolicyFailure::Error(e.to_string()), None),
        };
        let (w, h) = state.screenshot.dimensions();
        let Some(message) = answer.pointer("/choices/0/message") else {
            let why = format!("the answer has no choices[0].message: {}", cut(&answer.to_string()));
            return Decision::failed(PolicyFailure::Error(why), None);
        };
        let text = message_text(message);
        // A tool call (Qwen's computer_use through a tool-call parser) wins over prose.
        if let Some(call) = message.pointer("/tool_calls/0/function") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let args = match call.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let shown = format!("{text}\n<tool_call>{call}</tool_call>").trim().to_string();
            return match parse::parse_tool_call(name, &args, &self.coords, w, h) {
                Ok(a) => with_answer(a, shown),
                Err(e) => Decision::failed(PolicyFailure::Unparsable(e), Some(shown)),
            };
        }
        match parse::parse_answer(&text, &self.coords, w, h) {
            Ok(p) => with_answer(p.action, text),
            Err(e) => Decision::failed(PolicyFailure::Unparsable(e), Some(text)),
        }
    }
}

fn with_answer(action: GuiAction, answer: String) -> Decision {
    Decision { answer: Some(answer), ..Decision::deterministic(action) }
}

/// SplitMix64 of `a ^ b·φ`: a request seed per (bench seed, episode and step).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn cut(s: &str) -> String {
    s.chars().take(300).collect()
}

/// The text of an assistant message: a string, or the text parts of a list.
pub fn message_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

impl Policy for ApiPolicy {
    fn name(&self) -> String {
        format!("{PREFIX}{}@{}", self.cfg.model, self.cfg.endpoint.base_url)
    }

    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        let empty = Episode::default();
        let pngs: Vec<Vec<u8>> = states.iter().map(|s| encode_png(&s.screenshot)).collect();
        let this = &*self;
        Ok(run_limited(states.len(), this.cfg.concurrency, |i| {
            this.decide(&states[i], &empty, &pngs[i], None)
        }))
    }

    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> anyhow::Result<Vec<Decision>> {
        // The episode is the key's job part (see `stream_key`); its step 0 starts afresh.
        let episode_of = |k: u64| k >> 20;
        for (s, &k) in states.iter().zip(keys) {
            if s.step == 0 {
                self.episodes.insert(episode_of(k), Episode::default());
            }
        }
        let pngs: Vec<Vec<u8>> = states.iter().map(|s| encode_png(&s.screenshot)).collect();
        let decisions = {
            let this = &*self;
            let empty = Episode::default();
            run_limited(states.len(), this.cfg.concurrency, |i| {
                let ep = this.episodes.get(&episode_of(keys[i])).unwrap_or(&empty);
                this.decide(&states[i], ep, &pngs[i], Some(keys[i]))
            })
        };
        for ((d, &k), png) in decisions.iter().zip(keys).zip(pngs) {
            let ep = self.episodes.entry(episode_of(k)).or_default();
            let text = match &d.failure {
                None => d.action.to_string(),
                Some(_) => format!("(no action: {})", cut(d.answer.as_deref().unwrap_or("no answer"))),
            };
            ep.actions.push(text);
            ep.shots.push_back(png);
            while ep.shots.len() > self.cfg.images.saturating_sub(1) {
                ep.shots.pop_front();
            }
        }
        Ok(decisions)
    }

    fn info(&self) -> Value {
        let served = match &self.served {
            Ok(models) => json!(models.iter().map(|m| &m.id).collect::<Vec<_>>()),
            Err(e) => json!(format!("unknown ({e})")),
        };
        // What the model reads, where its server says: a `pixels` checkpoint behind
        // `guirl serve-policy` leaves the elements unused, and the report must say so.
        let served_observation = self.served.as_ref().ok().and_then(|models| {
            models.iter().find(|m| m.id == self.cfg.model).and_then(|m| m.observation).map(|o| o.to_string())
        });
        json!({
            "name": self.name(),
            "model": self.cfg.model,
            "served_models": served,
            "base_url": self.cfg.endpoint.base_url,
            "prompt_file": self.cfg.prompt_file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "built-in".into()),
            "prompt_sha256": self.template_hash,
            "coords": self.coords.to_string(),
            "images": self.cfg.images,
            "elements": self.cfg.elements,
            "served_observation": served_observation,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "seed": self.cfg.seed,
            "extra_body": self.cfg.extra_body,
        })
    }
}

/// `f(0..n)` with at most `limit` calls running at once, results in order.
fn run_limited<T: Send>(n: usize, limit: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    let indices: Vec<usize> = (0..n).collect();
    for chunk in indices.chunks(limit.max(1)) {
        let f = &f;
        let part: Vec<T> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|&i| s.spawn(move || f(i))).collect();
            handles.into_iter().map(|h| h.join().expect("an API request thread panicked")).collect()
        });
        out.extend(part);
    }
    out
}
