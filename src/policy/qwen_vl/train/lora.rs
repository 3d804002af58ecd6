//! LoRA adapters on the linear layers (the vision tower's too with `lora_vision_targets`), in PEFT's layout.
//!
//! An adapter adds `scale · (dropout(x) Aᵀ) Bᵀ` to a frozen layer, `A` `[r, in]`, `B` `[out, r]`,
//! `scale = alpha / r`. A starts Kaiming-uniform and B at zero (PEFT's default), so a new
//! adapter leaves the model unchanged. The base weights stay plain tensors: only A and B
//! are `Var`s. All adapters of a model share one [`AdapterSwitch`], so the KL reference and
//! the behaviour weights of an overlapped run are the same model with a snapshot of the
//! adapters (an [`AdapterSnapshot`]: a copy of A and B only, not of the base). Which
//! weights a forward uses is chosen per thread for the length of that forward
//! ([`AdapterSwitch::scope`]), never on the shared model: a background collection with a
//! snapshot and an update of the live adapters can run at once on two threads.
//! Dropout (PEFT's `lora_dropout`, on the adapter's input only) acts in training passes
//! alone, with masks keyed by the pass and the adapter ([`super::train_pass`]).
//!
//! On disk (what peft, vLLM and mistral.rs read): `adapter_model.safetensors` with
//! `base_model.model.<module>.lora_A.weight` / `lora_B.weight`, and `adapter_config.json`
//! with `r`, `lora_alpha`, `lora_dropout`, `target_modules`, `peft_type = "LORA"`.

use super::train_pass::TrainPass;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor, TensorId, Var};
use serde_json::json;
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which layers get adapters, and their size.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSettings {
    /// Rank r.
    pub rank: usize,
    /// Scale numerator: the update is multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Language-model module names (the last path component: `q_proj`, `down_proj`, ...).
    pub targets: Vec<String>,
    /// Vision-tower module names (`qkv`, `proj`, `linear_fc1`, ...); empty: the tower is
    /// frozen. Kept apart from `targets` because the towers share names (`gate_proj` in
    /// Qwen2.5-VL's).
    pub vision_targets: Vec<String>,
    /// Dropout probability on the adapter's input in training passes, in [0, 1).
    pub dropout: f64,
    /// `target_modules` exactly as the PEFT adapter these settings were read from wrote it
    /// (a list, or a regular expression), so that saving the adapter again keeps what peft
    /// matches; `None` for adapters guirl made, which are saved with their full names.
    pub peft_target_modules: Option<serde_json::Value>,
}

impl Default for LoraSettings {
    fn default() -> Self {
        LoraSettings {
            rank: 16,
            alpha: 32.0,
            targets: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
                .map(String::from)
                .to_vec(),
            vision_targets: Vec::new(),
            peft_target_modules: None,
            dropout: 0.0,
        }
    }
}

/// Which adapter weights a model's forward uses.
#[derive(Clone)]
pub enum AdapterUse {
    /// The trained adapters (the policy).
    Live,
    /// No adapters: the base model.
    Off,
    /// A frozen copy of the adapters (the KL reference, or the weights an overlapped run
    /// collects with).
    Snapshot(Arc<AdapterSnapshot>),
}

impl AdapterUse {
    /// The trained adapters?
    pub fn is_live(&self) -> bool {
        matches!(self, AdapterUse::Live)
    }
}

/// A copy of every adapter's A and B at one moment (not views: `Var::set` writes the live
/// ones in place), and of the modules trained whole (`[model] train_modules`). Kept by the
/// policies that use it and freed with the last of them.
pub struct AdapterSnapshot {
    /// By the id of the live A's `Var`.
    weights: HashMap<TensorId, (Tensor, Tensor)>,
    /// Each module trained whole, by the id of its live `Var`.
    whole: HashMap<TensorId, Tensor>,
}

impl AdapterSnapshot {
    /// A snapshot of `pairs` (the live adapter, its frozen A and B) and `whole` (a module
    /// trained whole: its live `Var`'s id, its frozen weight).
    pub(crate) fn new<'a>(
        pairs: impl IntoIterator<Item = (&'a LoraAdapter, (Tensor, Tensor))>,
        whole: impl IntoIterator<Item = (TensorId, Tensor)>,
    ) -> Self {
        AdapterSnapshot {
            weights: pairs.into_iter().map(|(ad, ab)| (ad.a.id(), ab)).collect(),
            whole: whole.into_iter().collect(),
        }
    }

