//! Every connection a browser started here opens goes through this forward proxy, which
//! resolves the host itself, checks the addresses it resolved to, and connects to one of
//! those very addresses.
//!
//! The DevTools request filter ([`super::local_guard`], the URL policy of `guirl serve`)
//! sees URLs, not connections: it never sees a WebSocket handshake, and it decides on a
//! name's answer at one moment while the browser resolves the name again later (DNS
//! rebinding). Here each connection is checked when it is made, with the address it is
//! made to, whatever asked for it: a navigation, a fetch, a worker, a `ws://` or `wss://`
//! socket (Chromium tunnels those through `CONNECT`). Chromium is told to send loopback
//! through the proxy too (`<-loopback>`) and to keep WebRTC's UDP off the network.
//!
//! The rules are those of the filter: loopback only on the open ports of
//! [`LocalGuard`], and under `guirl serve` the session's host rule. A refused connection
//! is answered 403 and listed in the step's `blocked_urls`. Browsers attached through
//! `webdriver_url` (a Grid) run elsewhere and are not proxied.

use super::local_guard::{is_loopback_like, reserve, LocalGuard, Reservation};
use axum::body::Body;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// A check of the host a page connects to: its name (`None` for an address) and every
/// address it resolved to; `Err` says why it is refused.
pub type HostCheck = Arc<dyn Fn(Option<&str>, &[IpAddr]) -> Result<(), String> + Send + Sync>;

/// A limit on resolving, and then on opening a connection to, the host a page asked for:
/// a resolver that never answers would otherwise hold the page's request (and the proxy
/// task serving it) for as long as the env lives.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The proxies' own threads: a proxy lives as long as its env, whatever runtime (or none)
/// the env's caller runs in.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("guirl-page-proxy")
        .enable_all()
        .build()
        .expect("the page proxy's runtime starts")
});

/// One env's proxy; it stops listening when dropped.
#[derive(Debug)]
pub struct PageProxy {
    port: u16,
    task: tokio::task::JoinHandle<()>,
    /// No page may connect to the proxy itself.
    _reserved: Reservation,
}

impl Drop for PageProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Rules {
    local: Arc<LocalGuard>,
    hosts: Option<HostCheck>,
}

