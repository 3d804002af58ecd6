//! A judge: a vision-language model behind an OpenAI-compatible API that reads an
//! episode's end (the instruction, the final screenshot, optionally a few before it and the
//! actions) with a rubric and answers `VERDICT: SUCCESS` or `VERDICT: FAILURE` on its last
//! line. `votes` samples are asked; the fraction saying SUCCESS is the episode's score,
//! compared with the task's threshold.
//!
//! It goes through the `openai:` policy's client ([`crate::policy::api::client`]): the same
//! timeouts, retries with backoff, key handling and error messages. A judge that cannot give
//! a verdict (down, timing out, or answering with no verdict line after its re-asks) is an
//! error, never a silent failure verdict: the collector marks the episode `judge_error`.
//!
//! Verdicts are cached by what the judge saw ([`cache`]), so re-scoring a recorded set
//! costs nothing the second time.

pub mod agreement;
pub mod cache;
mod verdict;

use crate::env::encode_png;
use crate::policy::api::client::Endpoint;
use crate::policy::api::openai::message_text;
use crate::policy::api::prompt::prompt_hash;
use crate::tasks::JudgeSpec;
use base64::Engine;
use image::RgbImage;
use serde_json::{json, Value};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
pub use verdict::Verdict;

/// The built-in rubric (the system prompt), replaced by a spec's `judge.rubric` file.
pub const DEFAULT_RUBRIC: &str = include_str!("default_rubric.md");

/// The verdict line of an answer: the last line that mentions `VERDICT:` decides (markdown
/// emphasis and case ignored); `None` when there is none or it names neither outcome.
pub fn parse_verdict(answer: &str) -> Option<bool> {
    let line = answer.lines().rev().find(|l| l.to_ascii_uppercase().contains("VERDICT:"))?;
    let upper = line.to_ascii_uppercase();
    let after = upper.rsplit_once("VERDICT:")?.1;
    let word: String = after
        .trim_start_matches(|c: char| !c.is_ascii_alphabetic())
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    match word.as_str() {
        "SUCCESS" => Some(true),
        "FAILURE" => Some(false),
        _ => None,
    }
}