    /// The frozen weight of the module trained whole whose live `Var` has this id, if the
    /// snapshot holds one.
    pub(crate) fn whole(&self, live: TensorId) -> Option<&Tensor> {
        self.whole.get(&live)
    }

    /// `ad`'s frozen A and B.
    pub(crate) fn of(&self, ad: &LoraAdapter) -> Result<&(Tensor, Tensor)> {
        self.weights
            .get(&ad.a.id())
            .ok_or_else(|| anyhow!("the adapters' snapshot holds no copy of an adapter attached after it"))
    }
}

/// A snapshot's adapters merged into copies of their layers' weights, `W + scale · B A`
/// rounded once to the weight's dtype: what decoding reads when `decode_lora = "merged"`.
/// A layer then runs one product instead of its base product, two low-rank ones and the
/// casts and sums around them (9 kernels a layer on a GPU, 7 layers a decoder block).
/// The copies cost the adapted weights' memory again, and are freed with the last holder.
pub struct MergedAdapters {
    /// The adapters merged (and the modules trained whole, read from here).
    snapshot: Arc<AdapterSnapshot>,
    /// Each adapted layer's merged weight, by the id of its live A's `Var`.
    weights: HashMap<TensorId, Tensor>,
    /// Merged weights (and biases) concatenated for one product (a layer's q/k/v, its
    /// gate/up) by the first layer's A; the layers' entries in `weights` are views of them.
    groups: HashMap<TensorId, (Tensor, Option<Tensor>)>,
}

impl MergedAdapters {
    /// Merged weights of `snapshot`'s adapters: `weights` holds (live adapter, merged
    /// weight) for every adapted layer.
    pub(crate) fn new<'a>(
        snapshot: Arc<AdapterSnapshot>,
        weights: impl IntoIterator<Item = (&'a LoraAdapter, Tensor)>,
    ) -> Self {
        let weights = weights.into_iter().map(|(ad, w)| (ad.a.id(), w)).collect();
        MergedAdapters { snapshot, weights, groups: HashMap::new() }
    }

    /// The same, with `groups`: each its layers' adapters (in order), their merged weights
    /// concatenated along the outputs (each layer's is a view of it) and their bias.
    pub(crate) fn grouped<'a>(
        mut self,
        groups: impl IntoIterator<Item = (Vec<&'a LoraAdapter>, Tensor, Option<Tensor>)>,
    ) -> Result<Self> {
        for (members, cat, bias) in groups {
            let mut at = 0;
            for ad in &members {
                let rows = ad.b.as_tensor().dim(0)?;
                self.weights.insert(ad.a.id(), cat.narrow(0, at, rows)?);
                at += rows;
            }
            if let Some(first) = members.first() {
                self.groups.insert(first.a.id(), (cat, bias));
            }
        }
        Ok(self)
    }

    /// The weight of `ad`'s layer with `ad` merged into it.
    fn of(&self, ad: &LoraAdapter) -> Result<&Tensor> {
        self.weights
            .get(&ad.a.id())
            .ok_or_else(|| anyhow!("the merged weights hold no copy of an adapter attached after them"))
    }
}

/// `w + scale · b a` (`w` `[out, in]`, `a` `[r, in]`, `b` `[out, r]`), computed in f32 and
/// rounded once to `w`'s dtype, outside any autograd graph (a snapshot's copies of the
/// `Var`s track one: a weight built from them would send every product through the
/// graph's slower path and keep the `Var`s alive).
pub(crate) fn merge_weight(w: &Tensor, (a, b): (&Tensor, &Tensor), scale: f64) -> Result<Tensor> {
    let f32 = |t: &Tensor| t.detach().to_dtype(DType::F32);
    let delta = (f32(b)?.matmul(&f32(a)?)? * scale)?;
    Ok((f32(w)? + delta)?.to_dtype(w.dtype())?.detach())
}

/// The switch of a model's adapters: which weights (live, none, a snapshot) the forwards
/// that this thread runs use. The choice is the thread's, set for a scope, so forwards of
/// the same model on other threads (a background collection, an update) choose their own.
#[derive(Debug, Clone)]
pub struct AdapterSwitch(u64);

