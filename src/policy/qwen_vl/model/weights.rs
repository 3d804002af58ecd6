//! The checkpoint's safetensors, memory-mapped, under either weight-name layout.
//!
//! Checkpoints saved by transformers ≥ 4.52 (and every Qwen3-VL) name the towers
//! `model.visual.*` and `model.language_model.*`; the older Qwen2.5-VL files on the hub use
//! `visual.*` and `model.*`. Both map onto the names the model asks for: `visual.…`,
//! `lm.…` (the language model) and `lm_head.weight`.
//! A sharded checkpoint lists its files in `model.safetensors.index.json`.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor, WithDType};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Which names the file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameLayout {
    /// `model.visual.*`, `model.language_model.*`, `lm_head.*`.
    Nested,
    /// `visual.*`, `model.*`, `lm_head.*` (older Qwen2.5-VL files).
    Flat,
}

impl NameLayout {
    /// The file's name for a model name (`visual.…`, `lm.…`, `lm_head.…`).
    pub fn file_name(&self, name: &str) -> String {
        match (self, name.split_once('.')) {
            (NameLayout::Nested, Some(("visual", rest))) => format!("model.visual.{rest}"),
            (NameLayout::Nested, Some(("lm", rest))) => format!("model.language_model.{rest}"),
            (NameLayout::Flat, Some(("visual", rest))) => format!("visual.{rest}"),
            (NameLayout::Flat, Some(("lm", rest))) => format!("model.{rest}"),
            _ => name.to_string(),
        }
    }
}

/// The weights of one checkpoint folder, read on demand.
pub struct Weights {
    files: Vec<(PathBuf, MmapedSafetensors)>,
    /// file name of a tensor → index into `files`
    index: HashMap<String, usize>,
    layout: NameLayout,
    dtype: DType,
    device: Device,
}

impl Weights {
    /// Map the folder's safetensors (from the index if sharded). Tensors are converted to
    /// `dtype` on `device` when asked for.
    pub fn open(dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let paths = shard_paths(dir)?;
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for path in paths {
            // SAFETY: the file is mapped read-only; guirl never writes a checkpoint it reads.
            let st = unsafe { MmapedSafetensors::new(&path) }
                .with_context(|| format!("{}: not a readable safetensors file", path.display()))?;
            for (name, _) in st.tensors() {
                index.insert(name, files.len());
            }
            files.push((path, st));
        }
        let layout = if index.keys().any(|k| k.starts_with("model.language_model.")) {
            NameLayout::Nested
        } else if index.keys().any(|k| k.starts_with("model.layers.")) {
            NameLayout::Flat
        } else {
            bail!(
                "{}: no language-model tensors found (expected names starting `model.language_model.` or \
                 `model.layers.`); is this a Qwen-VL checkpoint?",
                dir.display()
            );
        };
        Ok(Weights { files, index, layout, dtype, device: device.clone() })
    }

    /// Which name layout the files use.
    pub fn layout(&self) -> NameLayout {
        self.layout
    }

    /// The dtype tensors are returned in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device tensors are put on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the checkpoint has this tensor (model name).
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(&self.layout.file_name(name))
    }

    /// The tensor `name` (model name), checked to have `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let file_name = self.layout.file_name(name);
        let Some(&i) = self.index.get(&file_name) else {
            let files: Vec<String> = self.files.iter().map(|(p, _)| file_label(p)).collect();
            bail!(
                "{}: tensor `{file_name}` is missing (looked in {}); the checkpoint does not match its config.json",
                self.dir_label(),
                files.join(", ")
            );
        };
        let (path, st) = &self.files[i];
        let cannot_read = || format!("{}: cannot read `{file_name}`", path.display());
        let view = st.get(&file_name).with_context(cannot_read)?;
        if view.shape() != shape {
            bail!(
                "{}: tensor `{file_name}` has shape {:?}, but config.json implies {:?}",
                path.display(),
                view.shape(),
                shape
            );
        }
        let from = DType::try_from(view.dtype()).with_context(cannot_read)?;
        let own = if self.device.is_cpu() { read_cpu(view.data(), from, self.dtype, shape) } else { None };
        let t = match own {
            Some(t) => t?,
            None => st.load(&file_name, &Device::Cpu).with_context(cannot_read)?,
        };
        let t = t.to_dtype(self.dtype)?.to_device(&self.device)?;
        // the mapped pages of a tensor read are not needed again: the model holds its copy
        release_pages(view.data());
        Ok(t)
    }

    fn dir_label(&self) -> String {
        self.files.first().and_then(|(p, _)| p.parent()).map(|d| d.display().to_string()).unwrap_or_default()
    }
}

