//! Each action kind's effect on a real page in headless Chromium, and the frame contract.

use crate::common;

use common::{env_for, repo};
use guirl::env::gui_env::eval;
use guirl::env::{BrowserConfig, EnvConfig, EpisodeStatus, GuiAction, GuiEnv, Pointer, ScreenState};
use serde_json::Value;

fn actions_env() -> GuiEnv {
    env_for(repo("fixtures/tasks/actions.toml").to_str().unwrap())
}

fn center(obs: &ScreenState, id: &str) -> (i32, i32) {
    obs.elements
        .iter()
        .find(|e| e.id == id)
        .unwrap_or_else(|| panic!("no element #{id} in {:?}", obs.elements))
        .bbox
        .center()
}

async fn log(env: &GuiEnv) -> Vec<Value> {
    eval(env, "return window.log;").await.unwrap().as_array().unwrap().clone()
}

async fn act(env: &mut GuiEnv, a: &str) -> guirl::env::StepOutcome {
    let out = env.step(&GuiAction::parse(a).unwrap()).await.unwrap();
    assert_eq!(out.info.action_error, None, "{a}");
    out
}

#[tokio::test]
async fn pointer_actions_hit_what_is_drawn_there() {
    let mut env = actions_env();
    let (obs, _) = env.reset(0).await.unwrap();
    assert_eq!((obs.frame.width, obs.frame.height), (320, 240));
    assert_eq!((obs.screenshot.width(), obs.screenshot.height()), (320, 240));
    // The blue square is drawn at (260..300, 20..60): the screenshot shows it there.
    let px = obs.screenshot.get_pixel(280, 40).0;
    assert!(px[2] > 200 && px[0] < 80, "expected blue at (280, 40), got {px:?}");

    let (x, y) = center(&obs, "b12");
    act(&mut env, &format!("click({x}, {y})")).await;
    let l = log(&env).await;
    let click = l.iter().rev().find(|e| e["type"] == "click").expect("a click event");
    assert_eq!(click["id"], "b12");
    assert_eq!((click["x"].as_i64().unwrap(), click["y"].as_i64().unwrap()), (x as i64, y as i64));

    let (x, y) = center(&obs, "b03");
    act(&mut env, &format!("double_click({x}, {y})")).await;
    act(&mut env, &format!("right_click({x}, {y})")).await;
    let (hx, hy) = center(&obs, "b10");
    act(&mut env, &format!("hover({hx}, {hy})")).await;
    let l = log(&env).await;
    assert!(l.iter().any(|e| e["type"] == "dblclick" && e["id"] == "b03"), "{l:?}");
    assert!(l.iter().any(|e| e["type"] == "contextmenu" && e["id"] == "b03"), "{l:?}");
    assert_eq!(l.last().unwrap()["type"], "mouseover");
    assert_eq!(l.last().unwrap()["id"], "b10");
    env.close().await;
}

/// The pointer's hover as a person with a mouse sees it: a native button under it is drawn
/// in its hover state, and the page's media queries say there is a mouse. Headless
/// Chromium by itself reports no pointer and draws neither (how sets before trajectory
/// format 3 were recorded, and replayed).
#[tokio::test]
async fn a_button_under_the_pointer_is_drawn_hovered_as_with_a_mouse() {
    for pointer in [Pointer::Mouse, Pointer::Unset] {
        let cfg =
            EnvConfig { browser: BrowserConfig { pointer, ..Default::default() }, ..Default::default() };
        let mut env = common::env_with(repo("fixtures/tasks/actions.toml").to_str().unwrap(), cfg);
        let (obs, _) = env.reset(0).await.unwrap();
        let b = obs.elements.iter().find(|e| e.id == "hang").unwrap().bbox;
        let (x, y) = b.center();
        // a point of the button's face, clear of its label
        let face = ((b.x + 4.0) as u32, (b.y + 4.0) as u32);
        let out = act(&mut env, &format!("hover({x}, {y})")).await;
        let (before, after) =
            (obs.screenshot.get_pixel(face.0, face.1).0, out.obs.screenshot.get_pixel(face.0, face.1).0);
        let media = eval(
            &env,
            "return [matchMedia('(hover: hover)').matches, matchMedia('(pointer: fine)').matches];",
        )
        .await
        .unwrap();
        let mouse = pointer == Pointer::Mouse;
        assert_eq!(media, serde_json::json!([mouse, mouse]), "{pointer:?}");
        assert_eq!(
            before != after,
            mouse,
            "{pointer:?}: the button's face {before:?} at rest, {after:?} under the pointer"
        );
        env.close().await;
    }
}