impl Default for AdapterSwitch {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        AdapterSwitch(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a switch selects on a thread: the adapter weights, and their merged layers when
/// the forwards read those.
type Selected = (AdapterUse, Option<Arc<MergedAdapters>>);

thread_local! {
    /// The weights each switch selects on this thread (absent: the live ones).
    static IN_USE: RefCell<HashMap<u64, Selected>> = RefCell::new(HashMap::new());
}

impl AdapterSwitch {
    /// Use `u` in this thread's forwards until the guard is dropped (then what was in use
    /// before).
    pub fn scope(&self, u: AdapterUse) -> AdapterScope {
        self.select((u, None))
    }

    /// Use `m`'s merged layers (and its snapshot for the modules trained whole) in this
    /// thread's forwards until the guard is dropped.
    pub fn scope_merged(&self, m: Arc<MergedAdapters>) -> AdapterScope {
        self.select((AdapterUse::Snapshot(m.snapshot.clone()), Some(m)))
    }

    fn select(&self, s: Selected) -> AdapterScope {
        let previous = IN_USE.with(|m| m.borrow_mut().insert(self.0, s));
        AdapterScope { id: self.0, previous, _thread: PhantomData }
    }

    /// The weights this thread's forwards use.
    pub fn get(&self) -> AdapterUse {
        IN_USE.with(|m| m.borrow().get(&self.0).map(|s| s.0.clone())).unwrap_or(AdapterUse::Live)
    }

    /// The merged layers this thread's forwards read, if any.
    fn merged(&self) -> Option<Arc<MergedAdapters>> {
        IN_USE.with(|m| m.borrow().get(&self.0).and_then(|s| s.1.clone()))
    }
}

/// Puts back the adapter weights in use before [`AdapterSwitch::scope`] when dropped. It
/// belongs to its thread (not `Send`).
pub struct AdapterScope {
    id: u64,
    previous: Option<Selected>,
    _thread: PhantomData<*const ()>,
}

impl Drop for AdapterScope {
    fn drop(&mut self) {
        IN_USE.with(|m| {
            let mut m = m.borrow_mut();
            match self.previous.take() {
                Some(u) => m.insert(self.id, u),
                None => m.remove(&self.id),
            }
        });
    }
}

/// One layer's adapter.
#[derive(Clone)]
pub struct LoraAdapter {
    pub(crate) a: Var,
    pub(crate) b: Var,
    pub(crate) scale: f64,
    switch: AdapterSwitch,
    /// The model's training-pass state (dropout, no-grad forwards).
    pass: TrainPass,
    /// This adapter's share of the dropout masks' key (from its module name).
    id: u64,
    /// Dropout probability in training passes.
    dropout: f64,
}

impl LoraAdapter {
    /// A fresh adapter for a `[out, in]` layer: A Kaiming-uniform (bound `1/sqrt(in)`, as
    /// PEFT's `kaiming_uniform_(a=sqrt(5))`) drawn from `seed`, B zero.
    pub fn new(
        out_dim: usize,
        in_dim: usize,
        s: &LoraSettings,
        switch: AdapterSwitch,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        use rand::{Rng, SeedableRng};
        let bound = 1.0 / (in_dim as f32).sqrt();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let values: Vec<f32> = (0..s.rank * in_dim).map(|_| rng.gen_range(-bound..bound)).collect();
        let a = Var::from_tensor(&Tensor::from_vec(values, (s.rank, in_dim), device)?)?;
        let b = Var::zeros((out_dim, s.rank), DType::F32, device)?;
        Ok(LoraAdapter {
            a,
            b,
            scale: s.alpha / s.rank as f64,
            switch,
            pass: TrainPass::default(),
            id: 0,
            dropout: s.dropout,
        })
    }

    /// The same adapter tied to a model's training-pass state, with its mask id and
    /// dropout probability.
    pub fn in_pass(mut self, pass: TrainPass, id: u64, dropout: f64) -> Self {
        self.pass = pass;
        self.id = id;
        self.dropout = dropout;
        self
    }

    /// The switch that selects its weights.
    pub(crate) fn switch(&self) -> &AdapterSwitch {
        &self.switch
    }

    /// An adapter from saved A and B.
    pub fn from_tensors(a: &Tensor, b: &Tensor, scale: f64, switch: AdapterSwitch) -> Result<Self> {
        Ok(LoraAdapter {
            a: Var::from_tensor(&a.to_dtype(DType::F32)?)?,
            b: Var::from_tensor(&b.to_dtype(DType::F32)?)?,
            scale,
            switch,
            pass: TrainPass::default(),
            id: 0,
            dropout: 0.0,
        })
    }

    /// A copy of the live A and B (for a snapshot), outside the autograd graph: candle's
    /// copy of a `Var` tracks it, and a forward over the copy would then build a graph
    /// (every layer's activations kept) for a reference that is never trained.
    pub(crate) fn copy_weights(&self) -> Result<(Tensor, Tensor)> {
        Ok((self.a.as_tensor().copy()?.detach(), self.b.as_tensor().copy()?.detach()))
    }

    /// Its layer's weight with it merged, when this thread's forwards read merged layers
    /// ([`AdapterSwitch::scope_merged`]).
    pub(crate) fn merged(&self) -> Result<Option<Tensor>> {
        self.switch.merged().map(|m| m.of(self).cloned()).transpose()
    }

    /// When this thread's forwards read merged layers and this adapter's layer is the first
    /// of a concatenated group ([`MergedAdapters::grouped`]): the group's weight and bias.
    pub(crate) fn merged_group(&self) -> Option<(Tensor, Option<Tensor>)> {
        self.switch.merged().and_then(|m| m.groups.get(&self.a.id()).cloned())
    }

    /// The (A, B) the switch selects on this thread, or None for no adapter.
    fn weights(&self) -> Result<Option<(Tensor, Tensor)>> {
        Ok(match self.switch.get() {
            AdapterUse::Live => Some((self.a.as_tensor().clone(), self.b.as_tensor().clone())),
            AdapterUse::Off => None,
            AdapterUse::Snapshot(s) => Some(s.of(self)?.clone()),
        })
    }

    /// What the layer's forward needs of this adapter for input `x`: the (A, B) the switch
    /// selects (detached in a checkpointed layer's graph-free forward), and the dropout
    /// mask in `x`'s dtype and shape while the model is in a training pass. None when
    /// adapters are off.
    pub(crate) fn parts(&self, x: &Tensor) -> Result<Option<(Tensor, Tensor, Option<Tensor>)>> {
        let Some((a, b)) = self.weights()? else { return Ok(None) };
        let pass = self.pass.get();
        // a checkpointed layer's forward builds no graph: detached views of A and B
        let (a, b) = if pass.no_grad { (a.detach(), b.detach()) } else { (a, b) };
        let mask = (pass.dropout_key.filter(|_| self.dropout > 0.0))
            .map(|key| {
                crate::nn::dropout::keyed_mask(key, self.id, self.dropout, x.shape(), x.device())?
                    .to_dtype(x.dtype())
            })
            .transpose()?;
        Ok(Some((a, b, mask)))
    }

    /// `scale · (dropout(x) Aᵀ) Bᵀ` in f32 whatever `x`'s dtype (A and B are f32, as peft
    /// keeps them in a bf16 model; the caller adds it to the base output in f32), with the
    /// weights the switch selects; None when adapters are off. Dropout acts only
    /// while the model is in a training pass. The layers run the fused
    /// `nn::fused::lora_linear`, which treats the base weight as frozen; this composed form
    /// is for a layer whose weight is also trained whole.
    pub fn delta(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let Some((a, b, mask)) = self.parts(x)? else { return Ok(None) };
        let x = match mask {
            Some(m) => (x * m)?,
            None => x.clone(),
        };
        let x = x.to_dtype(DType::F32)?;
        let dims = x.dims().to_vec();
        let inp = *dims.last().ok_or_else(|| anyhow!("LoRA input without a feature axis"))?;
        let a = a.to_dtype(DType::F32)?;
        let b = b.to_dtype(DType::F32)?;
        let flat = x.reshape(((), inp))?;
        let y = (flat.matmul(&a.t()?)?.matmul(&b.t()?)? * self.scale)?;
        let mut out = dims;
        *out.last_mut().expect("feature axis") = b.dim(0)?;
        Ok(Some(y.reshape(out)?))
    }
}

/// The key PEFT gives a module's adapter matrix (`which` is `lora_A` or `lora_B`).
pub fn peft_key(module: &str, which: &str) -> String {
    format!("base_model.model.{module}.{which}.weight")
}

/// Write adapters (keyed by the module's name in transformers' tree) as a PEFT folder,
/// with the modules trained whole (`full`: name, weight) as PEFT's `modules_to_save`.
///
/// peft matches each entry of a `target_modules` or `modules_to_save` list as a name
/// suffix: `norm` would also catch the vision mergers' norms, `0` every first block. So
/// both lists hold full module names, which match exactly the modules trained here
/// (unless the settings came from a PEFT adapter, whose `target_modules` is kept as written).
pub fn save_peft(
    dir: &Path,
    adapters: &[(String, &LoraAdapter, Option<[usize; 4]>)],
    full: &[(String, &Tensor)],
    s: &LoraSettings,
    base: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (module, ad, kernel) in adapters {
        let (mut a, mut b) =
            (ad.a.as_tensor().to_device(&Device::Cpu)?, ad.b.as_tensor().to_device(&Device::Cpu)?);
        if let Some([c, t, p, q]) = kernel {
            // a convolution's adapter, as peft keeps it: A a conv of the layer's kernel, B a 1×1×1 conv
            a = a.reshape((a.dim(0)?, *c, *t, *p, *q))?;
            b = b.reshape((b.dim(0)?, b.dim(1)?, 1, 1, 1))?;
        }
        tensors.insert(peft_key(module, "lora_A"), a);
        tensors.insert(peft_key(module, "lora_B"), b);
    }
    for (module, v) in full {
        tensors.insert(format!("base_model.model.{module}.weight"), v.to_device(&Device::Cpu)?);
    }
    let modules_to_save: std::collections::BTreeSet<&str> = full.iter().map(|(m, _)| m.as_str()).collect();
    let target_modules = match &s.peft_target_modules {
        Some(kept) => kept.clone(),
        None => json!(adapters.iter().map(|(m, _, _)| m.as_str()).collect::<std::collections::BTreeSet<_>>()),
    };
    let tmp = dir.join("adapter_model.safetensors.tmp");
    candle_core::safetensors::save(&tensors, &tmp)?;
    std::fs::rename(&tmp, dir.join("adapter_model.safetensors"))?;
    let cfg = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": s.rank,
        "lora_alpha": s.alpha,
        "lora_dropout": s.dropout,
        "bias": "none",
        "target_modules": target_modules,
        "modules_to_save": if modules_to_save.is_empty() { serde_json::Value::Null } else { json!(modules_to_save) },
        "base_model_name_or_path": base,
        "fan_in_fan_out": false,
        "use_rslora": false,
        "use_dora": false,
        "inference_mode": true,
    });
    let tmp = dir.join("adapter_config.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&cfg)?)?;
    std::fs::rename(&tmp, dir.join("adapter_config.json"))?;
    Ok(())
}

/// A PEFT adapter folder read back: settings and `module → (A, B)`.
pub struct PeftAdapter {
    /// Rank, alpha, dropout and targets from `adapter_config.json`.
    pub settings: LoraSettings,
    /// `alpha / rank`.
    pub scale: f64,
    /// Module name (without `base_model.model.`) → `(A, B)`.
    pub tensors: HashMap<String, (Tensor, Tensor)>,
    /// Modules saved whole (`modules_to_save`): module name → weight.
    pub full: HashMap<String, Tensor>,
}

/// Read `adapter_config.json` and `adapter_model.safetensors` from `dir`.
pub fn load_peft(dir: &Path) -> Result<PeftAdapter> {
    let cfg_path = dir.join("adapter_config.json");
    let text =
        std::fs::read_to_string(&cfg_path).with_context(|| format!("{}: cannot read", cfg_path.display()))?;
    let cfg: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", cfg_path.display()))?;
    if cfg.get("peft_type").and_then(|v| v.as_str()).is_some_and(|t| t != "LORA") {
        bail!("{}: only LoRA adapters are supported (peft_type = \"LORA\")", cfg_path.display());
    }
    for flag in ["use_dora", "use_rslora", "fan_in_fan_out"] {
        if cfg.get(flag).and_then(|v| v.as_bool()) == Some(true) {
            bail!("{}: `{flag} = true` is not supported", cfg_path.display());
        }
    }
    let rank =
        cfg.get("r").and_then(|v| v.as_u64()).ok_or_else(|| anyhow!("{}: missing `r`", cfg_path.display()))?
            as usize;
    let alpha = cfg.get("lora_alpha").and_then(|v| v.as_f64()).unwrap_or(rank as f64);
    let dropout = cfg.get("lora_dropout").and_then(|v| v.as_f64()).unwrap_or(0.0);
    if !(0.0..1.0).contains(&dropout) {
        bail!("{}: `lora_dropout = {dropout}` is not in [0, 1)", cfg_path.display());
    }
    let targets = match cfg.get("target_modules") {
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let wpath = dir.join("adapter_model.safetensors");
    let all = candle_core::safetensors::load(&wpath, &Device::Cpu)
        .with_context(|| format!("{}: cannot read the adapter weights", wpath.display()))?;
    let mut tensors = HashMap::new();
    let mut full = HashMap::new();
    for (key, a) in &all {
        let Some(module) =
            key.strip_prefix("base_model.model.").and_then(|k| k.strip_suffix(".lora_A.weight"))
        else {
            if !key.contains(".lora_") {
                if let Some(m) = key.strip_prefix("base_model.model.").and_then(|k| k.strip_suffix(".weight"))
                {
                    full.insert(m.to_string(), a.clone());
                }
            }
            continue;
        };
        let bkey = peft_key(module, "lora_B");
        let b = all.get(&bkey).ok_or_else(|| anyhow!("{}: `{key}` has no `{bkey}`", wpath.display()))?;
        // a convolution's adapter (the vision patch embedding) as the linear layer it is here
        let (a, b) =
            if a.rank() > 2 { (a.flatten_from(1)?, b.flatten_from(1)?) } else { (a.clone(), b.clone()) };
        tensors.insert(module.to_string(), (a, b));
    }
    if tensors.is_empty() {
        bail!("{}: no `base_model.model.*.lora_A.weight` tensors", wpath.display());
    }
    Ok(PeftAdapter {
        // which of the targets are the vision tower's is known once the modules are matched
        settings: LoraSettings {
            rank,
            alpha,
            targets,
            vision_targets: Vec::new(),
            dropout,
            peft_target_modules: cfg.get("target_modules").cloned(),
        },
        scale: alpha / rank as f64,
        tensors,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merged weight computes what the base product plus the adapter's does, and holds no
    /// graph even when made from tracked copies of the `Var`s.
    #[test]
    fn a_merged_weight_is_the_layer_with_its_adapter_and_outside_the_graph() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (6, 5), &dev).unwrap();
        let a = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 5), &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::randn(0f32, 1.0, (6, 2), &dev).unwrap()).unwrap();
        let (ta, tb) = (a.as_tensor().copy().unwrap(), b.as_tensor().copy().unwrap());
        assert!(ta.track_op(), "candle's copy of a Var tracks it: the test shows nothing");
        let merged = merge_weight(&w, (&ta, &tb), 0.5).unwrap();
        assert!(!merged.track_op());
        let x = Tensor::randn(0f32, 1.0, (3, 5), &dev).unwrap();
        let want = (x.matmul(&w.t().unwrap()).unwrap()
            + (x.matmul(&ta.t().unwrap()).unwrap().matmul(&tb.t().unwrap()).unwrap() * 0.5).unwrap())
        .unwrap();
        let got = x.matmul(&merged.t().unwrap()).unwrap();
        let diff: f32 = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap();
        assert!(diff < 1e-5, "merged layer differs by {diff}");
        // rounded once to the weight's dtype
        let half = merge_weight(&w.to_dtype(DType::BF16).unwrap(), (&ta, &tb), 0.5).unwrap();
        assert_eq!(half.dtype(), DType::BF16);
    }

