//! Qwen3-VL and Qwen2.5-VL against transformers, on the tiny random checkpoints in
//! `fixtures/qwen_vl` (written, with their reference outputs, by
//! `scripts/make_qwen_fixtures.py`). No PyTorch is needed here.

mod common;

use candle_core::{DType, Device, Tensor, D};
use common::qwen::*;
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::train::lora::LoraSettings;
use guirl::policy::qwen_vl::DecodeKernels;
use std::path::{Path, PathBuf};

#[test]
fn prompt_logits_equal_transformers_for_both_architectures_with_one_and_two_images() {
    for arch in ARCHS {
        let m = load(arch);
        let r = reference(arch);
        for case in CASES {
            let (logits, _) = prompt_logits(&m, &r, case, None).unwrap();
            let e = rel_err(&logits, &r[&format!("{case}.logits")]);
            eprintln!("{arch}/{case}: prompt logits, relative error {e:.2e}");
            assert!(e <= tolerance(), "{arch}/{case}: relative error {e}");
        }
    }
}

#[test]
fn cached_decoding_and_the_one_pass_score_equal_transformers() {
    for arch in ARCHS {
        let m = load(arch);
        let r = reference(arch);
        for case in CASES {
            let mut cache = KvCache::default();
            let (logits, delta) = prompt_logits(&m, &r, case, Some(&mut cache)).unwrap();
            let n = logits.dim(0).unwrap();
            let tokens = ids(&r[&format!("{case}.decode_tokens")]);
            // greedy agrees with transformers' first choice
            let first = logits.get(n - 1).unwrap().argmax(D::Minus1).unwrap().to_scalar::<u32>().unwrap();
            assert_eq!(first, tokens[0], "{arch}/{case}");
            let want = &r[&format!("{case}.decode_logits")];
            for (k, &tok) in tokens.iter().enumerate() {
                let h = m.step(tok, n + k, delta, &mut cache).unwrap();
                let got = m.logits(&h).unwrap().squeeze(0).unwrap();
                let e = rel_err(&got, &want.get(k).unwrap());
                eprintln!("{arch}/{case}: cached decode step {k}, relative error {e:.2e}");
                assert!(e <= tolerance(), "{arch}/{case} decode step {k}: relative error {e}");
            }
            // the prompt and its continuation in one differentiable pass (training)
            let full = one_pass_logits(&m, &r, case, &tokens);
            let e = rel_err(&full, &r[&format!("{case}.full_logits")]);
            eprintln!("{arch}/{case}: one-pass score, relative error {e:.2e}");
            assert!(e <= tolerance(), "{arch}/{case} one-pass score: relative error {e}");
        }
    }
}

/// A prompt run in two parts, its text before the first image into a cache and the rest
/// over that cache (how rollouts share a task's system prompt), gives transformers' logits
/// for the rest; a continuation that would leave an image behind, or a cache of the wrong
/// length, is refused.
#[test]
fn a_prompt_continued_over_its_text_prefix_equals_transformers() {
    for arch in ARCHS {
        let m = load(arch);
        let r = reference(arch);
        let image = m.config.image_token_id;
        for case in CASES {
            let g = grids(&r[&format!("{case}.grids")]);
            let px = r[&format!("{case}.pixel_values")].to_device(&device()).unwrap();
            let vision = m.encode_images(&px, &g).unwrap();
            let all = ids(&r[&format!("{case}.input_ids")]);
            let split = all.iter().position(|&t| t == image).unwrap();
            assert!(split > 0, "{arch}/{case}: the prompt starts with text");
            let mut cache = KvCache::default();
            m.hidden(&m.prompt(all[..split].to_vec(), &[]).unwrap(), None, Some(&mut cache)).unwrap();
            let prompt = m.prompt(all.clone(), &g).unwrap();
            let rest = m.hidden_from(&prompt, split, Some(&vision), &mut cache).unwrap();
            assert_eq!(cache.len(), all.len(), "{arch}/{case}: the rest is appended");
            let want = r[&format!("{case}.logits")].narrow(0, split, all.len() - split).unwrap();
            let e = rel_err(&m.logits(&rest).unwrap(), &want);
            eprintln!("{arch}/{case}: prompt over its prefix, relative error {e:.2e}");
            assert!(e <= tolerance(), "{arch}/{case}: relative error {e}");

            let err = m.hidden_from(&prompt, split + 1, Some(&vision), &mut KvCache::default()).unwrap_err();
            assert!(err.to_string().contains("over a cache of 0 tokens"), "{err}");
            let mut past_image = KvCache::default();
            let text = [&all[..split], &all[..1]].concat();
            m.hidden(&m.prompt(text, &[]).unwrap(), None, Some(&mut past_image)).unwrap();
            let err = m.hidden_from(&prompt, split + 1, Some(&vision), &mut past_image).unwrap_err();
            assert!(err.to_string().contains("must be text"), "{err}");
        }
    }
}

