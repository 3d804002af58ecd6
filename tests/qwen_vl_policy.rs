//! The Qwen-VL backbones as trainable policies, on the tiny random checkpoints in
//! `fixtures/qwen_vl`: sampling and rescoring agree, a policy step moves only LoRA,
//! adapters save and load, and every malformed checkpoint folder gets a message that
//! names the file and what is wrong in it.

mod common;

use candle_core::{Device, Tensor};
use guirl::env::GuiAction;
use guirl::policy::qwen_vl::{DecodeKernels, DecodeLora, DecodeWindow, QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{copy_trainable, Policy, PolicyFailure, Sampling, TrainablePolicy};
use guirl::train::optim::{AdamW, AdamWConfig};
use std::path::{Path, PathBuf};

fn fixture(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/qwen_vl").join(arch)
}

use common::qwen::{bits, max_abs_diff, perturb_b, policy_settings as settings};
use common::synthetic_state as state;

/// Each architecture with attention per answer over its own cache, and with window slots
/// (`decode_window`: one attention per layer for a chunk of slots), sized per prompt or
/// fixed; the attention eager or fused (`decode_kernels`) in either. Merged and fused: one
/// product a layer for q/k/v and one for gate/up, split by the fused kernels.
const DECODINGS: [(&str, DecodeWindow, DecodeLora, DecodeKernels); 9] = [
    ("qwen3_vl", DecodeWindow::Off, DecodeLora::Separate, DecodeKernels::Eager),
    ("qwen3_vl", DecodeWindow::Auto, DecodeLora::Separate, DecodeKernels::Eager),
    ("qwen3_vl", DecodeWindow::Auto, DecodeLora::Merged, DecodeKernels::Eager),
    ("qwen3_vl", DecodeWindow::Auto, DecodeLora::Merged, DecodeKernels::Fused),
    ("qwen2_5_vl", DecodeWindow::Off, DecodeLora::Separate, DecodeKernels::Eager),
    ("qwen2_5_vl", DecodeWindow::Off, DecodeLora::Merged, DecodeKernels::Eager),
    ("qwen2_5_vl", DecodeWindow::Off, DecodeLora::Separate, DecodeKernels::Fused),
    ("qwen2_5_vl", DecodeWindow::Off, DecodeLora::Merged, DecodeKernels::Fused),
    ("qwen2_5_vl", DecodeWindow::Tokens(512), DecodeLora::Separate, DecodeKernels::Eager),
];

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn sampled_answers_rescored_give_the_same_logprobs() {
    let cases = [
        ("qwen3_vl", DecodeLora::Separate, DecodeKernels::Eager, DecodeWindow::Off),
        ("qwen2_5_vl", DecodeLora::Separate, DecodeKernels::Eager, DecodeWindow::Off),
        ("qwen3_vl", DecodeLora::Merged, DecodeKernels::Eager, DecodeWindow::Off),
        ("qwen3_vl", DecodeLora::Separate, DecodeKernels::Fused, DecodeWindow::Auto),
        ("qwen2_5_vl", DecodeLora::Separate, DecodeKernels::Fused, DecodeWindow::Off),
        ("qwen3_vl", DecodeLora::Merged, DecodeKernels::Fused, DecodeWindow::Auto),
        ("qwen2_5_vl", DecodeLora::Merged, DecodeKernels::Fused, DecodeWindow::Off),
    ];
    for (arch, lora, attention, window) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        (s.decode_lora, s.decode_kernels, s.decode_window) = (Some(lora), Some(attention), Some(window));
        let arch = format!("{arch} {attention:?} {window:?}");
        let arch = arch.as_str();
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.3, greedy: false, seed: 7 });
        let states =
            vec![state(0, &[]), state(1, &["click(10, 20)"]), state(2, &["click(10, 20)", "key(Enter)"])];
        let decisions = p.act_keyed(&states, &[1, 2, 3]).unwrap();
        let tokens: Vec<Vec<u32>> = decisions.iter().map(|d| d.tokens.clone()).collect();
        let scores = p.score(&states, &tokens).unwrap();
        for (i, d) in decisions.iter().enumerate() {
            assert!(!d.tokens.is_empty() && d.tokens.len() <= 6, "{arch}: {:?}", d.tokens);
            assert!(d.answer.is_some(), "{arch}: the answer text is kept");
            if let Some(PolicyFailure::Unparsable(e)) = &d.failure {
                assert!(e.contains("no action") || e.contains("could not read"), "{e}");
            }
            let n = d.tokens.len();
            let got = scores.logp.get(i).unwrap().narrow(0, 0, n).unwrap();
            let want = Tensor::new(d.token_logprobs.as_slice(), &Device::Cpu).unwrap();
            let diff = max_diff(&got, &want);
            assert!(diff < 1e-4, "{arch} state {i}: rescored log-probs differ by {diff}");
            let ent = scores.entropy.get(i).unwrap().narrow(0, 0, n).unwrap().to_vec1::<f32>().unwrap();
            assert!(ent.iter().all(|e| e.is_finite() && *e > 0.0), "{arch}: entropies {ent:?}");
            let mask: f32 = scores.mask.get(i).unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert_eq!(mask as usize, n);
        }
        // the same keys give the same answers, whatever else is in the batch
        let again = p.act_keyed(&states[1..2], &[2]).unwrap();
        assert_eq!(again[0].tokens, decisions[1].tokens, "{arch}: batch-independent sampling");
    }
}

