//! LoRA dropout (`[model] lora_dropout`) on the tiny Qwen-VL fixtures: it acts in training
//! passes only (never in rollouts, plain scoring or the KL reference's pass), its masks
//! come from the pass's key (the same run gives the same gradients), 0 changes nothing,
//! and it is saved as PEFT's `lora_dropout`.

use crate::common;

use candle_core::{Device, Tensor};
use guirl::env::{GuiAction, ScreenState};
use guirl::policy::qwen_vl::train::lora::load_peft;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{Policy, Sampling, TrainablePolicy};
use guirl::train::algo_config::AlgoConfig;
use guirl::train::optim::AdamW;
use guirl::train::update::{update, Sample};
use std::path::Path;

fn settings(arch: &str, dir: &Path, dropout: f64) -> QwenPolicySettings {
    let mut s = common::qwen::policy_settings(arch, dir);
    s.lora_dropout = dropout;
    s
}

use common::synthetic_state as state;

/// Every LoRA B set to the same fixed non-zero values in every policy (B starts at 0,
/// where dropout on the adapter's input could not show).
fn set_b(p: &QwenVlPolicy) {
    for (k, (name, v)) in p.trainable_vars().into_iter().enumerate() {
        if name.ends_with("lora_B") {
            let n = v.elem_count();
            let vals: Vec<f32> = (0..n).map(|i| 0.05 * ((i as f32) * 0.37 + k as f32).sin()).collect();
            v.set(&Tensor::from_vec(vals, v.dims(), &Device::Cpu).unwrap()).unwrap();
        }
    }
}

fn policy(arch: &str, dir: &Path, dropout: f64) -> QwenVlPolicy {
    let p = QwenVlPolicy::new(settings(arch, dir, dropout), &Device::Cpu, 5).unwrap();
    set_b(&p);
    p
}

fn batch(p: &QwenVlPolicy) -> (Vec<ScreenState>, Vec<Vec<u32>>) {
    let states = vec![state(0, &[]), state(1, &["click(10, 20)"])];
    let tokens = vec![
        p.encode(&states[0], &GuiAction::Click { x: 35, y: 20 }).unwrap(),
        p.encode(&states[1], &GuiAction::Done).unwrap(),
    ];
    (states, tokens)
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// The training loss and every trainable tensor's gradient (by name) of a training pass.
fn train_grads(p: &QwenVlPolicy, key: u64) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    let (states, tokens) = batch(p);
    let s = p.score_train(&states, &tokens, key).unwrap();
    let loss = s.logp.sum_all().unwrap().neg().unwrap();
    let g = p.gradients(&loss).unwrap();
    let grads = p
        .trainable_vars()
        .into_iter()
        .map(|(n, v)| {
            let gv = g.get(v.as_tensor()).unwrap_or_else(|| panic!("{n} has no gradient"));
            (n, values(gv))
        })
        .collect();
    (values(&s.logp), grads)
}

#[test]
fn dropout_zero_changes_nothing() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let p = policy(arch, tmp.path(), 0.0);
        let (states, tokens) = batch(&p);
        let plain = p.score(&states, &tokens).unwrap();
        let loss = plain.logp.sum_all().unwrap().neg().unwrap();
        let g = loss.backward().unwrap();
        let (logp, grads) = train_grads(&p, 11);
        assert_eq!(logp, values(&plain.logp), "{arch}: a training pass without dropout is the plain one");
        for ((name, gt), (_, v)) in grads.iter().zip(p.trainable_vars()) {
            assert_eq!(gt, &values(g.get(v.as_tensor()).unwrap()), "{arch}: {name}");
        }
    }
}

#[test]
fn dropout_acts_in_training_passes_only_with_keyed_masks() {
    for arch in ["qwen3_vl", "qwen2_5_vl"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut p = policy(arch, tmp.path(), 0.3);
        let mut off = policy(arch, tmp.path(), 0.0);
        let (states, tokens) = batch(&p);
        let eval = values(&p.score(&states, &tokens).unwrap().logp);
        // plain scoring (evaluation, the KL measurement) ignores dropout
        assert_eq!(eval, values(&off.score(&states, &tokens).unwrap().logp), "{arch}");
        let (a, ga) = train_grads(&p, 11);
        assert_ne!(a, eval, "{arch}: the training pass drops adapter inputs");
        // the same key: the same masks, the same gradients, also in a second policy of the run
        let twin = policy(arch, tmp.path(), 0.3);
        let (b, gb) = train_grads(&twin, 11);
        assert_eq!(a, b, "{arch}");
        assert_eq!(ga, gb, "{arch}: same seed and step, same gradients");
        assert!(ga.iter().all(|(_, g)| g.iter().any(|x| *x != 0.0)), "{arch}: every tensor has a gradient");
        let (c, gc) = train_grads(&p, 12);
        assert_ne!(a, c, "{arch}: another update step draws other masks");
        assert_ne!(ga, gc, "{arch}");
        // the pass is over: plain scoring is back to no dropout
        assert_eq!(values(&p.score(&states, &tokens).unwrap().logp), eval, "{arch}");
        // the KL reference's pass never drops, even when asked for a training pass
        let r = p.reference().unwrap();
        assert_eq!(values(&r.score_train(&states, &tokens, 11).unwrap().logp), eval, "{arch}");
        // rollouts ignore it: the same answers and log-probs as without dropout
        for q in [&mut p, &mut off] {
            q.set_sampling(Sampling { temperature: 1.0, greedy: false, seed: 3 });
        }
        let da = p.act_keyed(&states, &[1, 2]).unwrap();
        let db = off.act_keyed(&states, &[1, 2]).unwrap();
        for (x, y) in da.iter().zip(&db) {
            assert_eq!((&x.tokens, &x.token_logprobs), (&y.tokens, &y.token_logprobs), "{arch}");
        }
    }
}

