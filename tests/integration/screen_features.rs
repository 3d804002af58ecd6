//! The small policy's `elements` input on real pages, in a real headless Chromium: each
//! visible element of the page is one encoder token that reads its words (flagged where
//! the instruction has them too), value, role, state and the grid cell under its box.
//! On builtin/login-settings' Settings page (reached by the oracle) the field the
//! instruction names has all its name words flagged (the page's "Email" is the
//! instruction's "email"), each row's × button is a button token on its own cell, and the
//! tokens change the policy's output. On builtin/toggle-switches every switch's token says
//! whether it is checked and whether the instruction quotes its name, before and after the
//! oracle's clicks.

use crate::common;

use candle_core::Device;
use common::env_for;
use guirl::env::{Element, GuiAction, ScreenState};
use guirl::policy::oracle::OraclePolicy;
use guirl::policy::vlm::config::VlmConfig;
use guirl::policy::vlm::elements::{element_tokens, ElementToken, Role};
use guirl::policy::vlm::inputs::encoder_inputs;
use guirl::policy::vlm::{Inputs, VlmPolicy};
use guirl::policy::Policy;
use std::collections::BTreeSet;

/// The three rows: the field's id, the phrase the instruction names it by.
const ROWS: [(&str, &str); 3] =
    [("displayname", "display name"), ("email", "email"), ("phone", "phone number")];

/// The small preset with the `elements` input (1 024 word buckets) and `bytes` of the
/// instruction.
fn with_elements(bytes: usize) -> VlmConfig {
    let inputs = Inputs { elements: Some(32), ..Inputs::default() };
    VlmConfig { max_instruction_bytes: bytes, word_buckets: 1024, inputs, ..VlmConfig::small() }
}

/// The image token under `e`'s centre.
fn cell_of(state: &ScreenState, e: &Element, cfg: &VlmConfig) -> usize {
    let (w, h) = state.screenshot.dimensions();
    let (cx, cy) = (e.bbox.x + e.bbox.w / 2.0, e.bbox.y + e.bbox.h / 2.0);
    (cy / h as f32 * cfg.grid_h() as f32) as usize * cfg.grid_w()
        + (cx / w as f32 * cfg.grid_w() as f32) as usize
}

/// Element `id` and its token (tokens are in the page's document order).
fn token<'a>(
    state: &'a ScreenState,
    tokens: &'a [ElementToken],
    id: &str,
) -> (&'a Element, &'a ElementToken) {
    let i = state.elements.iter().position(|e| e.id == id).unwrap_or_else(|| panic!("no #{id} on the page"));
    (&state.elements[i], &tokens[i])
}

#[tokio::test]
async fn the_settings_page_is_read_as_one_token_per_element() {
    // configs/login-settings-weak.toml reads the instruction's first 128 bytes: the field
    // is named after byte 64.
    let cfg = with_elements(128);
    cfg.validate().unwrap();
    let policy = VlmPolicy::new(cfg.clone(), &Device::Cpu, 7).unwrap();
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
        let tokens = element_tokens(&state, &cfg, 32);
        assert_eq!(tokens.len(), state.elements.len().min(32), "one token per element");
        // The key mask opens exactly as many element slots as there are tokens.
        let enc = encoder_inputs(std::slice::from_ref(&state), &cfg, &Device::Cpu).unwrap();
        let slots = enc.elements.as_ref().unwrap().roles.dim(1).unwrap();
        let mask = enc.key_mask.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(mask[mask.len() - slots..].iter().filter(|&&m| m == 0.0).count(), tokens.len());
        let (named, _) =
            *ROWS.iter().find(|(_, p)| state.instruction.contains(&format!("your {p} to"))).unwrap();
        named_seen.insert(named);
        for (id, _) in ROWS {
            let (field, t) = token(&state, &tokens, id);
            assert_eq!(t.role, Role::TextField, "#{id}");
            assert!(!t.words.is_empty() && !t.value.is_empty(), "#{id}: its name and its value: {t:?}");
            // The named field's name is the instruction's, every word of it; no other is.
            assert_eq!(
                t.matched.iter().all(|&m| m),
                id == named,
                "seed {seed}, #{id} ({:?}): {}",
                field.label,
                state.instruction
            );
            let (button, b) = token(&state, &tokens, &format!("clear-{id}"));
            assert_eq!((b.role, b.cell), (Role::Button, cell_of(&state, button, &cfg)), "#clear-{id}");
        }
        // The elements reach the policy's output.
        let action = vec![GuiAction::parse("click(100, 100)").unwrap()];
        let mut bare = state.clone();
        bare.elements.clear();
        let with = policy.log_probs(std::slice::from_ref(&state), &action).unwrap().logp;
        let without = policy.log_probs(&[bare], &action).unwrap().logp;
        let diff = (with - without).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff > 1e-6, "seed {seed}: the page's elements change nothing");
    }
    assert_eq!(named_seen.len(), ROWS.len(), "12 seeds did not name every row: {named_seen:?}");
    env.close().await;
}

#[tokio::test]
async fn each_switch_token_says_whether_it_is_on_and_whether_the_instruction_names_it() {
    // The policy of configs/toggle-switches-weak.toml.
    let cfg = VlmConfig { image_width: 96, image_height: 96, ..with_elements(112) };
    cfg.validate().unwrap();
    let mut env = env_for("builtin/toggle-switches");
    let mut pairs_seen = BTreeSet::new();
    for seed in 0..6 {
        let (mut state, _) = env.reset(seed).await.unwrap();
        for step in 0..8 {
            let tokens = element_tokens(&state, &cfg, 32);
            let switches: Vec<usize> =
                (0..tokens.len()).filter(|&i| state.elements[i].input_type == "checkbox").collect();
            assert!((3..=5).contains(&switches.len()), "seed {seed}: {} switches", switches.len());
            assert_eq!(tokens.iter().filter(|t| t.role == Role::Checkbox).count(), switches.len());
            for &i in &switches {
                let (e, t) = (&state.elements[i], &tokens[i]);
                // The truth from the page itself: the instruction quotes every switch to turn on.
                let named = state.instruction.contains(&format!("\"{}\"", e.label));
                assert_eq!(t.checked, e.checked, "seed {seed}, step {step}, {:?}", e.label);
                assert!(!t.words.is_empty(), "{:?} has no words", e.label);
                if named {
                    assert!(
                        t.matched.iter().all(|&m| m),
                        "seed {seed}: {:?} is named: {}",
                        e.label,
                        state.instruction
                    );
                }
                assert_eq!(t.cell, cell_of(&state, e, &cfg));
                pairs_seen.insert((named, e.checked));
            }
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
