//! The one error shape of the env server: an HTTP status, a stable code and a message
//! that says what to do. REST answers it as `{"error": {"code", "message"}}`; the
//! WebSocket transport maps it onto OpenEnv's error codes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Seconds a client is told to wait when the server is full.
pub const RETRY_AFTER_S: u64 = 5;

/// A request the server cannot serve, and why.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status of the REST answer.
    pub status: StatusCode,
    /// Stable machine-readable code (`unknown_session`, `bad_seed`, ...).
    pub code: &'static str,
    /// What went wrong and what to do about it.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    /// A message over [`MAX_MESSAGE_CHARS`] is cut: many quote the client.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        let message = cut(&message.into(), MAX_MESSAGE_CHARS);
        ApiError { status, code, message }
    }
    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    /// 400 with a more specific code (`bad_seed`, `bad_option`, `malformed_action`,
    /// `unknown_task`, `missing_task`, `field_too_long`, `refused_url`).
    pub fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
    /// 404 `unknown_session`.
    pub fn unknown_session(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!(
                "no session {id:?}: it was closed or timed out (idle sessions are closed after \
                 --idle-timeout); create one with POST /v1/sessions"
            ),
        )
    }
    /// 409 `no_episode`.
    pub fn no_episode(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "no_episode", message)
    }
    /// 503 `capacity_reached`.
    pub fn capacity(active: usize, max: usize) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "capacity_reached",
            format!(
                "all {max} sessions are in use ({active} open): retry after {RETRY_AFTER_S} s, close \
                 sessions you no longer need, or start the server with a larger --max-sessions"
            ),
        )
    }

    /// The OpenEnv WebSocket error code this error maps onto.
    pub fn openenv_code(&self) -> &'static str {
        match self.code {
            "capacity_reached" => "CAPACITY_REACHED",
            "bad_request" => "VALIDATION_ERROR",
            "malformed_action" | "bad_seed" | "bad_option" | "unknown_task" | "missing_task"
            | "field_too_long" | "refused_url" => "VALIDATION_ERROR",
            "unknown_session" => "SESSION_ERROR",
            _ => "EXECUTION_ERROR",
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        }
        resp
    }
}

/// Longest message: an error's, or a step's `action_error`.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// `s` whole, or its first `max` characters with a marker saying it was cut and how long
/// it was: how a client's own text is quoted back.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    format!("{}… [cut: {n} characters in all]", s.chars().take(max).collect::<String>())
}
