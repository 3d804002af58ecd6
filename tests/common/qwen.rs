//! The tiny Qwen-VL fixtures (`fixtures/qwen_vl`) and transformers' reference outputs,
//! as the Qwen-VL tests read them.

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use guirl::policy::qwen_vl::model::text::KvCache;
use guirl::policy::qwen_vl::QwenVl;
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