impl PageProxy {
    /// Listen on a free loopback port, letting through what `local` and `hosts` allow.
    pub fn start(local: Arc<LocalGuard>, hosts: Option<HostCheck>) -> std::io::Result<PageProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let rules = Arc::new(Rules { local, hosts });
        let task = RUNTIME.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
            loop {
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    // Out of file descriptors, say: wait rather than spin.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let rules = rules.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let rules = rules.clone();
                        async move { Ok::<_, Infallible>(rules.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(PageProxy { port, task, _reserved: reserve(port) })
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Chromium's flags that send every connection through the proxy at `port`.
    pub fn chromium_flags(port: u16) -> [String; 3] {
        [
            format!("--proxy-server=http://127.0.0.1:{port}"),
            // Loopback too: by default Chromium goes there directly.
            "--proxy-bypass-list=<-loopback>".into(),
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".into(),
        ]
    }
}

/// Why a connection is not made.
enum Denied {
    /// A rule forbids it: listed in the step's `blocked_urls`.
    Refused(String),
    /// The name does not resolve (no DNS, a typo, the browser's own update check on a
    /// machine without network): the browser would have failed alike without the proxy,
    /// so nothing was blocked and nothing is listed.
    Unresolved(String),
}

/// The answer to a request whose host does not resolve: a gateway error, as the
/// browser's own failed lookup would be, logged only at debug level.
fn unresolved(what: &str, why: &str) -> Response<Body> {
    tracing::debug!(url = what, "a browser's request found no host: {why}");
    answer(StatusCode::BAD_GATEWAY)
}

fn answer(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = code;
    r
}

impl Rules {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        if req.method() == Method::CONNECT {
            return self.tunnel(req).await;
        }
        let uri = req.uri().clone();
        let (Some("http"), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return answer(StatusCode::BAD_REQUEST);
        };
        let port = uri.port_u16().unwrap_or(80);
        let addrs = match self.decide(host, port).await {
            Ok(a) => a,
            Err(Denied::Refused(why)) => {
                self.local.record(&uri.to_string(), &why);
                return answer(StatusCode::FORBIDDEN);
            }
            Err(Denied::Unresolved(why)) => return unresolved(&uri.to_string(), &why),
        };
        let Some(stream) = connect(&addrs).await else { return answer(StatusCode::BAD_GATEWAY) };
        let Ok((mut send, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await else {
            return answer(StatusCode::BAD_GATEWAY);
        };
        tokio::spawn(conn);
        let (mut parts, body) = req.into_parts();
        // The origin server gets the origin form: the path, not the whole URL.
        parts.uri = match uri.path_and_query().map_or("/", |p| p.as_str()).parse() {
            Ok(u) => u,
            Err(_) => return answer(StatusCode::BAD_REQUEST),
        };
        parts.headers.remove("proxy-connection");
        parts.headers.remove("proxy-authorization");
        match send.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(Body::new),
            Err(_) => answer(StatusCode::BAD_GATEWAY),
        }
    }

    /// `CONNECT host:port`: https, and WebSockets of either scheme.
    async fn tunnel(&self, req: Request<Incoming>) -> Response<Body> {
        let Some(auth) = req.uri().authority().cloned() else { return answer(StatusCode::BAD_REQUEST) };
        let port = auth.port_u16().unwrap_or(443);
        // Chromium names the tunnel's target alone: a secure page or any socket.
        let what = || format!("CONNECT {auth} (https, ws or wss)");
        let addrs = match self.decide(auth.host(), port).await {
            Ok(a) => a,
            Err(Denied::Refused(why)) => {
                self.local.record(&what(), &why);
                return answer(StatusCode::FORBIDDEN);
            }
            Err(Denied::Unresolved(why)) => return unresolved(&what(), &why),
        };
        let Some(mut upstream) = connect(&addrs).await else { return answer(StatusCode::BAD_GATEWAY) };
        tokio::spawn(async move {
            if let Ok(up) = hyper::upgrade::on(req).await {
                let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(up), &mut upstream).await;
            }
        });
        answer(StatusCode::OK)
    }

    /// The addresses a page may connect to for `host:port`, resolved here once: the
    /// connection goes to one of them, so no later answer can differ from the checked one.
    async fn decide(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Denied> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let (name, ips): (Option<&str>, Vec<IpAddr>) = match bare.parse::<IpAddr>() {
            Ok(ip) => (None, vec![ip]),
            Err(_) => {
                let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port)))
                    .await
                    .map_err(|_| {
                        Denied::Unresolved(format!(
                            "{bare} did not resolve within {}s",
                            CONNECT_TIMEOUT.as_secs()
                        ))
                    })?
                    .map_err(|e| Denied::Unresolved(format!("{bare} does not resolve: {e}")))?;
                (Some(bare), found.map(|a| a.ip()).collect())
            }
        };
        if ips.is_empty() {
            return Err(Denied::Unresolved(format!("{bare} does not resolve")));
        }
        let local = ips.iter().filter(|&&ip| is_loopback_like(ip)).count();
        if local > 0 && !self.local.port_open(port) {
            return Err(Denied::Refused(format!("port {port} of this machine's loopback is not the task's")));
        }
        // guirl's task server or the task's own start page: allowed above, by port.
        if local < ips.len() {
            if let Some(check) = &self.hosts {
                check(name, &ips).map_err(Denied::Refused)?;
            }
        }
        Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }
}

