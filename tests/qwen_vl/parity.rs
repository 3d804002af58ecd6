//! Prompts, images, cached decoding and rows decoded together against transformers' outputs.
use crate::common::qwen::*;
use candle_core::{DType, Device, Tensor, D};
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::DecodeKernels;
use std::path::PathBuf;

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
            let batch = m.logits_rows(&h, ROWS, attention).unwrap();
            for (i, cache) in alone.iter_mut().enumerate() {
                let h1 =
                    m.step_rows_on(&on(&toks[i..=i]), &pos[i..=i], &mut [cache], ROWS, attention).unwrap();
                let one = m.logits_rows(&h1, ROWS, attention).unwrap().squeeze(0).unwrap();
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
