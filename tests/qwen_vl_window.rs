//! `decode_window`: answers decoded in window slots, one attention per layer for a chunk of
//! them, give per-answer decoding's answers within rounding, are rescored to their sampled
//! log-probs, and a prompt that does not fit a fixed window is an error naming the key;
//! with `"auto"` each answer's slot is sized from its own prompt, and answers of different
//! sizes decoded together are each the bits it gets alone. (That answers are bit for bit
//! the same whatever shares the chunk is in qwen_vl_decode.rs.)

mod common;

use candle_core::{Device, Tensor};
use common::qwen::{bits, max_abs_diff, perturb_b, policy_settings};
use common::synthetic_state as state;
use guirl::policy::qwen_vl::{DecodeWindow, QwenVlPolicy};
use guirl::policy::{Policy, Sampling, TrainablePolicy};

#[test]
fn window_decoding_gives_per_answer_decodings_answers_within_rounding() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = policy_settings(arch, tmp.path());
        s.max_new_tokens = 12;
        s.decode_rows = Some(3);
        let per_answer = QwenVlPolicy::new(s.clone(), &Device::Cpu, 0).unwrap();
        s.decode_window = Some(DecodeWindow::Tokens(512));
        let windowed = QwenVlPolicy::new(s.clone(), &Device::Cpu, 0).unwrap();
        let states = vec![
            state(0, &[]),
            state(0, &[]),
            state(1, &["click(10, 20)"]),
            state(2, &["click(10, 20)", "key(Enter)"]),
        ];
        let keys = [1u64, 2, 3, 4];
        let mut runs = Vec::new();
        for mut p in [per_answer, windowed] {
            perturb_b(&p);
            p.set_sampling(Sampling { temperature: 1.0, greedy: true, seed: 3 });
            runs.push((p.act_keyed(&states, &keys).unwrap(), p));
        }
        let ((a, _), (b, windowed)) = (&runs[0], &runs[1]);
        for (i, (a, b)) in a.iter().zip(b).enumerate() {
            assert_eq!(a.tokens, b.tokens, "{arch} state {i}: greedy tokens differ");
            let diff = max_abs_diff(&a.token_logprobs, &b.token_logprobs);
            assert!(diff < 1e-4, "{arch} state {i}: log-probs differ by {diff}");
        }
        // sampled answers rescored (one pass over prompt and answer) give their log-probs
        let tokens: Vec<Vec<u32>> = b.iter().map(|d| d.tokens.clone()).collect();
        let scores = windowed.score(&states, &tokens).unwrap();
        for (i, d) in b.iter().enumerate() {
            let got = scores.logp.get(i).unwrap().narrow(0, 0, d.tokens.len()).unwrap();
            let want = Tensor::new(d.token_logprobs.as_slice(), &Device::Cpu).unwrap();
            let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff < 1e-4, "{arch} state {i}: rescored log-probs differ by {diff}");
        }
        // a window the prompt and the longest answer do not fit: an error saying what to raise
        s.decode_window = Some(DecodeWindow::Tokens(16));
        let mut small = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        let e = format!("{:#}", small.act_keyed(&states[..1], &keys[..1]).unwrap_err());
        assert!(e.contains("raise model.decode_window (now 16) to at least"), "{arch}: {e}");
    }
}

/// `"auto"`: a prompt too long for the first window size gets the next one, decoded in
/// its own chunks in the same steps; every answer is the bits it gets alone, and a window
/// too small for that prompt names the size it needs.
#[test]
fn auto_windows_are_sized_per_prompt_and_answers_of_every_size_are_those_decoded_alone() {
    // a long history: the prompt outgrows the short prompts' window size
    let long: Vec<String> = (0..40).map(|i| format!("click({i}, {})", 2 * i)).collect();
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let states = vec![state(0, &[]), state(1, &long), state(2, &["click(10, 20)"]), state(3, &long)];
    let keys = [40u64, 41, 42, 43];
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = policy_settings(arch, tmp.path());
        (s.max_new_tokens, s.decode_rows, s.decode_window) = (8, Some(2), Some(DecodeWindow::Tokens(16)));
        // the window each prompt needs, from a fixed window too small for any
        let mut fixed = QwenVlPolicy::new(s.clone(), &Device::Cpu, 0).unwrap();
        let mut need = |i: usize| -> usize {
            let e = format!("{:#}", fixed.act_keyed(&states[i..=i], &keys[i..=i]).unwrap_err());
            e.split("at least ").nth(1).and_then(|t| t.split(',').next()).unwrap().parse().unwrap()
        };
        let (short, long) = (need(0), need(1));
        let size = |n: usize| DecodeWindow::Auto.slot_for(n).unwrap();
        assert!(size(short) < size(long), "{arch}: {short} and {long} tokens round to one window size");
        s.decode_window = Some(DecodeWindow::Auto);
        let mut p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        p.set_sampling(Sampling { temperature: 1.5, greedy: false, seed: 9 });
        let together: Vec<_> = p.act_keyed(&states, &keys).unwrap().iter().map(bits).collect();
        for i in 0..states.len() {
            let alone = p.act_keyed(&states[i..=i], &keys[i..=i]).unwrap();
            assert_eq!(bits(&alone[0]), together[i], "{arch}: state {i} alone differs from in the batch");
        }
    }
}

#[test]
fn decode_window_reads_auto_off_or_tokens_and_names_a_bad_word() {
    let read = |v: &str| toml::from_str::<toml::Table>(&format!("w = {v}")).unwrap()["w"].clone();
    let window = |v: &str| read(v).try_into::<DecodeWindow>();
    assert_eq!(window("\"auto\"").unwrap(), DecodeWindow::Auto);
    assert_eq!(window("\"off\"").unwrap(), DecodeWindow::Off);
    assert_eq!(window("1024").unwrap(), DecodeWindow::Tokens(1024));
    for bad in ["\"big\"", "true", "-3"] {
        let e = window(bad).unwrap_err().to_string();
        assert!(e.contains("\"auto\", \"off\" or a number of tokens"), "{bad}: {e}");
    }
    assert_eq!("auto".parse::<DecodeWindow>().unwrap(), DecodeWindow::Auto);
    assert_eq!(toml::Value::try_from(DecodeWindow::Tokens(512)).unwrap(), toml::Value::Integer(512));
    assert_eq!(toml::Value::try_from(DecodeWindow::Auto).unwrap(), toml::Value::String("auto".into()));
}