/// A tensor of `shape` read from the file's bytes `data` (little-endian, in `from`) into
/// memory of its own in `to`, for the conversions a CPU model makes (f32, bf16 or f16 read
/// as f32; bf16 and f16 kept); `None` for others (candle's reader then). The memory is
/// advised for transparent huge pages before it is first touched: a model's weights are
/// gigabytes, and each 4 KiB page touched costs a fault (about 1.6 µs on our 2-core
/// machine) where a 2 MiB page costs one.
fn read_cpu(data: &[u8], from: DType, to: DType, shape: &[usize]) -> Option<Result<Tensor>> {
    fn fill<T: WithDType, const N: usize>(
        data: &[u8],
        shape: &[usize],
        conv: impl Fn([u8; N]) -> T,
    ) -> Result<Tensor> {
        let n = data.len() / N;
        let mut v: Vec<T> = Vec::with_capacity(n);
        advise_huge_pages(v.as_mut_ptr() as usize, n * std::mem::size_of::<T>());
        for (dst, src) in v.spare_capacity_mut().iter_mut().zip(data.chunks_exact(N)) {
            dst.write(conv(src.try_into().expect("chunks of N bytes")));
        }
        // SAFETY: the loop above wrote all n elements (`data` holds n chunks of N bytes)
        unsafe { v.set_len(n) };
        Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
    }
    let bf16 = |b: [u8; 2]| half::bf16::from_bits(u16::from_le_bytes(b));
    let f16 = |b: [u8; 2]| half::f16::from_bits(u16::from_le_bytes(b));
    Some(match (from, to) {
        (DType::F32, DType::F32) => fill(data, shape, f32::from_le_bytes),
        (DType::BF16, DType::F32) => fill(data, shape, |b| bf16(b).to_f32()),
        (DType::F16, DType::F32) => fill(data, shape, |b| f16(b).to_f32()),
        (DType::BF16, DType::BF16) => fill(data, shape, bf16),
        (DType::F16, DType::F16) => fill(data, shape, f16),
        _ => return None,
    })
}

/// Ask the kernel to back `[start, start + len)` with transparent huge pages where the
/// system allows it on request (`madvise` mode; with `always` they are used anyway).
fn advise_huge_pages(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (from, to) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
        if to > from {
            // SAFETY: advice on whole huge pages inside the caller's allocation; it changes
            // how the kernel backs them, never their contents
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
        }
    }
}

/// Drop this process's pages of a read-only file mapping's range (whole pages inside it):
/// they leave the resident set, stay in the page cache, and read the same if touched again.
fn release_pages(data: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = data.as_ptr() as usize;
        let (from, to) = (start.next_multiple_of(page), (start + data.len()) / page * page);
        if to > from {
            // SAFETY: whole pages inside a read-only file mapping guirl never writes: dropping
            // them only makes the next read fault them in again from the same file
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
        }
    }
}

fn file_label(p: &Path) -> String {
    p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The safetensors files of a checkpoint: the index's shards, else `model.safetensors`,
/// else every `*.safetensors` in the folder.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text =
            std::fs::read_to_string(&index).with_context(|| format!("{}: cannot read", index.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index.display()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| anyhow!("{}: missing `weight_map`", index.display()))?;
        let mut names: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut out = Vec::new();
        for n in names {
            let p = dir.join(n);
            if !p.exists() {
                bail!("{}: shard `{n}` listed in the index is missing", index.display());
            }
            out.push(p);
        }
        return Ok(out);
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list the checkpoint folder", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    found.sort();
    if found.is_empty() {
        bail!(
            "{}: no weights (model.safetensors, or shards with model.safetensors.index.json)",
            dir.display()
        );
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every conversion the CPU reader makes equals candle's reader followed by `to_dtype`,
    /// a dtype it does not convert (f64) still loads through candle's, and a shape the
    /// config does not imply is refused.
    #[test]
    fn the_cpu_reader_equals_candles_for_every_dtype_pair() {
        let dir = tempfile::tempdir().unwrap();
        let base = Tensor::arange(0f32, 24., &Device::Cpu).unwrap().affine(0.37, -3.1).unwrap();
        let base = base.reshape((2, 3, 4)).unwrap();
        let names = ["f32", "bf16", "f16", "f64"];
        let mut map = HashMap::new();
        for (name, dt) in names.iter().zip([DType::F32, DType::BF16, DType::F16, DType::F64]) {
            map.insert(format!("model.layers.{name}"), base.to_dtype(dt).unwrap());
        }
        candle_core::safetensors::save(&map, dir.path().join("model.safetensors")).unwrap();
        let values =
            |t: &Tensor| t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        for to in [DType::F32, DType::BF16, DType::F16] {
            let w = Weights::open(dir.path(), to, &Device::Cpu).unwrap();
            for name in names {
                let got = w.get(&format!("lm.layers.{name}"), &[2, 3, 4]).unwrap();
                let want = map[&format!("model.layers.{name}")].to_dtype(to).unwrap();
                assert_eq!(got.dtype(), to, "{name} read as {to:?}");
                assert_eq!(values(&got), values(&want), "{name} read as {to:?}");
            }
        }
        let w = Weights::open(dir.path(), DType::F32, &Device::Cpu).unwrap();
        let e = w.get("lm.layers.f32", &[4, 6]).unwrap_err().to_string();
        assert!(e.contains("has shape [2, 3, 4], but config.json implies [4, 6]"), "{e}");
    }
}
