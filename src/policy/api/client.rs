//! A blocking client for OpenAI-compatible HTTP endpoints (vLLM, SGLang, llama.cpp's
//! server, hosted APIs): timeouts, retries with backoff on 429 / 5xx / connection errors,
//! and both error body shapes vLLM has used.

use serde_json::Value;
use std::time::Duration;

/// Endpoint settings.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL, usually ending in `/v1` (`http://127.0.0.1:8000/v1`).
    pub base_url: String,
    /// Bearer token, if any.
    pub api_key: Option<String>,
    /// Limit on one request (connect, send and read), after which it is retried.
    pub timeout: Duration,
    /// Retries after the first try, for 429, 5xx, timeouts and refused connections.
    pub retries: u32,
    /// First backoff; doubled at each retry (a `Retry-After` header wins, up to 30 s).
    pub backoff: Duration,
}

/// A model an endpoint lists in `/v1/models`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    /// The id requests name.
    pub id: String,
    /// What the model reads, where the server says (`guirl serve-policy` does: a
    /// `pixels` checkpoint leaves the elements it is sent unused).
    pub observation: Option<crate::policy::observation::Observation>,
    /// The coordinate frame of its answers, where the server says (`guirl serve-policy` does).
    pub coordinates: Option<super::coords::CoordMode>,
}

/// A request that did not succeed, with what to tell the user.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status, if the server answered.
    pub status: Option<u16>,
    /// The message (the server's, or the transport's).
    pub message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "HTTP {s}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The message of an error body: `{"error": {"message": …}}` (OpenAI, newer vLLM),
/// `{"object": "error", "message": …}` (older vLLM), `{"error": "…"}`, `{"detail": …}`
/// (FastAPI), else the body itself, cut.
pub fn error_message(body: &str) -> String {
    let cut = |s: &str| s.chars().take(300).collect::<String>();
    let Ok(v) = serde_json::from_str::<Value>(body) else { return cut(body.trim()) };
    let found = v
        .pointer("/error/message")
        .or_else(|| v.get("message"))
        .or_else(|| v.get("error").filter(|e| e.is_string()))
        .or_else(|| v.get("detail"));
    match found {
        Some(Value::String(s)) => cut(s),
        Some(other) => cut(&other.to_string()),
        None => cut(body.trim()),
    }
}

/// What a 404 most likely means: the server answered that a model does not exist (vLLM,
/// OpenAI and `guirl serve-policy` say so in the message), or there is no such route.
fn not_found_hint(message: &str, url: &str, models_url: &str) -> String {
    if message.to_ascii_lowercase().contains("model") {
        format!(" (check the model name: GET {models_url} lists what the server serves)")
    } else {
        format!(" (no {url}: is the base URL right? It usually ends in /v1)")
    }
}

impl Endpoint {
    fn agent(&self) -> ureq::Agent {
        ureq::AgentBuilder::new()
            .timeout(self.timeout)
            .timeout_connect(self.timeout.min(Duration::from_secs(10)))
            .build()
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path.trim_start_matches('/'))
    }

    /// `GET {base}/models`: the models the endpoint serves.
    pub fn models(&self) -> Result<Vec<ServedModel>, ApiError> {
        let v = self.call("models", None)?;
        let models = v.get("data").and_then(Value::as_array).map(|d| {
            d.iter()
                .filter_map(|m| {
                    Some(ServedModel {
                        id: m.get("id")?.as_str()?.to_string(),
                        observation: m
                            .get("observation")
                            .and_then(Value::as_str)
                            .and_then(|o| o.parse().ok()),
                        coordinates: m
                            .get("coordinates")
                            .and_then(Value::as_str)
                            .and_then(|c| c.parse().ok()),
                    })
                })
                .collect()
        });
        models.ok_or_else(|| ApiError {
            status: None,
            message: format!("{} did not list models: {v}", self.url("models")),
        })
    }

    /// `POST {base}/{path}` with a JSON body (or GET without one), retried as configured.
    pub fn call(&self, path: &str, body: Option<&Value>) -> Result<Value, ApiError> {
        let agent = self.agent();
        let url = self.url(path);
        let mut wait = self.backoff;
        let mut tries = 0;
        loop {
            let mut req = match body {
                Some(_) => agent.post(&url),
                None => agent.get(&url),
            };
            if let Some(k) = &self.api_key {
                req = req.set("Authorization", &format!("Bearer {k}"));
            }
            let result = match body {
                Some(b) => req.send_json(b),
                None => req.call(),
            };
            let (retryable, err, retry_after) = match result {
                Ok(resp) => {
                    let text = resp.into_string().map_err(|e| ApiError {
                        status: None,
                        message: format!("reading the answer of {url}: {e}"),
                    })?;
                    return serde_json::from_str(&text).map_err(|e| ApiError {
                        status: Some(200),
                        message: format!(
                            "{url} answered with something that is not JSON ({e}): {}",
                            error_message(&text)
                        ),
                    });
                }
                Err(ureq::Error::Status(code, resp)) => {
                    let after = resp.header("Retry-After").and_then(|h| h.trim().parse::<f64>().ok());
                    let text = resp.into_string().unwrap_or_default();
                    let mut message = error_message(&text);
                    if code == 404 {
                        message.push_str(&not_found_hint(&message, &url, &self.url("models")));
                    }
                    if code == 401 || code == 403 {
                        message.push_str(" (check the API key's environment variable)");
                    }
                    (code == 429 || code >= 500, ApiError { status: Some(code), message }, after)
                }
                Err(ureq::Error::Transport(t)) => {
                    // (ureq's message names the URL already)
                    (true, ApiError { status: None, message: t.to_string() }, None)
                }
            };
            if !retryable || tries >= self.retries {
                let mut err = err;
                if tries > 0 {
                    err.message.push_str(&format!(" (after {} tries)", tries + 1));
                }
                return Err(err);
            }
            tries += 1;
            let pause = retry_after.map(|s| Duration::from_secs_f64(s.clamp(0.0, 30.0))).unwrap_or(wait);
            tracing::debug!("{url}: {err}; retrying in {pause:?}");
            std::thread::sleep(pause);
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_404_blames_the_model_name_when_the_server_does() {
        let (url, models) = ("http://h/v1/chat/completions", "http://h/v1/models");
        let vllm =
            error_message(r#"{"object":"error","message":"The model `qwen` does not exist.","code":404}"#);
        assert!(not_found_hint(&vllm, url, models).contains("check the model name: GET http://h/v1/models"));
        for route_missing in [r#"{"detail":"Not Found"}"#, "<html>404 Not Found</html>", ""] {
            let hint = not_found_hint(&error_message(route_missing), url, models);
            assert!(hint.contains("is the base URL right"), "{route_missing}: {hint}");
        }
    }

    #[test]
    fn both_error_shapes_are_read() {
        assert_eq!(
            error_message(
                r#"{"error":{"message":"bad image","type":"BadRequestError","param":null,"code":400}}"#
            ),
            "bad image"
        );
        assert_eq!(
            error_message(
                r#"{"object":"error","message":"At most 1 image(s) may be provided in one request.","type":"BadRequestError","param":null,"code":400}"#
            ),
            "At most 1 image(s) may be provided in one request."
        );
        assert_eq!(error_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_message("<html>502 Bad Gateway</html>"), "<html>502 Bad Gateway</html>");
    }
}