#[test]
fn answers_decoded_together_are_bit_for_bit_those_decoded_alone() {
    for (arch, window, lora, attention) in DECODINGS {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        (s.decode_window, s.decode_lora, s.decode_kernels) = (Some(window), Some(lora), Some(attention));
        s.max_new_tokens = 12;
        s.decode_rows = Some(3);
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 11 });
        // a group's first step (three identical states, one prompt run), two other states:
        // five answers decode in a chunk of 3 and one of 2 (padded to 3); alone, each is a
        // chunk of 1 (padded to 3)
        let states = vec![
            state(0, &[]),
            state(0, &[]),
            state(1, &["click(10, 20)"]),
            state(0, &[]),
            state(2, &["click(10, 20)", "key(Enter)"]),
        ];
        let keys = [10, 11, 12, 13, 14];
        let together: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        for i in 0..states.len() {
            let alone = p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap();
            assert_eq!(
                bits(&alone[0]),
                together[i],
                "{arch} {window:?} {lora:?} {attention:?}: state {i} alone differs from in the batch"
            );
        }
        let order = [4, 2, 0, 3, 1];
        let shuffled_states: Vec<_> = order.iter().map(|&i| states[i].clone()).collect();
        let shuffled_keys: Vec<u64> = order.iter().map(|&i| keys[i]).collect();
        let shuffled = p.act_keyed(&shuffled_states, &shuffled_keys).unwrap();
        for (j, &i) in order.iter().enumerate() {
            assert_eq!(
                bits(&shuffled[j]),
                together[i],
                "{arch} {window:?} {lora:?} {attention:?}: state {i} in another order differs"
            );
        }
        // the same prompt with other keys draws other answers (the shared prompt run does
        // not share the sampling)
        assert!(
            together[0] != together[1] || together[0] != together[3],
            "{arch} {window:?} {lora:?} {attention:?}: one answer for three keys"
        );
    }
}

/// A chunk wider than a few rows is padded to its rows (its products' rounding depends on
/// the row count, on a CPU from 9 rows), so an answer decoded alone in it is the same bits
/// as beside nine others; narrower chunks run their live rows alone (the test above).
#[test]
fn answers_in_a_chunk_of_more_than_eight_rows_are_padded_and_bit_for_bit_those_decoded_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings("qwen2_5_vl", tmp.path());
    (s.decode_window, s.decode_lora, s.decode_kernels) =
        (Some(DecodeWindow::Off), Some(DecodeLora::Separate), Some(DecodeKernels::Fused));
    s.max_new_tokens = 6;
    s.decode_rows = Some(10);
    let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
    perturb_b(&p);
    p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 3 });
    let history: [&[&str]; 3] = [&[], &["click(10, 20)"], &["click(10, 20)", "key(Enter)"]];
    let states: Vec<_> = (0..10usize).map(|i| state(i as u32 % 4, history[i % 3])).collect();
    let keys: Vec<u64> = (30..40).collect();
    let together: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
    for i in [0, 5, 9] {
        let alone = p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap();
        assert_eq!(bits(&alone[0]), together[i], "state {i} alone differs from in a chunk of 10");
    }
}

/// With `batch_invariant = false` a chunk runs its live answers alone: an answer decoded
/// alone in a chunk of 10 is the one a chunk of 1 decodes (not the padded chunk's, above),
/// and the policy says it is no longer batch invariant.
#[test]
fn without_batch_invariance_a_chunk_runs_only_its_live_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings("qwen2_5_vl", tmp.path());
    (s.decode_window, s.decode_lora, s.decode_kernels) =
        (None, Some(DecodeLora::Separate), Some(DecodeKernels::Fused));
    s.max_new_tokens = 6;
    let states: Vec<_> = (0..3u32).map(|i| state(i, &[])).collect();
    let keys = [50u64, 51, 52];
    let decode = |rows: usize, invariant: bool| {
        let s = QwenPolicySettings { decode_rows: Some(rows), batch_invariant: invariant, ..s.clone() };
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 4 });
        assert_eq!(p.batch_invariant(), invariant);
        (0..3).map(|i| bits(&p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap()[0])).collect::<Vec<_>>()
    };
    assert_eq!(decode(10, false), decode(1, true));
}

/// Without batch invariance the prompts admitted together run together (their screenshots
/// in one call of the vision tower, their remainders in one right-padded pass over the
/// shared prefix): each answer is the one its prompt run alone gives, the same tokens and
/// log-probs within rounding, for prompts of different lengths and a group's repeated one.
#[test]
fn without_batch_invariance_prompts_run_together_give_the_answers_run_alone() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        (s.decode_window, s.decode_lora, s.decode_kernels) =
            (None, Some(DecodeLora::Separate), Some(DecodeKernels::Eager));
        s.max_new_tokens = 8;
        // one row a chunk either way: only how the prompts ran differs
        s.decode_rows = Some(1);
        let states = [
            state(0, &[]),
            state(1, &["click(10, 20)"]),
            state(0, &[]),
            state(2, &["click(10, 20)", "key(Enter)"]),
        ];
        let keys = [60u64, 61, 62, 63];
        let decode = |invariant: bool| {
            let s = QwenPolicySettings { batch_invariant: invariant, ..s.clone() };
            let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
            perturb_b(&p);
            p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 6 });
            p.act_keyed(&states, &keys).unwrap()
        };
        let (alone, together) = (decode(true), decode(false));
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a.tokens, t.tokens, "{arch} state {i}: prompts run together changed the answer");
            let diff = max_abs_diff(&a.token_logprobs, &t.token_logprobs);
            assert!(diff < 1e-4, "{arch} state {i}: log-probs differ by {diff}");
        }
    }
}

