//! Keeps task pages away from the services on this machine's loopback, in every mode
//! (`run`, `train`, `bench`, `play`, `serve`).
//!
//! A page on a loopback origin (guirl's own task server, a local site a user trains on)
//! passes chromedriver's and DevTools' origin checks, so without this a page's script
//! could POST a new WebDriver session to any chromedriver on the machine and run a
//! command outside the browser's sandbox. Three layers stop it:
//!
//! 1. chromedriver listens on loopback only, under a secret path (`--url-base`), so a
//!    page that finds its port still cannot name a command (see `browser/launch.rs`).
//! 2. Every port a guirl chromedriver, browser DevTools endpoint or env server listens on
//!    is [`reserve`]d while it is open: no page request may reach it, whatever the task.
//! 3. A page may reach a loopback address (127/8, ::1, 0.0.0.0, `localhost` and any name
//!    that resolves there) only on the ports of guirl's task server and of the task's own
//!    start page ([`crate::tasks::Task::home_url`]); everything else on loopback is
//!    refused, and the refusal is listed in the step's `blocked_urls`.
//!
//! A `file:` URL is refused unless it lies in the folder of the task's own `file://` start
//! page ([`crate::tasks::Task::local_site`]): a local task's link or frame would otherwise
//! show any file the browser's user can read (`/etc/passwd`, a key) in the screenshot.
//!
//! Layers 2 and 3 act on the requests DevTools pauses (`Fetch.enable`): navigations,
//! frames, subresources, fetches, form posts and redirects, in pages and workers.
//! WebSocket handshakes are not paused by DevTools, and a name may resolve differently
//! when the browser connects: [`super::page_proxy`] applies layers 2 and 3 again to
//! every connection a browser started here makes, with the address it connects to.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, LazyLock, Mutex};

/// Blocked URLs kept between two reads (the rest are counted, not listed).
const MAX_LISTED: usize = 20;
/// A listed URL's length at most (a page could make them long).
const MAX_URL_CHARS: usize = 300;

/// Ports of this process's drivers and servers, with how many holders each has.
static RESERVED: LazyLock<Mutex<HashMap<u16, usize>>> = LazyLock::new(Mutex::default);

/// A loopback port no page may reach while this lives (see [`reserve`]).
#[derive(Debug)]
pub struct Reservation(u16);

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut r = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = r.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                r.remove(&self.0);
            }
        }
    }
}

/// Keep pages off loopback port `port` (a chromedriver, a DevTools endpoint, an env
/// server) until the returned value is dropped.
pub fn reserve(port: u16) -> Reservation {
    *RESERVED.lock().unwrap_or_else(|e| e.into_inner()).entry(port).or_default() += 1;
    Reservation(port)
}

/// Whether `port` is reserved now.
pub fn is_reserved(port: u16) -> bool {
    RESERVED.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&port)
}

/// Whether a connection to `ip` reaches this machine's loopback: 127/8, `::1`, and the
/// unspecified addresses (Linux connects `0.0.0.0` and `::` to the local host), also
/// written as IPv4-mapped or -compatible IPv6.
pub fn is_loopback_like(ip: IpAddr) -> bool {
    let v4 = |a: Ipv4Addr| a.is_loopback() || a.octets()[0] == 0;
    match ip {
        IpAddr::V4(a) => v4(a),
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.is_unspecified()
                || a.to_ipv4_mapped().or_else(|| a.to_ipv4()).is_some_and(v4)
        }
    }
}

/// One browser's loopback rule and what it refused since the last read.
#[derive(Debug, Default)]
pub struct LocalGuard {
    /// Loopback ports pages may reach: the task server's and the task's start page's.
    open: Mutex<HashSet<u16>>,
    /// The folder `file:` URLs may come from: the task's `file://` start page's.
    files: Mutex<Option<std::path::PathBuf>>,
    /// Whether a host name reaches loopback, by name (resolved once per browser).
    names: Mutex<HashMap<String, bool>>,
    blocked: Mutex<(Vec<String>, usize)>,
}

impl LocalGuard {
    /// A guard that lets pages reach guirl's task server and the loopback port of
    /// `home` (the task's start URL), if it has one.
    pub fn new(home: Option<&str>) -> Arc<LocalGuard> {
        let g = Arc::new(LocalGuard::default());
        g.set_home(home);
        g
    }

    /// A guard for `task`: its start page's loopback port and its local folder open.
    pub fn for_task(task: &dyn crate::tasks::Task) -> Arc<LocalGuard> {
        let g = Arc::new(LocalGuard::default());
        g.set_task(task);
        g
    }

    /// Change the task (the env switched tasks): its start page's loopback port, and the
    /// folder of its `file://` start page, are open.
    pub fn set_task(&self, task: &dyn crate::tasks::Task) {
        self.set_home(task.home_url().as_deref());
        let folder = task.local_site().map(|s| s.folder);
        *self.files.lock().unwrap_or_else(|e| e.into_inner()) = folder;
    }

