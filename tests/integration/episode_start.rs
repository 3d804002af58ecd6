//! Every episode starts as it would in a fresh browser, whatever the one before did:
//! nothing keeps the keyboard focus and the pointer rests where a new page has it. Without
//! this the same seed and the same actions could score differently (MiniWoB++'s
//! login-user: a button still focused from the last episode answered a first
//! `key(Enter)`), and `guirl replay` of a set recorded with more than one browser failed
//! on its own episodes.

use crate::common;

use common::env_for;
use guirl::env::gui_env::eval;
use guirl::env::{GuiAction, GuiEnv, ScreenState};

/// The elements under the pointer and the focused one.
const POINTER_AND_FOCUS: &str =
    "return [Array.from(document.querySelectorAll(':hover')).map(e => e.tagName + '#' + e.id), \
     document.activeElement && document.activeElement.tagName];";

/// The first screen of `seed` and what is under the pointer and focused then.
async fn start(env: &mut GuiEnv, seed: u64) -> (ScreenState, serde_json::Value) {
    let s = env.reset(seed).await.unwrap().0;
    (s, eval(env, POINTER_AND_FOCUS).await.unwrap())
}

#[tokio::test]
async fn a_miniwob_episode_starts_as_in_a_fresh_browser() {
    // enter-text keeps its text field across episodes, in the same place.
    let task = "miniwob/enter-text";
    let mut fresh = env_for(task);
    let (first, first_state) = start(&mut fresh, 5).await;
    fresh.close().await;

    // The last episode clicked into the field: focused, under the pointer.
    let mut used = env_for(task);
    let s = used.reset(6).await.unwrap().0;
    let field = s.elements.iter().find(|e| e.tag == "input").expect("enter-text has a field");
    let (x, y) = field.bbox.center();
    used.step(&GuiAction::Click { x, y }).await.unwrap();
    assert!(eval(&used, POINTER_AND_FOCUS).await.unwrap().to_string().contains("INPUT#tt"));
    let (later, later_state) = start(&mut used, 5).await;
    used.close().await;

    assert_eq!(later_state, first_state, "under the pointer and focused, against a fresh browser's");
    assert!(later.elements.iter().all(|e| !e.focused), "an element kept the focus: {:?}", later.elements);
    assert_eq!(first.instruction, later.instruction);
    assert_eq!(
        serde_json::to_value(&first.elements).unwrap(),
        serde_json::to_value(&later.elements).unwrap(),
        "the elements differ from a fresh browser's"
    );
    assert!(
        first.screenshot.as_raw() == later.screenshot.as_raw(),
        "the first screen differs from a fresh browser's"
    );
}

/// The share of a screenshot's pixels in MiniWoB++'s START cover colour (#111).
fn cover_share(s: &ScreenState) -> f64 {
    let dark = s.screenshot.pixels().filter(|p| p.0 == [0x11, 0x11, 0x11]).count();
    dark as f64 / (s.screenshot.width() * s.screenshot.height()) as f64
}

#[tokio::test]
async fn a_finished_miniwob_episode_shows_its_page_not_the_next_start_cover() {
    // MiniWoB++ puts its START cover up for the next episode as soon as one ends: the last
    // screen (the viewer's final frame) showed that cover, not what the episode did.
    let mut env = env_for("miniwob/click-test");
    let s = env.reset(3).await.unwrap().0;
    assert!(cover_share(&s) < 0.2, "the first screen is covered: {}", cover_share(&s));
    let button = s.elements.iter().find(|e| e.tag == "button").expect("click-test has its button");
    let (x, y) = button.bbox.center();
    let end = env.step(&GuiAction::Click { x, y }).await.unwrap();
    assert!(end.terminated && end.reward > 0.0, "{:?}", end.info);
    assert!(cover_share(&end.obs) < 0.2, "the last screen shows the START cover: {}", cover_share(&end.obs));
    assert!(end.obs.elements.iter().any(|e| e.tag == "button"), "the page as the episode left it");
    // the next episode starts as before
    let next = env.reset(4).await.unwrap().0;
    assert!(cover_share(&next) < 0.2 && next.elements.iter().any(|e| e.tag == "button"));
    env.close().await;
}