/// A connection to the first of `addrs` that answers.
async fn connect(addrs: &[SocketAddr]) -> Option<tokio::net::TcpStream> {
    for a in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(a)).await {
            return Some(s);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Send `head` to a proxy and read its whole answer.
    fn ask(port: u16, head: &str) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if out.windows(4).any(|w| w == b"\r\n\r\n") && head.starts_with("CONNECT") {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A loopback server that answers every connection with `body` and counts them.
    fn origin(body: &'static str) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = n.clone();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (port, n)
    }

    #[test]
    fn loopback_is_reached_only_on_the_tasks_ports_in_every_form() {
        let (open, opened) = origin("task page");
        let (closed, reached) = origin("a driver");
        let local = LocalGuard::new(Some(&format!("http://127.0.0.1:{open}/")));
        let proxy = PageProxy::start(local.clone(), None).unwrap();
        let p = proxy.port();
        let got = ask(p, &format!("GET http://127.0.0.1:{open}/x HTTP/1.1\r\nHost: 127.0.0.1:{open}\r\nConnection: close\r\n\r\n"));
        assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("task page"), "{got}");
        for target in [
            format!("127.0.0.1:{closed}"),
            format!("localhost:{closed}"),
            format!("[::ffff:127.0.0.1]:{closed}"),
        ] {
            let got = ask(
                p,
                &format!(
                    "GET http://{target}/session HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
                ),
            );
            assert!(got.starts_with("HTTP/1.1 403"), "{target}: {got}");
            let got = ask(p, &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"));
            assert!(got.starts_with("HTTP/1.1 403"), "{target}: {got}");
        }
        // The proxy's own port is refused too.
        let got = ask(p, &format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\n\r\n"));
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0, "a refused port was reached");
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 1);
        let (urls, _) = local.take_blocked();
        assert_eq!(urls.len(), 7, "{urls:?}");
        assert!(urls.iter().any(|u| u.starts_with("CONNECT localhost:")), "{urls:?}");
    }

    #[test]
    fn a_tunnel_carries_bytes_both_ways_and_the_host_rule_decides_on_addresses() {
        let (open, _) = origin("through the tunnel");
        let local = LocalGuard::new(Some(&format!("http://127.0.0.1:{open}/")));
        let proxy = PageProxy::start(local.clone(), None).unwrap();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "CONNECT 127.0.0.1:{open} HTTP/1.1\r\nHost: 127.0.0.1:{open}\r\n\r\n").unwrap();
        let mut head = [0u8; 19];
        s.read_exact(&mut head).unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
        let mut rest = Vec::new();
        // the rest of the proxy's head, then the tunnelled request's answer
        write!(s, "GET / HTTP/1.1\r\n\r\n").unwrap();
        let _ = s.read_to_end(&mut rest);
        assert!(String::from_utf8_lossy(&rest).ends_with("through the tunnel"));

        // A host rule sees the name and what it resolved to, and its refusal is listed.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let rule: HostCheck = Arc::new(move |name, ips| {
            log.lock().unwrap().push((name.map(str::to_string), ips.to_vec()));
            Err("not on the list".into())
        });
        let proxy = PageProxy::start(local.clone(), Some(rule)).unwrap();
        let got = ask(proxy.port(), "CONNECT 10.255.255.1:443 HTTP/1.1\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        // loopback on the task's port is the task's, whatever the host rule says
        let got =
            ask(proxy.port(), &format!("GET http://127.0.0.1:{open}/ HTTP/1.1\r\nConnection: close\r\n\r\n"));
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.as_slice(), &[(None, vec!["10.255.255.1".parse::<IpAddr>().unwrap()])]);
        let (urls, _) = local.take_blocked();
        assert_eq!(urls, vec!["CONNECT 10.255.255.1:443 (https, ws or wss)".to_string()]);
    }

    #[test]
    fn a_name_that_does_not_resolve_is_a_gateway_error_not_a_blocked_request() {
        // `.invalid` never resolves (RFC 6761): as a browser's own update check on a
        // machine without DNS, nothing was refused, so nothing is listed.
        let local = LocalGuard::new(None);
        let proxy = PageProxy::start(local.clone(), None).unwrap();
        let got = ask(proxy.port(), "CONNECT update.guirl.invalid:443 HTTP/1.1\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
        let got = ask(
            proxy.port(),
            "GET http://time.guirl.invalid/ HTTP/1.1\r\nHost: time.guirl.invalid\r\nConnection: close\r\n\r\n",
        );
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
        assert_eq!(local.take_blocked(), (Vec::new(), 0));
    }
}
