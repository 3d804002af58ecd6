//! A website spec's `[success]` checks mean what they say, in a real headless Chromium:
//! `js` passes on `true` or a number at its threshold only (a truthy string, an object or
//! a Promise never passes), `element_text` reads the text a person sees (a hidden element's
//! text is none; a field's is its value), a number is no reward when another check fails,
//! and variables reach scripts as `vars` whatever they hold.

use crate::common::env_for;
use guirl::env::gui_env::eval;
use guirl::env::{EpisodeStatus, GuiAction, GuiEnv, StepInfo};

/// The page the checks read: a hidden thank-you line, a visible one, a filled field.
const SETUP: &str = "document.body.insertAdjacentHTML('beforeend', \
    '<div id=hidden style=display:none>Thanks, hidden</div><div id=shown>Thanks, shown</div>\
     <div id=faint style=opacity:0>Thanks, faint</div><input id=name value=Bob>');";

/// An env for a spec on the fixture page, with `setup` as its `setup_js`.
fn spec_with(dir: &std::path::Path, name: &str, setup: &str, success: &str, extra: &str) -> GuiEnv {
    let path = dir.join(name);
    let text = format!(
        "start_url = \"/fixtures/pages/two-buttons.html\"\ninstruction = \"Wait\"\nsetup_js = {setup:?}\n\
         {extra}\n[success]\n{success}\n"
    );
    std::fs::write(&path, text).unwrap();
    env_for(path.to_str().unwrap())
}

fn spec(dir: &std::path::Path, name: &str, success: &str, extra: &str) -> GuiEnv {
    spec_with(dir, name, SETUP, success, extra)
}

async fn wait(env: &mut GuiEnv) -> StepInfo {
    env.step(&GuiAction::parse("wait(10)").unwrap()).await.unwrap().info
}

#[tokio::test]
async fn a_check_passes_on_true_or_a_number_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = spec(dir.path(), "answer.toml", "js = \"window.answer\"", "");
    env.reset(0).await.unwrap();
    for (answer, passes) in [
        ("'false'", false),
        ("'1'", false),
        ("[]", false),
        ("({})", false),
        ("Promise.resolve(true)", false),
        ("NaN", false),
        ("null", false),
        ("false", false),
        ("0.5", false),
        ("true", true),
        ("1", true),
    ] {
        eval(&env, &format!("window.answer = {answer};")).await.unwrap();
        let info = wait(&mut env).await;
        let status = if passes { EpisodeStatus::Success } else { EpisodeStatus::Running };
        assert_eq!(info.status, status, "js gave {answer}: {info:?}");
        assert_eq!(info.raw_reward, passes as u8 as f64, "js gave {answer}: {info:?}");
        if passes {
            env.reset(0).await.unwrap();
        }
    }
    env.close().await;
}

#[tokio::test]
async fn element_text_is_the_text_a_person_sees() {
    let dir = tempfile::tempdir().unwrap();
    for (selector, contains, passes) in [
        ("#hidden", "Thanks", false),
        ("#faint", "Thanks", false),
        ("#shown", "Thanks", true),
        ("#name", "Bob", true),
        ("#nothing", "", false),
    ] {
        let check = format!("element_text = {{ selector = {selector:?}, contains = {contains:?} }}");
        let mut env = spec(dir.path(), "text.toml", &check, "");
        env.reset(0).await.unwrap();
        let info = wait(&mut env).await;
        let status = if passes { EpisodeStatus::Success } else { EpisodeStatus::Running };
        assert_eq!(info.status, status, "{selector} contains {contains:?}: {info:?}");
        env.close().await;
    }
}

/// A number from `js` is the reward only when every other check passes: here `js` pays 1
/// while the element check fails, and `done()` ends the episode a failure paid 0 (it was
/// paid 1); a penalty below 0 stays.
#[tokio::test]
async fn a_failed_episode_is_not_paid_the_scripts_number() {
    let dir = tempfile::tempdir().unwrap();
    for (js, reward) in [("1", 0.0), ("-0.5", -0.5)] {
        let check =
            format!("js = {js:?}\nelement_text = {{ selector = \"#hidden\", contains = \"Thanks\" }}\nend_on_success = false");
        let mut env = spec(dir.path(), "mixed.toml", &check, "");
        env.reset(0).await.unwrap();
        let out = env.step(&GuiAction::parse("done()").unwrap()).await.unwrap();
        assert_eq!(out.info.status, EpisodeStatus::Fail, "{:?}", out.info);
        assert_eq!(out.info.raw_reward, reward, "js {js}: {:?}", out.info);
        env.close().await;
    }
}

/// Variables reach `setup_js` and `success.js` as `vars`, whatever they hold; one spliced
/// as `'{name}'` whose value holds a quote breaks the script, and the reset says where.
#[tokio::test]
async fn variables_reach_scripts_as_vars() {
    let dir = tempfile::tempdir().unwrap();
    let vars = "[variables]\nname = [\"O'Brien \\\"Bob\\\"\"]";
    let (setup, check) = ("document.title = vars.name;", "js = \"document.title === vars.name\"");
    let mut env = spec_with(dir.path(), "vars.toml", setup, check, vars);
    env.reset(0).await.unwrap();
    assert_eq!(wait(&mut env).await.status, EpisodeStatus::Success);
    env.close().await;

    let mut env = spec(dir.path(), "spliced.toml", "js = \"'{name}' === 'x'\"", vars);
    let e = env.reset(0).await.unwrap_err().to_string();
    assert!(e.contains("does not parse") && e.contains("success.js") && e.contains("vars.name"), "{e}");
    env.close().await;
}