#[test]
fn the_chat_template_and_tokenizer_give_the_reference_prompt_ids() {
    for arch in ARCHS {
        let m = load(arch);
        let r = reference(arch);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir(arch).join("reference.json")).unwrap())
                .unwrap();
        for case in meta["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let rendered = m.chat.render(&case["messages"], true).unwrap();
            assert_eq!(rendered, case["prompt"].as_str().unwrap(), "{arch}/{name}: template");
            let merge = m.config.vision.spatial_merge_size;
            let counts: Vec<usize> = grids(&r[&format!("{name}.grids")])
                .iter()
                .map(|g| g[0] * g[1] * g[2] / (merge * merge))
                .collect();
            let got = m.chat.encode_prompt(&rendered, &counts).unwrap();
            assert_eq!(got, ids(&r[&format!("{name}.input_ids")]), "{arch}/{name}: ids");
        }
    }
}

#[test]
fn image_preprocessing_matches_the_transformers_processor() {
    for arch in ARCHS {
        let m = load(arch);
        let r = reference(arch);
        for case in CASES {
            let meta_images: Vec<PathBuf> =
                (0..2).map(|i| dir(arch).join(format!("{case}_{i}.png"))).filter(|p| p.exists()).collect();
            let processed: Vec<_> =
                meta_images.iter().map(|p| m.processor.process(&image::open(p).unwrap().to_rgb8())).collect();
            let (px, g) = m.processor.batch(&processed, &Device::Cpu).unwrap();
            assert_eq!(g, grids(&r[&format!("{case}.grids")]), "{arch}/{case}: grids");
            let want = &r[&format!("{case}.pixel_values")];
            // Images already at a multiple of the resize factor are not resampled: exact.
            // Resampled ones differ by the bicubic kernels (ours a = -0.5, torchvision's
            // -0.75 with antialias): bounded on average.
            let mean = (&px - want).unwrap().abs().unwrap().mean_all().unwrap().to_scalar::<f32>().unwrap();
            let exact = processed.iter().zip(&meta_images).all(|(p, path)| {
                let img = image::open(path).unwrap();
                p.resized == (img.height(), img.width())
            });
            if exact {
                assert!(mean < 1e-6, "{arch}/{case}: mean abs diff {mean}");
            } else {
                assert!(mean < 0.05, "{arch}/{case}: mean abs diff {mean} after resizing");
            }
        }
    }
}

#[test]
fn placeholder_count_equals_the_vision_features_for_odd_sizes() {
    for arch in ARCHS {
        let m = load(arch);
        for (w, h) in [(17, 33), (70, 45), (100, 61), (160, 210), (333, 97)] {
            let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 7) as u8, (y * 3) as u8, 90]));
            let p = m.processor.process(&img);
            let (px, g) = m.processor.batch(std::slice::from_ref(&p), &device()).unwrap();
            let out = m.encode_images(&px, &g).unwrap();
            let merge = m.config.vision.spatial_merge_size;
            assert_eq!(out.embeds.dim(0).unwrap(), p.tokens(merge), "{arch} {w}x{h}");
            let text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n";
            let ids = m.chat.encode_prompt(text, &[p.tokens(merge)]).unwrap();
            let prompt = m.prompt(ids, &g).unwrap();
            m.hidden(&prompt, Some(&out), None).unwrap();
        }
    }
}

