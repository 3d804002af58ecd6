//! The URL policy inside the browser: a session's every request (navigations, redirects,
//! frames, scripts, images, fetches) is paused over DevTools and let through only when
//! the server's [`UrlPolicy`] allows it, so a page cannot redirect or frame its way to a
//! host its `start_url` could not name. A refused request fails in the page as
//! `net::ERR_BLOCKED_BY_CLIENT`; the next reset or step lists it in `info.blocked_urls`,
//! and the episode goes on.

use super::limits;
use crate::env::devtools::RequestCheck;
use crate::env::url_policy::UrlPolicy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Blocked URLs kept between two answers (the rest are counted, not listed).
pub const MAX_LISTED: usize = 20;

/// One session's request checks and what they blocked since the last answer.
pub struct RequestGuard {
    policy: Arc<UrlPolicy>,
    /// guirl's own task server (always allowed: task ids and spec paths load from it).
    own_origin: Option<String>,
    /// Decisions by origin, so a page's hundred requests resolve its host once. A name
    /// is not re-resolved within a session (see docs/serve.md on DNS rebinding).
    decided: Mutex<HashMap<String, bool>>,
    blocked: Mutex<(Vec<String>, usize)>,
}

fn origin(url: &url::Url) -> String {
    url.origin().ascii_serialization()
}

impl RequestGuard {
    /// A guard for `policy`.
    pub fn new(policy: Arc<UrlPolicy>) -> Arc<RequestGuard> {
        let own_origin =
            crate::tasks::server::base_url().ok().and_then(|u| url::Url::parse(&u).ok()).map(|u| origin(&u));
        Arc::new(RequestGuard { policy, own_origin, decided: Mutex::default(), blocked: Mutex::default() })
    }

    /// Whether `url` may be requested (recording it when not).
    pub async fn allows(&self, url: &str) -> bool {
        // Content the page already holds, not a request to anywhere.
        if url.starts_with("data:") || url.starts_with("blob:") {
            return true;
        }
        let parsed = url::Url::parse(url).ok();
        let key = parsed.as_ref().map(origin).filter(|o| o != "null");
        if key.is_some() && key == self.own_origin {
            return true;
        }
        let cached =
            key.as_ref().and_then(|k| self.decided.lock().unwrap_or_else(|e| e.into_inner()).get(k).copied());
        let ok = match cached {
            Some(ok) => ok,
            None => {
                let ok = self.policy.check(url).await.is_ok();
                if let Some(k) = key {
                    self.decided.lock().unwrap_or_else(|e| e.into_inner()).insert(k, ok);
                }
                ok
            }
        };
        if !ok {
            tracing::info!(url, "blocked a request the URL policy refuses");
            let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
            if b.0.len() < MAX_LISTED {
                b.0.push(limits::cut(url, limits::MAX_ECHO_CHARS));
            } else {
                b.1 += 1;
            }
        }
        ok
    }

    /// The check to hand the browser.
    pub fn check(self: &Arc<Self>) -> RequestCheck {
        let me = self.clone();
        Arc::new(move |url: String| {
            let me = me.clone();
            Box::pin(async move { me.allows(&url).await })
        })
    }

    /// The URLs blocked since the last call (at most 20) and how many more.
    pub fn take_blocked(&self) -> (Vec<String>, usize) {
        std::mem::take(&mut *self.blocked.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
