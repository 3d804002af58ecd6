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
