//! Accepting connections with bounds a slow or hostile client cannot stretch, before it
//! has shown a token, for both servers (`guirl serve`, `guirl serve-policy`): a connection
//! must send its request head within [`ConnLimits::header_timeout`] (idle keep-alive
//! connections too), a POST its body within [`ConnLimits::body_timeout`] and under the
//! body limit (a `Content-Length` over it is refused before a byte is read), and at most
//! [`ConnLimits::max_connections`] are open at once. Past that cap a new connection gets a
//! `503` that says the server is shedding load, and is closed: the server stays answerable
//! and says why. Each server words these answers in its own error shape.

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, Method, StatusCode};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

/// Time and count bounds on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// A request head (and an idle keep-alive connection's next one) must arrive within this.
    pub header_timeout: Duration,
    /// A request body must arrive within this.
    pub body_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(20),
        }
    }
}

impl ConnLimits {
    /// The default bounds with `--max-connections` (left out: [`default_max_connections`]);
    /// fewer than 4 is refused.
    pub fn with_max_connections(max: Option<usize>) -> anyhow::Result<ConnLimits> {
        if max.is_some_and(|n| n < 4) {
            anyhow::bail!(
                "--max-connections must be at least 4 (a client, a health check and room to spare)"
            );
        }
        Ok(ConnLimits { max_connections: max.unwrap_or_else(default_max_connections), ..Default::default() })
    }
}

/// A quarter of the open-file limit (each session's browser needs files too), from 16 to
/// 1,024. The soft limit is first raised to the hard one.
pub fn default_max_connections() -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain calls on a stack value this function owns.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 256;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    ((soft / 4) as usize).clamp(16, 1024)
}

/// Connections open now and refused at the cap so far (for `/health`).
#[derive(Debug, Default)]
pub struct ConnCounts {
    /// Open now.
    pub open: AtomicUsize,
    /// Refused because the cap was reached, since the server started.
    pub shed: AtomicU64,
}

struct Slot(Arc<ConnCounts>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serve `app` on `listener` under `limits` until `shutdown` resolves; open connections
/// then finish their request in flight. A connection past the cap is answered `503` with
/// the JSON body `shed_body(max_connections)`.
pub async fn accept(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    counts: Arc<ConnCounts>,
    shed_body: fn(usize) -> String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                // Out of files or a reset before accept: go on, after a breath for the former.
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Answers go out as soon as they are written: with Nagle's algorithm on, the tail
        // of an answer that fills more than one segment waits for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        if counts.open.fetch_add(1, Ordering::Relaxed) >= limits.max_connections {
            counts.open.fetch_sub(1, Ordering::Relaxed);
            counts.shed.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(shed(tcp, shed_body(limits.max_connections)));
            continue;
        }
        let slot = Slot(counts.clone());
        // Connection info tells loopback clients (which may take shared-memory frames) apart.
        let svc = app.clone().map_request(move |mut req: Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.map(Body::new)
        });
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let svc = hyper_util::service::TowerToHyperService::new(svc);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection from {peer} ended: {e}");
                    }
                    return;
                }
                _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    let _ = stop_tx.send(true);
    Ok(())
}

/// What a connection past the cap is told (each server wraps it in its error shape).
pub fn shed_message(max: usize) -> String {
    format!("this server has its {max} connections open; try again in a moment, and close connections you do not use")
}

/// Answer a connection past the cap with a 503 and close it.
async fn shed(mut tcp: tokio::net::TcpStream, body: String) {
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), tcp.write_all(reply.as_bytes())).await;
    let _ = tcp.shutdown().await;
}

/// A declared body over the limit but at most this long is read (and dropped) before the
/// 413, so the client sees the answer; a longer one is answered at once.
const DRAIN_MAX: u64 = 1 << 20;

/// Why a request body was refused ([`read_body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRefusal {
    /// Over the limit (413).
    TooLarge {
        /// The limit, in bytes.
        max: usize,
    },
    /// Not all there within the timeout (408).
    Timeout {
        /// The timeout.
        after: Duration,
    },
}

impl BodyRefusal {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            BodyRefusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefusal::Timeout { .. } => StatusCode::REQUEST_TIMEOUT,
        }
    }

    /// What to tell the client.
    pub fn message(self) -> String {
        match self {
            BodyRefusal::TooLarge { max } => {
                format!("the request body is over this server's limit of {max} bytes")
            }
            BodyRefusal::Timeout { after } => {
                format!("the request body did not arrive within {} s: send it whole", after.as_secs())
            }
        }
    }
}

/// A POST's body, read whole within the time and size bounds before any handler runs:
/// a `Content-Length` over `max_body` is refused (at once past 1 MiB, read and dropped
/// below it), a body that stalls is `408`.
pub async fn read_body(req: Request, max_body: usize, timeout: Duration) -> Result<Request, BodyRefusal> {
    if req.method() != Method::POST {
        return Ok(req);
    }
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > max_body as u64) {
        // A client writing a modest body before reading the answer would get a broken
        // pipe, not the 413, if the connection closed under it: read such a body and drop
        // it. A huge one is answered at once.
        if n <= DRAIN_MAX {
            let _ = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), n as usize)).await;
        }
        return Err(BodyRefusal::TooLarge { max: max_body });
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(_)) => Err(BodyRefusal::TooLarge { max: max_body }),
        Err(_) => Err(BodyRefusal::Timeout { after: timeout }),
    }
}
