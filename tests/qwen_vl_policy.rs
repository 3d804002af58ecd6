//! The Qwen-VL backbones as trainable policies, on the tiny random checkpoints in
//! `fixtures/qwen_vl`: a frozen copy decodes while the live adapters train, a policy step
//! moves only LoRA, several states score as each alone,
//! adapters save and load, and every malformed checkpoint folder gets a message that
//! names the file and what is wrong in it.

mod common;

use candle_core::{Device, Tensor};
use guirl::env::GuiAction;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{copy_trainable, Policy, Sampling, TrainablePolicy};
use guirl::train::optim::{AdamW, AdamWConfig};
use std::path::Path;

use common::qwen::{bits, copy_of, dir, max_diff, perturb_b, policy_settings as settings};
use common::synthetic_state as state;

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
    let e = load_err(&dir("qwen2_5_vl"), "qwen3_vl");
    assert!(
        e.contains("model.kind") && e.contains("holds a qwen2_5_vl checkpoint; set kind = \"qwen2_5_vl\""),
        "{e}"
    );

    // a folder that does not exist
    let e = load_err(Path::new("/nonexistent/qwen"), "qwen3_vl");
    assert!(e.contains("/nonexistent/qwen") && e.contains("no such checkpoint folder"), "{e}");

    // a saved adapter whose base model moved: the file that names it is said, and the fix
    let tmp = tempfile::tempdir().unwrap();
    let p = QwenVlPolicy::new(settings("qwen3_vl", tmp.path()), &Device::Cpu, 0).unwrap();
    let ckpt = tmp.path().join("ckpt");
    p.save(&ckpt).unwrap();
    edit_json(&ckpt.join("qwen_policy.json"), |v| v["path"] = "/nonexistent/base".into());
    let e = format!("{:#}", QwenVlPolicy::load_dir(&ckpt, &Device::Cpu).err().unwrap());
    assert!(
        e.contains(
            "qwen_policy.json: the base model it names (\"path\": \"/nonexistent/base\") did not load"
        ) && e.contains("set \"path\" there")
            && e.contains("no such checkpoint folder"),
        "{e}"
    );
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
/// answers of different lengths, an empty answer, states that are the same but for their
/// answers, gradient checkpointing on or off, and adapters in the vision tower.
#[test]
fn a_padded_batch_scores_and_trains_as_each_state_alone() {
    // (with vision adapters the tower runs in the pass, each screenshot once for its states;
    // the last case runs the same states' prompts whole, `score_same_states_once = false`)
    let cases = [
        ("qwen3_vl", false, false, true),
        ("qwen2_5_vl", false, false, true),
        ("qwen3_vl", true, false, true),
        ("qwen3_vl", false, true, true),
        ("qwen2_5_vl", false, false, false),
    ];
    for (arch, checkpoint, vision, once) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = settings(arch, tmp.path());
        s.gradient_checkpointing = checkpoint;
        s.score_same_states_once = once;
        if vision {
            s.lora_vision_targets = vec!["qkv".into(), "linear_fc2".into()];
        }
        let p_settings = s.clone();
        let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        perturb_b(&p);
        // two screenshots of one size (states 0 and 3 share one), so the vision tower sees
        // the batch's two distinct images together and each once; states 0 and 3 also share
        // their text before the screenshot, which the batch runs once for both, while state
        // 2 (another size, so another system prompt) runs whole; states 4 and 5 are state
        // 0 again (a group's first step: one screen, one prompt), which the batch runs once
        // for the three, their answers apart
        let mut states = vec![
            state(0, &[]),
            state(1, &["click(10, 20)", "key(Enter)", "type(\"a longer history\")"]),
            state(2, &["click(10, 20)"]),
            state(3, &["key(Tab)"]),
            state(0, &[]),
            state(0, &[]),
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
            p.encode(&states[4], &GuiAction::Type { text: "another answer".into() }).unwrap(),
            p.encode(&states[5], &GuiAction::Click { x: 60, y: 3 }).unwrap(),
        ];
        let batch = p.score_train(&states, &tokens, 3).unwrap();
        let vars = p.trainable_vars();
        let grads = p.gradients(&batch.logp.sum_all().unwrap()).unwrap();
        // the three copies alone in a pass: one set is all of it, its whole prompt one prefix
        let copies = [0, 4, 5];
        let set_states: Vec<_> = copies.iter().map(|&i| states[i].clone()).collect();
        let set_tokens: Vec<_> = copies.iter().map(|&i| tokens[i].clone()).collect();
        let set = p.score_train(&set_states, &set_tokens, 3).unwrap();
        for (j, &i) in copies.iter().enumerate() {
            let n = tokens[i].len();
            let d = max_diff(
                &set.logp.get(j).unwrap().narrow(0, 0, n).unwrap(),
                &batch.logp.get(i).unwrap().narrow(0, 0, n).unwrap(),
            );
            assert!(d < 1e-5, "{arch}: copy {i} in a pass of its set: log-probs differ by {d}");
        }
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
            assert!(d < 1e-5, "{arch} (checkpoint {checkpoint}, vision adapters {vision}) state {i}: log-probs differ by {d}");
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
                "{arch} (checkpoint {checkpoint}, vision adapters {vision}): {name}'s gradient differs by {d} (relative)"
            );
        }
    }
}