/// Continuous batching: answers that join a decode in flight, a few steps apart, leave as
/// they finish and share steps with whoever is live then are bit for bit the answers each
/// state gets decoded alone.
#[test]
fn answers_joining_a_decode_in_flight_are_bit_for_bit_those_decoded_alone() {
    for (arch, window, lora, attention) in DECODINGS {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        (s.decode_window, s.decode_lora, s.decode_kernels) = (Some(window), Some(lora), Some(attention));
        s.max_new_tokens = 10;
        s.decode_rows = Some(2);
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 5 });
        let states = [
            state(0, &[]),
            state(1, &["click(10, 20)"]),
            state(0, &[]),
            state(2, &["click(10, 20)", "key(Enter)"]),
            state(0, &[]),
        ];
        let keys = [20u64, 21, 22, 23, 24];
        // (the step before which each state joins): two at the start, one that shares the
        // first's prompt three steps later, one while the first ones finish, one after
        let joins = [0usize, 0, 3, 9, 14];
        // started for more answers than it ever has live: the rows set are kept
        let mut dec = p.step_decoder(states.len()).expect("Qwen-VL decodes token by token");
        assert_eq!(dec.rows(), 2);
        let mut got: Vec<Option<guirl::policy::Decision>> = vec![None; states.len()];
        let mut steps = 0;
        while got.iter().any(Option::is_none) {
            for (i, _) in joins.iter().enumerate().filter(|(_, &j)| j == steps) {
                dec.admit(i as u64, &states[i], keys[i]).unwrap();
            }
            let live = dec.live();
            let done = dec.step().unwrap();
            assert_eq!(
                dec.live(),
                live - done.len(),
                "{arch} {window:?} {lora:?} {attention:?}: finished answers leave"
            );
            for (id, d) in done {
                assert!(
                    got[id as usize].replace(d).is_none(),
                    "{arch} {window:?} {lora:?} {attention:?}: answer {id} returned twice"
                );
            }
            steps += 1;
            assert!(steps < 100, "{arch} {window:?} {lora:?} {attention:?}: the decode never ended");
        }
        for (i, d) in got.iter().enumerate() {
            let d = d.as_ref().unwrap();
            let alone = p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap();
            assert_eq!(
                bits(&alone[0]),
                bits(d),
                "{arch} {window:?} {lora:?} {attention:?}: state {i} joining at step {} differs",
                joins[i]
            );
            assert!(
                !d.tokens.is_empty() && d.tokens.len() <= 10,
                "{arch} {window:?} {lora:?} {attention:?}: {:?}",
                d.tokens
            );
        }
        // an empty decoder steps to nothing
        assert!(dec.step().unwrap().is_empty() && dec.live() == 0);
    }
}

/// With `decode_rows` unset a decoder takes as many rows as the answers it is started for
/// (the collector's envs): its answers are those of `decode_rows` set to that count.
#[test]
fn a_decoder_without_decode_rows_steps_all_the_answers_it_is_started_for_together() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings("qwen3_vl", tmp.path());
    assert_eq!(s.decode_rows, None);
    let states = [state(0, &[]), state(1, &["click(10, 20)"]), state(2, &[])];
    let keys = [40u64, 41, 42];
    let mut p = QwenVlPolicy::new(s.clone(), &Device::Cpu, 0).unwrap();
    perturb_b(&p);
    p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 9 });
    assert_eq!(p.step_decoder(1000).unwrap().rows(), 256, "at most 256 rows");
    let mut dec = p.step_decoder(3).unwrap();
    assert_eq!(dec.rows(), 3);
    for (i, st) in states.iter().enumerate() {
        dec.admit(i as u64, st, keys[i]).unwrap();
    }
    let mut got = vec![None; 3];
    while dec.live() > 0 {
        for (id, d) in dec.step().unwrap() {
            got[id as usize] = Some(bits(&d));
        }
    }
    let mut three =
        QwenVlPolicy::new(QwenPolicySettings { decode_rows: Some(3), ..s }, &Device::Cpu, 0).unwrap();
    three.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 9 });
    perturb_b(&three);
    let whole: Vec<_> = three.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
    assert_eq!(got.into_iter().map(Option::unwrap).collect::<Vec<_>>(), whole);
}

