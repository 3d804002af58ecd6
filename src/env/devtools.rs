//! A direct Chrome DevTools Protocol channel to the page, beside the WebDriver session.
//!
//! Reading the page state and taking the screenshot are the two calls of every step
//! that need no WebDriver semantics. Sent over the browser's own DevTools websocket
//! they skip chromedriver's HTTP hop and its per-command navigation checks (measured:
//! a script round trip 4-5 ms -> 0.5 ms). Input actions go over it on request (see
//! [`super::input`]); navigation stays on WebDriver.
//!
//! The channel is found from the session: Selenium Grid's `se:cdp` capability, or the
//! `DevToolsActivePort` file Chromium writes into its profile folder (the one chromedriver
//! names in its `chrome.userDataDir` capability). Where
//! neither exists, the browser works over WebDriver alone.

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One `Input.dispatch*` call: the method and its parameters.
pub type InputEvent = (&'static str, Value);
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

type Reply = Result<Value, CdpError>;
/// Calls awaiting their reply; `None` once the connection has closed, so a call made after
/// the browser died fails at once instead of waiting out its limit.
type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>>;

/// Whether the browser may make a request to a URL (see [`DevTools::filter_requests`]).
pub type RequestCheck = Arc<dyn Fn(String) -> futures::future::BoxFuture<'static, bool> + Send + Sync>;
type Filter = Arc<Mutex<Option<RequestCheck>>>;

/// Why a DevTools call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CdpError {
    /// No answer within the limit.
    Timeout,
    /// The websocket closed (the browser died or the session ended).
    Closed,
    /// The browser answered with an error (for example: the page navigated away).
    Protocol(String),
    /// An awaited page event did not come within the limit; says what was awaited.
    Stalled(String),
}

impl std::fmt::Display for CdpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CdpError::Timeout => write!(f, "no answer"),
            CdpError::Closed => write!(f, "the DevTools connection closed"),
            CdpError::Protocol(m) => write!(f, "{m}"),
            CdpError::Stalled(what) => write!(f, "timed out waiting for {what}"),
        }
    }
}

/// The main frame's navigations so far (see [`DevTools::navigations`]), to compare with a
/// mark taken before an action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Navigations {
    /// Navigations the page requested in its own tab (`Page.frameRequestedNavigation`: a
    /// link, a form, a script).
    pub requested: u64,
    /// How many of the requested ones are over. A new document ends every navigation
    /// requested before it: a double click on a link requests two and commits one, the
    /// second request replacing the first. The frame's loading stopping ends them too: a
    /// 204 or a download commits nothing. A move within the document ends one.
    pub settled: u64,
    /// New documents and moves within the document, requested or not.
    pub ended: u64,
    /// Times the main frame stopped loading.
    pub stopped: u64,
}

impl Navigations {
    /// Whether a navigation requested after `mark` is still in flight.
    pub fn pending_since(&self, mark: Navigations) -> bool {
        self.requested > mark.requested && self.settled < self.requested
    }
}

/// One DevTools session attached to one page target.
pub struct DevTools {
    out: mpsc::UnboundedSender<Message>,
    pending: Pending,
    next_id: AtomicU64,
    session: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Counts `Emulation.virtualTimeBudgetExpired` events (see [`super::page_clock`]).
    budget_expired: tokio::sync::watch::Receiver<u64>,
    /// Changes with each new document in the page's main frame (`Page.frameNavigated`);
    /// holds whether the latest is `about:blank`.
    commits: tokio::sync::watch::Receiver<bool>,
    /// Counts the main frame's navigations (see [`Navigations`]).
    navigations: tokio::sync::watch::Receiver<Navigations>,
    /// The URL of the latest navigation the page requested (for error messages).
    requested_url: Arc<Mutex<String>>,
    /// Decides the requests paused by `Fetch.enable`.
    filter: Filter,
    /// The endpoint's port when it listens on this machine's loopback.
    port: Option<u16>,
}