    /// What one thread selects is its own; a scope puts back what was in use before it.
    #[test]
    fn a_switch_selects_per_thread_and_per_scope() {
        let (switch, other) = (AdapterSwitch::default(), AdapterSwitch::default());
        assert!(switch.get().is_live(), "live by default");
        {
            let _off = switch.scope(AdapterUse::Off);
            assert!(matches!(switch.get(), AdapterUse::Off));
            assert!(other.get().is_live(), "another model's switch");
            let seen = std::thread::scope(|s| s.spawn(|| switch.get().is_live()).join().unwrap());
            assert!(seen, "another thread still uses the live adapters");
            {
                let _snap = switch.scope(AdapterUse::Snapshot(Arc::new(AdapterSnapshot::new([], []))));
                assert!(matches!(switch.get(), AdapterUse::Snapshot(_)));
            }
            assert!(matches!(switch.get(), AdapterUse::Off), "the inner scope put Off back");
            {
                let snap = Arc::new(AdapterSnapshot::new([], []));
                let _merged = switch.scope_merged(Arc::new(MergedAdapters::new(snap, [])));
                assert!(matches!(switch.get(), AdapterUse::Snapshot(_)) && switch.merged().is_some());
                let _live = switch.scope(AdapterUse::Live);
                assert!(switch.merged().is_none(), "a scope inside reads no merged layers");
            }
            assert!(switch.merged().is_none(), "merged layers end with their scope");
        }
        assert!(switch.get().is_live());
    }
}
