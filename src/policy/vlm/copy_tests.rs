//! Copy spans, and the policy typing from its instruction: encoding, sampling and
//! scoring agree, gradients reach the head, and a tiny policy learns to copy words it
//! never saw.

use super::*;
use crate::env::{GuiAction, ScreenState};
use crate::policy::vlm::speed::square_state;
use crate::policy::vlm::{VlmConfig, VlmPolicy};
use crate::policy::{Policy, Sampling, TrainablePolicy};
use candle_core::Device;

#[test]
fn pieces_are_words_and_single_marks() {
    let s = CopySource::new("Enter \"ann@x.com\" now", 100);
    // E n t e r _ " a n n @ x . c o m " _ n o w
    assert!(s.can_start(0) && !s.can_start(1) && !s.can_start(5));
    assert!(s.can_start(6), "a quote is a piece of its own");
    assert_eq!(s.find("ann@x.com"), Some((7, 15, None)));
    assert_eq!(s.text(7, 15, None), "ann@x.com");
    assert_eq!(s.find("\"ann@x.com\""), Some((6, 16, None)));
    assert_eq!(s.find("nn"), None, "not at a piece start");
    assert_eq!(s.find("Ent"), None, "not at a piece end");
    assert_eq!(s.find("now"), Some((18, 20, None)));
    assert_eq!(s.find(""), None);
    let p: Vec<f32> = s.pieces().collect();
    assert_eq!(p[0], 0.0);
    assert_eq!(p[5], 0.0, "a space belongs to the piece before it");
    assert_eq!(p[7], 2.0);
    assert_eq!(p[15], 6.0, "ann @ x . com");
}

#[test]
fn cut_and_non_ascii_instructions() {
    let s = CopySource::new("Type café now", 100);
    assert_eq!(s.find("caf"), Some((5, 7, None)), "a non-ASCII byte ends a run of letters");
    assert!(s.find("café").is_none(), "é is not printable ASCII");
    assert_eq!(s.find("now"), Some((11, 13, None)));
    let cut = CopySource::new("Type hello", 7);
    assert_eq!(cut.len(), 7);
    assert_eq!(cut.find("he"), Some((5, 6, None)), "the cut ends the last piece");
    assert_eq!(cut.find("hello"), None);
    assert!(CopySource::new("", 10).is_empty());
}

#[test]
fn a_span_can_be_typed_in_upper_or_lower_case() {
    let s = CopySource::new("Type \"kenda\" in all upper case, or \"Bo\"", 100);
    assert_eq!(s.find("KENDA"), Some((6, 10, Some(Case::Upper))));
    assert_eq!(s.find("kenda"), Some((6, 10, None)), "as it is comes first");
    assert_eq!(s.find("bo"), Some((36, 37, Some(Case::Lower))));
    assert_eq!(s.text(6, 10, Some(Case::Upper)), "KENDA");
    assert_eq!(s.find("KenDa"), None);
}

fn copy_policy(kinds: &[&str], seed: u64) -> VlmPolicy {
    let mut cfg = VlmConfig { copy: true, ..VlmConfig::tiny() };
    cfg.actions.kinds = kinds.iter().map(|k| k.to_string()).collect();
    VlmPolicy::new(cfg, &Device::Cpu, seed).unwrap()
}

fn typing_state(word: &str) -> ScreenState {
    square_state(160, 210, 40, 60, 30, [200, 200, 200], &format!("Type \"{word}\" here."))
}

/// Demonstrated text that the instruction holds is written as a span; other text as free
/// bytes; both decode back to the same action, and a policy without copy spells it.
#[test]
fn demonstrated_text_in_the_instruction_is_encoded_as_a_copy() {
    let p = copy_policy(&["click", "type"], 0);
    let s = typing_state("Kasie");
    let kasie = GuiAction::Type { text: "Kasie".into() };
    let toks = TrainablePolicy::encode(&p, &s, &kasie).unwrap();
    let names: Vec<String> = toks.iter().map(|&t| p.token_text(t)).collect();
    assert_eq!(names, ["type", "from@6", "to@10", "<end>"]);
    let upper = GuiAction::Type { text: "KASIE".into() };
    let up = TrainablePolicy::encode(&p, &s, &upper).unwrap();
    assert_eq!(up.iter().map(|&t| p.token_text(t)).collect::<Vec<_>>(), ["type", "from@6", "to@10", "upper"]);
    assert_eq!(
        p.vocab().decode_in(&up, 160, 210, Some(&CopySource::new(&s.instruction, 32))).unwrap(),
        upper
    );
    let src = CopySource::new(&s.instruction, 32);
    assert_eq!(p.vocab().decode_in(&toks, 160, 210, Some(&src)).unwrap(), kasie);
    let other = GuiAction::Type { text: "Kas".into() };
    let toks = TrainablePolicy::encode(&p, &s, &other).unwrap();
    assert_eq!(toks.len(), 5, "free bytes K a s and END after the kind: {toks:?}");
    assert_eq!(p.vocab().decode_in(&toks, 160, 210, Some(&src)).unwrap(), other);
    let plain = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 0).unwrap();
    assert_eq!(TrainablePolicy::encode(&plain, &s, &kasie).unwrap().len(), 7);
    // A copy token for a span the grammar does not allow (inside a word) is refused.
    let bad = vec![toks[0], p.vocab().size() as u32 - 2 * 32 + 7, p.vocab().size() as u32 - 32 + 10];
    assert!(TrainablePolicy::score(&p, &[s], &[bad]).is_err());
}