#[tokio::test]
async fn typing_and_keys_reach_the_page() {
    let mut env = actions_env();
    let (obs, _) = env.reset(0).await.unwrap();
    let (x, y) = center(&obs, "text");
    let out = act(&mut env, &format!("click({x}, {y})")).await;
    assert!(out.obs.elements.iter().any(|e| e.id == "text" && e.focused));
    let out = act(&mut env, r#"type("Hi \"you\"")"#).await;
    let input = out.obs.elements.iter().find(|e| e.id == "text").unwrap();
    assert_eq!(input.value, "Hi \"you\"");
    act(&mut env, "key(ctrl+a)").await;
    let out = act(&mut env, "key(Backspace)").await;
    assert_eq!(out.obs.elements.iter().find(|e| e.id == "text").unwrap().value, "");
    act(&mut env, "key(Enter)").await;
    let l = log(&env).await;
    assert!(l.iter().any(|e| e["type"] == "keydown" && e["key"] == "a" && e["ctrl"] == true), "{l:?}");
    assert!(l.iter().any(|e| e["type"] == "keydown" && e["key"] == "Enter"), "{l:?}");
    env.close().await;
}

#[tokio::test]
async fn scroll_and_drag_move_things() {
    let mut env = actions_env();
    let (obs, _) = env.reset(0).await.unwrap();
    assert!(obs.previous_screenshot.is_none(), "the first step has no previous frame");
    let before = obs.elements.iter().find(|e| e.id == "hang").unwrap().bbox;
    assert!(obs.elements.iter().any(|e| e.id == "text"));
    let out = act(&mut env, "scroll(100, 100, 0, 150)").await;
    assert_eq!(out.obs.frame.scroll_y, 150, "scroll offset is reported in the frame");
    // The previous frame is the screenshot the scroll acted on, and the page moved since.
    assert_eq!(out.obs.previous_screenshot.as_ref(), Some(&obs.screenshot));
    assert_ne!(out.obs.screenshot, obs.screenshot);
    let after = out.obs.elements.iter().find(|e| e.id == "hang").unwrap().bbox;
    assert_eq!(after.y, before.y - 150.0, "element boxes follow the scroll");
    assert!(!out.obs.elements.iter().any(|e| e.id == "text"), "the field scrolled out of view is not listed");
    act(&mut env, "scroll(100, 100, 0, -150)").await;
    // A key scroll is done when the step returns (no smooth-scroll animation left to run,
    // which would make the next frame depend on timing and replays diverge).
    act(&mut env, "click(300, 230)").await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(act(&mut env, "key(ArrowDown)").await.obs.frame.scroll_y);
    }
    let scrolled = eval(&env, "return window.scrollY;").await.unwrap();
    assert_eq!(serde_json::json!(seen[2]), scrolled, "the frame shows where the page ended up: {seen:?}");
    assert!(seen[0] > 0 && seen[1] == 2 * seen[0] && seen[2] == 3 * seen[0], "{seen:?}");
    act(&mut env, "scroll(100, 100, 0, -2000)").await;

    // The red box is drawn at (200..230, 120..150); it is not interactive, so not listed.
    let px = obs.screenshot.get_pixel(215, 135).0;
    assert!(px[0] > 150 && px[1] < 100, "expected red at (215, 135), got {px:?}");
    let out = act(&mut env, "drag(215, 135, 265, 175)").await;
    let pos = eval(&env, "var d = document.getElementById('drag'); return [d.offsetLeft, d.offsetTop];")
        .await
        .unwrap();
    assert_eq!(pos, serde_json::json!([250, 160]), "drag moved the box by (50, 40)");
    let px = out.obs.screenshot.get_pixel(265, 175).0;
    assert!(px[0] > 150 && px[1] < 100, "the screenshot shows the box at its new place, got {px:?}");
    env.close().await;
}

