//! Gradient checkpointing per decoder layer (`[model] gradient_checkpointing`) on the tiny
//! Qwen-VL fixtures: the loss and every trainable tensor's gradient equal those without it
//! (also with LoRA dropout, whose masks the recomputation must draw again, and with modules
//! trained whole before and after the layers), the trainer's update sees the same
//! gradients, and rollouts (the KV-cached path) are untouched.
//!
//! `checkpointing_memory_and_time` (ignored) measures peak RSS and time of one training
//! pass with and without it: see its docs.

mod common;

use candle_core::{DType, Device, Tensor};
use guirl::env::GuiAction;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{Policy, Sampling, TrainablePolicy};
use guirl::train::config::AlgoConfig;
use guirl::train::optim::AdamW;
use guirl::train::update::{update, Sample};
use std::path::{Path, PathBuf};

fn settings(arch: &str, dir: &Path, checkpointing: bool, dropout: f64) -> QwenPolicySettings {
    let mut s = common::qwen::policy_settings(arch, dir);
    s.lora_dropout = dropout;
    s.gradient_checkpointing = checkpointing;
    // trained whole: the embeddings before the first layer, the final norm after the last
    s.train_modules = vec!["embed_tokens".into(), "norm".into()];
    s
}

use common::synthetic_state as state;

fn policy(arch: &str, dir: &Path, checkpointing: bool, dropout: f64) -> QwenVlPolicy {
    let p = QwenVlPolicy::new(settings(arch, dir, checkpointing, dropout), &Device::Cpu, 5).unwrap();
    // fixed non-zero B (it starts at 0), the same in every policy
    for (k, (name, v)) in p.trainable_vars().into_iter().enumerate() {
        if name.ends_with("lora_B") {
            let vals: Vec<f32> =
                (0..v.elem_count()).map(|i| 0.05 * ((i as f32) * 0.37 + k as f32).sin()).collect();
            v.set(&Tensor::from_vec(vals, v.dims(), &Device::Cpu).unwrap()).unwrap();
        }
    }
    p
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap()
}

/// A loss of a training pass (log-probs and entropies of two states) and every trainable
/// tensor's gradient, by name.
fn loss_and_grads(p: &QwenVlPolicy) -> (f32, Vec<(String, Vec<f32>)>) {
    let states = vec![state(0, &[]), state(1, &["click(10, 20)", "key(Enter)"])];
    let tokens = vec![
        p.encode(&states[0], &GuiAction::Click { x: 35, y: 20 }).unwrap(),
        p.encode(&states[1], &GuiAction::Type { text: "hi".into() }).unwrap(),
    ];
    let s = p.score_train(&states, &tokens, 9).unwrap();
    let loss =
        (s.logp.sum_all().unwrap().neg().unwrap() - (s.entropy.sum_all().unwrap() * 0.1).unwrap()).unwrap();
    let g = p.gradients(&loss).unwrap();
    let grads = p
        .trainable_vars()
        .into_iter()
        .map(|(n, v)| {
            let gv = g.get(v.as_tensor()).unwrap_or_else(|| panic!("{n} has no gradient"));
            (n, values(gv))
        })
        .collect();
    (loss.to_scalar::<f32>().unwrap(), grads)
}

/// max |a − b| / max |b|.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    let d = common::qwen::max_abs_diff(a, b);
    d / b.iter().map(|x| x.abs()).fold(f32::MIN_POSITIVE, f32::max)
}

#[test]
fn checkpointed_layers_give_the_same_loss_and_every_gradient() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        for dropout in [0.0, 0.2] {
            let tmp = tempfile::tempdir().unwrap();
            let (l_off, g_off) = loss_and_grads(&policy(arch, tmp.path(), false, dropout));
            let (l_on, g_on) = loss_and_grads(&policy(arch, tmp.path(), true, dropout));
            assert!((l_on - l_off).abs() <= 1e-5 * l_off.abs(), "{arch} p={dropout}: loss {l_on} vs {l_off}");
            assert_eq!(g_on.len(), g_off.len());
            let mut worst = 0f32;
            for ((name, on), (_, off)) in g_on.iter().zip(&g_off) {
                assert!(
                    off.iter().any(|x| *x != 0.0),
                    "{arch}: {name} has a zero gradient without checkpointing"
                );
                let r = rel(on, off);
                assert!(r <= 1e-5, "{arch} p={dropout}: {name} differs by {r} (relative)");
                worst = worst.max(r);
            }
            println!(
                "{arch} dropout {dropout}: {} tensors, worst relative gradient difference {worst:.2e}",
                g_on.len()
            );
        }
    }
}