/// Images of one size go through the vision tower's attention as one batch; each image's
/// features (and DeepStack taps) equal the tower's on that image alone, whatever shares
/// the batch, for both architectures (Qwen2.5-VL's windows included).
#[test]
fn images_of_one_size_encode_together_as_each_alone() {
    for arch in ARCHS {
        let m = load(arch);
        let img = |w: u32, h: u32, k: u32| {
            image::RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([(x * k) as u8, (y * 3 + k) as u8, (x ^ y) as u8])
            })
        };
        let images = [img(160, 210, 7), img(160, 210, 11), img(70, 45, 5), img(160, 210, 13)];
        let ps: Vec<_> = images.iter().map(|i| m.processor.process(i)).collect();
        let (px, g) = m.processor.batch(&ps, &device()).unwrap();
        let together = m.encode_images(&px, &g).unwrap();
        let mut at = 0;
        for (i, p) in ps.iter().enumerate() {
            let (px1, g1) = m.processor.batch(std::slice::from_ref(p), &device()).unwrap();
            let alone = m.encode_images(&px1, &g1).unwrap();
            let n = alone.embeds.dim(0).unwrap();
            let err = rel_err(&together.embeds.narrow(0, at, n).unwrap(), &alone.embeds);
            assert!(err <= tolerance() / 10.0, "{arch} image {i}: relative error {err:.2e}");
            for (t, a) in together.deepstack.iter().zip(&alone.deepstack) {
                let err = rel_err(&t.narrow(0, at, n).unwrap(), a);
                assert!(err <= tolerance() / 10.0, "{arch} image {i} DeepStack: {err:.2e}");
            }
            at += n;
        }
        assert_eq!(at, together.embeds.dim(0).unwrap());
    }
}

/// Rows decoded together (`step_rows`, chunks of a fixed row count) match transformers'
/// cached decoding, and each row has exactly the bits it has when decoded alone: a
/// result never depends on which other answers share the step. With eager attention and
/// with the fused kernel (`decode_kernels`). On the test device and dtype
/// (`benches/gpu/run.sh` runs it on CUDA).
#[test]
fn rows_decoded_together_equal_transformers_and_themselves_alone() {
    const ROWS: usize = 4;
    for (arch, attention) in
        ARCHS.iter().flat_map(|a| [(*a, DecodeKernels::Eager), (*a, DecodeKernels::Fused)])
    {
        let m = load(arch);
        let r = reference(arch);
        // three answers: the two cases, and the first case again
        let mut prefix = Vec::new();
        for case in [CASES[0], CASES[1], CASES[0]] {
            let mut cache = KvCache::default();
            let (logits, delta) = prompt_logits(&m, &r, case, Some(&mut cache)).unwrap();
            prefix.push((case, cache, logits.dim(0).unwrap(), delta));
        }
        let tokens = |case: &str| ids(&r[&format!("{case}.decode_tokens")]);
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap();
            v.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
        };
        let mut together: Vec<KvCache> = prefix.iter().map(|p| p.1.clone()).collect();
        let mut alone: Vec<KvCache> = prefix.iter().map(|p| p.1.clone()).collect();
        for k in 0..3 {
            let toks: Vec<u32> = prefix.iter().map(|p| tokens(p.0)[k]).collect();
            let pos: Vec<i64> = prefix.iter().map(|p| (p.2 + k) as i64 + p.3).collect();
            let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
            let on = |t: &[u32]| Tensor::new(t, &device()).unwrap();
            let h = m.step_rows_on(&on(&toks), &pos, &mut refs, ROWS, attention).unwrap();
            let batch = m.logits_rows(&h, ROWS).unwrap();
            for (i, cache) in alone.iter_mut().enumerate() {
                let h1 =
                    m.step_rows_on(&on(&toks[i..=i]), &pos[i..=i], &mut [cache], ROWS, attention).unwrap();
                let one = m.logits_rows(&h1, ROWS).unwrap().squeeze(0).unwrap();
                let row = batch.get(i).unwrap();
                assert!(
                    bits(&row) == bits(&one),
                    "{arch} {attention:?} step {k}: row {i} differs from itself alone"
                );
                let want = r[&format!("{}.decode_logits", prefix[i].0)].get(k).unwrap();
                let e = rel_err(&row, &want);
                assert!(
                    e <= tolerance(),
                    "{arch} {attention:?} step {k} row {i}: relative error {e} against transformers"
                );
            }
        }
    }
}

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

