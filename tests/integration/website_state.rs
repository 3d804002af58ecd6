//! Website tasks start every episode from a clean browser state (`fresh_state`, on by
//! default): what the previous episode's page stored (cookies, localStorage,
//! sessionStorage, IndexedDB) is gone before the start page's scripts run, over DevTools,
//! over chromedriver's DevTools forwarding (`--no-devtools`) and with scripts alone.

use crate::common;

use common::{env_with, repo};
use guirl::env::browser::ClearedBy;
use guirl::env::gui_env::eval;
use guirl::env::{Browser, BrowserConfig, EnvConfig, GuiEnv};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SPEC: &str = "fixtures/tasks/stateful.toml";
const NOTHING: fn() -> Value = || json!({ "local": null, "session": null, "cookie": null, "idb": null });

/// What the stateful page found stored when it loaded (it stores a new visit meanwhile).
async fn seen(env: &GuiEnv) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = eval(env, "return window.stateDone === true ? window.stateSeen : null;").await.unwrap();
        if !v.is_null() {
            return v;
        }
        assert!(Instant::now() < deadline, "the stateful page never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stateful spec with `fresh_state = false`, written next to a temp dir.
fn keeping_spec(dir: &tempfile::TempDir) -> String {
    let text = std::fs::read_to_string(repo(SPEC)).unwrap();
    let path = dir.path().join("keep.toml");
    std::fs::write(&path, format!("fresh_state = false\n{text}")).unwrap();
    path.display().to_string()
}

async fn clean_then_kept(browser: BrowserConfig) {
    let mut env = env_with(repo(SPEC).to_str().unwrap(), EnvConfig { browser, ..Default::default() });
    env.reset(0).await.unwrap();
    assert_eq!(seen(&env).await, NOTHING());
    // The same browser: the first episode's visit must not show in the second.
    let (_, info) = env.reset(1).await.unwrap();
    assert!(!info.browser_started);
    assert_eq!(seen(&env).await, NOTHING(), "the previous episode's state leaked");

    // fresh_state = false keeps it: every storage shows the second episode's visit.
    let dir = tempfile::tempdir().unwrap();
    env.set_task(guirl::tasks::load_task(&keeping_spec(&dir)).unwrap());
    env.reset(2).await.unwrap();
    let kept = seen(&env).await;
    for key in ["local", "session", "cookie", "idb"] {
        assert!(kept[key].is_string(), "{key} not kept: {kept}");
    }
    env.close().await;
}

#[tokio::test]
async fn each_episode_starts_clean_unless_fresh_state_is_false() {
    clean_then_kept(BrowserConfig::default()).await;
}

#[tokio::test]
async fn fresh_state_without_the_devtools_channel() {
    clean_then_kept(BrowserConfig::default().with_devtools(false)).await;
}

/// What the stateful page at the browser's current URL found stored when it loaded.
async fn seen_by(browser: &Browser) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let js = "return window.stateDone === true ? window.stateSeen : null;";
        let v = browser.execute(js, vec![]).await.unwrap();
        if !v.is_null() {
            return v;
        }
        assert!(Instant::now() < deadline, "the stateful page never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn devtools_or_scripts_clear_a_sites_state() {
    let url = format!("{}/fixtures/pages/stateful.html", guirl::tasks::server::base_url().unwrap());
    // The direct DevTools channel, chromedriver's DevTools forwarding, and scripts alone
    // (the fallback for endpoints that forward no DevTools commands).
    for (devtools, scripts) in [(true, false), (false, false), (false, true)] {
        let cfg = BrowserConfig::default().with_devtools(devtools);
        let browser = Browser::launch(&cfg, 200, 100).await.unwrap();
        browser.goto(&url).await.unwrap();
        seen_by(&browser).await;
        browser.goto(&url).await.unwrap();
        let stored = seen_by(&browser).await;
        assert!(["local", "session", "cookie", "idb"].iter().all(|k| stored[*k].is_string()), "{stored}");
        if scripts {
            browser.clear_site_data_with_scripts(&url).await.unwrap();
        } else {
            assert_eq!(browser.clear_site_data(&url).await.unwrap(), ClearedBy::DevTools);
        }
        browser.goto(&url).await.unwrap();
        assert_eq!(seen_by(&browser).await, NOTHING(), "devtools {devtools}, scripts {scripts}");
        browser.close().await;
    }
}