/// Rollout-like samples: the policy's own sampled tokens and their log-probs.
fn samples(p: &mut QwenVlPolicy) -> Vec<Sample> {
    p.set_sampling(Sampling { temperature: 1.0, greedy: false, seed: 3 });
    let states = vec![state(0, &[]), state(1, &["click(10, 20)"]), state(2, &[]), state(3, &["key(Enter)"])];
    let d = p.act_keyed(&states, &[1, 2, 3, 4]).unwrap();
    states
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
        .collect()
}

/// The adapters after one update (2 minibatches) of a fresh policy, with the run seed `seed`.
fn after_update(dir: &Path, dropout: f64, seed: u64) -> Vec<Vec<f32>> {
    let mut p = policy("qwen3_vl", dir, dropout);
    let s = samples(&mut p);
    let algo = AlgoConfig { minibatch: 2, epochs: 1, lr: 1e-3, ..Default::default() };
    let mut opt = AdamW::new(p.trainable_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &s, &algo, seed, 0).unwrap();
    assert_eq!(up.optimizer_steps, 2, "{up:?}");
    p.trainable_vars().iter().map(|(_, v)| values(v.as_tensor())).collect()
}

#[test]
fn an_update_with_dropout_is_reproducible_from_the_run_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let a = after_update(tmp.path(), 0.2, 7);
    assert_eq!(a, after_update(tmp.path(), 0.2, 7), "the same seed, byte-identical adapters");
    assert_ne!(a, after_update(tmp.path(), 0.2, 8), "another run seed, other masks");
    assert_ne!(a, after_update(tmp.path(), 0.0, 7), "dropout acts in the update");
}

#[test]
fn lora_dropout_is_saved_as_pefts_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let p = policy("qwen2_5_vl", tmp.path(), 0.05);
    let ckpt = tmp.path().join("ckpt");
    p.save(&ckpt).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["lora_dropout"], serde_json::json!(0.05));
    assert_eq!(load_peft(&ckpt).unwrap().settings.dropout, 0.05);
    // the checkpoint loads back as a policy that trains with the same dropout
    let q = QwenVlPolicy::load_dir(&ckpt, &Device::Cpu).unwrap();
    let (states, tokens) = batch(&q);
    assert_eq!(train_grads(&q, 4).0, train_grads(&p, 4).0);
    assert_eq!(
        values(&q.score(&states, &tokens).unwrap().logp),
        values(&p.score(&states, &tokens).unwrap().logp)
    );
    // a policy without dropout still loads the adapter (dropout is not part of its shape)
    let mut plain = QwenVlPolicy::new(settings("qwen2_5_vl", tmp.path(), 0.0), &Device::Cpu, 5).unwrap();
    plain.load(&ckpt).unwrap();
    // an out-of-range value in a PEFT folder is refused with the file's name
    let mut bad = cfg.clone();
    bad["lora_dropout"] = serde_json::json!(1.5);
    std::fs::write(ckpt.join("adapter_config.json"), bad.to_string()).unwrap();
    let e = format!("{:#}", load_peft(&ckpt).err().unwrap());
    assert!(e.contains("adapter_config.json") && e.contains("lora_dropout"), "{e}");
}

/// The error `[model]` gives: on load (a key of another kind, a value out of range), and
/// at build too for a value out of range.
fn model_error(model: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let model = model.replace("PATH", &format!("{root}/fixtures/qwen_vl/qwen3_vl"));
    let text = format!(
        "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n[model]\n{model}\n[algo]\nkind = \"grpo\"\n"
    );
    let mut cfg = match guirl::train::TrainConfig::parse(&text) {
        Ok(cfg) => cfg,
        Err(e) => return format!("{e:#}"),
    };
    let built = match cfg.model.build(&Device::Cpu, 0) {
        Ok(_) => panic!("{model} built"),
        Err(e) => format!("{e:#}"),
    };
    cfg.resolve();
    let loaded = format!("{:#}", cfg.validate().expect_err("validated"));
    assert!(loaded.contains(&built), "load: {loaded}\nbuild: {built}");
    built
}

#[test]
fn misused_lora_dropout_and_checkpointing_keys_are_errors_naming_them() {
    for v in ["1.0", "-0.1", "1.5"] {
        let e = model_error(&format!("kind = \"qwen3_vl\"\npath = \"PATH\"\nlora_dropout = {v}"));
        assert!(e.contains("model.lora_dropout") && e.contains("[0, 1)"), "{e}");
    }
    let e = model_error("lora_dropout = 0.1");
    assert!(e.contains("model.lora_dropout is a key of kind = \"qwen3_vl\""), "{e}");
    let e = model_error("gradient_checkpointing = true");
    assert!(e.contains("model.gradient_checkpointing is a key of kind = \"qwen3_vl\""), "{e}");
    // in range, with a backbone: both keys build
    let text = format!(
        "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n[model]\nkind = \"qwen3_vl\"\n\
         path = \"{}/fixtures/qwen_vl/qwen3_vl\"\nlora_dropout = 0.05\ngradient_checkpointing = true\n[algo]\nkind = \"grpo\"\n",
        env!("CARGO_MANIFEST_DIR")
    );
    let cfg = guirl::train::TrainConfig::parse(&text).unwrap();
    let s = cfg.model.qwen().unwrap();
    assert_eq!((s.lora_dropout, s.gradient_checkpointing), (0.05, true));
    cfg.model.build(&Device::Cpu, 0).unwrap();
}
