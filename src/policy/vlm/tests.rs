//! Tests of the whole policy on the tiny config: gradients reach every weight, `act` and
//! `log_probs` agree, checkpoints and frozen copies are real copies, and it can learn.

use super::speed::{square_state, synthetic_batch};
use super::*;
use crate::nn::custom_ops as fused;
use candle_nn::{AdamW, Optimizer, ParamsAdamW};

fn tiny(seed: u64) -> VlmPolicy {
    VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, seed).unwrap()
}

fn mixed_actions() -> (Vec<ScreenState>, Vec<GuiAction>) {
    let (states, _) = synthetic_batch(4, 3);
    let actions = ["click(12, 40)", "type(\"hi there\")", "key(Enter)", "done()"]
        .map(|a| GuiAction::parse(a).unwrap())
        .to_vec();
    (states, actions)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn one_backward_pass_reaches_every_var() {
    // With the optional word features on, so their table is covered too.
    let p = VlmPolicy::new(VlmConfig { word_buckets: 64, ..VlmConfig::tiny() }, &Device::Cpu, 1).unwrap();
    let (states, actions) = mixed_actions();
    let s = p.log_probs(&states, &actions).unwrap();
    let loss = (s.logp.sum_all().unwrap().neg().unwrap() - s.entropy.sum_all().unwrap()).unwrap();
    let grads = loss.backward().unwrap();
    let mut dead = Vec::new();
    for (name, var) in p.named_vars() {
        let g = grads.get(var.as_tensor());
        let norm = g.map(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap()).unwrap_or(0.0);
        if !(norm > 0.0 && norm.is_finite()) {
            dead.push(format!("{name} ({norm})"));
        }
    }
    assert!(dead.is_empty(), "Vars without gradient: {dead:?}");
    assert!(p.vars().len() > 30, "{}", p.vars().len());
}

#[test]
fn fused_and_composed_ops_give_the_same_scores_and_gradients() {
    let p = tiny(6);
    let (states, actions) = mixed_actions();
    let run = |fused_ops: bool| {
        fused::set_enabled_on_this_thread(fused_ops);
        let s = p.log_probs(&states, &actions).unwrap();
        let loss = (s.logp.sum_all().unwrap() + s.entropy.sum_all().unwrap()).unwrap();
        let grads = loss.backward().unwrap();
        fused::set_enabled_on_this_thread(true);
        let g: Vec<Tensor> = p.vars().iter().map(|v| grads.get(v.as_tensor()).unwrap().clone()).collect();
        (s.logp, g)
    };
    let ((lf, gf), (lc, gc)) = (run(true), run(false));
    assert!(max_abs_diff(&lf, &lc) < 1e-5, "log-probs differ by {}", max_abs_diff(&lf, &lc));
    for ((name, _), (a, b)) in p.named_vars().iter().zip(gf.iter().zip(&gc)) {
        let size = b.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(
            max_abs_diff(a, b) <= 1e-4 * (1.0 + size),
            "{name}: gradients differ by {}",
            max_abs_diff(a, b)
        );
    }
}

#[test]
fn act_log_probs_equal_log_probs_of_the_same_actions() {
    for (temperature, greedy) in [(1.0, false), (0.7, false), (1.3, true)] {
        let mut p = tiny(2);
        p.temperature = temperature;
        p.greedy = greedy;
        let (states, _) = synthetic_batch(6, 5);
        let decisions = p.act(&states).unwrap();
        let actions: Vec<GuiAction> = decisions.iter().map(|d| d.action.clone()).collect();
        let s = p.log_probs(&states, &actions).unwrap();
        let logp = s.logp.to_vec2::<f32>().unwrap();
        let mask = s.mask.to_vec2::<f32>().unwrap();
        for (i, d) in decisions.iter().enumerate() {
            let n = mask[i].iter().filter(|m| **m > 0.0).count();
            assert_eq!(n, d.token_logprobs.len(), "{}", d.action);
            for (j, lp) in d.token_logprobs.iter().enumerate() {
                assert!(
                    (lp - logp[i][j]).abs() < 1e-4,
                    "T={temperature} state {i} token {j}: act {lp} vs {}",
                    logp[i][j]
                );
            }
            let total: f32 = d.token_logprobs.iter().sum();
            assert!((d.logprob - total).abs() < 1e-5);
            // The action was written in the policy's vocabulary, on this screenshot.
            GuiAction::parse(&d.action.to_string()).unwrap();
        }
        let ent = s.entropy.to_vec2::<f32>().unwrap();
        assert!(ent.iter().flatten().all(|e| *e >= -1e-5 && e.is_finite()));
    }
}

#[test]
fn same_seed_same_weights_and_samples() {
    let (states, _) = synthetic_batch(4, 9);
    let (mut a, mut b) = (tiny(7), tiny(7));
    for ((na, va), (nb, vb)) in a.named_vars().iter().zip(b.named_vars().iter()) {
        assert_eq!(na, nb);
        assert_eq!(max_abs_diff(va.as_tensor(), vb.as_tensor()), 0.0, "{na}");
    }
    let da: Vec<String> = a.act(&states).unwrap().iter().map(|d| d.action.to_string()).collect();
    let db: Vec<String> = b.act(&states).unwrap().iter().map(|d| d.action.to_string()).collect();
    assert_eq!(da, db);
    let c = tiny(8);
    let differ = a.vars().iter().zip(c.vars()).any(|(x, y)| max_abs_diff(x.as_tensor(), y.as_tensor()) > 0.0);
    assert!(differ, "seeds 7 and 8 gave the same weights");
}

#[test]
fn save_load_round_trip_gives_identical_outputs() {
    let p = tiny(3);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    p.save(&ckpt).unwrap();
    let q = VlmPolicy::load(&ckpt, &Device::Cpu).unwrap();
    assert_eq!(q.config(), p.config());
    let (states, actions) = mixed_actions();
    let (a, b) = (p.log_probs(&states, &actions).unwrap(), q.log_probs(&states, &actions).unwrap());
    assert_eq!(max_abs_diff(&a.logp, &b.logp), 0.0);
    assert_eq!(max_abs_diff(&a.entropy, &b.entropy), 0.0);
}

#[test]
fn load_errors_name_the_folder_and_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let e = VlmPolicy::load(&dir.path().join("nope"), &Device::Cpu).err().unwrap().to_string();
    assert!(e.contains("nope") && e.contains("does not exist"), "{e}");
    let e = VlmPolicy::load(dir.path(), &Device::Cpu).err().unwrap().to_string();
    assert!(e.contains("has no config.json"), "{e}");
    tiny(1).save(dir.path()).unwrap();
    std::fs::remove_file(dir.path().join(WEIGHTS_FILE)).unwrap();
    let e = VlmPolicy::load(dir.path(), &Device::Cpu).err().unwrap().to_string();
    assert!(e.contains("has no model.safetensors"), "{e}");
    // Weights of one architecture under the config of another.
    tiny(1).save(dir.path()).unwrap();
    let mut cfg = VlmConfig::tiny();
    cfg.decoder_layers = 2;
    std::fs::write(dir.path().join(CONFIG_FILE), serde_json::to_string(&cfg).unwrap()).unwrap();
    let e = format!("{:#}", VlmPolicy::load(dir.path(), &Device::Cpu).err().unwrap());
    assert!(e.contains("lacks") && e.contains("decoder.layers.1"), "{e}");
    cfg.decoder_layers = 1;
    cfg.mlp_dim = 48;
    std::fs::write(dir.path().join(CONFIG_FILE), serde_json::to_string(&cfg).unwrap()).unwrap();
    let e = format!("{:#}", VlmPolicy::load(dir.path(), &Device::Cpu).err().unwrap());
    assert!(e.contains("has shape") && e.contains("mlp"), "{e}");
}