/// docs/qwen-vl.md's "Config keys" table and the reader's list
/// (`model::config_keys::CONFIG_KEYS`) name the same keys, in the same sections, with the
/// same use; every row gives a reason, and the counts line counts them.
#[test]
fn the_config_keys_table_is_the_readers_list() {
    use guirl::policy::qwen_vl::model::config_keys::{KeyUse, CONFIG_KEYS};
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/qwen-vl.md")).unwrap();
    let section = doc.split("## Config keys").nth(1).expect("docs/qwen-vl.md has a Config keys section");
    let section = section.split("\n## ").next().unwrap();
    let mut table = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| section")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        assert!(!cells[3].is_empty(), "no reason given: {line}");
        table.push((cells[0].to_string(), cells[1].trim_matches('`').to_string(), cells[2].to_string()));
    }
    let word = |u: KeyUse| match u {
        KeyUse::Used => "used",
        KeyUse::Refused => "refused",
        KeyUse::Ignored => "ignored",
    };
    let code: Vec<(String, String, String)> = CONFIG_KEYS
        .iter()
        .map(|&(s, k, u)| (s.name().to_string(), k.to_string(), word(u).to_string()))
        .collect();
    let missing: Vec<_> = code.iter().filter(|r| !table.contains(r)).collect();
    let extra: Vec<_> = table.iter().filter(|r| !code.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "not in the doc: {missing:?}\nnot in the reader: {extra:?}"
    );
    assert_eq!(table.len(), code.len(), "a row twice");
    let count = |w: &str| code.iter().filter(|r| r.2 == w).count();
    let line = format!(
        "Counted: {} keys, {} used, {} refused, {} ignored.",
        code.len(),
        count("used"),
        count("refused"),
        count("ignored")
    );
    assert!(section.contains(&line), "the doc should say: {line}");
}