    /// Change the task's start URL (the env switched tasks).
    pub fn set_home(&self, home: Option<&str>) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.clear();
        let server = crate::tasks::server::base_url().ok();
        for u in server.as_deref().into_iter().chain(home) {
            if let Some(port) = url::Url::parse(u).ok().and_then(|u| u.port_or_known_default()) {
                open.insert(port);
            }
        }
    }

    /// Whether a page may request `url`; a refusal is recorded for [`LocalGuard::take_blocked`].
    pub async fn allows(&self, url: &str) -> bool {
        if url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("file:")) {
            let ok = self.file_allowed(url);
            if !ok {
                self.record(url, "a file outside the folder of the task's own file:// start page");
            }
            return ok;
        }
        let ok = self.decide(url).await;
        if !ok {
            self.record(url, "a service on this machine's loopback");
        }
        ok
    }

    /// Whether `url` (a `file:` URL) names a file in the task's local folder. The URL
    /// parser resolves `..` and percent escapes before the comparison.
    fn file_allowed(&self, url: &str) -> bool {
        let folder = self.files.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let path = url::Url::parse(url).ok().and_then(|u| u.to_file_path().ok());
        matches!((folder, path), (Some(folder), Some(path)) if path.starts_with(&folder))
    }

    /// List a refused request or connection (`what`) for [`LocalGuard::take_blocked`].
    pub fn record(&self, what: &str, why: &str) {
        tracing::warn!(url = what, "blocked a page's request: {why}");
        let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        if b.0.len() < MAX_LISTED {
            b.0.push(what.chars().take(MAX_URL_CHARS).collect());
        } else {
            b.1 += 1;
        }
    }

    /// Whether pages may reach loopback port `port`: the task server's or the start
    /// page's, and no driver's or server's.
    pub fn port_open(&self, port: u16) -> bool {
        !is_reserved(port) && self.open.lock().unwrap_or_else(|e| e.into_inner()).contains(&port)
    }

    async fn decide(&self, url: &str) -> bool {
        let Ok(u) = url::Url::parse(url) else { return true };
        if !matches!(u.scheme(), "http" | "https" | "ws" | "wss") {
            return true;
        }
        let Some(port) = u.port_or_known_default() else { return true };
        let local = match u.host() {
            Some(url::Host::Ipv4(a)) => is_loopback_like(IpAddr::V4(a)),
            Some(url::Host::Ipv6(a)) => is_loopback_like(IpAddr::V6(a)),
            Some(url::Host::Domain(name)) => self.name_is_local(name, port).await,
            None => false,
        };
        !local || self.port_open(port)
    }

    async fn name_is_local(&self, name: &str, port: u16) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        // Chromium answers these itself, without asking DNS.
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Some(&known) = self.names.lock().unwrap_or_else(|e| e.into_inner()).get(&name) {
            return known;
        }
        // A name the browser could resolve to loopback counts as loopback; one that does
        // not resolve here does not resolve for the browser either.
        let local = match tokio::net::lookup_host((name.as_str(), port)).await {
            Ok(addrs) => addrs.into_iter().any(|a| is_loopback_like(a.ip())),
            Err(_) => false,
        };
        self.names.lock().unwrap_or_else(|e| e.into_inner()).insert(name, local);
        local
    }

    /// The URLs refused since the last call (at most 20) and how many more.
    pub fn take_blocked(&self) -> (Vec<String>, usize) {
        std::mem::take(&mut *self.blocked.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_in_every_spelling() {
        for s in ["127.0.0.1", "127.9.8.7", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"] {
            assert!(is_loopback_like(s.parse().unwrap()), "{s}");
        }
        for s in ["10.0.0.1", "8.8.8.8", "169.254.169.254", "fe80::1", "::ffff:10.0.0.1"] {
            assert!(!is_loopback_like(s.parse().unwrap()), "{s}");
        }
    }

    #[tokio::test]
    async fn file_urls_pass_inside_the_task_folder_only() {
        let g = LocalGuard::new(None);
        assert!(!g.allows("file:///srv/site/index.html").await, "no folder: no file");
        *g.files.lock().unwrap() = Some("/srv/site".into());
        assert!(g.allows("file:///srv/site/index.html").await);
        assert!(g.allows("FILE:///srv/site/img/a.png?x#y").await);
        for out in [
            "file:///etc/passwd",
            "file:///srv/site/../secret.txt",
            "file:///srv/site/%2e%2e/secret.txt",
            "file:///srv/site2/index.html",
            "file://otherhost/srv/site/index.html",
        ] {
            assert!(!g.allows(out).await, "{out}");
        }
        assert_eq!(g.take_blocked().0.len(), 6);
    }

    #[tokio::test]
    async fn only_the_open_ports_of_loopback_pass() {
        let g = LocalGuard::new(Some("http://localhost:4321/page.html"));
        // Hex and decimal spellings reach the parser already in dotted form (the URL
        // standard's host parser, as in the browser).
        assert!(g.allows("http://127.0.0.1:4321/x").await);
        assert!(g.allows("ws://[::1]:4321/socket").await);
        assert!(!g.allows("http://0x7f.1:9515/session").await);
        assert!(!g.allows("http://2130706433:9515/session").await);
        assert!(!g.allows("http://localhost:9515/session").await);
        assert!(!g.allows("http://a.localhost:9515/session").await);
        assert!(!g.allows("http://[::ffff:7f00:1]:9222/json").await);
        assert!(!g.allows("http://0.0.0.0:80/").await);
        // Not loopback: this guard leaves it to the URL policy.
        assert!(g.allows("http://10.1.2.3:9515/session").await);
        assert!(g.allows("data:text/html,hi").await);
        let (urls, more) = g.take_blocked();
        assert_eq!((urls.len(), more), (6, 0));
        assert!(g.take_blocked().0.is_empty());
    }

    #[tokio::test]
    async fn a_reserved_port_is_closed_even_when_it_is_home() {
        let g = LocalGuard::new(Some("http://127.0.0.1:4322/"));
        let r = reserve(4322);
        assert!(!g.allows("http://127.0.0.1:4322/session").await);
        drop(r);
        assert!(!is_reserved(4322));
        assert!(g.allows("http://127.0.0.1:4322/session").await);
    }
}