/// A typed span's log-prob is the same whether computed at sampling or at scoring time,
/// and sampled copies decode to the instruction's text (in some case).
#[test]
fn a_copied_span_scores_the_same_at_sampling_and_scoring_time() {
    let mut p = copy_policy(&["type"], 3);
    p.set_sampling(Sampling { temperature: 1.0, greedy: false, seed: 5 });
    let words = ["Kasie", "ann@x.com", "Blue sky", "r2d2", "a.b", "Zoe", "q", "LONGWORD"];
    let states: Vec<ScreenState> = (0..64).map(|i| typing_state(words[i % words.len()])).collect();
    let keys: Vec<u64> = (0..64).collect();
    let d = p.act_keyed(&states, &keys).unwrap();
    let tokens: Vec<Vec<u32>> = d.iter().map(|d| d.tokens.clone()).collect();
    let scored = TrainablePolicy::score(&p, &states, &tokens).unwrap().logp.to_vec2::<f32>().unwrap();
    let first_copy = p.vocab().size() as u32 - 64;
    let mut copies = 0;
    for (i, d) in d.iter().enumerate() {
        for (j, lp) in d.token_logprobs.iter().enumerate() {
            assert!((scored[i][j] - lp).abs() < 1e-4, "state {i} token {j}: {} vs {lp}", scored[i][j]);
        }
        if d.tokens[1] >= first_copy {
            copies += 1;
            let GuiAction::Type { text } = &d.action else { panic!("{:?}", d.action) };
            // a sampled case token may follow the span
            let found = states[i].instruction.to_ascii_lowercase().contains(&text.to_ascii_lowercase());
            assert!(found, "{text:?} is not in the instruction");
        }
    }
    assert!(copies > 0, "no copy among 64 samples from a near-uniform start");
}

/// The copy head's weights get gradient from a copied span's log-prob.
#[test]
fn gradients_reach_the_copy_head() {
    let p = copy_policy(&["click", "type"], 1);
    let states: Vec<ScreenState> = ["Kasie", "Blue sky"].iter().map(|w| typing_state(w)).collect();
    let actions = ["Kasie", "Blue sky"].map(|w| GuiAction::Type { text: w.into() }).to_vec();
    let loss = p.log_probs(&states, &actions).unwrap().logp.sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let heads: Vec<(String, candle_core::Var)> =
        p.named_vars().into_iter().filter(|(n, _)| n.contains(".copy.")).collect();
    assert_eq!(heads.len(), 6, "{:?}", heads.iter().map(|h| &h.0).collect::<Vec<_>>());
    for (name, var) in heads {
        let g = grads
            .get(var.as_tensor())
            .map(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap());
        assert!(g.is_some_and(|g| g > 0.0 && g.is_finite()), "{name}: {g:?}");
    }
}

/// Behaviour cloning on 48 words, then greedy typing of 16 words it never saw: a policy
/// with copy types them exactly (free bytes could only guess letters it was taught).
#[test]
fn a_tiny_policy_learns_to_copy_words_it_never_saw() {
    use candle_nn::{AdamW, Optimizer, ParamsAdamW};
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut word = || -> String {
        let n = rng.gen_range(3..9);
        (0..n).map(|_| (b'a' + rng.gen_range(0..26u8)) as char).collect()
    };
    let train: Vec<String> = (0..48).map(|_| word()).collect();
    let held: Vec<String> = (0..16).map(|_| word()).collect();
    let mut p = copy_policy(&["click", "type"], 2);
    let states: Vec<ScreenState> = train.iter().map(|w| typing_state(w)).collect();
    let actions: Vec<GuiAction> = train.iter().map(|w| GuiAction::Type { text: w.clone() }).collect();
    let batch = p.prepare(&states, &actions).unwrap();
    let mut opt =
        AdamW::new(p.vars(), ParamsAdamW { lr: 3e-3, weight_decay: 0.0, ..Default::default() }).unwrap();
    for _ in 0..150 {
        let s = p.score(&batch).unwrap();
        let loss = (s.logp.sum_all().unwrap().neg().unwrap() / states.len() as f64).unwrap();
        opt.backward_step(&loss).unwrap();
    }
    p.set_sampling(Sampling { temperature: 1.0, greedy: true, seed: 0 });
    let held_states: Vec<ScreenState> = held.iter().map(|w| typing_state(w)).collect();
    let typed: Vec<GuiAction> = p.act(&held_states).unwrap().into_iter().map(|d| d.action).collect();
    let right =
        typed.iter().zip(&held).filter(|(a, w)| **a == GuiAction::Type { text: w.to_string() }).count();
    assert!(right >= 15, "{right}/16 unseen words typed exactly: {typed:?}");
}