/// The keys read only to refuse them: each value guirl cannot honour is an error naming
/// the key, and the value that changes nothing loads.
#[test]
fn config_keys_guirl_cannot_honour_are_refused_by_name() {
    use guirl::policy::qwen_vl::model::config::QwenVlConfig;
    use serde_json::{json, Value};
    let config = |arch: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir(arch).join("config.json")).unwrap()).unwrap()
    };
    // Qwen2.5-VL keeps the text keys at the top level, Qwen3-VL under text_config
    let text = |c: &Value, arch: &str| -> Value {
        if arch == "qwen3_vl" {
            c["text_config"].clone()
        } else {
            c.clone()
        }
    };
    let cases: [(&str, Value, &str); 6] = [
        ("quantization_config", json!({"quant_method": "awq"}), "quantized"),
        ("use_sliding_window", json!(true), "sliding-window"),
        ("layer_types", json!(["full_attention", "sliding_attention"]), "full_attention"),
        ("attention_dropout", json!(0.1), "attention dropout"),
        ("hidden_act", json!("gelu"), "silu"),
        ("bogus_key", json!(1), "unknown config key"),
    ];
    for arch in ARCHS {
        assert!(QwenVlConfig::from_json(&config(arch), "config.json").is_ok(), "{arch}");
        for (key, value, says) in &cases {
            let mut c = config(arch);
            let mut t = text(&c, arch);
            t[*key] = value.clone();
            if arch == "qwen3_vl" {
                c["text_config"] = t;
            } else {
                c = t;
            }
            let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
            assert!(e.contains(key) && e.contains(says), "{arch} {key}: {e}");
        }
        // the harmless values load
        let mut c = config(arch);
        let mut t = text(&c, arch);
        t["use_sliding_window"] = json!(false);
        t["layer_types"] = json!(["full_attention", "full_attention"]);
        t["attention_dropout"] = json!(0.0);
        if arch == "qwen3_vl" {
            c["text_config"] = t;
        } else {
            c = t;
        }
        QwenVlConfig::from_json(&c, "config.json").unwrap();
    }
    // a Qwen3-VL without any text rope_theta: transformers 4 and 5 disagree on the default
    let mut c = config("qwen3_vl");
    c["text_config"]["rope_parameters"].as_object_mut().unwrap().remove("rope_theta");
    let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
    assert!(e.contains("rope_theta") && e.contains("500000"), "{e}");
    // the vision tower's rope object takes only its own keys
    let mut c = config("qwen3_vl");
    c["vision_config"]["rope_parameters"]["factor"] = json!(2.0);
    let e = format!("{:#}", QwenVlConfig::from_json(&c, "config.json").unwrap_err());
    assert!(e.contains("vision_config.rope_parameters.factor"), "{e}");
}