#[test]
fn frozen_copy_does_not_follow_the_original() {
    let p = tiny(4);
    let frozen = p.frozen_copy().unwrap();
    let (states, actions) = mixed_actions();
    let before = frozen.log_probs(&states, &actions).unwrap().logp;
    assert_eq!(max_abs_diff(&before, &p.log_probs(&states, &actions).unwrap().logp), 0.0);
    for var in p.vars() {
        var.set(&(var.as_tensor() + 0.05).unwrap()).unwrap();
    }
    let after = frozen.log_probs(&states, &actions).unwrap().logp;
    assert_eq!(max_abs_diff(&before, &after), 0.0, "the frozen copy changed with the original");
    assert!(max_abs_diff(&before, &p.log_probs(&states, &actions).unwrap().logp) > 1e-3);
}

#[test]
fn supervised_clicks_on_a_coloured_square_drive_the_loss_down() {
    let mut p = tiny(5);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let colours = [([220, 30, 30], "red"), ([30, 60, 220], "blue")];
    let (mut states, mut actions) = (Vec::new(), Vec::new());
    for i in 0..16 {
        let (x, y) = (rng.gen_range(0..130), rng.gen_range(0..180));
        let (colour, name) = colours[i % 2];
        states.push(square_state(160, 210, x, y, 30, colour, &format!("Click the {name} square.")));
        actions.push(GuiAction::Click { x: x as i32 + 15, y: y as i32 + 15 });
    }
    let batch = p.prepare(&states, &actions).unwrap();
    let mut opt =
        AdamW::new(p.vars(), ParamsAdamW { lr: 3e-3, weight_decay: 0.0, ..Default::default() }).unwrap();
    let mut losses = Vec::new();
    for _ in 0..200 {
        let s = p.score(&batch).unwrap();
        // Cross-entropy per action: −Σ_t log π(a_t) averaged over the batch.
        let loss = (s.logp.sum_all().unwrap().neg().unwrap() / states.len() as f64).unwrap();
        losses.push(loss.to_scalar::<f32>().unwrap());
        opt.backward_step(&loss).unwrap();
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(last < 0.3 * first, "loss went {first} → {last}: {losses:?}");
    // Greedy decoding now clicks on at least half the squares (chance: about 0.4 of 16).
    p.greedy = true;
    let hits = p
        .act(&states)
        .unwrap()
        .iter()
        .zip(&actions)
        .filter(|(d, a)| match (&d.action, a) {
            (GuiAction::Click { x, y }, GuiAction::Click { x: tx, y: ty }) => {
                (x - tx).abs() <= 15 && (y - ty).abs() <= 15
            }
            _ => false,
        })
        .count();
    assert!(hits >= 8, "{hits}/16 greedy clicks on the square; losses {losses:?}");
}

/// Speed figures in the test profile (dependencies at opt-level 2): `VLM_PRESET=small
/// cargo test --lib vlm::tests::speed_report -- --ignored --nocapture`.
#[test]
#[ignore]
fn speed_report() {
    let preset = std::env::var("VLM_PRESET").unwrap_or_else(|_| "small".into());
    let batch = std::env::var("VLM_BATCH").map(|b| b.parse().unwrap()).unwrap_or(32);
    let cfg = match std::env::var("VLM_CONFIG") {
        Ok(path) => VlmConfig::from_file(std::path::Path::new(&path)).unwrap(),
        Err(_) => VlmConfig::preset(&preset).unwrap(),
    };
    let report = speed::measure(&cfg, batch, 2, 7, &Device::Cpu).unwrap();
    println!("VLM `{preset}`\n{}", report.to_text());
}

#[test]
fn word_buckets_name_a_word_the_same_at_every_offset() {
    let text = br#"Turn on "Sync" and "Wi-Fi"; Sync, then Apply."#;
    let ids = words::word_buckets(text, 512);
    let at = |needle: &str, from: usize| {
        let i = from + text[from..].windows(needle.len()).position(|w| w == needle.as_bytes()).unwrap();
        ids[i..i + needle.len()].to_vec()
    };
    let sync = at("Sync", 0);
    assert!(sync.iter().all(|&b| b == sync[0] && b > 0), "{sync:?}");
    assert_eq!(at("Sync", 20), sync, "the same word, later in the text");
    // "Wi-Fi" is two words; quotes, spaces and punctuation are outside words.
    let wifi = at("Wi-Fi", 0);
    assert!(wifi[0] == wifi[1] && wifi[2] == 0 && wifi[3] == wifi[4] && wifi[0] != wifi[3], "{wifi:?}");
    assert_eq!(ids[4], 0);
    assert!(ids.iter().all(|&b| b < 512));
    let words: std::collections::BTreeSet<u32> = ids.iter().copied().filter(|&b| b > 0).collect();
    assert_eq!(words.len(), 8, "Turn on Sync and Wi Fi then Apply (Sync twice): {ids:?}");
}

fn labelled(text: &str, x: f32, y: f32) -> crate::env::Element {
    crate::env::Element {
        tag: "label".into(),
        text: text.into(),
        bbox: crate::env::BBox { x, y, w: 40.0, h: 10.0 },
        ..Default::default()
    }
}

#[test]
fn screen_words_sit_on_the_token_under_each_element() {
    // tiny: a 4 × 5 token grid; on a 160 × 200 screenshot one token is 40 × 40 pixels.
    let cfg = VlmConfig { word_buckets: 256, screen_text: true, ..VlmConfig::tiny() };
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Turn on \"Sync\".");
    s.elements = vec![
        labelled("Sync", 50.0, 85.0),          // centre (70, 90): column 1, row 2
        labelled("Dark mode", 100.0, 160.0),   // centre (120, 165): column 3, row 4
        labelled("Dark", 100.0, 160.0),        // the same token, a word it already has
        labelled("  ", 0.0, 0.0),              // no text: nothing
        labelled("Far away", 400.0, 10.0),     // centred off the screenshot: skipped
        labelled("a b c d e f g h", 0.0, 0.0), // more words than slots: the first six
        crate::env::Element {
            // A switch: its accessible name and its state, on its own token.
            tag: "input".into(),
            input_type: "checkbox".into(),
            label: "Wi-Fi".into(),
            checked: true,
            bbox: crate::env::BBox { x: 130.0, y: 10.0, w: 20.0, h: 10.0 },
            ..Default::default()
        },
    ];
    let ids = inputs::screen_words(&s, &cfg);
    let k = inputs::SCREEN_WORD_SLOTS;
    let at = |col: usize, row: usize| ids[(row * 4 + col) * k..(row * 4 + col + 1) * k].to_vec();
    let word = |w: &str| words::word_buckets(w.as_bytes(), 256)[0];
    // The same bucket as the instruction's "Sync": one vector for the word in both places.
    let sync_in_instruction = words::word_buckets(s.instruction.as_bytes(), 256)[9];
    assert_eq!(at(1, 2), vec![sync_in_instruction, 0, 0, 0, 0, 0]);
    assert_eq!(at(3, 4), vec![word("Dark"), word("mode"), 0, 0, 0, 0]);
    assert_eq!(at(0, 0), ["a", "b", "c", "d", "e", "f"].map(word).to_vec());
    assert_eq!(at(3, 0), vec![word("Wi"), word("Fi"), word("checked"), 0, 0, 0]);
    let filled = ids.iter().filter(|&&id| id != 0).count();
    assert_eq!(filled, 1 + 2 + 6 + 3, "{ids:?}");
    // Only "Sync" is also a word of the instruction.
    let enc = inputs::encoder_inputs(std::slice::from_ref(&s), &cfg, &Device::Cpu).unwrap();
    let matched = enc.screen.unwrap().matched.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(matched.iter().sum::<f32>(), 1.0);
    assert_eq!(matched[(2 * 4 + 1) * k], 1.0);

    // The words reach the policy's output, and their embeddings get a gradient.
    let p = VlmPolicy::new(cfg, &Device::Cpu, 3).unwrap();
    let action = vec![GuiAction::parse("click(70, 90)").unwrap()];
    let mut plain = s.clone();
    plain.elements.clear();
    let with = p.log_probs(std::slice::from_ref(&s), &action).unwrap();
    let without = p.log_probs(&[plain], &action).unwrap();
    assert!(max_abs_diff(&with.logp, &without.logp) > 1e-6, "screen words change nothing");
    let grads = with.logp.sum_all().unwrap().backward().unwrap();
    let (_, table) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("word_emb")).unwrap();
    let g = grads.get(table.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    let mode = word("mode") as usize; // on the screen only, not in the instruction
    assert!(g[mode].iter().any(|v| *v != 0.0), "no gradient for a screen-only word");
    let (_, m) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("screen_match")).unwrap();
    let g = grads.get(m.as_tensor()).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(g > 0.0, "no gradient for the match feature");
}

