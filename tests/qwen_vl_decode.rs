//! Rollout decoding of the Qwen-VL policies, on the tiny random checkpoints in
//! `fixtures/qwen_vl`: sampled answers rescore to their own log-probs, and an answer is bit
//! for bit the same whatever shares its decoding (alone, in a chunk, padded or not, joining
//! late, read every few steps); without `batch_invariant` the same tokens within rounding.
//! Every decoding the policy offers is checked (`DECODINGS`).

mod common;

use candle_core::{Device, Tensor};
use guirl::policy::qwen_vl::{DecodeKernels, DecodeLora, DecodeWindow, QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{Policy, PolicyFailure, Sampling, TrainablePolicy};

use common::qwen::{
    bits, copy_of, decode_joining, max_abs_diff, max_diff, perturb_b, policy_settings as settings,
};
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
        let what = format!("{arch} {window:?} {lora:?} {attention:?}");
        let got = decode_joining(dec.as_mut(), &states, &keys, &joins, &what);
        for (i, d) in got.iter().enumerate() {
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
            let what = format!("{arch} {window:?} {lora:?} {attention:?} sync {sync}");
            let got: Vec<_> =
                decode_joining(dec.as_mut(), &states, &keys, &joins, &what).iter().map(bits).collect();
            (whole, got)
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