/// The host reads the drawn tokens every `decode_sync` steps (the tokens are fed back on the
/// device in between): answers that end between reads run on until the next read and their
/// extra tokens are dropped, so every answer is the same bits whatever the interval, also
/// for answers that join between reads. A random model rarely draws its end-of-answer
/// token, so a copy of the checkpoint names a token it often draws as that token.
#[test]
fn answers_read_every_few_steps_are_bit_for_bit_those_read_every_step() {
    let states: Vec<_> =
        (0..6).map(|i| state(i % 3, if i % 2 == 0 { &[] } else { &["click(10, 20)"] })).collect();
    let keys: Vec<u64> = (30..36).collect();
    let joins = [0usize, 0, 1, 2, 5, 7];
    let max = 14;
    for (arch, window, lora, attention) in DECODINGS {
        let model = copy_of(arch);
        let decode = |sync: usize| {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = settings(arch, tmp.path());
            s.path = model.path().to_str().unwrap().to_string();
            (s.decode_window, s.decode_lora, s.decode_sync, s.decode_rows, s.max_new_tokens) =
                (Some(window), Some(lora), Some(sync), Some(2), max);
            s.decode_kernels = Some(attention);
            let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
            perturb_b(&p);
            p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 3 });
            let whole: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
            let mut dec = p.step_decoder(2).unwrap();
            let mut got = vec![None; states.len()];
            let mut steps = 0;
            while got.iter().any(Option::is_none) {
                for i in (0..states.len()).filter(|&i| joins[i] == steps) {
                    dec.admit(i as u64, &states[i], keys[i]).unwrap();
                }
                for (id, d) in dec.step().unwrap() {
                    assert!(
                        got[id as usize].replace(bits(&d)).is_none(),
                        "{arch} {window:?} {lora:?} {attention:?}: {id} twice"
                    );
                }
                steps += 1;
                assert!(
                    steps < 100,
                    "{arch} {window:?} {lora:?} {attention:?} sync {sync}: the decode never ended"
                );
            }
            (whole, got.into_iter().map(Option::unwrap).collect::<Vec<_>>())
        };
        // a token that several answers draw after their first (so not all end at once)
        let mut count = std::collections::HashMap::new();
        for b in decode(1).0 {
            let seen: std::collections::BTreeSet<u32> = b.0[1..].iter().copied().collect();
            seen.into_iter().for_each(|t| *count.entry(t).or_insert(0) += 1);
        }
        let (&eos, _) = count.iter().max_by_key(|(t, n)| (**n, **t)).unwrap();
        let config = model.path().join("config.json");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("\"eos_token_id\": 489"), "{arch}: the fixture's end token moved");
        std::fs::write(&config, text.replace("\"eos_token_id\": 489", &format!("\"eos_token_id\": {eos}")))
            .unwrap();

        let (every, joined) = decode(1);
        assert_eq!(
            joined, every,
            "{arch} {window:?} {lora:?} {attention:?}: joining answers differ from a whole call"
        );
        let ended: Vec<usize> = every.iter().map(|b| b.0.len()).filter(|&n| n < max).collect();
        assert!(
            ended.len() >= 2,
            "{arch} {window:?} {lora:?} {attention:?}: answers end early with token {eos}: {every:?}"
        );
        for sync in [3, 4] {
            let (whole, late) = decode(sync);
            assert_eq!(
                whole, every,
                "{arch} {window:?} {lora:?} {attention:?}: a whole call read every {sync} steps differs"
            );
            assert_eq!(
                late, joined,
                "{arch} {window:?} {lora:?} {attention:?}: joining answers read every {sync} steps differ"
            );
        }
    }
}