#[tokio::test]
async fn bad_actions_are_steps_with_an_error_not_crashes() {
    let mut env = actions_env();
    env.reset(0).await.unwrap();
    let out = env.step(&GuiAction::Click { x: 400, y: 10 }).await.unwrap();
    let err = out.info.action_error.expect("outside the screenshot is an error");
    assert!(err.contains("outside the 320x240 screenshot"), "{err}");
    assert_eq!(out.info.status, EpisodeStatus::Running);
    assert_eq!(out.obs.step, 1, "a bad action still counts as a step");

    let out = env.step(&GuiAction::Type { text: "x".into() }).await.unwrap();
    assert!(out.info.action_error.unwrap().contains("nothing has keyboard focus"));

    let out = env.step_text("click(10, ").await.unwrap();
    let err = out.info.action_error.unwrap();
    assert!(err.contains("position 10") && err.contains("expected an integer"), "{err}");
    assert_eq!(out.obs.step, 3);
    // The episode's memory: the actions taken, executable or not; malformed text is none.
    assert_eq!(out.obs.history, ["click(400, 10)", "type(\"x\")"]);
    let (obs, _) = env.reset(1).await.unwrap();
    assert!(obs.history.is_empty(), "a reset starts a new memory");
    env.close().await;
}

#[tokio::test]
async fn strict_mode_ends_the_episode_on_an_invalid_action() {
    let cfg = guirl::env::EnvConfig {
        rules: guirl::env::EpisodeRules { strict_actions: true, ..Default::default() },
        ..Default::default()
    };
    let mut env = common::env_with(repo("fixtures/tasks/actions.toml").to_str().unwrap(), cfg);
    env.reset(0).await.unwrap();
    let out = env.step(&GuiAction::Click { x: -1, y: 10 }).await.unwrap();
    assert!(out.terminated);
    assert_eq!(out.info.status, EpisodeStatus::InvalidAction);
    env.close().await;
}

#[tokio::test]
async fn success_check_and_step_limit() {
    let mut env = actions_env();
    let (obs, _) = env.reset(3).await.unwrap();
    // "Press button R,C": find it by its text.
    let target = obs.instruction.trim_start_matches("Press button ").to_string();
    let (x, y) = obs.find_text(&target).next().expect("target button").bbox.center();
    let out = act(&mut env, &format!("click({x}, {y})")).await;
    assert!(out.terminated);
    assert_eq!(out.info.status, EpisodeStatus::Success);
    assert_eq!(out.reward, 1.0);
    assert!(env.step(&GuiAction::Wait { ms: 1 }).await.is_err(), "no steps after the end");

    let cfg = guirl::env::EnvConfig { max_steps: Some(2), ..Default::default() };
    let mut env2 = common::env_with(repo("fixtures/tasks/actions.toml").to_str().unwrap(), cfg);
    env2.reset(3).await.unwrap();
    assert!(!env2.step(&GuiAction::Wait { ms: 1 }).await.unwrap().truncated);
    let out = env2.step(&GuiAction::Wait { ms: 1 }).await.unwrap();
    assert!(out.truncated && !out.terminated);
    assert_eq!(out.info.status, EpisodeStatus::Truncated);
    env.close().await;
    env2.close().await;
}