#[test]
fn checkpointed_layers_keep_their_adapters_out_of_the_main_graph() {
    // what shows the layers really ran outside the graph: the plain backward of a
    // checkpointed pass reaches the embeddings (through the layers' input gradients) but
    // none of the adapters, whose gradients only `gradients` merges in
    let tmp = tempfile::tempdir().unwrap();
    let p = policy("qwen3_vl", tmp.path(), true, 0.0);
    let states = vec![state(0, &[])];
    let tokens = vec![p.encode(&states[0], &GuiAction::Done).unwrap()];
    let loss = p.score_train(&states, &tokens, 1).unwrap().logp.sum_all().unwrap();
    let plain = loss.backward().unwrap();
    for (name, v) in p.trainable_vars() {
        let has = plain.get(v.as_tensor()).is_some();
        assert_eq!(has, !name.contains("lora_"), "{name}: in the main graph: {has}");
    }
    // a plain (non-training) pass of the same policy is not checkpointed
    let loss = p.score(&states, &tokens).unwrap().logp.sum_all().unwrap();
    let g = loss.backward().unwrap();
    assert!(p.trainable_vars().iter().all(|(_, v)| g.get(v.as_tensor()).is_some()));
}

#[test]
fn the_trainers_update_gets_the_checkpointed_gradients() {
    let run = |checkpointing: bool| {
        let tmp = tempfile::tempdir().unwrap();
        let mut p = policy("qwen2_5_vl", tmp.path(), checkpointing, 0.1);
        p.set_sampling(Sampling { temperature: 1.0, greedy: false, seed: 3 });
        let states = vec![state(0, &[]), state(1, &["click(10, 20)"]), state(2, &[]), state(3, &[])];
        let d = p.act_keyed(&states, &[1, 2, 3, 4]).unwrap();
        let samples: Vec<Sample> = states
            .into_iter()
            .zip(d)
            .enumerate()
            .map(|(i, (state, d))| Sample {
                state,
                tokens: d.tokens,
                old_logp: d.token_logprobs,
                adv: if i % 2 == 0 { 1.0 } else { -1.0 },
                traj: i,
                group: i,
                behaviour_weight: None,
            })
            .collect();
        let algo = AlgoConfig { minibatch: 2, epochs: 1, lr: 1e-3, ..Default::default() };
        let mut opt = AdamW::new(p.trainable_vars(), algo.adamw_config()).unwrap();
        let up = update(&p, None, &mut opt, &samples, &algo, 1, 0).unwrap();
        (samples.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>(), up)
    };
    let (t_off, off) = run(false);
    let (t_on, on) = run(true);
    assert_eq!(t_on, t_off, "rollouts (KV-cached decoding) are the same with checkpointing on");
    assert_eq!(on.optimizer_steps, 2);
    // without the side gradients merged, the adapters' share of the norm would be missing
    let r = ((on.grad_norm - off.grad_norm) / off.grad_norm).abs();
    assert!(r < 1e-5, "gradient norm {} with checkpointing, {} without", on.grad_norm, off.grad_norm);
    assert!(
        (on.loss.loss - off.loss.loss).abs() <= 1e-5 * off.loss.loss.abs().max(1e-3),
        "{on:?} vs {off:?}"
    );
}

/// Peak RSS and time of training passes with and without checkpointing, each in its own
/// process (peak RSS is per process): `GUIRL_CKPT_MODEL=DIR GUIRL_CKPT=on|off cargo test
/// --release --test qwen_vl_checkpointing checkpointing_memory_and_time -- --ignored --nocapture`.
/// `DIR` is a Qwen3-VL checkpoint folder (default: the tiny fixture); `GUIRL_CKPT_TOKENS`
/// answer tokens are scored (default 64), after a prompt with one 224×224 screenshot.
#[test]
#[ignore]
fn checkpointing_memory_and_time() {
    let dir = std::env::var("GUIRL_CKPT_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| common::qwen::dir("qwen3_vl"));
    let on = std::env::var("GUIRL_CKPT").as_deref() == Ok("on");
    let n: usize = std::env::var("GUIRL_CKPT_TOKENS").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let mut s = QwenPolicySettings::new("qwen3_vl", dir.to_str().unwrap());
    s.gradient_checkpointing = on;
    let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
    let mut st = state(0, &[]);
    st.screenshot =
        image::RgbImage::from_fn(224, 224, |x, y| image::Rgb([(x * 3) as u8, (y * 5) as u8, 40])).into();
    let tokens: Vec<u32> = (0..n as u32).map(|i| 100 + i % 50).collect();
    let rss = |field: &str| -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
    };
    // the vision tower's output is cached: a first pass fills it
    let _ = p.score(std::slice::from_ref(&st), std::slice::from_ref(&tokens)).unwrap();
    let before = rss("VmRSS:");
    let mut times = Vec::new();
    for k in 0..3 {
        let t0 = std::time::Instant::now();
        let sc = p.score_train(std::slice::from_ref(&st), std::slice::from_ref(&tokens), k).unwrap();
        let g = p.gradients(&sc.logp.sum_all().unwrap().neg().unwrap()).unwrap();
        assert!(p.trainable_vars().iter().all(|(_, v)| g.get(v.as_tensor()).is_some()));
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "checkpointing {}: {} answer tokens, RSS before the passes {before} MiB, peak {} MiB, score+backward median {:.3}s",
        if on { "on" } else { "off" },
        n,
        rss("VmHWM:"),
        times[1]
    );
}
