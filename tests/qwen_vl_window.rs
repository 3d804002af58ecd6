//! `decode_window`: answers decoded in fixed window slots, one attention per layer for a
//! chunk of them, give per-answer decoding's answers within rounding, are rescored to their
//! sampled log-probs, and a prompt that does not fit the window is an error naming the key.
//! (That they are bit for bit the same whatever shares the chunk is in qwen_vl_policy.rs.)

mod common;

use candle_core::{Device, Tensor};
use common::qwen::{perturb_b, policy_settings};
use common::synthetic_state as state;
use guirl::policy::qwen_vl::QwenVlPolicy;
use guirl::policy::{Policy, Sampling, TrainablePolicy};

#[test]
fn window_decoding_gives_per_answer_decodings_answers_within_rounding() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = policy_settings(arch, tmp.path());
        s.max_new_tokens = 12;
        s.decode_rows = Some(3);
        let per_answer = QwenVlPolicy::new(s.clone(), &Device::Cpu, 0).unwrap();
        s.decode_window = Some(512);
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
            let diff = a
                .token_logprobs
                .iter()
                .zip(&b.token_logprobs)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
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
        s.decode_window = Some(16);
        let mut small = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        let e = format!("{:#}", small.act_keyed(&states[..1], &keys[..1]).unwrap_err());
        assert!(e.contains("raise model.decode_window (now 16) to at least"), "{arch}: {e}");
    }
}