/// `numbers`: a number on the screen is compared with the instruction's first one
/// (less, equal, greater) on its token, symbol-only texts become words, and the relation
/// moves the policy's output and learns.
#[test]
fn numbers_on_the_screen_are_compared_with_the_instruction() {
    assert_eq!(inputs::first_number("Set the counter to 12, then click 3"), Some(12));
    assert_eq!(inputs::first_number("\u{2212}4 and -7"), Some(-4));
    assert_eq!(inputs::first_number("was -7"), Some(-7));
    assert_eq!(inputs::first_number("no digits"), None);
    let cfg = VlmConfig { word_buckets: 256, screen_text: true, numbers: true, ..VlmConfig::tiny() };
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Set the counter to 5, then Submit.");
    s.elements = vec![
        labelled("3", 0.0, 0.0),           // token (0, 0): less
        labelled("5", 50.0, 85.0),         // token (1, 2): equal
        labelled("12", 100.0, 160.0),      // token (3, 4): greater
        labelled("\u{2212}", 100.0, 10.0), // token (3, 0): a symbol, no number
        // token (2, 3): a field whose value holds the number (a spinner): less
        crate::env::Element { tag: "input".into(), value: "-3".into(), ..labelled("", 80.0, 125.0) },
    ];
    let rel = inputs::number_relations(&s, &cfg);
    let at = |col: usize, row: usize| rel[(row * 4 + col) * 3..(row * 4 + col + 1) * 3].to_vec();
    assert_eq!(at(0, 0), vec![1.0, 0.0, 0.0]);
    assert_eq!(at(1, 2), vec![0.0, 1.0, 0.0]);
    assert_eq!(at(3, 4), vec![0.0, 0.0, 1.0]);
    assert_eq!(at(2, 3), vec![1.0, 0.0, 0.0]);
    assert_eq!(rel.iter().sum::<f32>(), 4.0, "{rel:?}");
    // No number in the instruction: nothing to compare.
    let mut none = s.clone();
    none.instruction = "Click Submit.".into();
    assert!(inputs::number_relations(&none, &cfg).iter().all(|&v| v == 0.0));
    // The minus sign is a word of its own with `numbers`, and nothing without.
    let words = inputs::screen_words(&s, &cfg);
    let k = inputs::SCREEN_WORD_SLOTS;
    assert_ne!(words[3 * k], 0);
    let plain = VlmConfig { numbers: false, ..cfg.clone() };
    assert_eq!(inputs::screen_words(&s, &plain)[3 * k], 0);

    let p = VlmPolicy::new(cfg, &Device::Cpu, 5).unwrap();
    let action = vec![GuiAction::parse("click(70, 90)").unwrap()];
    // Each of the three rows reaches the output (a gradient), so each is read and learns.
    let a = p.log_probs(std::slice::from_ref(&s), &action).unwrap();
    let grads = a.logp.sum_all().unwrap().backward().unwrap();
    let (_, t) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("number_relation")).unwrap();
    let g = grads.get(t.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    assert!(g.iter().all(|row| row.iter().any(|v| *v != 0.0)), "a relation row has no gradient");
    let e = VlmConfig { numbers: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(e.contains("`numbers`") && e.contains("screen_text"), "{e}");
}

/// `control_state`: each checkbox or radio button's token gets the one-hot of (named by
/// the instruction, checked); a name is named only when all its words are said ("Dark
/// mode" does not name "Airplane mode"), and every row of the table learns.
#[test]
fn control_states_cross_the_instructions_names_with_the_checked_state() {
    // 1 024 buckets, as the task configs: at 256 "Airplane" and one of the instruction's words share one.
    let cfg = VlmConfig { word_buckets: 1024, screen_text: true, control_state: true, ..VlmConfig::tiny() };
    let mut s =
        speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Turn on \"Dark mode\", turn off the rest.");
    let switch = |name: &str, checked: bool, x: f32, y: f32| crate::env::Element {
        tag: "input".into(),
        input_type: "checkbox".into(),
        label: name.into(),
        checked,
        ..labelled("", x, y)
    };
    s.elements = vec![
        switch("Dark mode", true, 0.0, 5.0),       // token (0, 0): named & checked
        switch("Dark mode", false, 40.0, 45.0),    // token (1, 1): named & unchecked
        switch("Airplane mode", true, 80.0, 85.0), // token (2, 2): unnamed & checked
        switch("Sync", false, 120.0, 125.0),       // token (3, 3): unnamed & unchecked
        labelled("Dark mode", 0.0, 165.0),         // token (0, 4): not a control
    ];
    let st = inputs::control_states(&s, &inputs_said(&s, &cfg), &cfg);
    let at = |col: usize, row: usize| st[(row * 4 + col) * 4..(row * 4 + col + 1) * 4].to_vec();
    assert_eq!(at(0, 0), vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(at(1, 1), vec![0.0, 1.0, 0.0, 0.0]);
    assert_eq!(at(2, 2), vec![0.0, 0.0, 1.0, 0.0]);
    assert_eq!(at(3, 3), vec![0.0, 0.0, 0.0, 1.0]);
    assert_eq!(st.iter().sum::<f32>(), 4.0, "{st:?}");
    let enc = inputs::encoder_inputs(std::slice::from_ref(&s), &cfg, &Device::Cpu).unwrap();
    let control = enc.screen.unwrap().control.unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(control, st);
    let off = VlmConfig { control_state: false, ..cfg.clone() };
    assert!(inputs::encoder_inputs(std::slice::from_ref(&s), &off, &Device::Cpu)
        .unwrap()
        .screen
        .unwrap()
        .control
        .is_none());

    let p = VlmPolicy::new(cfg, &Device::Cpu, 5).unwrap();
    let action = vec![GuiAction::parse("click(100, 100)").unwrap()];
    let a = p.log_probs(std::slice::from_ref(&s), &action).unwrap();
    let grads = a.logp.sum_all().unwrap().backward().unwrap();
    let (_, t) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("control_state")).unwrap();
    let g = grads.get(t.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    assert!(g.iter().all(|row| row.iter().any(|v| *v != 0.0)), "a control-state row has no gradient");
    let e = VlmConfig { control_state: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(e.contains("`control_state`") && e.contains("screen_text"), "{e}");
}

/// The instruction's word buckets, as `encoder_inputs` collects them.
fn inputs_said(s: &crate::env::ScreenState, cfg: &VlmConfig) -> std::collections::HashSet<u32> {
    words::policy_words(s.instruction.as_bytes(), cfg).into_iter().filter(|&w| w != 0).collect()
}

/// `row_labels`: a word-less control (a `×` at a form row's end) carries the words of the
/// element nearest to its left on its line, so the instruction's match flag reaches the
/// button; controls with words of their own, and those alone on their line, keep theirs.
/// `fold_case`: the page's "Email" is the instruction's "email".
#[test]
fn a_wordless_control_takes_its_rows_label() {
    // tiny: a 4 × 5 token grid; on a 160 × 200 screenshot one token is 40 × 40 pixels.
    let cfg = VlmConfig {
        word_buckets: 256,
        screen_text: true,
        row_labels: true,
        fold_case: true,
        ..VlmConfig::tiny()
    };
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Change your email to \"a@b.io\".");
    let button = |text: &str, x: f32, y: f32| crate::env::Element {
        tag: "button".into(),
        bbox: crate::env::BBox { x, y, w: 10.0, h: 10.0 },
        ..labelled(text, 0.0, 0.0)
    };
    s.elements = vec![
        labelled("Display name", 0.0, 45.0), // row 1, column 0 (centre (20, 50))
        button("\u{d7}", 130.0, 45.0),       // row 1, column 3: takes "Display name"
        labelled("Email", 0.0, 85.0),        // row 2, column 0
        crate::env::Element {
            // The row's field, named by its <label>: nearer to the × than the label.
            tag: "input".into(),
            label: "Email".into(),
            value: "old@x.io".into(),
            ..labelled("", 45.0, 85.0)
        },
        button("\u{d7}", 130.0, 85.0),  // row 2, column 3: takes "Email"
        button("\u{d7}", 130.0, 165.0), // row 4: nothing to its left, nothing
        button("Save", 90.0, 125.0),    // row 3, column 2: has its own word
        labelled("Help", 140.0, 125.0), // right of Save on its line, not left
    ];
    let ids = inputs::screen_words(&s, &cfg);
    let k = inputs::SCREEN_WORD_SLOTS;
    let at = |col: usize, row: usize| ids[(row * 4 + col) * k..(row * 4 + col + 1) * k].to_vec();
    let word = |w: &str| words::word_buckets(w.as_bytes(), 256)[0];
    assert_eq!(at(3, 1), vec![word("display"), word("name"), 0, 0, 0, 0]);
    assert_eq!(at(3, 2), vec![word("email"), 0, 0, 0, 0, 0]);
    assert_eq!(at(3, 4), vec![0; 6]);
    assert_eq!(at(2, 3), vec![word("save"), 0, 0, 0, 0, 0]);
    // The instruction's "email" now flags the × of its row, not the other one.
    let enc = inputs::encoder_inputs(std::slice::from_ref(&s), &cfg, &Device::Cpu).unwrap();
    let matched = enc.screen.unwrap().matched.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(matched[(2 * 4 + 3) * k], 1.0);
    assert_eq!(matched[(4 + 3) * k], 0.0);
    // Case kept: "Email" is not "email", and nothing matches.
    let cased = VlmConfig { fold_case: false, ..cfg.clone() };
    let enc = inputs::encoder_inputs(std::slice::from_ref(&s), &cased, &Device::Cpu).unwrap();
    assert_eq!(enc.screen.unwrap().matched.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    // Off: the × buttons carry nothing.
    let off = VlmConfig { row_labels: false, ..cfg.clone() };
    let ids = inputs::screen_words(&s, &off);
    assert!(ids[(4 + 3) * k..(4 + 4) * k]
        .iter()
        .chain(&ids[(2 * 4 + 3) * k..(2 * 4 + 4) * k])
        .all(|&id| id == 0));
    let e = VlmConfig { row_labels: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(e.contains("`row_labels`") && e.contains("screen_text"), "{e}");
    let e = VlmConfig { fold_case: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(e.contains("`fold_case`") && e.contains("word_buckets"), "{e}");
}

/// Memory of the episode: the last `memory` pointing actions sit, by age, on the token
/// they pointed at; they change the policy's output, and the age table learns.
#[test]
fn history_marks_sit_on_the_clicked_token_by_age() {
    // tiny: a 4 × 5 token grid; on a 160 × 200 screenshot one token is 40 × 40 pixels.
    let cfg = VlmConfig { memory: 2, ..VlmConfig::tiny() };
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Turn on \"Sync\".");
    s.history = ["click(10, 10)", "drag(10, 10, 150, 190)", "type(\"x\")", "click(70, 90)", "not an action"]
        .map(String::from)
        .to_vec();
    let marks = inputs::history_marks(&s, &cfg);
    let at = |col: usize, row: usize, age: usize| marks[(row * 4 + col) * 2 + age];
    // Newest first: the malformed text is no action; click(70, 90) is age 0 (column 1,
    // row 2); type("x") is age 1 and points nowhere; older ones are past `memory`.
    assert_eq!(at(1, 2, 0), 1.0);
    assert_eq!(marks.iter().sum::<f32>(), 1.0, "{marks:?}");
    s.history.pop();
    s.history.remove(2); // now: click, drag, click(70, 90): the drag is age 1, both ends
    let marks = inputs::history_marks(&s, &cfg);
    let at = |col: usize, row: usize, age: usize| marks[(row * 4 + col) * 2 + age];
    assert_eq!((at(1, 2, 0), at(0, 0, 1), at(3, 4, 1)), (1.0, 1.0, 1.0));
    assert_eq!(marks.iter().sum::<f32>(), 3.0);

    let p = VlmPolicy::new(cfg, &Device::Cpu, 3).unwrap();
    let action = vec![GuiAction::parse("click(70, 90)").unwrap()];
    let mut fresh = s.clone();
    fresh.history.clear();
    let with = p.log_probs(std::slice::from_ref(&s), &action).unwrap();
    let without = p.log_probs(&[fresh], &action).unwrap();
    assert!(max_abs_diff(&with.logp, &without.logp) > 1e-6, "the history changes nothing");
    let grads = with.logp.sum_all().unwrap().backward().unwrap();
    let (_, table) = p.named_vars().into_iter().find(|(n, _)| n.ends_with("memory")).unwrap();
    let g = grads.get(table.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    assert!(g.iter().all(|row| row.iter().any(|v| *v != 0.0)), "an age without a gradient");
}

#[test]
fn screen_text_needs_word_buckets() {
    let err = VlmConfig { screen_text: true, ..VlmConfig::tiny() }.validate().unwrap_err().to_string();
    assert!(err.contains("screen_text") && err.contains("word_buckets"), "{err}");
}

/// A state's sampled action depends on its stream key only, not on which other states
/// share the batch or in what order (what makes runs with several browsers reproducible).
#[test]
fn keyed_sampling_does_not_depend_on_the_batch() {
    let mut p = tiny(5);
    p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 42 });
    let (states, _) = synthetic_batch(4, 9);
    let keys = [3u64, 17, 99, 1 << 20];
    let together = p.act_keyed(&states, &keys).unwrap();
    let (rev_s, rev_k): (Vec<_>, Vec<_>) = states.iter().cloned().zip(keys).rev().unzip();
    let reversed = p.act_keyed(&rev_s, &rev_k).unwrap();
    for i in 0..4 {
        let alone = p.act_keyed(std::slice::from_ref(&states[i]), &keys[i..=i]).unwrap();
        assert_eq!(alone[0].tokens, together[i].tokens, "state {i} alone vs in the batch");
        assert_eq!(reversed[3 - i].tokens, together[i].tokens, "state {i} in reversed order");
    }
    // Another key draws another stream: over 4 states at T = 1.5 some action differs.
    let other = p.act_keyed(&states, &[4, 18, 100, 7]).unwrap();
    assert!(other.iter().zip(&together).any(|(a, b)| a.tokens != b.tokens));
}

/// Scoring the sampled token ids gives back the log-probs recorded at sampling time.
#[test]
fn scoring_the_sampled_tokens_reproduces_their_log_probs() {
    let mut p = tiny(6);
    p.set_sampling(Sampling { temperature: 0.8, greedy: false, seed: 1 });
    let (states, _) = synthetic_batch(6, 2);
    let keys: Vec<u64> = (0..6).collect();
    let d = p.act_keyed(&states, &keys).unwrap();
    let tokens: Vec<Vec<u32>> = d.iter().map(|d| d.tokens.clone()).collect();
    let s = TrainablePolicy::score(&p, &states, &tokens).unwrap();
    let logp = s.logp.to_vec2::<f32>().unwrap();
    for (i, d) in d.iter().enumerate() {
        assert_eq!(d.tokens.len(), d.token_logprobs.len());
        for (j, lp) in d.token_logprobs.iter().enumerate() {
            assert!((logp[i][j] - lp).abs() < 1e-4, "state {i} token {j}: {} vs {lp}", logp[i][j]);
        }
    }
    // A token sequence the grammar forbids is refused, not scored.
    let bad = vec![vec![tokens::END, tokens::END]];
    assert!(TrainablePolicy::score(&p, &states[..1], &bad).is_err());
}

/// Coordinate bins finer than the screenshot's pixels are refused with what to set.
#[test]
fn bins_finer_than_pixels_are_refused() {
    let mut cfg = VlmConfig::tiny();
    cfg.actions.x_bins = 200; // the synthetic screenshots are 160 px wide
    let mut p = VlmPolicy::new(cfg, &Device::Cpu, 0).unwrap();
    let (states, actions) = synthetic_batch(1, 0);
    let e = p.act(&states).unwrap_err().to_string();
    assert!(e.contains("x_bins <= 160"), "{e}");
    let e = TrainablePolicy::encode(&p, &states[0], &actions[0]).unwrap_err().to_string();
    assert!(e.contains("x_bins <= 160"), "{e}");
}
