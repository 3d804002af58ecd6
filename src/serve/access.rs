//! Who may call guirl's servers (`guirl serve`, `guirl serve-policy`), checked before
//! anything else runs: a browser on the server's machine (or on a client's) must not be a
//! way in.
//!
//! - **Token.** With one set, every route but `/health` needs `Authorization: Bearer
//!   <token>` (or `?token=`, for WebSocket clients that cannot set headers).
//! - **Host.** The `Host` header must be an IP address, `localhost`, or a name the
//!   operator listed (`--host-names`). A DNS-rebinding page reaches the server under the
//!   attacker's name, so its requests carry that name and are refused.
//! - **Origin.** Browsers put an `Origin` header on every cross-origin request, POSTs
//!   and WebSocket handshakes included; programs (Python `requests`, `websockets`, curl,
//!   OpenAI's client) send none. A request with an `Origin` the operator did not list
//!   (`--allow-origins`) is refused, so no page can create sessions, drive them over
//!   `/ws` or run a served policy.
//! - **Content type.** A POST with a body must say `application/json`: a page's no-cors
//!   fetch can only send `text/plain`, form encodings and `multipart/form-data`.
//!
//! Each server renders a [`Refusal`] in its own error shape.

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};

/// Who may talk to a server besides programs on the machines that reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrossSite {
    /// Host names (without port) the `Host` header may carry besides IP addresses and
    /// `localhost`: the names clients reach the server by.
    pub host_names: Vec<String>,
    /// Web origins (`https://app.example.com`) whose pages may call the API.
    pub allowed_origins: Vec<String>,
}

impl CrossSite {
    fn host_ok(&self, host: &str) -> bool {
        // `name:port`, `1.2.3.4:port`, `[::1]:port`, or any of them without the port.
        let name = match host.strip_prefix('[') {
            Some(rest) => {
                return rest.split(']').next().is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
            }
            None => {
                host.rsplit_once(':').map_or(host, |(n, p)| if p.parse::<u16>().is_ok() { n } else { host })
            }
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.host_names.iter().any(|n| n.eq_ignore_ascii_case(&name))
    }

    fn origin_ok(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/');
        self.allowed_origins.iter().any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }
}

/// Why a request is refused: its HTTP status, a short machine-readable code, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: StatusCode,
    /// `bad_host`, `forbidden_origin`, `unsupported_media_type` or `unauthorized`.
    pub code: &'static str,
    /// What was wrong and what to do.
    pub message: String,
}

fn refuse(status: StatusCode, code: &'static str, message: impl Into<String>) -> Option<Refusal> {
    Some(Refusal { status, code, message: message.into() })
}

/// Text from a request, cut for an error message.
fn short(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl CrossSite {
    /// Host, then Origin, then a POST body's content type: the first that fails.
    pub fn refusal(&self, req: &Request) -> Option<Refusal> {
        let headers = req.headers();
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        // HTTP/1.0 clients may send no Host; then the URI's authority (if any) is what to check.
        let host = host.map(str::to_string).or_else(|| req.uri().authority().map(|a| a.to_string()));
        if let Some(h) = host.filter(|h| !self.host_ok(h)) {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "bad_host",
                format!(
                    "Host {:?} is not this server's: connect by IP address or localhost, or start the server \
                     with --host-names {} if clients reach it by that name",
                    short(&h),
                    short(h.rsplit_once(':').map_or(h.as_str(), |(n, _)| n))
                ),
            );
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let o = origin.to_str().unwrap_or("(not text)");
            if !self.origin_ok(o) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "forbidden_origin",
                    format!(
                        "requests from web pages are refused (Origin {:?}); a program sends no Origin header. \
                         Start the server with --allow-origins {} to let that site's pages in",
                        short(o),
                        short(o)
                    ),
                );
            }
        }
        if req.method() == Method::POST && has_body(req) && !is_json(req.headers().get(header::CONTENT_TYPE))
        {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send JSON bodies with \"Content-Type: application/json\"",
            );
        }
        None
    }
}

/// Whether `given` is the server's `token`, in time that does not depend on where they
/// differ: both are hashed first (so their lengths do not show either), then compared
/// with `subtle`'s constant-time equality.
pub fn token_matches(given: &str, token: &str) -> bool {
    use sha2::Digest;
    use subtle::ConstantTimeEq;
    let (a, b) = (sha2::Sha256::digest(given.as_bytes()), sha2::Sha256::digest(token.as_bytes()));
    a.as_slice().ct_eq(b.as_slice()).into()
}

/// The refusal of a request that does not carry `token`: as a bearer header (the scheme
/// is case-insensitive, RFC 9110; some clients send `bearer`) or as `?token=`.
pub fn token_refusal(req: &Request, token: &str) -> Option<Refusal> {
    let header_ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' ').filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")))
        .is_some_and(|(_, t)| token_matches(t.trim(), token));
    let query_ok = req.uri().query().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "token" && token_matches(&v, token))
    });
    if header_ok || query_ok {
        return None;
    }
    refuse(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server needs its token: send the header \"Authorization: Bearer <token>\" (or ?token=<token>)",
    )
}

fn has_body(req: &Request) -> bool {
    let len = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    len.map_or(req.headers().contains_key(header::TRANSFER_ENCODING), |n| n > 0)
}

fn is_json(v: Option<&axum::http::HeaderValue>) -> bool {
    let Some(t) = v.and_then(|v| v.to_str().ok()) else { return false };
    let mime = t.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::{token_matches, CrossSite};

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        for other in ["s3cret-tokeN", "s3cret-toke", "s3cret-token ", "", "S3cret-token"] {
            assert!(!token_matches(other, "s3cret-token"), "{other:?}");
        }
    }

    #[test]
    fn hosts() {
        let c = CrossSite { host_names: vec!["gpu-box.internal".into()], ..Default::default() };
        for ok in
            ["127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:80", "10.1.2.3", "gpu-box.internal:8765"]
        {
            assert!(c.host_ok(ok), "{ok}");
        }
        for bad in ["attacker.example", "attacker.example:8765", "localhost.attacker.example", "[evil]:1"] {
            assert!(!c.host_ok(bad), "{bad}");
        }
    }

    #[test]
    fn origins() {
        let c = CrossSite { allowed_origins: vec!["https://app.example.com".into()], ..Default::default() };
        assert!(c.origin_ok("https://app.example.com"));
        assert!(!c.origin_ok("http://127.0.0.1:8000"));
        assert!(!c.origin_ok("null"));
    }
}
