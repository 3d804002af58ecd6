//! peft adapters (language model and vision tower) against peft's outputs, their
//! gradients, training and saving; the layer profile; a vision rope theta that is not the default.
use crate::common::qwen::*;
use candle_core::{DType, Device, Tensor, D};
use guirl::policy::qwen_vl::train::lora::LoraSettings;

#[test]
fn a_peft_adapter_made_by_peft_reproduces_its_logits() {
    let mut m = load("qwen3_vl");
    let r = reference("qwen3_vl");
    m.load_adapter(&dir("qwen3_vl").join("lora")).unwrap();
    let want =
        candle_core::safetensors::load(dir("qwen3_vl").join("lora/reference.safetensors"), &Device::Cpu)
            .unwrap();
    let (logits, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
    let e = rel_err(&logits, &want["one_image.logits"]);
    eprintln!("qwen3_vl/one_image with peft's adapter: relative error {e:.2e}");
    assert!(e <= tolerance(), "with peft's adapter: relative error {e}");
    // saved by guirl and read back: the same logits
    let tmp = tempfile::tempdir().unwrap();
    m.save_adapter(tmp.path()).unwrap();
    let mut m2 = load("qwen3_vl");
    m2.load_adapter(tmp.path()).unwrap();
    let (again, _) = prompt_logits(&m2, &r, "one_image", None).unwrap();
    assert_eq!(rel_err(&again, &logits), 0.0);
}

#[test]
fn a_peft_adapter_on_the_vision_tower_reproduces_peft_logits() {
    for arch in ARCHS {
        let mut m = load(arch);
        let r = reference(arch);
        let folder = dir(arch).join("lora_vision");
        m.load_adapter(&folder).unwrap();
        assert!(m.vision.has_adapters(), "{arch}: peft's vision targets were attached");
        let want =
            candle_core::safetensors::load(folder.join("reference.safetensors"), &Device::Cpu).unwrap();
        let (logits, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
        let e = rel_err(&logits, &want["one_image.logits"]);
        eprintln!("{arch}/one_image with peft's vision adapter: relative error {e:.2e}");
        assert!(e <= tolerance(), "{arch} with peft's vision adapter: relative error {e}");
        // and without it (adapters switched off) the logits are the base model's, which differ
        let _off = m.lora().unwrap().1.scope(guirl::policy::qwen_vl::train::lora::AdapterUse::Off);
        let (base, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
        assert!(
            rel_err(&base, &want["one_image.logits"]) > 10.0 * tolerance(),
            "{arch}: the adapter changes nothing"
        );
    }
}

#[test]
fn every_lora_tensor_gets_a_finite_nonzero_gradient() {
    for arch in ARCHS {
        let mut m = load(arch);
        let r = reference(arch);
        m.attach_lora(&LoraSettings { rank: 2, alpha: 4.0, ..LoraSettings::default() }, 0).unwrap();
        let vars = m.lora_vars();
        assert_eq!(vars.len(), 2 * 7 * m.config.text.num_hidden_layers);
        // B starts at zero (the adapter leaves the model unchanged), so A's gradient would
        // be zero: give B values first, as after a first update.
        for (name, v) in &vars {
            if name.ends_with("lora_B") {
                v.set(&Tensor::randn(0f32, 0.02, v.dims(), v.device()).unwrap()).unwrap();
            }
        }
        let (logits, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
        // log-prob of the reference's greedy tokens at the last position
        let lp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let loss = lp.get(logits.dim(0).unwrap() - 1).unwrap().get(7).unwrap().neg().unwrap();
        let grads = loss.backward().unwrap();
        for (name, v) in &vars {
            let g = grads.get(v).unwrap_or_else(|| panic!("{arch}: no gradient for {name}"));
            let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(norm.is_finite() && norm > 0.0, "{arch}: gradient of {name} is {norm}");
        }
    }
}

#[test]
fn adapters_off_is_the_base_model() {
    let mut m = load("qwen3_vl");
    let r = reference("qwen3_vl");
    let switch = m.load_adapter(&dir("qwen3_vl").join("lora")).unwrap();
    let _off = switch.scope(guirl::policy::qwen_vl::train::lora::AdapterUse::Off);
    let (logits, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
    assert!(rel_err(&logits, &r["one_image.logits"]) <= tolerance());
}

/// Every vision-tower module name an architecture's adapters can target.
fn vision_leaves(arch: &str) -> Vec<String> {
    let names: &[&str] = match arch {
        "qwen3_vl" => &["qkv", "proj", "linear_fc1", "linear_fc2"],
        _ => &["qkv", "proj", "gate_proj", "up_proj", "down_proj", "0", "2"],
    };
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn vision_adapters_train_change_the_answer_and_survive_a_save_and_load() {
    for arch in ARCHS {
        let mut m = load(arch);
        let r = reference(arch);
        let (base, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
        let settings = LoraSettings {
            rank: 2,
            alpha: 4.0,
            vision_targets: vision_leaves(arch),
            ..LoraSettings::default()
        };
        m.attach_lora(&settings, 0).unwrap();
        let vars = m.lora_vars();
        let vision: Vec<_> = vars.iter().filter(|(n, _)| n.starts_with("model.visual.")).collect();
        let cfg = &m.config.vision;
        // per block qkv, proj and the MLP's 2 (Qwen3-VL) or 3 (Qwen2.5-VL) layers; 2 per
        // merger; the patch embedding (`proj`, as peft's suffix match takes it too)
        let per_block = if arch == "qwen3_vl" { 4 } else { 5 };
        let mergers = 1 + cfg.deepstack_visual_indexes.len();
        assert_eq!(vision.len(), 2 * (per_block * cfg.depth + 2 * mergers + 1), "{arch}");
        for (name, v) in &vars {
            if name.ends_with("lora_B") {
                v.set(&Tensor::randn(0f32, 0.02, v.dims(), v.device()).unwrap()).unwrap();
            }
        }
        let (logits, _) = prompt_logits(&m, &r, "one_image", None).unwrap();
        assert!(rel_err(&logits, &base) > 0.0, "{arch}: the adapters change nothing");
        let lp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let loss = lp.get(logits.dim(0).unwrap() - 1).unwrap().get(7).unwrap().neg().unwrap();
        let grads = loss.backward().unwrap();
        for (name, v) in &vision {
            let g = grads.get(v).unwrap_or_else(|| panic!("{arch}: no gradient for {name}"));
            let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(norm.is_finite() && norm > 0.0, "{arch}: gradient of {name} is {norm}");
        }
        // PEFT's names, read back by a fresh model (which finds the vision targets itself)
        let tmp = tempfile::tempdir().unwrap();
        m.save_adapter(tmp.path()).unwrap();
        let saved =
            candle_core::safetensors::load(tmp.path().join("adapter_model.safetensors"), &Device::Cpu)
                .unwrap();
        assert!(
            saved.contains_key("base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight"),
            "{arch}"
        );
        // the patch embedding's adapter in peft's convolution shapes
        let pa = &saved["base_model.model.model.visual.patch_embed.proj.lora_A.weight"];
        let pb = &saved["base_model.model.model.visual.patch_embed.proj.lora_B.weight"];
        let (p, t) = (cfg.patch_size, cfg.temporal_patch_size);
        assert_eq!(pa.dims(), [2, cfg.in_channels, t, p, p], "{arch}");
        assert_eq!(pb.dims(), [cfg.hidden_size, 2, 1, 1, 1], "{arch}");
        let mut m2 = load(arch);
        m2.load_adapter(tmp.path()).unwrap();
        assert_eq!(m2.lora().unwrap().0.vision_targets.len(), vision_leaves(arch).len(), "{arch}");
        let (again, _) = prompt_logits(&m2, &r, "one_image", None).unwrap();
        assert_eq!(rel_err(&again, &logits), 0.0, "{arch}");
    }
}

#[test]
fn a_vision_target_that_matches_nothing_names_the_towers_layers() {
    let mut m = load("qwen3_vl");
    let settings = LoraSettings { vision_targets: vec!["q_proj".into()], ..LoraSettings::default() };
    let err = m.attach_lora(&settings, 0).unwrap_err().to_string();
    assert!(
        err.contains("lora_vision_targets") && err.contains("linear_fc1") && err.contains("qkv"),
        "{err}"
    );
}

/// The layer profile the GPU speed bench prints (`qwen_speed profile`): every part is in
/// the graph (it adds nodes to the loss's) and the whole layer walks more nodes than any part.
#[test]
fn the_decoder_layer_profile_times_every_part_in_the_graph() {
    for arch in ARCHS {
        let mut m = load(arch);
        m.attach_lora(&LoraSettings { rank: 2, alpha: 4.0, ..LoraSettings::default() }, 0).unwrap();
        let dev = device();
        let parts = m.text.profile_layer(0, 2, 9, 1, &|| Ok(dev.synchronize()?)).unwrap();
        let loss = parts[0].nodes;
        let whole = parts.iter().find(|p| p.part == "whole layer").expect("the whole layer is timed");
        let names: Vec<&str> = parts.iter().map(|p| p.part.as_str()).collect();
        for want in ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "attention"]
        {
            assert!(names.contains(&want), "{arch}: {want} not in {names:?}");
        }
        assert_eq!(names.contains(&"q/k rms_norm (per head)"), arch == "qwen3_vl", "{arch}: {names:?}");
        for p in &parts[1..] {
            assert!(
                p.nodes > loss,
                "{arch}: {} adds no graph node ({} vs the loss's {loss})",
                p.part,
                p.nodes
            );
            assert!(p.forward_s.is_finite() && p.backward_s.is_finite(), "{arch}: {p:?}");
            if p.part != "whole layer" {
                assert!(
                    whole.nodes > p.nodes,
                    "{arch}: the whole layer has {} nodes, {} has {}",
                    whole.nodes,
                    p.part,
                    p.nodes
                );
            }
        }
    }
}

/// A checkpoint whose vision tower's `rope_parameters.rope_theta` is 2000, not the
/// default 10000 (`fixtures/qwen_vl/ARCH/vision_theta/`, the fixture checkpoint with that
/// config), with peft's vision adapter: image features, DeepStack features and logits
/// equal transformers'. The theta moves them by 7e-3 to 3e-2 (the reference is checked
/// against guirl at 10000 below), so a reader that ignored it fails.
#[test]
fn a_vision_rope_theta_of_2000_gives_transformers_outputs() {
    for arch in ARCHS {
        let variant = dir(arch).join("vision_theta");
        let tmp = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(dir(arch)).unwrap().flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
            }
        }
        std::fs::copy(variant.join("config.json"), tmp.path().join("config.json")).unwrap();
        let want =
            candle_core::safetensors::load(variant.join("reference.safetensors"), &Device::Cpu).unwrap();
        let r = reference(arch);
        let outputs = |m: &guirl::policy::qwen_vl::QwenVl| {
            let g = grids(&r["one_image.grids"]);
            let px = r["one_image.pixel_values"].to_device(&device()).unwrap();
            let vision = m.encode_images(&px, &g).unwrap();
            let (logits, _) = prompt_logits(m, &r, "one_image", None).unwrap();
            let mut out = vec![("one_image.image_embeds".to_string(), vision.embeds.clone())];
            for (i, d) in vision.deepstack.iter().enumerate() {
                out.push((format!("one_image.deepstack.{i}"), d.clone()));
            }
            out.push(("one_image.logits".to_string(), logits));
            out
        };
        let mut m = guirl::policy::qwen_vl::QwenVl::load(tmp.path(), dtype(), &device()).unwrap();
        assert_eq!(m.config.vision.rope_theta, 2_000.0, "{arch}");
        m.load_adapter(&dir(arch).join("lora_vision")).unwrap();
        let got = outputs(&m);
        assert_eq!(got.len(), want.len(), "{arch}: {:?}", want.keys().collect::<Vec<_>>());
        let mut at_default = load(arch);
        at_default.load_adapter(&dir(arch).join("lora_vision")).unwrap();
        for ((key, g), (_, d)) in got.iter().zip(outputs(&at_default)) {
            let e = rel_err(g, &want[key]);
            let moved = rel_err(&d, &want[key]);
            eprintln!(
                "{arch} vision theta 2000, {key}: relative error {e:.2e} (theta 10000 would be {moved:.2e})"
            );
            assert!(e <= tolerance(), "{arch} {key}: relative error {e}");
            if dtype() == DType::F32 {
                assert!(moved > 10.0 * tolerance(), "{arch} {key}: the theta moves it by only {moved:.1e}");
            }
        }
    }
}
