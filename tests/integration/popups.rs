//! Native popups in real headless Chromium, on both input paths: a `<select>`'s list is
//! drawn in the page and chosen from by mouse or keyboard, a date field's picker button
//! does not open a picker nobody can see, and `alert` / `confirm` are accepted; no step
//! hangs or ends in `env_error`.

use crate::common;

use common::{env_with, repo};
use guirl::env::browser::BrowserConfig;
use guirl::env::gui_env::eval;
use guirl::env::{EnvConfig, EpisodeStatus, GuiAction, GuiEnv, InputPath, ScreenState, StepOutcome};

async fn act(env: &mut GuiEnv, a: &str) -> StepOutcome {
    let out = env.step(&GuiAction::parse(a).unwrap()).await.unwrap();
    assert_eq!(out.info.env_error, None, "{a}");
    assert_eq!(out.info.action_error, None, "{a}");
    out
}

fn center(obs: &ScreenState, pick: impl Fn(&guirl::env::Element) -> bool) -> (i32, i32) {
    obs.elements
        .iter()
        .find(|e| pick(e))
        .unwrap_or_else(|| panic!("not in {:#?}", obs.elements))
        .bbox
        .center()
}

const FRUITS: [&str; 5] = ["Apple", "Banana", "Cherry", "Damson", "Elderberry"];

/// The drawn list's options on screen (its items are `div`s with an option's text).
fn options(obs: &ScreenState) -> Vec<String> {
    obs.elements
        .iter()
        .filter(|e| e.tag == "div" && FRUITS.contains(&e.text.as_str()))
        .map(|e| e.text.clone())
        .collect()
}

async fn log(env: &GuiEnv) -> Vec<String> {
    serde_json::from_value(eval(env, "return window.log;").await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_popups_are_operated_and_never_hang_a_step() {
    let fruits = FRUITS;
    for path in [InputPath::DevTools, InputPath::WebDriver] {
        let browser = BrowserConfig::default().with_input(path);
        let task = repo("fixtures/tasks/popups.toml");
        let mut env = env_with(task.to_str().unwrap(), EnvConfig { browser, ..Default::default() });

        // The mouse: a click on the select shows its list in the frame, a click on an
        // option chooses it (one change event) and closes the list.
        let (obs, _) = env.reset(0).await.unwrap();
        let target = obs.instruction.trim_start_matches("Choose ").to_string();
        let select = center(&obs, |e| e.id == "pick");
        let out = act(&mut env, &format!("click({}, {})", select.0, select.1)).await;
        assert_eq!(options(&out.obs), fruits, "{path:?}: the list's options are on screen");
        assert!(out.obs.screenshot != obs.screenshot, "{path:?}: the list is drawn");
        let (x, y) = center(&out.obs, |e| e.tag == "div" && e.text == target);
        let out = act(&mut env, &format!("click({x}, {y})")).await;
        assert_eq!(out.info.status, EpisodeStatus::Success, "{path:?}: {target} chosen");
        assert!(options(&out.obs).is_empty(), "{path:?}: the list closed");
        assert_eq!(log(&env).await, [format!("change {target}")]);

        // The keyboard: Space opens the list on the focused select, arrows and Enter choose.
        let (obs, _) = env.reset(1).await.unwrap();
        let target = obs.instruction.trim_start_matches("Choose ").to_string();
        let at = fruits.iter().position(|f| *f == target).unwrap();
        act(&mut env, "key(Tab)").await;
        let out = act(&mut env, "key(Space)").await;
        assert_eq!(options(&out.obs), fruits, "{path:?}: Space opens the list");
        for _ in 0..at {
            act(&mut env, "key(ArrowDown)").await;
        }
        let out = act(&mut env, "key(Enter)").await;
        assert_eq!(out.info.status, EpisodeStatus::Success, "{path:?}: {target} chosen by keys");
        assert!(options(&out.obs).is_empty());

        // A date field: its picker button opens nothing; the field takes a typed date.
        let (obs, _) = env.reset(2).await.unwrap();
        let date = obs.elements.iter().find(|e| e.id == "when").unwrap().bbox;
        let (right, mid) = ((date.x + date.w) as i32 - 8, (date.y + date.h / 2.0) as i32);
        // (the pointer over the button draws its hover state: the frame to compare with)
        let hovered = act(&mut env, &format!("hover({right}, {mid})")).await;
        let out = act(&mut env, &format!("click({right}, {mid})")).await;
        assert!(out.obs.screenshot == hovered.obs.screenshot, "{path:?}: the picker button draws nothing");
        let out = act(&mut env, &format!("click({}, {mid})", date.x as i32 + 10)).await;
        act(&mut env, "type(\"05062024\")").await;
        let v = eval(&env, "return document.getElementById('when').value;").await.unwrap();
        assert_eq!(v, "2024-05-06", "{path:?}");

        // alert and confirm are accepted: the page goes on (confirm returned true).
        let (x, y) = center(&out.obs, |e| e.id == "alert");
        act(&mut env, &format!("click({x}, {y})")).await;
        let (x, y) = center(&out.obs, |e| e.id == "confirm");
        act(&mut env, &format!("click({x}, {y})")).await;
        assert_eq!(log(&env).await, ["alerted", "confirmed true"], "{path:?}");
        env.close().await;
    }
}
