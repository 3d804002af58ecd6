//! The checkpoint's safetensors, memory-mapped, under either weight-name layout.
//!
//! Checkpoints saved by transformers ≥ 4.52 (and every Qwen3-VL) name the towers
//! `model.visual.*` and `model.language_model.*`; the older Qwen2.5-VL files on the hub use
//! `visual.*` and `model.*`. Both map onto the names the model asks for: `visual.…`,
//! `lm.…` (the language model) and `lm_head.weight`.
//! A sharded checkpoint lists its files in `model.safetensors.index.json`.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
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
        let t = st
            .load(&file_name, &Device::Cpu)
            .with_context(|| format!("{}: cannot read `{file_name}`", path.display()))?;
        if t.dims() != shape {
            bail!(
                "{}: tensor `{file_name}` has shape {:?}, but config.json implies {:?}",
                path.display(),
                t.dims(),
                shape
            );
        }
        Ok(t.to_dtype(self.dtype)?.to_device(&self.device)?)
    }

    fn dir_label(&self) -> String {
        self.files.first().and_then(|(p, _)| p.parent()).map(|d| d.display().to_string()).unwrap_or_default()
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