/// An overlapped run's frozen copy (its behaviour weights) decodes on one thread while the
/// live adapters train on another, LoRA dropout on: the copy's answers are bit for bit
/// those it gives alone, and the update moved the live policy's. The adapter switch and the
/// training pass are each thread's own, not the shared model's.
#[test]
fn a_frozen_copy_decodes_unchanged_while_the_live_adapters_train_on_another_thread() {
    // adapters alone, then with modules trained whole (the tied embedding and the final
    // norm; the untied head and the norm), which the copy holds copies of too
    let whole: [&[&str]; 2] = [&["embed_tokens", "norm"], &["lm_head", "norm"]];
    let cases =
        [("qwen3_vl", &[][..]), ("qwen2_5_vl", &[][..]), ("qwen3_vl", whole[0]), ("qwen2_5_vl", whole[1])];
    for (arch, modules) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        s.train_modules = modules.iter().map(|m| m.to_string()).collect();
        let arch = format!("{arch} {modules:?}");
        s.max_new_tokens = 8;
        s.lora_dropout = 0.3;
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        let sampling = Sampling { temperature: 1.5, greedy: false, seed: 3 };
        p.set_sampling(sampling);
        let mut frozen = p.reference().unwrap();
        frozen.set_sampling(sampling);
        // the copy an overlapped run collects on, on a GPU on a second stream: every weight
        // its own (the base read again, the trainable ones copied), frozen from it as above
        let copy = p.copy_on(&Device::Cpu).unwrap().expect("a live policy copies itself");
        let mut copied = copy.reference().unwrap();
        copied.set_sampling(sampling);
        let states = vec![state(0, &[]), state(1, &["click(10, 20)"]), state(2, &["key(Enter)"])];
        let keys = [31u64, 32, 33];
        let alone: Vec<_> = frozen.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        let live_before: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_eq!(live_before, alone, "{arch}: the copy starts as the live policy");
        let from_copy: Vec<_> = copied.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_eq!(from_copy, alone, "{arch}: the policy's own copy decodes as the live policy");
        let target: Vec<Vec<u32>> =
            states.iter().map(|st| p.encode(st, &GuiAction::Click { x: 35, y: 20 }).unwrap()).collect();
        let done = std::sync::atomic::AtomicBool::new(false);
        let rounds = std::thread::scope(|scope| {
            let update = scope.spawn(|| {
                let mut opt =
                    AdamW::new(p.trainable_vars(), AdamWConfig { lr: 1e-2, ..Default::default() }).unwrap();
                for step in 0..6u64 {
                    let scores = p.score_train(&states, &target, step).unwrap();
                    let loss = scores.logp.sum_all().unwrap().neg().unwrap();
                    opt.step(&p.gradients(&loss).unwrap()).unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let mut rounds = 0;
            while rounds < 2 || !done.load(std::sync::atomic::Ordering::SeqCst) {
                let during: Vec<_> = frozen.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
                assert_eq!(during, alone, "{arch}: round {rounds} during the update differs");
                rounds += 1;
            }
            update.join().unwrap();
            rounds
        });
        let live_after: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_ne!(live_after, live_before, "{arch}: the update did not move the live policy");
        let after: Vec<_> = frozen.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_eq!(after, alone, "{arch}: the copy after the update ({rounds} rounds during it)");
        let copy_after: Vec<_> = copied.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_eq!(copy_after, alone, "{arch}: the policy's own copy moved with the update");
        // the next freeze: the copy's trainable weights refreshed from the live ones
        copy_trainable(&p, copy.as_ref()).unwrap();
        let mut refreshed = copy.reference().unwrap();
        refreshed.set_sampling(sampling);
        let now: Vec<_> = refreshed.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        assert_eq!(now, live_after, "{arch}: the refreshed copy decodes as the live policy now");
    }
}

#[test]
fn a_policy_step_moves_only_lora_and_the_reference_stays_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let mut p = QwenVlPolicy::new(settings("qwen3_vl", tmp.path()), &Device::Cpu, 0).unwrap();
    perturb_b(&p);
    let reference = p.reference().unwrap();
    assert!(reference.trainable_vars().is_empty());
    let states = vec![state(0, &[])];
    let target = vec![p.encode(&states[0], &GuiAction::Click { x: 35, y: 20 }).unwrap()];
    // guirl text in 0-1000 units, then the end-of-turn token
    let text: String = target[0].iter().map(|&t| p.token_text(t)).collect();
    assert!(text.contains("500") && text.ends_with("<|im_end|>"), "{text}");
    let before_ref = reference.score(&states, &target).unwrap().logp;
    // a frozen copy's forward builds no autograd graph (it would keep every layer's
    // activations for a backward that never comes)
    assert!(!before_ref.track_op(), "the reference's scores hold a graph");
    let vars = p.trainable_vars();
    assert!(vars.iter().all(|(n, _)| n.contains("lora_")), "only adapters by default");
    let before: Vec<Tensor> = vars.iter().map(|(_, v)| v.as_tensor().copy().unwrap()).collect();
    let mut opt = AdamW::new(vars.clone(), AdamWConfig { lr: 1e-3, ..Default::default() }).unwrap();
    let nll0 = p.score(&states, &target).unwrap().logp.sum_all().unwrap().neg().unwrap();
    opt.step(&nll0.backward().unwrap()).unwrap();
    for ((name, v), b) in vars.iter().zip(&before) {
        assert!(max_diff(v.as_tensor(), b) > 0.0, "{name} did not move");
    }
    let nll1 = p.score(&states, &target).unwrap().logp.sum_all().unwrap().neg().unwrap();
    let (n0, n1) = (nll0.to_scalar::<f32>().unwrap(), nll1.to_scalar::<f32>().unwrap());
    assert!(n1 < n0, "one step lowers the NLL: {n0} -> {n1}");
    // the reference (base weights + a copy of the adapters when it was made) did not move
    let after_ref = reference.score(&states, &target).unwrap().logp;
    assert_eq!(max_diff(&before_ref, &after_ref), 0.0);
    // saved and loaded into a later reference, it scores the same again
    let rdir = tempfile::tempdir().unwrap();
    reference.save(rdir.path()).unwrap();
    let mut later = p.reference().unwrap();
    assert!(max_diff(&later.score(&states, &target).unwrap().logp, &before_ref) > 0.0, "a new snapshot");
    later.load(rdir.path()).unwrap();
    assert_eq!(max_diff(&later.score(&states, &target).unwrap().logp, &before_ref), 0.0);
    // a later copy takes a snapshot of its own: the first reference keeps its weights
    let _other = p.reference().unwrap();
    assert_eq!(max_diff(&reference.score(&states, &target).unwrap().logp, &before_ref), 0.0);
    let _ = p.act(&states).unwrap();
}

#[test]
fn a_saved_adapter_loads_back_as_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings("qwen2_5_vl", tmp.path());
    // the untied head and the final norm trained whole, beside the adapters
    s.train_modules = vec!["lm_head".into(), "norm".into()];
    let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
    perturb_b(&p);
    for (name, v) in p.trainable_vars() {
        if name.ends_with("norm.weight") || name.starts_with("lm_head") {
            v.set(&(v.as_tensor() * 1.5).unwrap()).unwrap();
        }
    }
    let ckpt = tmp.path().join("ckpt");
    p.save(&ckpt).unwrap();
    assert!(ckpt.join("adapter_model.safetensors").is_file() && ckpt.join("adapter_config.json").is_file());
    let states = vec![state(0, &["click(3, 4)"])];
    let tokens = vec![p.encode(&states[0], &GuiAction::Done).unwrap()];
    let want = p.score(&states, &tokens).unwrap().logp;
    let q = guirl::policy::load_checkpoint(&ckpt, &Device::Cpu).unwrap();
    assert_eq!(max_diff(&q.score(&states, &tokens).unwrap().logp, &want), 0.0);
    assert!(q.describe().contains("qwen2_5_vl"), "{}", q.describe());
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("adapter_config.json")).unwrap()).unwrap();
    // full names: peft matches entries as suffixes, and `norm` alone would catch the
    // vision mergers' norms too
    assert_eq!(cfg["modules_to_save"], serde_json::json!(["lm_head", "model.language_model.norm"]));
    // a policy that does not train those modules refuses the checkpoint
    let mut plain = QwenVlPolicy::new(settings("qwen2_5_vl", tmp.path()), &Device::Cpu, 0).unwrap();
    let e = format!("{:#}", plain.load(&ckpt).unwrap_err());
    assert!(e.contains("train_modules"), "{e}");
    // a reference saved and loaded leaves the live adapters alone
    let r = p.reference().unwrap();
    let rdir = tmp.path().join("ref");
    r.save(&rdir).unwrap();
    let mut r2 = p.reference().unwrap();
    r2.load(&rdir).unwrap();
    assert_eq!(max_diff(&p.score(&states, &tokens).unwrap().logp, &want), 0.0);
    // the reference holds its own copy of the modules trained whole, saved with it: the
    // live head and norm move, the reference and the one loaded from its folder do not
    for (name, v) in p.trainable_vars() {
        if name.ends_with("norm.weight") || name.starts_with("lm_head") {
            v.set(&(v.as_tensor() * 0.5).unwrap()).unwrap();
        }
    }
    // (within rounding: the reference's copy is a plain tensor, and a product of a few rows
    // by a plain weight runs another kernel than by a trained one, `nn::few_rows`)
    let moved = max_diff(&p.score(&states, &tokens).unwrap().logp, &want);
    assert!(moved > 1e-3, "the live modules moved: {moved}");
    assert!(max_diff(&r.score(&states, &tokens).unwrap().logp, &want) < 1e-5, "the reference kept its copy");
    assert!(max_diff(&r2.score(&states, &tokens).unwrap().logp, &want) < 1e-5, "and saved it");
}

