//! The browser as a task's [`Page`], and clearing what a site stored in it.
//!
//! One browser serves many episodes, so what a page stores (cookies, localStorage,
//! sessionStorage, IndexedDB, Cache Storage, service workers) would carry over into the
//! next episode. Website tasks clear it for their origin before the start page loads.

use super::{Browser, CdpCommand, EnvError};
use crate::tasks::Page;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

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
    /// Chrome DevTools (`Storage.clearDataForOrigin`, `Storage.clearCookies`), over the
    /// direct channel or chromedriver's `goog/cdp/execute`.
    DevTools,
    /// Scripts in a page of the origin and WebDriver's cookie deletion (endpoints without
    /// DevTools): covers cookies, localStorage, sessionStorage and IndexedDB.
    Scripts,
}

/// The storage types DevTools clears: everything a page can write.
const ALL: &str = "all";

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
    /// (DevTools) or on `url` (scripts). A URL without an origin (`data:`) has nothing
    /// to clear.
    pub async fn clear_site_data(&self, url: &str) -> Result<ClearedBy, EnvError> {
        let Some(origin) = origin_of(url) else { return Ok(ClearedBy::DevTools) };
        // Leave the old page first: its unload handlers may still write.
        Browser::goto(self, "about:blank").await?;
        let by_devtools = async {
            self.cdp_call("Storage.clearDataForOrigin", json!({ "origin": origin, "storageTypes": ALL }))
                .await?;
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

#[cfg(test)]
mod measure {
    use super::*;
    use std::time::Instant;

    fn ms(t: Instant) -> f64 {
        t.elapsed().as_secs_f64() * 1000.0
    }

    #[tokio::test]
    #[ignore]
    async fn measure_reset_cost() {
        let cfg = crate::env::BrowserConfig::default();
        let b = Browser::launch(&cfg, 200, 100).await.unwrap();
        let url = format!("{}/fixtures/pages/stateful.html", crate::tasks::server::base_url().unwrap());
        let origin = origin_of(&url).unwrap();
        let seen = || async {
            loop {
                let v = b
                    .execute("return window.stateDone === true ? window.stateSeen : null;", vec![])
                    .await
                    .unwrap();
                if !v.is_null() {
                    break v;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        b.goto(&url).await.unwrap();
        seen().await;
        let n = 30;
        for variant in [
            "blank-webdriver+all",
            "blank-cdp+all",
            "inplace-all",
            "inplace-all-nocookiecall",
            "inplace-types",
            "none",
        ] {
            let mut times = vec![];
            let mut loads = vec![];
            let mut leaks = std::collections::BTreeSet::new();
            for _ in 0..n {
                let t = Instant::now();
                match variant {
                    "blank-webdriver+all" => {
                        Browser::goto(&b, "about:blank").await.unwrap();
                    }
                    "blank-cdp+all" => {
                        b.cdp_call("Page.navigate", json!({"url": "about:blank"})).await.unwrap();
                    }
                    _ => {}
                }
                match variant {
                    "inplace-types" => {
                        b.cdp_call("Storage.clearDataForOrigin", json!({"origin": origin, "storageTypes": "cookies,local_storage,indexeddb,cache_storage,service_workers"})).await.unwrap();
                    }
                    "none" => {}
                    _ => {
                        b.cdp_call(
                            "Storage.clearDataForOrigin",
                            json!({"origin": origin, "storageTypes": "all"}),
                        )
                        .await
                        .unwrap();
                    }
                }
                if !variant.contains("nocookiecall") && variant != "none" && variant != "inplace-types" {
                    b.cdp_call("Network.clearBrowserCookies", json!({})).await.unwrap();
                }
                times.push(ms(t));
                let t = Instant::now();
                b.goto(&url).await.unwrap();
                loads.push(ms(t));
                let v = seen().await;
                for k in ["local", "session", "cookie", "idb"] {
                    if !v[k].is_null() {
                        leaks.insert(k);
                    }
                }
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            eprintln!(
                "{variant:28} clear median {:6.2} ms, load median {:6.2} ms, leaked {:?}",
                med(&mut times),
                med(&mut loads),
                leaks
            );
        }
        drop(b);
    }
}