impl DevTools {
    /// Connect to a browser-level DevTools websocket, attached to no page yet.
    pub async fn open(ws_url: &str, limit: Duration) -> Result<DevTools, String> {
        // Nagle's algorithm off: an input event and the frame it waits for are two small
        // writes back to back, and with it on the frame sat in the socket until the
        // browser's delayed ACK (~40 ms a step).
        let connect = tokio_tungstenite::connect_async_with_config(ws_url, None, true);
        let (ws, _) = tokio::time::timeout(limit, connect)
            .await
            .map_err(|_| format!("no answer from {ws_url}"))?
            .map_err(|e| format!("cannot open {ws_url}: {e}"))?;
        let (mut sink, mut stream) = ws.split();
        let (out, mut rx) = mpsc::unbounded_channel::<Message>();
        let writer = tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if sink.send(m).await.is_err() {
                    break;
                }
            }
        });
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let (p, dialogs) = (pending.clone(), out.clone());
        let (expired_tx, budget_expired) = tokio::sync::watch::channel(0u64);
        let (commits_tx, commits) = tokio::sync::watch::channel(false);
        let (nav_tx, navigations) = tokio::sync::watch::channel(Navigations::default());
        let requested_url = Arc::new(Mutex::new(String::new()));
        let last_url = requested_url.clone();
        // The main frame's id, from its first commit (events of other frames are not counted).
        let mut main_frame: Option<String> = None;
        let filter = Filter::default();
        let f = filter.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let Message::Text(text) = msg else { continue };
                let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                match v.get("id").and_then(Value::as_u64) {
                    Some(id) => {
                        if let Some(tx) = p.lock().expect("pending").as_mut().and_then(|m| m.remove(&id)) {
                            let reply = match v.get("error") {
                                Some(e) => Err(CdpError::Protocol(
                                    e["message"].as_str().unwrap_or("DevTools error").to_string(),
                                )),
                                None => Ok(v["result"].clone()),
                            };
                            let _ = tx.send(reply);
                        }
                    }
                    // A JS dialog blocks the page's scripts: accept it, as the WebDriver
                    // session does (`unhandledPromptBehavior: accept`).
                    None if v["method"] == "Page.javascriptDialogOpening" => {
                        let m = json!({ "id": 0, "method": "Page.handleJavaScriptDialog",
                                        "params": { "accept": true }, "sessionId": v["sessionId"] });
                        let _ = dialogs.send(Message::text(m.to_string()));
                    }
                    // Decided off the reader (a check may resolve a name), answered in the
                    // session that paused it.
                    None if v["method"] == "Fetch.requestPaused" => {
                        let check = f.lock().expect("filter").clone();
                        let out = dialogs.clone();
                        tokio::spawn(async move {
                            let url = v["params"]["request"]["url"].as_str().unwrap_or_default().to_string();
                            let go = match check {
                                Some(c) => c(url).await,
                                None => true,
                            };
                            let id = v["params"]["requestId"].clone();
                            let mut m = if go {
                                json!({ "id": 0, "method": "Fetch.continueRequest", "params": { "requestId": id } })
                            } else {
                                json!({ "id": 0, "method": "Fetch.failRequest",
                                        "params": { "requestId": id, "errorReason": "BlockedByClient" } })
                            };
                            if let Some(s) = v.get("sessionId") {
                                m["sessionId"] = s.clone();
                            }
                            let _ = out.send(Message::text(m.to_string()));
                        });
                    }
                    None if v["method"] == "Emulation.virtualTimeBudgetExpired" => {
                        expired_tx.send_modify(|n| *n += 1);
                    }
                    None if v["method"] == "Page.frameNavigated"
                        && v["params"]["frame"]["parentId"].is_null() =>
                    {
                        main_frame = v["params"]["frame"]["id"].as_str().map(str::to_string);
                        commits_tx.send_replace(v["params"]["frame"]["url"] == "about:blank");
                        nav_tx.send_modify(|n| {
                            n.ended += 1;
                            n.settled = n.requested;
                        });
                    }
                    // Nothing is in flight in the main frame any more (a navigation that
                    // committed nothing, or one another replaced, is over).
                    None if v["method"] == "Page.frameStoppedLoading"
                        && main_frame.as_deref().is_some_and(|m| v["params"]["frameId"] == m) =>
                    {
                        nav_tx.send_modify(|n| {
                            n.stopped += 1;
                            n.settled = n.requested;
                        });
                    }
                    None if v["method"] == "Page.frameRequestedNavigation"
                        && v["params"]["disposition"] == "currentTab"
                        && main_frame.as_deref().is_none_or(|m| v["params"]["frameId"] == m) =>
                    {
                        let url = v["params"]["url"].as_str().unwrap_or_default();
                        *last_url.lock().expect("requested url") = url.to_string();
                        nav_tx.send_modify(|n| n.requested += 1);
                    }
                    None if v["method"] == "Page.navigatedWithinDocument"
                        && main_frame.as_deref().is_some_and(|m| v["params"]["frameId"] == m) =>
                    {
                        nav_tx.send_modify(|n| {
                            n.ended += 1;
                            n.settled = (n.settled + 1).min(n.requested);
                        });
                    }
                    None => {}
                }
            }
            for (_, tx) in p.lock().expect("pending").take().into_iter().flatten() {
                let _ = tx.send(Err(CdpError::Closed));
            }
        });
        Ok(DevTools {
            out,
            pending,
            next_id: AtomicU64::new(1),
            session: String::new(),
            tasks: vec![writer, reader],
            budget_expired,
            commits,
            navigations,
            requested_url,
            filter,
            port: loopback_port(ws_url),
        })
    }

    /// The endpoint's port when it listens on this machine's loopback (pages must not
    /// reach it: see [`super::local_guard`]).
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Pause every request the browser makes, in every page and frame, until `check`
    /// allows it; a refused one fails as `net::ERR_BLOCKED_BY_CLIENT`.
    pub async fn filter_requests(&self, check: RequestCheck, limit: Duration) -> Result<(), CdpError> {
        *self.filter.lock().expect("filter") = Some(check);
        self.browser_call("Fetch.enable", json!({ "patterns": [{ "urlPattern": "*" }] }), limit).await?;
        Ok(())
    }

    /// Attach to page `target_id` (chromedriver's window handles are DevTools target ids):
    /// [`DevTools::call`] then goes to that page. Downloads are denied from then on, in
    /// every page of the browser.
    pub async fn attach(&mut self, target_id: &str, limit: Duration) -> Result<(), String> {
        let attached = self
            .browser_call("Target.attachToTarget", json!({ "targetId": target_id, "flatten": true }), limit)
            .await
            .map_err(|e| format!("cannot attach to page {target_id}: {e}"))?;
        self.session = attached["sessionId"].as_str().unwrap_or_default().to_string();
        self.call("Page.enable", json!({}), limit).await.map_err(|e| format!("Page.enable: {e}"))?;
        // chromedriver lets a headless browser save downloads into its working directory
        // (guirl's, unless the browser runs as another user): a page could write files on
        // the host. A download is cancelled as it begins; the page stays.
        self.browser_call("Browser.setDownloadBehavior", json!({ "behavior": "deny" }), limit)
            .await
            .map_err(|e| format!("Browser.setDownloadBehavior: {e}"))?;
        Ok(())
    }

    /// A receiver that changes each time the page's virtual-time budget runs out.
    pub fn budget_expiries(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut rx = self.budget_expired.clone();
        rx.borrow_and_update();
        rx
    }

    /// The main frame's navigations so far; see [`DevTools::wait_navigation_after`].
    pub fn navigations(&self) -> Navigations {
        *self.navigations.borrow()
    }

    /// The URL of the latest navigation the page requested (empty before any).
    pub fn requested_url(&self) -> String {
        self.requested_url.lock().expect("requested url").clone()
    }

    /// Whether a navigation the page requested after `mark` (an earlier
    /// [`DevTools::navigations`]) has not ended yet: then wait at most `limit` for it to
    /// end. Returns whether one was pending; [`CdpError::Timeout`] if it did not end in
    /// time (a server that never answers), [`CdpError::Closed`] if the browser went away.
    /// Input over DevTools returns once the page has handled the event; a link it followed
    /// is then requested but may not have replaced the page, and the page's
    /// `beforeunload` may not have run either (chromedriver's input actions wait for such
    /// navigations themselves).
    pub async fn wait_navigation_after(&self, mark: Navigations, limit: Duration) -> Result<bool, CdpError> {
        let mut rx = self.navigations.clone();
        if !rx.borrow_and_update().pending_since(mark) {
            return Ok(false);
        }
        let ended = async { rx.wait_for(|n| !n.pending_since(mark)).await.map(|_| ()) };
        match tokio::time::timeout(limit, ended).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(_)) => Err(CdpError::Closed),
            Err(_) => Err(CdpError::Timeout),
        }
    }

    /// Wait at most `start` for the page to request a navigation after `mark`, then at
    /// most `limit` for it to end (as [`DevTools::wait_navigation_after`]). Returns
    /// whether one was requested. For a click that followed a link: the navigation starts
    /// in a task after the click, possibly after the caller's first look at the page.
    pub async fn wait_navigation_start(
        &self,
        mark: Navigations,
        start: Duration,
        limit: Duration,
    ) -> Result<bool, CdpError> {
        let mut rx = self.navigations.clone();
        let requested = async { rx.wait_for(|n| n.requested > mark.requested).await.map(|_| ()) };
        match tokio::time::timeout(start, requested).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(CdpError::Closed),
            Err(_) => {
                tracing::debug!("a followed link requested no navigation within {start:?}");
                return Ok(false);
            }
        }
        self.wait_navigation_after(mark, limit).await?;
        Ok(true)
    }

    /// Wait at most `limit` for a new document or for the main frame to stop loading,
    /// whichever comes first after `mark`: a page that has seen `beforeunload` is being
    /// left, or not (a 204, a download). Returns the navigations then;
    /// [`CdpError::Timeout`] if neither came.
    pub async fn wait_document_or_stop(
        &self,
        mark: Navigations,
        limit: Duration,
    ) -> Result<Navigations, CdpError> {
        let mut rx = self.navigations.clone();
        let over =
            async { rx.wait_for(|n| n.ended > mark.ended || n.stopped > mark.stopped).await.map(|n| *n) };
        match tokio::time::timeout(limit, over).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(_)) => Err(CdpError::Closed),
            Err(_) => Err(CdpError::Timeout),
        }
    }

    /// A receiver that changes each time a new document replaces the page's main one; it
    /// holds whether the new document is `about:blank`.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<bool> {
        let mut rx = self.commits.clone();
        rx.borrow_and_update();
        rx
    }

    /// Send `method` to the page and wait at most `limit` for its result.
    pub async fn call(&self, method: &str, params: Value, limit: Duration) -> Reply {
        self.send(Some(&self.session), method, params, limit).await
    }

    /// Send `method` to the browser itself (no page session).
    pub async fn browser_call(&self, method: &str, params: Value, limit: Duration) -> Reply {
        self.send(None, method, params, limit).await
    }

    async fn send(&self, session: Option<&str>, method: &str, params: Value, limit: Duration) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().expect("pending").as_mut() {
            Some(m) => m.insert(id, tx),
            None => return Err(CdpError::Closed),
        };
        if self.out.send(Message::text(msg.to_string())).is_err() {
            self.pending.lock().expect("pending").as_mut().map(|m| m.remove(&id));
            return Err(CdpError::Closed);
        }
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(CdpError::Closed),
            Err(_) => {
                self.pending.lock().expect("pending").as_mut().map(|m| m.remove(&id));
                Err(CdpError::Timeout)
            }
        }
    }

    /// Run `body` (a WebDriver-style function body that reads `arguments`) in the page's
    /// main world and return its JSON result. A thrown error is a `Protocol` error
    /// starting with "javascript error".
    pub async fn run_script(&self, body: &str, args: &[Value], awaits: bool, limit: Duration) -> Reply {
        let expression = format!("(function () {{\n{body}\n}}).apply(null, {})", Value::from(args.to_vec()));
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": awaits }),
                limit,
            )
            .await?;
        if let Some(ex) = r.get("exceptionDetails") {
            let text = ex["exception"]["description"]
                .as_str()
                .or_else(|| ex["text"].as_str())
                .unwrap_or("the script threw");
            return Err(CdpError::Protocol(format!("javascript error: {text}")));
        }
        Ok(r["result"].get("value").cloned().unwrap_or(Value::Null))
    }
}

impl Drop for DevTools {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn loopback_port(ws_url: &str) -> Option<u16> {
    let u = url::Url::parse(ws_url).ok()?;
    let local = match u.host()? {
        url::Host::Ipv4(a) => super::local_guard::is_loopback_like(a.into()),
        url::Host::Ipv6(a) => super::local_guard::is_loopback_like(a.into()),
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
    };
    local.then(|| u.port_or_known_default()).flatten()
}

/// The browser-level DevTools websocket URL of a session, if one can be reached from here.
pub fn endpoint(
    caps: Option<&serde_json::Map<String, Value>>,
    profile: Option<&std::path::Path>,
) -> Option<String> {
    if let Some(url) = caps.and_then(|c| c.get("se:cdp")).and_then(Value::as_str) {
        return Some(url.to_string());
    }
    // Chromium writes its debugging port and browser path here when started with port 0.
    let text = std::fs::read_to_string(profile?.join("DevToolsActivePort")).ok()?;
    let mut lines = text.lines();
    let port: u16 = lines.next()?.trim().parse().ok()?;
    let path = lines.next()?.trim();
    Some(format!("ws://127.0.0.1:{port}{path}"))
}