/// A copy of a fixture checkpoint (without its reference outputs) to break.
fn copy_of(arch: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture(arch)).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
        }
    }
    tmp
}

fn load_err(dir: &Path, arch: &str) -> String {
    let s = QwenPolicySettings::new(arch, dir.to_str().unwrap());
    match QwenVlPolicy::new(s, &Device::Cpu, 0) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn malformed_checkpoint_folders_are_errors_that_name_the_file_and_what_is_wrong() {
    // a tensor missing from the weights
    let d = copy_of("qwen3_vl");
    let st = candle_core::safetensors::load(d.path().join("model.safetensors"), &Device::Cpu).unwrap();
    let mut fewer = st.clone();
    fewer.remove("model.language_model.layers.1.mlp.up_proj.weight");
    candle_core::safetensors::save(&fewer, d.path().join("model.safetensors")).unwrap();
    let e = load_err(d.path(), "qwen3_vl");
    assert!(e.contains("model.language_model.layers.1.mlp.up_proj.weight") && e.contains("missing"), "{e}");

    // a tensor of the wrong shape
    let d = copy_of("qwen3_vl");
    let mut wrong = st.clone();
    wrong.insert(
        "model.visual.blocks.0.attn.proj.weight".into(),
        Tensor::zeros((32, 31), candle_core::DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&wrong, d.path().join("model.safetensors")).unwrap();
    let e = load_err(d.path(), "qwen3_vl");
    assert!(
        e.contains("model.safetensors")
            && e.contains("model.visual.blocks.0.attn.proj.weight")
            && e.contains("[32, 31]"),
        "{e}"
    );

    // no tokenizer
    let d = copy_of("qwen3_vl");
    std::fs::remove_file(d.path().join("tokenizer.json")).unwrap();
    let e = load_err(d.path(), "qwen3_vl");
    assert!(e.contains("tokenizer.json") && e.contains("missing"), "{e}");

    // a config key the reader does not know
    let d = copy_of("qwen3_vl");
    edit_json(&d.path().join("config.json"), |v| v["text_config"]["sliding_attention_every"] = 4.into());
    let e = load_err(d.path(), "qwen3_vl");
    assert!(e.contains("config.json") && e.contains("text_config.sliding_attention_every"), "{e}");

    // a required key missing
    let d = copy_of("qwen2_5_vl");
    edit_json(&d.path().join("config.json"), |v| {
        v.as_object_mut().unwrap().remove("num_hidden_layers");
    });
    let e = load_err(d.path(), "qwen2_5_vl");
    assert!(e.contains("config.json") && e.contains("num_hidden_layers"), "{e}");

    // a shard the index lists is gone
    let d = copy_of("qwen2_5_vl");
    std::fs::remove_file(d.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(d.path(), "qwen2_5_vl");
    assert!(e.contains("model-00002-of-00002.safetensors") && e.contains("missing"), "{e}");

    // no chat template anywhere
    let d = copy_of("qwen2_5_vl");
    edit_json(&d.path().join("tokenizer_config.json"), |v| {
        v.as_object_mut().unwrap().remove("chat_template");
    });
    let e = load_err(d.path(), "qwen2_5_vl");
    assert!(e.contains("no chat template"), "{e}");

    // the backbone named is not the checkpoint's
    let e = load_err(&fixture("qwen2_5_vl"), "qwen3_vl");
    assert!(e.contains("model.kind") && e.contains("Qwen25Vl"), "{e}");

    // a folder that does not exist
    let e = load_err(Path::new("/nonexistent/qwen"), "qwen3_vl");
    assert!(e.contains("/nonexistent/qwen") && e.contains("no such checkpoint folder"), "{e}");
}

#[test]
fn an_hf_model_not_in_the_cache_fails_offline_with_what_to_do() {
    let cache = tempfile::tempdir().unwrap();
    // HF_HOME points the cache at an empty folder; HF_HUB_OFFLINE forbids the network.
    std::env::set_var("HF_HOME", cache.path());
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let e = load_err(Path::new("hf:Qwen/Qwen3-VL-2B-Instruct"), "qwen3_vl");
    assert!(
        e.contains("hf:Qwen/Qwen3-VL-2B-Instruct")
            && e.contains("not in the Hugging Face cache")
            && e.contains("huggingface-cli download"),
        "{e}"
    );
    let e = load_err(Path::new("hf:not-a-repo-id"), "qwen3_vl");
    assert!(e.contains("hf:ORG/NAME"), "{e}");
}

#[test]
fn model_backbone_keys_that_do_not_fit_are_errors_naming_them() {
    let build = |model: &str| -> String {
        let text = format!(
            "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n[model]\n{model}\n[algo]\nkind = \"grpo\"\n"
        );
        // A key of another kind, or no path, is refused on load; the rest when the policy is built.
        match guirl::train::TrainConfig::parse(&text) {
            Err(e) => format!("{e:#}"),
            Ok(cfg) => match cfg.model.build(&Device::Cpu, 0) {
                Ok(_) => panic!("{model} built"),
                Err(e) => format!("{e:#}"),
            },
        }
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let e = build(&format!("path = \"{root}/fixtures/qwen_vl/qwen3_vl\""));
    assert!(e.contains("model.path is a key of kind = \"qwen3_vl\" or \"qwen2_5_vl\""), "{e}");
    let e = build(&format!(
        "kind = \"qwen3_vl\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\"\nword_buckets = 64"
    ));
    assert!(e.contains("model.word_buckets is a key of kind = \"small\"") && e.contains("remove it"), "{e}");
    let e = build("kind = \"qwen3_vl\"");
    assert!(e.contains("needs model.path"), "{e}");
    let e = build(&format!("kind = \"llava\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\""));
    assert!(e.contains("qwen3_vl") && e.contains("qwen2_5_vl"), "{e}");
    // the old form: refused with the new one
    let e = build(&format!("backbone = \"qwen3_vl\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\""));
    assert!(e.contains("[model] is in the old form") && e.contains("kind = \"qwen3_vl\""), "{e}");
    let e = build(&format!(
        "kind = \"qwen3_vl\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\"\ntrain_modules = [\"vision\"]"
    ));
    assert!(e.contains("train_modules") && e.contains("embed_tokens"), "{e}");
    let e = build(&format!(
        "kind = \"qwen3_vl\"\npath = \"{root}/fixtures/qwen_vl/qwen3_vl\"\nlora_targets = [\"qkv\"]"
    ));
    assert!(e.contains("LoRA targets"), "{e}");
}

#[test]
fn vision_adapters_train_through_the_policy_and_are_never_served_from_the_vision_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings("qwen3_vl", tmp.path());
    s.lora_vision_targets = vec!["qkv".into(), "linear_fc2".into()];
    let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
    perturb_b(&p);
    let reference = p.reference().unwrap();
    let states = vec![state(0, &[])];
    let target = vec![p.encode(&states[0], &GuiAction::Click { x: 35, y: 20 }).unwrap()];
    let before_ref = reference.score(&states, &target).unwrap().logp;
    let vars = p.trainable_vars();
    let vision: Vec<_> = vars.iter().filter(|(n, _)| n.starts_with("model.visual.")).cloned().collect();
    assert!(
        !vision.is_empty()
            && vision.iter().all(|(n, _)| n.contains(".attn.qkv.") || n.contains("linear_fc2"))
    );
    let before: Vec<Tensor> = vision.iter().map(|(_, v)| v.as_tensor().copy().unwrap()).collect();
    let mut opt = AdamW::new(vars.clone(), AdamWConfig { lr: 1e-2, ..Default::default() }).unwrap();
    let live = p.score(&states, &target).unwrap().logp;
    let nll0 = live.sum_all().unwrap().neg().unwrap();
    opt.step(&nll0.backward().unwrap()).unwrap();
    for ((name, v), b) in vision.iter().zip(&before) {
        assert!(max_diff(v.as_tensor(), b) > 0.0, "{name} did not move");
    }
    // the reference scores with its own copy of the vision adapters, not the live tower's
    assert_eq!(max_diff(&before_ref, &reference.score(&states, &target).unwrap().logp), 0.0);
    // switching the vision adapters' B off changes the score of the same screenshot at once
    let now = p.score(&states, &target).unwrap().logp;
    for (name, v) in &vision {
        if name.ends_with("lora_B") {
            v.set(&v.as_tensor().zeros_like().unwrap()).unwrap();
        }
    }
    assert!(max_diff(&now, &p.score(&states, &target).unwrap().logp) > 0.0, "a stale vision output");
}

/// Several states are scored as one right-padded batch (one pass, not one per state: on a
/// GPU the pass's time is the host issuing kernels). Each state's log-probs, entropies and
/// the LoRA gradients equal those of the states scored one at a time, with prompts and
/// answers of different lengths, an empty answer, and gradient checkpointing on or off.
#[test]
fn a_padded_batch_scores_and_trains_as_each_state_alone() {
    for (arch, checkpoint) in [("qwen3_vl", false), ("qwen2_5_vl", false), ("qwen3_vl", true)] {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        s.gradient_checkpointing = checkpoint;
        let p_settings = s.clone();
        let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        // two screenshots of one size (states 0 and 3 share one), so the vision tower sees
        // the batch's two distinct images together and each once; states 0 and 3 also share
        // their text before the screenshot, which the batch runs once for both, while state
        // 2 (another size, so another system prompt) runs whole
        let mut states = vec![
            state(0, &[]),
            state(1, &["click(10, 20)", "key(Enter)", "type(\"a longer history\")"]),
            state(2, &["click(10, 20)"]),
            state(3, &["key(Tab)"]),
        ];
        states[2].screenshot = image::RgbImage::from_fn(70, 45, |x, y| {
            image::Rgb([(y * 4) as u8, 200 - x as u8, (x ^ y) as u8])
        })
        .into();
        let tokens: Vec<Vec<u32>> = vec![
            p.encode(&states[0], &GuiAction::Click { x: 35, y: 20 }).unwrap(),
            Vec::new(),
            p.encode(&states[2], &GuiAction::Type { text: "hello there".into() }).unwrap(),
            p.encode(&states[3], &GuiAction::Click { x: 5, y: 40 }).unwrap(),
        ];
        let batch = p.score_train(&states, &tokens, 3).unwrap();
        let vars = p.trainable_vars();
        let grads = p.gradients(&batch.logp.sum_all().unwrap()).unwrap();
        // the states alone on a twin with the same weights and its own, empty vision cache:
        // there each screenshot goes through the vision tower alone, in the batch together
        let q = QwenVlPolicy::new(p_settings, &Device::Cpu, 0).unwrap();
        let q_vars = q.trainable_vars();
        for ((n, v), (m, w)) in q_vars.iter().zip(&vars) {
            assert_eq!(n, m);
            v.set(w.as_tensor()).unwrap();
        }
        let mut alone_grads: Vec<Tensor> =
            vars.iter().map(|(_, v)| v.as_tensor().zeros_like().unwrap()).collect();
        for (i, (st, t)) in states.iter().zip(&tokens).enumerate() {
            let one = q.score_train(std::slice::from_ref(st), std::slice::from_ref(t), 3).unwrap();
            let n = t.len();
            let mask: f32 = batch.mask.get(i).unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert_eq!(mask as usize, n, "{arch}: state {i}'s mask");
            if n == 0 {
                continue;
            }
            let row = |x: &Tensor| x.get(i).unwrap().narrow(0, 0, n).unwrap();
            let lone = |x: &Tensor| x.get(0).unwrap().narrow(0, 0, n).unwrap();
            let d = max_diff(&row(&batch.logp), &lone(&one.logp));
            assert!(d < 1e-5, "{arch} (checkpoint {checkpoint}) state {i}: log-probs differ by {d}");
            let d = max_diff(&row(&batch.entropy), &lone(&one.entropy));
            assert!(d < 1e-5, "{arch} state {i}: entropies differ by {d}");
            let g = q.gradients(&one.logp.sum_all().unwrap()).unwrap();
            for (acc, (name, v)) in alone_grads.iter_mut().zip(&q_vars) {
                let gv =
                    g.get(v).unwrap_or_else(|| panic!("{arch}: state {i} alone: no gradient for {name}"));
                *acc = (&*acc + gv).unwrap();
            }
        }
        for ((name, v), want) in vars.iter().zip(&alone_grads) {
            let got = grads.get(v).unwrap_or_else(|| panic!("{arch}: no gradient for {name}"));
            let scale = want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap().max(1e-6);
            let d = max_diff(got, want) / scale;
            assert!(
                d < 1e-4,
                "{arch} (checkpoint {checkpoint}): {name}'s gradient differs by {d} (relative)"
            );
        }
    }
}
