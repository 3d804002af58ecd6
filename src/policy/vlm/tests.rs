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
    // With every optional input on, so their parameters are covered too (copy's own test
    // is in copy_tests.rs: it needs actions that copy).
    let mut cfg = VlmConfig { word_buckets: 64, ..VlmConfig::tiny() };
    cfg.inputs = Inputs { previous_frame: true, elements: Some(8), history: Some(2) };
    let p = VlmPolicy::new(cfg, &Device::Cpu, 1).unwrap();
    let (mut states, actions) = mixed_actions();
    for (i, s) in states.iter_mut().enumerate() {
        s.history = ["click(20, 30)", "type(\"hi\")"][..i % 3].iter().map(|a| a.to_string()).collect();
        s.previous_screenshot = Some(std::sync::Arc::new(image::RgbImage::new(160, 210)));
        // Every role, state and match: the page's own elements, one checked and one focused.
        s.elements[0].checked = true;
    }
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

/// Memory of the episode: the last `memory` pointing actions sit, by age, on the token
/// they pointed at; they change the policy's output, and the age table learns.
#[test]
fn history_marks_sit_on_the_clicked_token_by_age() {
    // tiny: a 4 × 5 token grid; on a 160 × 200 screenshot one token is 40 × 40 pixels.
    let cfg = VlmConfig { inputs: Inputs { history: Some(2), ..Inputs::default() }, ..VlmConfig::tiny() };
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Turn on \"Sync\".");
    s.history = ["click(10, 10)", "drag(10, 10, 150, 190)", "type(\"x\")", "click(70, 90)", "not an action"]
        .map(String::from)
        .to_vec();
    let marks = inputs::history_marks(&s, &cfg, 2);
    let at = |col: usize, row: usize, age: usize| marks[(row * 4 + col) * 2 + age];
    // Newest first: the malformed text is no action; click(70, 90) is age 0 (column 1,
    // row 2); type("x") is age 1 and points nowhere; older ones are past `memory`.
    assert_eq!(at(1, 2, 0), 1.0);
    assert_eq!(marks.iter().sum::<f32>(), 1.0, "{marks:?}");
    s.history.pop();
    s.history.remove(2); // now: click, drag, click(70, 90): the drag is age 1, both ends
    let marks = inputs::history_marks(&s, &cfg, 2);
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

#[test]
fn the_prompt_counts_the_image_tokens_and_each_instruction_byte() {
    let p = tiny(0);
    let count = |text: &str| p.prompt_tokens(&square_state(160, 210, 0, 0, 4, [9, 9, 9], text)).unwrap();
    let image = p.config().image_tokens();
    assert_eq!(count("Click"), image + 5);
    assert_eq!(count("Click it"), image + 8);
    // bytes past the cap are not read
    let cap = p.config().max_instruction_bytes;
    assert_eq!(count(&"x".repeat(cap + 10)), image + cap);
}
