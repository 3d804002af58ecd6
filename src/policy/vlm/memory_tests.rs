//! The remembered actions as encoder tokens (`memory_actions`): what each slot holds, the
//! key mask over empty slots, and that the tokens change the policy and learn.

use super::inputs::{self, ACTION_WORDS};
use super::layers::NEG;
use super::*;

fn state_with(history: &[&str]) -> ScreenState {
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Add \"milk\" to the list");
    s.history = history.iter().map(|h| h.to_string()).collect();
    s
}

fn kind(name: &str) -> usize {
    GuiAction::KINDS.iter().position(|k| *k == name).unwrap()
}

#[test]
fn slots_hold_the_newest_actions_kinds_and_typed_words() {
    let cfg = VlmConfig { memory: 3, memory_actions: true, word_buckets: 64, ..VlmConfig::tiny() };
    let s = state_with(&["click(10, 10)", "type(\"milk tea\")", "bad text", "key(Enter)"]);
    let slots = inputs::action_tokens(&s, &cfg);
    let milk_tea = inputs::word_buckets(b"milk tea", 64);
    let (milk, tea) = (milk_tea[0], milk_tea[5]);
    let enter = inputs::word_buckets(b"Enter", 64)[0];
    assert_eq!(
        slots,
        vec![(kind("key"), vec![enter]), (kind("type"), vec![milk, tea]), (kind("click"), vec![])],
        "newest first, malformed text skipped"
    );
    // Without word features a slot is its kind alone.
    let bare = VlmConfig { word_buckets: 0, ..cfg.clone() };
    assert!(inputs::action_tokens(&s, &bare).iter().all(|(_, w)| w.is_empty()));

    // Two states, one with a single remembered action: its two empty slots are masked.
    let states = [s, state_with(&["click(10, 10)"])];
    let enc = inputs::encoder_inputs(&states, &cfg, &Device::Cpu).unwrap();
    let mask = enc.key_mask.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let n = mask.len() / 2;
    let tail = |i: usize| mask[i * n + n - 3..(i + 1) * n].to_vec();
    assert_eq!(tail(0), vec![0.0; 3]);
    assert_eq!(tail(1), vec![0.0, NEG, NEG]);
    let acts = enc.actions.unwrap();
    assert_eq!(acts.kinds.dims(), &[2, 3, GuiAction::KINDS.len()]);
    assert_eq!(acts.words.unwrap().dims(), &[2, 3, ACTION_WORDS]);
}

#[test]
fn remembered_actions_change_the_policy_and_their_tables_learn() {
    let cfg = VlmConfig { memory: 2, memory_actions: true, word_buckets: 64, ..VlmConfig::tiny() };
    let p = VlmPolicy::new(cfg, &Device::Cpu, 4).unwrap();
    let typed = state_with(&["click(70, 90)", "type(\"milk\")"]);
    let clicked = state_with(&["click(70, 90)"]);
    let action = vec![GuiAction::parse("click(120, 90)").unwrap()];
    let a = p.log_probs(std::slice::from_ref(&typed), &action).unwrap();
    let b = p.log_probs(&[clicked], &action).unwrap();
    let diff = (&a.logp - &b.logp).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff > 1e-6, "having typed changes nothing");
    let grads = a.logp.sum_all().unwrap().backward().unwrap();
    for name in ["action_kind", "action_age"] {
        let (_, v) = p.named_vars().into_iter().find(|(n, _)| n.ends_with(name)).unwrap();
        let g =
            grads.get(v.as_tensor()).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(g > 0.0 && g.is_finite(), "{name}: {g}");
    }
    // An old config (no memory_actions) has neither table; memory_actions alone is refused.
    let old = VlmPolicy::new(VlmConfig { memory: 2, ..VlmConfig::tiny() }, &Device::Cpu, 4).unwrap();
    assert!(old.named_vars().iter().all(|(n, _)| !n.contains("action_")));
    let e = VlmConfig { memory_actions: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(e.contains("`memory_actions` needs `memory`"), "{e}");
}
