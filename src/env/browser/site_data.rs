//! The browser as a task's [`Page`]: navigating, and clearing what a site stored in it.
//!
//! One browser serves many episodes, so what a page stores (cookies, localStorage,
//! sessionStorage, IndexedDB, Cache Storage, service workers) would carry over into the
//! next episode. Website tasks clear it for their origin before the start page loads.

use super::{Browser, CdpCommand, EnvError};
use crate::tasks::Page;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

impl Browser {
    /// Navigate and wait for the page's load event.
    pub async fn goto(&self, url: &str) -> Result<(), EnvError> {
        let limit = self.page_load_timeout + std::time::Duration::from_secs(1);
        let doing = format!("loading {url}");
        let page_load = |e: EnvError| EnvError::PageLoad { url: url.to_string(), reason: e.to_string() };
        match self.guard_for(limit, &doing, async { Ok(self.client.goto(url).await) }).await {
            Ok(Ok(())) => Ok(()),
            // The WebDriver endpoint itself is gone (chromedriver died): the browser failed,
            // not the page, and a fresh one is what helps.
            Ok(Err(e)) if webdriver_gone(&e) => Err(EnvError::from_cmd(&doing, e)),
            Ok(Err(e)) => Err(page_load(EnvError::from_cmd(&doing, e))),
            Err(e) => Err(page_load(e)),
        }
    }
}

/// Whether a WebDriver command failed because the endpoint could not be reached or
/// the connection to it was lost (as opposed to an answer refusing the command).
fn webdriver_gone(e: &fantoccini::error::CmdError) -> bool {
    use fantoccini::error::CmdError::{Failed, FailedC, Lost};
    matches!(e, Failed(_) | FailedC(_) | Lost(_))
}

#[async_trait]
impl Page for Browser {
    async fn goto(&self, url: &str) -> Result<(), EnvError> {
        Browser::goto(self, url).await
    }
    async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, EnvError> {
        Browser::execute(self, script, args).await
    }
    async fn clear_site_data(&self, url: &str) -> Result<(), EnvError> {
        Browser::clear_site_data(self, url).await.map(|_| ())
    }
}

/// How a site's stored state was cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearedBy {
    /// Chrome DevTools (`Storage.clearDataForOrigin`, `Network.clearBrowserCookies`), over the
    /// direct channel or chromedriver's `goog/cdp/execute`.
    DevTools,
    /// Scripts in a page of the origin and WebDriver's cookie deletion (endpoints without
    /// DevTools): covers cookies, localStorage, sessionStorage and IndexedDB.
    Scripts,
    /// The URL has no origin to clear (`data:`, `about:`).
    Nothing,
}

/// The storage types DevTools clears: everything a page script can write. (`all` adds
/// caches no page reads, such as the shader cache, and measured 4x slower: 11 vs 3 ms.)
const PAGE_STORAGE: &str = "cookies,local_storage,indexeddb,cache_storage,service_workers,\
                            file_systems,websql,shared_storage,storage_buckets";

/// The origin (`scheme://host:port`) of `url` as DevTools names it; `file://` for files.
pub fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    match u.origin() {
        o @ url::Origin::Tuple(..) => Some(o.ascii_serialization()),
        url::Origin::Opaque(_) if u.scheme() == "file" => Some("file://".into()),
        url::Origin::Opaque(_) => None,
    }
}

impl Browser {
    /// Delete what pages of `url`'s origin stored, leaving the browser on `about:blank`
    /// (DevTools) or on `url` (scripts, where the endpoint forwards no DevTools commands).
    ///
    /// Cost, measured on the stateful test page (2 cores, 40 interleaved resets, medians):
    /// `GuiEnv::reset` 33 ms keeping the state, 47 ms with this (35.6 ms clearing without
    /// leaving the page, which an unload handler could write into again; 54 ms leaving it
    /// through WebDriver). A fresh browser context per episode measured +65 ms before the
    /// load (creating it, a page in it, switching the WebDriver session); scripts +59 ms.
    pub async fn clear_site_data(&self, url: &str) -> Result<ClearedBy, EnvError> {
        let Some(origin) = origin_of(url) else { return Ok(ClearedBy::Nothing) };
        // Leave the old page first: its unload handlers may still write. DevTools'
        // navigation returns at commit; through WebDriver, which waits for the blank
        // page's load, a reset measured 11 ms slower.
        let by_devtools = async {
            self.cdp_call("Page.navigate", json!({ "url": "about:blank" })).await?;
            let params = json!({ "origin": origin, "storageTypes": PAGE_STORAGE });
            self.cdp_call("Storage.clearDataForOrigin", params).await?;
            // Cookies of other origins too (a parent domain's, third parties').
            self.cdp_call("Network.clearBrowserCookies", json!({})).await
        };
        match by_devtools.await {
            Ok(_) => Ok(ClearedBy::DevTools),
            Err(e) => {
                tracing::debug!("clearing {origin} over DevTools failed ({e}); using scripts");
                self.clear_site_data_with_scripts(url).await?;
                Ok(ClearedBy::Scripts)
            }
        }
    }

    /// A DevTools command to the page, over the direct channel or chromedriver's
    /// `goog/cdp/execute`; an error where neither works.
    async fn cdp_call(&self, method: &'static str, params: Value) -> Result<Value, EnvError> {
        if let Some(dt) = &self.devtools {
            return dt
                .call(method, params, self.limit())
                .await
                .map_err(|e| EnvError::Browser(format!("{method}: {e}")));
        }
        if !self.cdp.load(Ordering::Relaxed) {
            return Err(EnvError::Browser("the endpoint does not forward DevTools commands".into()));
        }
        self.guard(method, self.client.issue_cmd(CdpCommand { cmd: method, params })).await
    }

    /// [`Browser::clear_site_data`] without DevTools: load `url` (a page of the origin
    /// is needed to reach its storage; its scripts see the old state, which is why this
    /// is the fallback), clear the origin's storage with scripts and its cookies over
    /// WebDriver. Leaves that page loaded: load it again to start from a clean state.
    pub async fn clear_site_data_with_scripts(&self, url: &str) -> Result<(), EnvError> {
        Browser::goto(self, url).await?;
        self.guard("deleting cookies", self.client.delete_all_cookies()).await?;
        // WebDriver's script call waits for the returned promise.
        let js = "try { localStorage.clear(); } catch (e) {} \
                  try { sessionStorage.clear(); } catch (e) {} \
                  if (!window.indexedDB || !indexedDB.databases) return null; \
                  return indexedDB.databases().then(function (dbs) { \
                    return Promise.all(dbs.map(function (db) { return new Promise(function (done) { \
                      var r = indexedDB.deleteDatabase(db.name); \
                      r.onsuccess = r.onerror = r.onblocked = function () { done(null); }; \
                    }); })); \
                  }).then(function () { return null; });";
        self.execute_webdriver(js, vec![]).await?;
        Ok(())
    }
}
