//! The policy's screen-word features on a real page: on builtin/login-settings' Settings
//! page (reached by the oracle in a real headless Chromium), `row_labels` and `fold_case`
//! put the instruction's match flag on the `×` button of the row the instruction names and
//! on no other row's; without them no `×` carries a flag at all.

mod common;

use candle_core::Device;
use common::env_for;
use guirl::env::ScreenState;
use guirl::policy::oracle::OraclePolicy;
use guirl::policy::vlm::config::VlmConfig;
use guirl::policy::vlm::inputs::{encoder_inputs, SCREEN_WORD_SLOTS};
use guirl::policy::Policy;

/// The three rows' clear buttons and the phrase the instruction names each by.
const ROWS: [(&str, &str); 3] =
    [("clear-displayname", "display name"), ("clear-email", "email"), ("clear-phone", "phone number")];

/// Whether any word slot of the image token under element `id`'s centre is flagged as
/// one of the instruction's words.
fn flagged(state: &ScreenState, id: &str, cfg: &VlmConfig) -> bool {
    let e = state.elements.iter().find(|e| e.id == id).unwrap_or_else(|| panic!("no #{id} on the page"));
    let (w, h) = state.screenshot.dimensions();
    let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
    let cell = (cy / h as f32 * cfg.grid_h() as f32) as usize * cfg.grid_w()
        + (cx / w as f32 * cfg.grid_w() as f32) as usize;
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
    let mut named_seen = std::collections::BTreeSet::new();
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
