//! Memory of the episode. The remembered actions as encoder tokens (the `history` input):
//! what each slot holds, the key mask over empty slots, and that the tokens change the
//! policy and learn. The previous frame (the `previous_frame` input): the change it shows
//! is read and learns.

use super::inputs::{self, ACTION_WORDS};
use super::layers::NEG;
use super::*;

fn state_with(history: &[&str]) -> ScreenState {
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Add \"milk\" to the list");
    s.history = history.iter().map(|h| h.to_string()).collect();
    s
}

fn history(memory: usize) -> Inputs {
    Inputs { history: Some(memory), ..Inputs::default() }
}

fn kind(name: &str) -> usize {
    GuiAction::KINDS.iter().position(|k| *k == name).unwrap()
}

#[test]
fn slots_hold_the_newest_actions_kinds_and_typed_words() {
    let cfg = VlmConfig { inputs: history(3), word_buckets: 64, ..VlmConfig::tiny() };
    let s = state_with(&["click(10, 10)", "type(\"milk tea\")", "bad text", "key(Enter)"]);
    let slots = inputs::action_tokens(&s, &cfg, 3);
    let milk_tea = words::word_buckets(b"milk tea", 64);
    let (milk, tea) = (milk_tea[0], milk_tea[5]);
    let enter = words::word_buckets(b"enter", 64)[0]; // words are read without case
    assert_eq!(
        slots,
        vec![(kind("key"), vec![enter]), (kind("type"), vec![milk, tea]), (kind("click"), vec![])],
        "newest first, malformed text skipped"
    );
    // Without word features a slot is its kind alone.
    let bare = VlmConfig { word_buckets: 0, ..cfg.clone() };
    assert!(inputs::action_tokens(&s, &bare, 3).iter().all(|(_, w)| w.is_empty()));

    // Two states, one with a single remembered action: its two empty slots are masked.
    let states = [s, state_with(&["click(10, 10)"])];
    let enc = inputs::encoder_inputs(&states, &cfg, &Device::Cpu).unwrap();
    let mask = enc.key_mask.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let n = mask.len() / 2;
    let tail = |i: usize| mask[i * n + n - 3..(i + 1) * n].to_vec();
    assert_eq!(tail(0), vec![0.0; 3]);
    assert_eq!(tail(1), vec![0.0, NEG, NEG]);
    let acts = enc.history.unwrap();
    assert_eq!(acts.kinds.dims(), &[2, 3, GuiAction::KINDS.len()]);
    assert_eq!(acts.words.unwrap().dims(), &[2, 3, ACTION_WORDS]);
}

#[test]
fn remembered_actions_change_the_policy_and_their_tables_learn() {
    let cfg = VlmConfig { inputs: history(2), word_buckets: 64, ..VlmConfig::tiny() };
    let p = VlmPolicy::new(cfg, &Device::Cpu, 4).unwrap();
    let typed = state_with(&["click(70, 90)", "type(\"milk\")"]);
    let clicked = state_with(&["click(70, 90)"]);
    let action = vec![GuiAction::parse("click(120, 90)").unwrap()];
    let a = p.log_probs(std::slice::from_ref(&typed), &action).unwrap();
    let b = p.log_probs(&[clicked], &action).unwrap();
    let diff = (&a.logp - &b.logp).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff > 1e-6, "having typed changes nothing");
    let grads = a.logp.sum_all().unwrap().backward().unwrap();
    for name in ["action_kind", "action_age", "memory"] {
        let (_, v) = p.named_vars().into_iter().find(|(n, _)| n.ends_with(name)).unwrap();
        let g =
            grads.get(v.as_tensor()).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(g > 0.0 && g.is_finite(), "{name}: {g}");
    }
    // Without the history there are none of its tables.
    let plain = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 4).unwrap();
    assert!(plain.named_vars().iter().all(|(n, _)| !n.contains("action_") && !n.ends_with("memory")));
}

/// `previous_frame`: each pixel carries its change since the previous screenshot (0 where
/// nothing changed and at the first step), the change moves the policy's log-probs, and
/// the gradient reaches the stem weights that read it.
#[test]
fn the_change_since_the_previous_frame_is_read_and_learns() {
    let cfg = VlmConfig { inputs: Inputs { previous_frame: true, ..Inputs::default() }, ..VlmConfig::tiny() };
    let (w, h) = (cfg.image_width, cfg.image_height);
    let before = speed::square_state(w as u32, h as u32, 8, 8, 8, [0, 0, 200], "Flip it");
    let mut after = speed::square_state(w as u32, h as u32, 8, 8, 8, [200, 0, 0], "Flip it");
    let mut px = Vec::new();
    inputs::frame_and_change(&after.screenshot, None, w, h, &mut px);
    assert_eq!(px.len(), w * h * 6);
    assert!(px.chunks_exact(6).all(|p| p[3..] == [0.0; 3]), "no previous frame: no change");
    let mut plain = Vec::new();
    inputs::image_values(&after.screenshot, w, h, &mut plain);
    assert!(px.chunks_exact(6).zip(plain.chunks_exact(3)).all(|(p, q)| p[..3] == *q), "RGB as before");
    px.clear();
    inputs::frame_and_change(&after.screenshot, Some(&before.screenshot), w, h, &mut px);
    let changed: Vec<usize> =
        px.chunks_exact(6).enumerate().filter(|(_, p)| p[3..] != [0.0; 3]).map(|(i, _)| i).collect();
    assert_eq!(changed.len(), 64, "exactly the 8x8 square changed");
    let first = &px[changed[0] * 6 + 3..changed[0] * 6 + 6];
    assert!((first[0] - 200.0 / 255.0).abs() < 1e-6 && (first[2] + 200.0 / 255.0).abs() < 1e-6, "{first:?}");

    let p = VlmPolicy::new(cfg, &Device::Cpu, 9).unwrap();
    let action = vec![GuiAction::parse("click(12, 12)").unwrap()];
    let fresh = p.log_probs(std::slice::from_ref(&after), &action).unwrap();
    after.previous_screenshot = Some(before.screenshot.clone());
    let moved = p.log_probs(std::slice::from_ref(&after), &action).unwrap();
    let diff =
        (&fresh.logp - &moved.logp).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff > 1e-6, "the change since the previous frame changes nothing");
    let grads = moved.logp.sum_all().unwrap().backward().unwrap();
    let (_, patch) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("stem.patch.weight")).unwrap();
    let g = grads.get(patch.as_tensor()).unwrap();
    // The patch weight is [channels, p·p·8]; per pixel the inputs are RGB, change, x, y.
    let cols = g.dim(1).unwrap();
    assert_eq!(cols % 8, 0, "{cols}");
    let g: Vec<Vec<f32>> = g.abs().unwrap().to_vec2().unwrap();
    let on_change: f32 = g.iter().flat_map(|r| r.chunks_exact(8).map(|c| c[3] + c[4] + c[5])).sum();
    assert!(on_change > 0.0 && on_change.is_finite(), "{on_change}");
    // Older configs read RGB and coordinates only: five values a pixel.
    let old = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 9).unwrap();
    let (_, w5) = old.named_vars().into_iter().find(|(n, _)| n.ends_with("stem.patch.weight")).unwrap();
    assert_eq!(w5.as_tensor().dim(1).unwrap() % 5, 0);
    assert_eq!(w5.as_tensor().dim(1).unwrap() / 5, cols / 8);
}
