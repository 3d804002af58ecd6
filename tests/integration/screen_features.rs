//! The policy's screen-word features on real pages, in a real headless Chromium: on
//! builtin/login-settings' Settings page (reached by the oracle), `row_labels` and
//! `fold_case` put the instruction's match flag on the `×` button of the row the
//! instruction names and on no other row's; without them no `×` carries a flag at all. On
//! builtin/toggle-switches, `control_state` gives every switch's token the (named,
//! checked) pair the page and the instruction say, before and after the oracle's clicks.

use crate::common;

use candle_core::Device;
use common::env_for;
use guirl::env::ScreenState;
use guirl::policy::oracle::OraclePolicy;
use guirl::policy::vlm::config::VlmConfig;
use guirl::policy::vlm::inputs::{encoder_inputs, SCREEN_WORD_SLOTS};
use guirl::policy::Policy;
use std::collections::BTreeSet;

/// The three rows' clear buttons and the phrase the instruction names each by.
const ROWS: [(&str, &str); 3] =
    [("clear-displayname", "display name"), ("clear-email", "email"), ("clear-phone", "phone number")];

/// The image token under element `id`'s centre.
fn cell_of(state: &ScreenState, id: &str, cfg: &VlmConfig) -> usize {
    let e = state.elements.iter().find(|e| e.id == id).unwrap_or_else(|| panic!("no #{id} on the page"));
    let (w, h) = state.screenshot.dimensions();
    let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
    (cy / h as f32 * cfg.grid_h() as f32) as usize * cfg.grid_w()
        + (cx / w as f32 * cfg.grid_w() as f32) as usize
}

/// Whether any word slot of the image token under element `id`'s centre is flagged as
/// one of the instruction's words.
fn flagged(state: &ScreenState, id: &str, cfg: &VlmConfig) -> bool {
    let cell = cell_of(state, id, cfg);
    let enc = encoder_inputs(std::slice::from_ref(state), cfg, &Device::Cpu).unwrap();
    let matched = enc.screen.unwrap().matched.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    matched[cell * SCREEN_WORD_SLOTS..(cell + 1) * SCREEN_WORD_SLOTS].contains(&1.0)
}

#[tokio::test]
async fn the_named_rows_clear_button_carries_the_instructions_match_flag() {
    // The policy of configs/login-settings-weak.toml (small preset, 1 024 word buckets, the
    // instruction's first 128 bytes: the field is named after byte 64).
    let on = VlmConfig {
        max_instruction_bytes: 128,
        word_buckets: 1024,
        screen_text: true,
        row_labels: true,
        fold_case: true,
        ..VlmConfig::small()
    };
    on.validate().unwrap();
    let off = VlmConfig { row_labels: false, fold_case: false, ..on.clone() };
    let mut env = env_for("builtin/login-settings");
    let mut named_seen = BTreeSet::new();
    for seed in 0..12 {
        if named_seen.len() == ROWS.len() {
            break;
        }
        let (mut state, _) = env.reset(seed).await.unwrap();
        // The oracle signs in and opens Settings; stop at the first frame with the rows.
        for _ in 0..8 {
            if state.elements.iter().any(|e| e.id == "clear-email") {
                break;
            }
            let action = OraclePolicy.act(std::slice::from_ref(&state)).unwrap().remove(0).action;
            state = env.step(&action).await.unwrap().obs;
        }
        assert!(
            state.elements.iter().any(|e| e.id == "clear-email"),
            "seed {seed}: the oracle never reached Settings"
        );
        let named =
            ROWS.iter().find(|(_, phrase)| state.instruction.contains(&format!("your {phrase} to"))).unwrap();
        named_seen.insert(named.0);
        for (id, _) in ROWS {
            assert_eq!(flagged(&state, id, &on), id == named.0, "seed {seed}, #{id}: {}", state.instruction);
            assert!(!flagged(&state, id, &off), "seed {seed}, #{id} is flagged without row labels");
        }
    }
    assert_eq!(named_seen.len(), ROWS.len(), "12 seeds did not name every row: {named_seen:?}");
    env.close().await;
}

#[tokio::test]
async fn each_switch_carries_whether_the_instruction_names_it_and_whether_it_is_on() {
    // The policy of configs/toggle-switches-weak.toml, with `control_state`.
    let cfg = VlmConfig {
        image_width: 96,
        image_height: 96,
        max_instruction_bytes: 112,
        word_buckets: 1024,
        screen_text: true,
        control_state: true,
        ..VlmConfig::small()
    };
    cfg.validate().unwrap();
    let mut env = env_for("builtin/toggle-switches");
    let mut pairs_seen = BTreeSet::new();
    for seed in 0..6 {
        let (mut state, _) = env.reset(seed).await.unwrap();
        for step in 0..8 {
            let enc = encoder_inputs(std::slice::from_ref(&state), &cfg, &Device::Cpu).unwrap();
            let control =
                enc.screen.unwrap().control.unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let switches: Vec<_> = state.elements.iter().filter(|e| e.input_type == "checkbox").collect();
            assert!((3..=5).contains(&switches.len()), "seed {seed}: {} switches", switches.len());
            for e in &switches {
                // The truth from the page itself: the instruction quotes every switch to turn on.
                let named = state.instruction.contains(&format!("\"{}\"", e.label));
                let want = 2 * usize::from(!named) + usize::from(!e.checked);
                let cell = cell_of(&state, &e.id, &cfg);
                let mut row = [0.0f32; 4];
                row[want] = 1.0;
                assert_eq!(
                    control[cell * 4..cell * 4 + 4],
                    row,
                    "seed {seed}, step {step}, {:?} (checked {}): {}",
                    e.label,
                    e.checked,
                    state.instruction
                );
                pairs_seen.insert(want);
            }
            assert_eq!(control.iter().sum::<f32>(), switches.len() as f32, "only the switches carry a pair");
            let action = OraclePolicy.act(std::slice::from_ref(&state)).unwrap().remove(0).action;
            let out = env.step(&action).await.unwrap();
            if out.terminated || out.truncated {
                assert!(out.reward > 0.0, "seed {seed}: the oracle failed");
                break;
            }
            state = out.obs;
        }
    }
    assert_eq!(pairs_seen.len(), 4, "6 seeds did not show all four (named, checked) pairs: {pairs_seen:?}");
    env.close().await;
}
