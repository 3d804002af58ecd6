//! The tiny Qwen-VL fixtures (`fixtures/qwen_vl`) and transformers' reference outputs,
//! as the Qwen-VL tests read them.

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::{QwenPolicySettings, QwenVl, QwenVlPolicy};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const ARCHS: [&str; 2] = ["qwen3_vl", "qwen2_5_vl"];
pub const CASES: [&str; 2] = ["one_image", "two_images"];

pub fn dir(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/qwen_vl").join(arch)
}

pub fn reference(arch: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir(arch).join("reference.safetensors"), &Device::Cpu).unwrap()
}

/// The device and dtype under test: CPU f32 unless `GUIRL_TEST_DEVICE=cuda` and
/// `GUIRL_TEST_DTYPE=bf16` say otherwise (benches/gpu/run.sh runs this file on a GPU).
pub fn device() -> Device {
    match std::env::var("GUIRL_TEST_DEVICE").as_deref() {
        Ok("cuda") => guirl::policy::device::cuda(0)
            .expect("GUIRL_TEST_DEVICE=cuda: no CUDA device (or not a --features cuda build)"),
        _ => Device::Cpu,
    }
}

pub fn dtype() -> DType {
    match std::env::var("GUIRL_TEST_DTYPE").as_deref() {
        Ok("bf16") => DType::BF16,
        _ => DType::F32,
    }
}

/// The parity bound: 1e-4 in f32; bf16 keeps 8 bits of mantissa, so 3e-2 there (at most
/// 2.15e-2 measured on CPU, with peft's text adapter, where transformers' own bf16 error
/// is 1.6e-2; docs/qwen-vl.md, "bf16").
pub fn tolerance() -> f32 {
    if dtype() == DType::BF16 {
        3e-2
    } else {
        1e-4
    }
}

pub fn load(arch: &str) -> QwenVl {
    QwenVl::load(&dir(arch), dtype(), &device()).unwrap()
}

pub fn ids(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::I64).unwrap().to_vec1::<i64>().unwrap().into_iter().map(|v| v as u32).collect()
}

pub fn grids(t: &Tensor) -> Vec<[usize; 3]> {
    t.to_dtype(DType::I64)
        .unwrap()
        .to_vec2::<i64>()
        .unwrap()
        .into_iter()
        .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
        .collect()
}

/// max |a − b| over two equally long runs of values.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// The largest `|a - b|` of two tensors of one shape.
pub fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

/// A copy of a fixture checkpoint's files (not its adapter folders), to edit or break.
pub fn copy_of(arch: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir(arch)).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
        }
    }
    tmp
}

/// max |a − b| / max |b|: the relative error the parity tests bound.
pub fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = &a.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let b = &b.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    let scale = b.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    diff / scale
}

/// Prompt logits `[T, V]` for a reference case, from the processor-made pixels.
pub fn prompt_logits(
    m: &QwenVl,
    r: &HashMap<String, Tensor>,
    case: &str,
    cache: Option<&mut KvCache>,
) -> Result<(Tensor, i64)> {
    let g = grids(&r[&format!("{case}.grids")]);
    let px = r[&format!("{case}.pixel_values")].to_device(&device())?;
    let vision = m.encode_images(&px, &g)?;
    let prompt = m.prompt(ids(&r[&format!("{case}.input_ids")]), &g)?;
    let h = m.hidden(&prompt, Some(&vision), cache)?;
    Ok((m.logits(&h)?, prompt.delta))
}

/// The logits of reference case `case`'s prompt followed by `tokens`, in one pass (the
/// training pass's forward), its screenshots through the vision tower.
pub fn one_pass_logits(m: &QwenVl, r: &HashMap<String, Tensor>, case: &str, tokens: &[u32]) -> Tensor {
    let g = grids(&r[&format!("{case}.grids")]);
    let px = r[&format!("{case}.pixel_values")].to_device(&device()).unwrap();
    let vision = m.encode_images(&px, &g).unwrap();
    let mut all = ids(&r[&format!("{case}.input_ids")]);
    all.extend(tokens);
    let prompt = m.prompt(all, &g).unwrap();
    m.logits(&m.hidden(&prompt, Some(&vision), None).unwrap()).unwrap()
}

/// Policy settings on the tiny fixture `arch`, with a short system prompt written into
/// `prompt_dir` (it keeps the tiny models' sequences short).
pub fn policy_settings(arch: &str, prompt_dir: &Path) -> QwenPolicySettings {
    let prompt = prompt_dir.join("prompt.md");
    std::fs::write(&prompt, "Act on the screen. {frame}").unwrap();
    let mut s = QwenPolicySettings::new(arch, dir(arch).to_str().unwrap());
    s.prompt = Some(prompt);
    s.lora_rank = 2;
    s.lora_alpha = 4.0;
    s.max_new_tokens = 6;
    s
}

/// Give every LoRA B a small random value, as after a first update (B starts at 0).
pub fn perturb_b(p: &QwenVlPolicy) {
    // Seeded (candle's CPU `randn` is not), so every run tests the same adapters: with an
    // unseeded draw the step test failed now and then (one AdamW step at lr 1e-2 can
    // overshoot: it did for this seed; at 1e-3 the NLL fell for each of seeds 0-7).
    use guirl::policy::TrainablePolicy;
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for (name, v) in p.trainable_vars() {
        if name.ends_with("lora_B") {
            // uniform with a standard deviation of 0.05
            let vals: Vec<f32> = (0..v.elem_count()).map(|_| rng.gen_range(-0.0866..0.0866)).collect();
            v.set(&Tensor::from_vec(vals, v.dims(), v.device()).unwrap()).unwrap();
        }
    }
}

/// Decode `states` (sampling streams `keys`) in `dec`, state `i` admitted before step
/// `joins[i]`, as the collector admits envs that become ready: the decisions in state order.
/// Checks on the way that a finished answer leaves at once, that no answer comes back twice
/// and that the decode ends (`what` names the setting in the messages).
pub fn decode_joining(
    dec: &mut dyn guirl::policy::StepDecoder,
    states: &[guirl::env::ScreenState],
    keys: &[u64],
    joins: &[usize],
    what: &str,
) -> Vec<guirl::policy::Decision> {
    let mut got: Vec<Option<guirl::policy::Decision>> = vec![None; states.len()];
    let mut steps = 0;
    while got.iter().any(Option::is_none) {
        for i in (0..states.len()).filter(|&i| joins[i] == steps) {
            dec.admit(i as u64, &states[i], keys[i]).unwrap();
        }
        dec.prefill().unwrap();
        let live = dec.live();
        let done = dec.step().unwrap();
        assert_eq!(dec.live(), live - done.len(), "{what}: finished answers leave");
        for (id, d) in done {
            assert!(got[id as usize].replace(d).is_none(), "{what}: answer {id} returned twice");
        }
        steps += 1;
        assert!(steps < 100, "{what}: the decode never ended");
    }
    got.into_iter().map(Option::unwrap).collect()
}

/// A decision's tokens and log-probs as bits, for exact comparison.
pub fn bits(d: &guirl::policy::Decision) -> (Vec<u32>, Vec<u32>) {
    (d.tokens.clone(), d.token_logprobs.iter().map(|x| x.to_bits()).collect())
}