/// The fused decoding attention (`guirl::nn::decode::attention`) on the test device, at
/// Qwen3-VL 2B's head shape (16 query heads over 8 key/value heads of 128): each row is the
/// attention over its own first positions that candle's ops compute in f32 on the CPU from
/// the same inputs (within the dtype's rounding), a free row is zeros, and a row's bits do
/// not depend on the other rows. `benches/gpu/run.sh` runs it on CUDA, the kernel's check.
#[test]
fn fused_decode_attention_on_the_test_device_is_each_rows_own_attention() {
    use guirl::nn::decode;
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (r, h, hkv, w, d) = (5usize, 16usize, 8usize, 300usize, 128usize);
    let scale = (d as f64).powf(-0.5);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut randn = |dims: &[usize]| {
        let n = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
        // rounded to the dtype under test first, so both sides read the same values
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap()
    };
    let (q, k, v) = (randn(&[r, h, d]), randn(&[r, hkv, w, d]), randn(&[r, hkv, w, d]));
    let on = |t: &Tensor| t.to_dtype(dt).unwrap().to_device(&dev).unwrap();
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, lens: &[u32]| {
        let lens = Tensor::new(lens, &dev).unwrap();
        let out = decode::attention(&on(q), &on(k), &on(v), &lens, scale).unwrap();
        out.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap()
    };
    let lens = [1u32, 0, 77, 300, 150];
    let got = run(&q, &k, &v, &lens);
    let g = h / hkv;
    for (row, &n) in lens.iter().enumerate() {
        let out = got.get(row).unwrap();
        if n == 0 {
            assert_eq!(out.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0, "a free row");
            continue;
        }
        for head in 0..h {
            let qv = q.get(row).unwrap().narrow(0, head, 1).unwrap(); // [1, D]
            let kk = k.get(row).unwrap().get(head / g).unwrap().narrow(0, 0, n as usize).unwrap();
            let vv = v.get(row).unwrap().get(head / g).unwrap().narrow(0, 0, n as usize).unwrap();
            let s = (qv.matmul(&kk.t().unwrap()).unwrap() * scale).unwrap();
            let p = candle_nn::ops::softmax_last_dim(&s).unwrap();
            let want = p.matmul(&vv).unwrap().squeeze(0).unwrap();
            let diff = (out.get(head).unwrap() - want).unwrap().abs().unwrap().max_all().unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            let bound = if dt == DType::F32 { 1e-5 } else { 8e-3 };
            assert!(diff <= bound, "{dt:?} on {dev:?}: row {row} (length {n}) head {head} differs by {diff}");
        }
    }
    // row 3 beside other rows (other values, other lengths) keeps its bits
    let mix = |t: &Tensor, u: &Tensor| {
        Tensor::cat(
            &[&u.narrow(0, 0, 3).unwrap(), &t.narrow(0, 3, 1).unwrap(), &u.narrow(0, 4, 1).unwrap()],
            0,
        )
        .unwrap()
    };
    let (q2, k2, v2) = (randn(&[r, h, d]), randn(&[r, hkv, w, d]), randn(&[r, hkv, w, d]));
    let other = run(&mix(&q, &q2), &mix(&k, &k2), &mix(&v, &v2), &[300, 12, 0, 300, 1]);
    let bits = |t: &Tensor| t.get(3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(bits(&got), bits(&other), "{dt:?} on {dev:?}: row 3 depends on the other rows");
}

/// The fused draw (`guirl::nn::decode::draw`) on the test device draws what the CPU's draws
/// with the same uniforms (the same token, or its neighbour where the draw falls within
/// rounding of a boundary), with the same log-probability, never a banned token, the
/// greedy token exactly, and tokens at the frequencies of their probabilities. A
/// vocabulary of Qwen-VL's size, logits in the dtype under test. `benches/gpu/run.sh`
/// runs it on CUDA, the kernel's check.
#[test]
fn fused_draw_on_the_test_device_is_the_cpus_draw() {
    use guirl::nn::decode::draw::{draw, Pick};
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (n, v) = (6usize, 151_936usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let x: Vec<f32> = (0..n * v).map(|_| rng.gen_range(-6.0..6.0)).collect();
    let x = Tensor::from_vec(x, (n, v), &Device::Cpu).unwrap().to_dtype(dt).unwrap();
    let banned: Vec<f32> = (0..v).map(|i| if i % 5 == 2 { f32::NEG_INFINITY } else { 0.0 }).collect();
    let banned = Tensor::new(banned, &Device::Cpu).unwrap();
    let on = |t: &Tensor| t.to_device(&dev).unwrap();
    let read = |(tok, both): (Tensor, Tensor)| {
        let lp: Vec<f32> =
            both.to_device(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap().iter().map(|r| r[1]).collect();
        (tok.to_device(&Device::Cpu).unwrap().to_vec1::<u32>().unwrap(), lp)
    };
    // the row's probabilities in f64, to say how far apart two tokens are in the CDF
    let z = (x.to_dtype(DType::F32).unwrap() / 1.3).unwrap().broadcast_add(&banned).unwrap();
    let lps = candle_nn::ops::log_softmax(&z, D::Minus1).unwrap().to_vec2::<f32>().unwrap();
    for _ in 0..10 {
        let u: Vec<f32> = (0..n).map(|_| rng.gen()).collect();
        let (want, want_lp) = read(draw(&x, &banned, 1.3, Pick::Sample(&u)).unwrap());
        let (got, got_lp) = read(draw(&on(&x), &on(&banned), 1.3, Pick::Sample(&u)).unwrap());
        for r in 0..n {
            let (a, b) = (got[r] as usize, want[r] as usize);
            assert!(a < v && a % 5 != 2, "{dt:?} on {dev:?}: drew {a}, banned or past the end");
            let between: f64 = lps[r][a.min(b)..a.max(b)].iter().map(|l| (*l as f64).exp()).sum();
            assert!(a == b || between < 1e-4, "{dt:?} on {dev:?}: drew {a}, the CPU {b} (u {})", u[r]);
            assert!((got_lp[r] - lps[r][a]).abs() < 1e-4, "{dt:?} on {dev:?}: log-prob {} of {a}", got_lp[r]);
            if a == b {
                assert!((got_lp[r] - want_lp[r]).abs() < 1e-4);
            }
        }
    }
    let greedy = |t: &Tensor, b: &Tensor| read(draw(t, b, 1.3, Pick::Greedy).unwrap()).0;
    assert_eq!(greedy(&on(&x), &on(&banned)), greedy(&x, &banned), "{dt:?} on {dev:?}: greedy");
    // three tokens with mass 0.2, 0.3 and 0.5, far apart
    let mut y = vec![-1e4f32; v];
    for (t, p) in [(10, 0.2f32), (75_000, 0.3), (v - 1, 0.5)] {
        y[t] = p.ln();
    }
    let y = Tensor::from_vec(y, (1, v), &Device::Cpu).unwrap();
    let free = Tensor::zeros(v, DType::F32, &Device::Cpu).unwrap();
    let mut counts = std::collections::HashMap::new();
    for k in 0..200 {
        let u = [(k as f32 + 0.5) / 200.0];
        *counts.entry(read(draw(&on(&y), &on(&free), 1.0, Pick::Sample(&u)).unwrap()).0[0]).or_insert(0) += 1;
    }
    assert_eq!(
        (counts[&10], counts[&75_000], counts[&(v as u32 - 1)]),
        (40, 60, 100),
        "{dt:?} on {dev:?}: {counts:?}"
    );
}

/// LoRA dropout's keyed masks (`guirl::nn::dropout`) drawn on the test device are the
/// CPU's, bit for bit, over more elements than one launch's grid covers in a pass.
/// `benches/gpu/run.sh` runs it on CUDA, the kernel's check.
#[test]
fn fused_dropout_mask_on_the_test_device_is_the_cpus() {
    use guirl::nn::dropout::keyed_mask;
    let dev = device();
    let shape = candle_core::Shape::from((8, 340, 6_144));
    for (key, id, p) in [(11u64, 3u64, 0.05), (12, 3, 0.3)] {
        let cpu = keyed_mask(key, id, p, &shape, &Device::Cpu).unwrap();
        let got = keyed_mask(key, id, p, &shape, &dev).unwrap().to_device(&Device::Cpu).unwrap();
        let differ = cpu.ne(&got).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
        assert_eq!(
            differ.to_scalar::<f32>().unwrap(),
            0.0,
            "on {dev:?}, p {p}: elements differ from the CPU's"
        );
    }
}

/// The fused layer steps (`guirl::nn::decode::layer`) on the test device, at Qwen3-VL 2B's
/// widths (hidden 2 048, heads of 128, MLP 6 144): the residual sum with its RMSNorm, a
/// head's RMSNorm with its rotation, SwiGLU (of two products or one product's halves) and
/// the split of one q/k/v product into heads each equal the CPU's result in f32 from the
/// same inputs (within the dtype's rounding), and a row's bits do not depend on the other
/// rows. `benches/gpu/run.sh` runs it on CUDA, the kernels' check.
#[test]
fn fused_layer_steps_on_the_test_device_are_candles_ops() {
    use guirl::nn::decode::layer::{add_rms_norm, norm_rope, split_heads, swiglu, swiglu_halves, HeadsIn};
    use rand::{Rng, SeedableRng};
    let (dev, dt) = (device(), dtype());
    let (m, h, heads, d, inter) = (5usize, 2048usize, 16usize, 128usize, 6144usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut randn = |dims: &[usize]| {
        let n = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap().to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap()
    };
    let on = |t: &Tensor| t.to_dtype(dt).unwrap().to_device(&dev).unwrap();
    let back = |t: &Tensor| t.to_dtype(DType::F32).unwrap().to_device(&Device::Cpu).unwrap();
    let bound = if dt == DType::F32 { 1e-5 } else { 3e-2 };
    let close = |got: &Tensor, want: &Tensor, what: &str| {
        let scale = want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let diff = (back(got) - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff / scale <= bound, "{dt:?} on {dev:?}: {what} differs by {diff} (of {scale})");
    };
    let row_bits =
        |t: &Tensor, r: usize| back(t).get(r).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();

    let (x, delta, w) = (randn(&[m, h]), randn(&[m, h]), randn(&[h]));
    let (sum, normed) = add_rms_norm(&on(&x), &on(&delta), &on(&w), 1e-6).unwrap();
    let want_sum = (&x + &delta).unwrap();
    close(&sum, &want_sum, "the residual sum");
    close(&normed, &candle_nn::ops::rms_norm(&back(&sum), &w, 1e-6).unwrap(), "the sum's RMSNorm");
    let (_, one) =
        add_rms_norm(&on(&x.narrow(0, 3, 1).unwrap()), &on(&delta.narrow(0, 3, 1).unwrap()), &on(&w), 1e-6)
            .unwrap();
    assert_eq!(row_bits(&normed, 3), row_bits(&one, 0), "{dt:?} on {dev:?}: add_rms_norm's row 3 alone");

    let (q, wq, angles) = (randn(&[m, heads, d]), randn(&[d]), randn(&[m, d / 2]));
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    let got = norm_rope(&on(&q), &on(&wq), 1e-6, &on(&cos), &on(&sin)).unwrap();
    let want = candle_nn::rotary_emb::rope(
        &candle_nn::ops::rms_norm(&q, &wq, 1e-6).unwrap().reshape((m, heads, 1, d)).unwrap(),
        &cos.reshape((m, 1, d / 2)).unwrap(),
        &sin.reshape((m, 1, d / 2)).unwrap(),
    )
    .unwrap()
    .reshape((m, heads, d))
    .unwrap();
    close(&got, &want, "the heads' norm and rotation");
    let row = |t: &Tensor| on(&t.narrow(0, 2, 1).unwrap());
    let one = norm_rope(&row(&q), &on(&wq), 1e-6, &row(&cos), &row(&sin)).unwrap();
    assert_eq!(row_bits(&got, 2), row_bits(&one, 0), "{dt:?} on {dev:?}: norm_rope's row 2 alone");

    let (g, u) = (randn(&[m, inter]), randn(&[m, inter]));
    close(&swiglu(&on(&g), &on(&u)).unwrap(), &(g.silu().unwrap() * &u).unwrap(), "SwiGLU");
    let gu = Tensor::cat(&[&g, &u], 1).unwrap();
    close(
        &swiglu_halves(&on(&gu)).unwrap(),
        &(g.silu().unwrap() * &u).unwrap(),
        "SwiGLU of one product's halves",
    );

    // one q/k/v product (16 + 2 × 8 heads of 128) split into heads: against the CPU's split
    // in f32 (its own test checks it against the separate products' path)
    let hkv = heads / 2;
    let (qkv, bias, wk) = (randn(&[m, (heads + 2 * hkv) * d]), randn(&[(heads + 2 * hkv) * d]), randn(&[d]));
    let split = |t: &dyn Fn(&Tensor) -> Tensor, rows: usize| {
        let (qkv, bias, wq, wk, c, s) = (t(&qkv), t(&bias), t(&wq), t(&wk), t(&cos), t(&sin));
        let (c, s) = (c.narrow(0, 0, rows).unwrap(), s.narrow(0, 0, rows).unwrap());
        let inputs = HeadsIn {
            heads: (heads, hkv, d),
            bias: Some(&bias),
            norms: Some((&wq, &wk, 1e-6)),
            tables: (&c, &s),
        };
        split_heads(&qkv, rows, inputs).unwrap()
    };
    let (q, k, v) = split(&|t| on(t), m - 1);
    let (cq, ck, cv) = split(&|t| t.clone(), m - 1);
    close(&q, &cq, "the split's queries");
    close(&k, &ck, "the split's keys");
    close(&v, &cv, "the split's values");
    let (q1, _, _) = split(&|t| on(t), 1);
    assert_eq!(row_bits(&q, 0), row_bits(&q1, 0), "{dt:?} on {dev:?}: split_heads' row 0 alone");
}
