//! Page time under guirl's control (bit-exact, whatever the timing): with
//! virtual page time a page's timers, `Date.now()` and CSS animations move on by a fixed
//! budget per step, so a slow policy sees exactly what a fast one sees; on the wall clock
//! it does not.

use crate::common;

use common::{env_with, repo};
use guirl::env::{EnvConfig, EpisodeRules, GuiAction, GuiEnv, ScreenState};
use std::time::Duration;

/// Reset to seed 0 and click the button `steps` times, sleeping `think` before each click
/// (the policy's answer time); the observations, the reset's first.
async fn episode(env: &mut GuiEnv, steps: usize, think: Duration) -> Vec<ScreenState> {
    let (obs, _) = env.reset(0).await.unwrap();
    let mut seen = vec![obs];
    for _ in 0..steps {
        tokio::time::sleep(think).await;
        let last = seen.last().unwrap();
        let (x, y) = last.elements.iter().find(|e| e.id == "b").expect("the button").bbox.center();
        let out = env.step(&GuiAction::Click { x, y }).await.unwrap();
        assert!(out.info.env_error.is_none(), "{:?}", out.info);
        seen.push(out.obs);
    }
    seen
}

fn text(obs: &ScreenState, id: &str) -> String {
    obs.elements.iter().find(|e| e.id == id).map(|e| e.text.clone()).unwrap_or_default()
}

/// A fast and a slow policy, each in a fresh browser.
async fn fast_and_slow(virtual_time_ms: Option<u32>) -> (Vec<ScreenState>, Vec<ScreenState>, bool) {
    let task = repo("fixtures/tasks/ticker.toml");
    let mut runs = Vec::new();
    let mut clocked = true;
    for think in [Duration::ZERO, Duration::from_millis(300)] {
        let mut env = env_with(
            task.to_str().unwrap(),
            EnvConfig { rules: EpisodeRules { virtual_time_ms, ..Default::default() }, ..Default::default() },
        );
        runs.push(episode(&mut env, 5, think).await);
        clocked &= env.uses_page_clock();
        env.close().await;
    }
    let slow = runs.pop().unwrap();
    (runs.pop().unwrap(), slow, clocked)
}

#[tokio::test]
async fn with_virtual_page_time_a_slow_policy_sees_what_a_fast_one_sees() {
    let (fast, slow, clocked) = fast_and_slow(Some(100)).await;
    assert!(clocked, "a browser without begin-frame control refuses page time (below)");
    for (a, b) in fast.iter().zip(&slow) {
        assert_eq!(a.elements, b.elements, "step {}", a.step);
        assert!(a.screenshot == b.screenshot, "step {}: the screenshots differ", a.step);
    }
    // The page did run: its load got one budget of 100 ms and the reset another, and each
    // step's 100 ms is two ticks of its 50 ms timer; its clock starts at 2024-01-01
    // 00:00:00 UTC in every browser.
    let ticks: Vec<String> = fast.iter().map(|o| text(o, "ticks")).collect();
    assert_eq!(ticks.first().unwrap(), "ticks 4", "{ticks:?}");
    assert_eq!(ticks.last().unwrap(), "ticks 14", "{ticks:?}");
    assert!(text(&fast[0], "iso").starts_with("2024-01-01T00:00:0"), "{}", text(&fast[0], "iso"));
    assert_ne!(fast[0].screenshot, fast[1].screenshot);
}

#[tokio::test]
async fn on_the_wall_clock_a_slow_policy_sees_another_page() {
    let (fast, slow, _) = fast_and_slow(None).await;
    // 300 ms of thinking is six ticks of the page's timer before each action.
    let differ = fast.iter().zip(&slow).filter(|(a, b)| a.screenshot != b.screenshot).count();
    assert!(differ >= 4, "only {differ} of {} screenshots differ", fast.len());
    assert_ne!(text(fast.last().unwrap(), "ticks"), text(slow.last().unwrap(), "ticks"));
}

#[tokio::test]
async fn miniwob_time_limit_counts_page_time_not_thinking_time() {
    // A 1 s episode limit at 100 ms of page time a step ends after the same number of
    // steps whatever the policy's pace (on the wall clock the slow one would time out at
    // its fourth step); the countdown in the screenshots matches too.
    let mut runs = Vec::new();
    for think in [Duration::ZERO, Duration::from_millis(300)] {
        let cfg = EnvConfig {
            rules: EpisodeRules { wall_clock_ms: Some(1000), ..Default::default() },
            max_steps: Some(20),
            ..Default::default()
        };
        let mut env = env_with("miniwob/click-test", cfg);
        let (obs, _) = env.reset(4).await.unwrap();
        let mut shots = vec![obs.screenshot];
        let mut end = None;
        for _ in 0..20 {
            tokio::time::sleep(think).await;
            let out = env.step(&GuiAction::Wait { ms: 0 }).await.unwrap();
            shots.push(out.obs.screenshot);
            if out.terminated || out.truncated {
                end = Some((out.obs.step, out.info.status, out.info.reason));
                break;
            }
        }
        if !env.uses_page_clock() {
            eprintln!("skipped: this browser runs without begin-frame control");
            return;
        }
        env.close().await;
        runs.push((end, shots));
    }
    let (end, shots) = &runs[0];
    let (step, _, reason) = end.clone().expect("the episode timed out");
    assert!((9..=10).contains(&step), "ended at step {step}");
    assert_eq!(reason.as_deref(), Some("timed out"));
    assert_eq!(end, &runs[1].0, "fast and slow policies end alike");
    assert!(shots == &runs[1].1, "fast and slow policies see the same countdown");
}

#[tokio::test]
async fn page_time_on_a_browser_without_frame_control_is_refused() {
    // (GUIRL_FRAME_CONTROL=0 does this; so does a Chromium that is not the headless shell)
    let mut cfg = EnvConfig {
        rules: EpisodeRules { virtual_time_ms: Some(100), ..Default::default() },
        ..Default::default()
    };
    cfg.browser.frame_control = false;
    let mut env = env_with(repo("fixtures/tasks/ticker.toml").to_str().unwrap(), cfg);
    let e = env.reset(0).await.expect_err("no page time without frame control").to_string();
    env.close().await;
    assert!(e.contains("needs begin-frame control") && e.contains("wall clock"), "{e}");
}