/// A judge, ready to ask.
pub struct Judge {
    spec: JudgeSpec,
    endpoint: Endpoint,
    rubric: String,
    rubric_hash: String,
    cache: Option<cache::VerdictCache>,
    requests: AtomicUsize,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl Judge {
    /// A judge for `spec`: reads its rubric (the built-in one without a file) and opens
    /// its cache folder. Nothing is asked yet: an endpoint that is down shows at the first
    /// episode, as a `judge_error`.
    pub fn new(spec: &JudgeSpec) -> anyhow::Result<Judge> {
        let rubric = match &spec.rubric {
            Some(p) => std::fs::read_to_string(p).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the judge's rubric {} ({e}): give a readable file, or none for the built-in rubric",
                    p.display()
                )
            })?,
            None => DEFAULT_RUBRIC.to_string(),
        };
        anyhow::ensure!(spec.votes >= 1, "a judge needs at least 1 vote");
        let cache = spec.cache.as_deref().map(cache::VerdictCache::open).transpose()?;
        Ok(Judge {
            endpoint: Endpoint {
                base_url: spec.base_url.clone(),
                api_key: std::env::var(&spec.api_key_env).ok().filter(|k| !k.is_empty()),
                timeout: Duration::from_secs_f64(spec.timeout_s),
                retries: spec.retries,
                backoff: Duration::from_millis(500),
            },
            rubric_hash: prompt_hash(&rubric),
            rubric,
            cache,
            spec: spec.clone(),
            requests: AtomicUsize::new(0),
        })
    }

    /// The judge for `spec`, made once per process and shared (every env of a collector
    /// asks the same one).
    pub fn shared(spec: &JudgeSpec) -> anyhow::Result<Arc<Judge>> {
        static JUDGES: OnceLock<Mutex<HashMap<String, Arc<Judge>>>> = OnceLock::new();
        let key = format!("{spec:?}");
        let mut judges = JUDGES.get_or_init(Default::default).lock().expect("judge registry");
        if let Some(j) = judges.get(&key) {
            return Ok(j.clone());
        }
        let j = Arc::new(Judge::new(spec)?);
        judges.insert(key, j.clone());
        Ok(j)
    }

    /// Ask the endpoint which models it serves (one quick try): `Err` with what to do when
    /// nothing answers at its base URL; a warning when it answers but does not list the
    /// model (some servers list none; requests may still work).
    pub fn check_reachable(&self) -> Result<(), String> {
        let quick = Endpoint {
            retries: 0,
            timeout: self.endpoint.timeout.min(Duration::from_secs(10)),
            ..self.endpoint.clone()
        };
        match quick.models() {
            Ok(models) if !models.iter().any(|m| m.id == self.spec.model) => {
                let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
                tracing::warn!("{} serves {ids:?}, not {:?}: judge requests may fail", self.spec.base_url, self.spec.model);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) if e.status.is_none() => Err(format!(
                "cannot reach the judge at {} ({e}): start its server (e.g. `vllm serve MODEL`), or fix the base URL",
                self.spec.base_url
            )),
            Err(e) => {
                tracing::warn!("cannot list the models of {}: {e}", self.spec.base_url);
                Ok(())
            }
        }
    }

    /// Check the judge of every task in `tasks` whose reward a judge gives (each endpoint
    /// once), as [`Judge::check_reachable`] does: a run whose judge nobody runs would end
    /// every episode in `judge_error`, after retries, and learn nothing.
    pub fn check_tasks(tasks: &[Arc<dyn crate::tasks::Task>]) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for t in tasks {
            let Some(spec) = t.learned_reward().and_then(|l| l.judge()) else { continue };
            if seen.insert((spec.base_url.clone(), spec.model.clone())) {
                Judge::shared(spec)?
                    .check_reachable()
                    .map_err(|e| anyhow::anyhow!("task {}: {e}", t.id()))?;
            }
        }
        Ok(())
    }

    /// Its settings.
    pub fn spec(&self) -> &JudgeSpec {
        &self.spec
    }

    /// SHA-256 of the rubric, hex.
    pub fn rubric_hash(&self) -> &str {
        &self.rubric_hash
    }

    /// HTTP requests sent so far (re-asks included, the client's retries not).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The judge's verdict on an episode that ended on the last of `frames` (the last
    /// `spec.frames` are shown, oldest first) after `actions`, and whether it came from the
    /// cache. `Err` says why there is no verdict.
    pub fn judge<F: Borrow<RgbImage>>(
        &self,
        frames: &[F],
        instruction: &str,
        actions: &[String],
    ) -> Result<(Verdict, bool), String> {
        if frames.is_empty() {
            return Err("no screenshot of the episode's end to judge".into());
        }
        let shown = &frames[frames.len().saturating_sub(self.spec.frames.max(1))..];
        let actions = if self.spec.actions { actions } else { &[] };
        let key = cache::key(&self.spec, &self.rubric_hash, shown, instruction, actions);
        if let Some(v) = self.cache.as_ref().and_then(|c| c.get(&key)) {
            return Ok((v, true));
        }
        let body = self.request(shown, instruction, actions);
        let answers: Vec<Result<(bool, String), String>> = std::thread::scope(|s| {
            let body = &body;
            let handles: Vec<_> =
                (0..self.spec.votes).map(|i| s.spawn(move || self.vote(body, i as u64))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a judge thread panicked".into())))
                .collect()
        });
        let mut verdict = Verdict { success_votes: 0, votes: self.spec.votes, reasoning: Vec::new() };
        for a in answers {
            let (ok, text) = a?;
            verdict.success_votes += ok as u32;
            verdict.reasoning.push(text);
        }
        if let Some(c) = &self.cache {
            if let Err(e) = c.put(&key, &verdict) {
                tracing::warn!("cannot cache a judge verdict: {e:#}");
            }
        }
        Ok((verdict, false))
    }

    /// One vote: asked until an answer has a verdict line, at most `retries + 1` times.
    fn vote(&self, body: &Value, vote: u64) -> Result<(bool, String), String> {
        let mut last = String::new();
        for attempt in 0..=self.spec.retries as u64 {
            let mut body = body.clone();
            // Each vote (and re-ask) its own seed, so votes differ where the server samples.
            body["seed"] = json!(vote * 1000 + attempt);
            self.requests.fetch_add(1, Ordering::SeqCst);
            let answer = self.endpoint.call("chat/completions", Some(&body)).map_err(|e| match e.status {
                None => format!("judge {}: {e}; is its server running at that base URL?", self.spec.name()),
                Some(_) => format!("judge {}: {e}", self.spec.name()),
            })?;
            let text = answer.pointer("/choices/0/message").map(message_text).unwrap_or_default();
            if let Some(ok) = parse_verdict(&text) {
                return Ok((ok, text));
            }
            last = if text.is_empty() { answer.to_string() } else { text };
        }
        let cut: String = last.chars().take(200).collect();
        Err(format!(
            "judge {}: no `VERDICT: SUCCESS` or `VERDICT: FAILURE` line in {} answer(s); the last: {cut:?} \
             (the rubric must ask for that last line; more retries re-ask more often)",
            self.spec.name(),
            self.spec.retries + 1
        ))
    }

    /// The chat request: the rubric as the system prompt; the instruction, the actions if
    /// shown, and the screenshots (oldest first) as the user turn.
    fn request<F: Borrow<RgbImage>>(&self, frames: &[F], instruction: &str, actions: &[String]) -> Value {
        let mut text = format!("Instruction: {}\n", instruction.replace(['\n', '\r'], " "));
        if !actions.is_empty() {
            text.push_str("Actions taken:\n");
            for (i, a) in actions.iter().enumerate() {
                text.push_str(&format!("{}. {}\n", i + 1, a.replace('\n', " ")));
            }
        }
        text.push_str(&match frames.len() {
            1 => "The final screenshot follows.".to_string(),
            n => format!("The last {n} screenshots follow, oldest first; the last is the final screen."),
        });
        let mut content = vec![json!({"type": "text", "text": text})];
        for f in frames {
            let b64 = base64::engine::general_purpose::STANDARD.encode(encode_png(f.borrow()));
            content.push(
                json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}}),
            );
        }
        json!({
            "model": self.spec.model,
            "messages": [
                {"role": "system", "content": self.rubric},
                {"role": "user", "content": content},
            ],
            "temperature": self.spec.temperature,
            "max_tokens": self.spec.max_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_verdict_line_decides() {
        assert_eq!(parse_verdict("The form was sent.\nVERDICT: SUCCESS"), Some(true));
        assert_eq!(parse_verdict("verdict: failure\n"), Some(false));
        assert_eq!(parse_verdict("**VERDICT:** **FAILURE**"), Some(false));
        assert_eq!(parse_verdict("VERDICT: SUCCESS\nOn second thought...\nVERDICT: FAILURE"), Some(false));
        assert_eq!(parse_verdict("VERDICT: SUCCESS\nVERDICT: maybe"), None);
        assert_eq!(parse_verdict("It worked."), None);
        assert_eq!(parse_verdict(""), None);
    }

    #[test]
    fn votes_are_counted_against_the_threshold() {
        let v = Verdict { success_votes: 2, votes: 3, reasoning: vec![] };
        assert!((v.fraction() - 2.0 / 3.0).abs() < 1e-12);
        assert!(v.success(0.5) && v.success(2.0 / 3.0) && !v.success(0.7));
    }

    #[test]
    fn a_missing_rubric_is_named() {
        let mut spec = JudgeSpec::parse("m@http://127.0.0.1:9/v1").unwrap();
        spec.rubric = Some("/nonexistent/rubric.md".into());
        let e = Judge::new(&spec).unwrap_err().to_string();
        assert!(e.contains("cannot read the judge's rubric /nonexistent/rubric.md"), "{e}");
    }
}
