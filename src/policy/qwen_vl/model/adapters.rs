//! LoRA adapters on a loaded model: the layers that can carry one, attaching, loading and
//! saving them in PEFT's layout, snapshots of their values, and modules trained whole.

use super::nn::Linear;
use super::QwenVl;
use crate::policy::qwen_vl::train::lora::{
    load_peft, merge_weight, save_peft, AdapterSnapshot, AdapterSwitch, AdapterUse, LoraAdapter,
    LoraSettings, MergedAdapters, PeftAdapter,
};
use anyhow::{bail, Result};
use candle_core::{DType, Tensor, Var};
use std::path::Path;
use std::sync::Arc;

/// A linear layer that can carry an adapter: its PEFT module name in transformers' current
/// tree (`model.language_model.layers.3.self_attn.q_proj`, `model.visual.blocks.0.attn.qkv`),
/// the name its seeds derive from (the language model's as before vision adapters existed),
/// and whether it is the vision tower's.
struct AdapterSite {
    peft: String,
    key: String,
    vision: bool,
}

impl AdapterSite {
    fn text(name: String) -> Self {
        AdapterSite { peft: format!("model.language_model.{name}"), key: name, vision: false }
    }

    fn vision(name: String) -> Self {
        AdapterSite { peft: format!("model.visual.{name}"), key: format!("visual.{name}"), vision: true }
    }

    /// The module's name in the older layout (`model.layers.*`, `visual.*`).
    fn legacy(&self) -> String {
        if self.vision {
            self.key.clone()
        } else {
            format!("model.{}", self.key)
        }
    }

    /// This module's tensors in a PEFT adapter, under either layout's name.
    fn find<'a, T>(&self, tensors: &'a std::collections::HashMap<String, T>) -> Option<&'a T> {
        tensors.get(&self.peft).or_else(|| tensors.get(&self.legacy()))
    }
}

impl QwenVl {
    /// Every linear layer that can carry an adapter: the language model's, then the
    /// vision tower's.
    fn sites(&self) -> Vec<(AdapterSite, &Linear)> {
        let text = self.text.linears().into_iter().map(|(n, l)| (AdapterSite::text(n), l));
        text.chain(self.vision.linears().into_iter().map(|(n, l)| (AdapterSite::vision(n), l))).collect()
    }

    /// [`Self::sites`], to attach adapters.
    fn sites_mut(&mut self) -> Vec<(AdapterSite, &mut Linear)> {
        let text = self.text.linears_mut().into_iter().map(|(n, l)| (AdapterSite::text(n), l));
        text.chain(self.vision.linears_mut().into_iter().map(|(n, l)| (AdapterSite::vision(n), l))).collect()
    }
}

impl QwenVl {
    /// Attach fresh adapters (A random, B zero) to the language model's layers named in
    /// `settings.targets` and the vision tower's named in `settings.vision_targets`; returns
    /// the switch that turns them all on or off.
    pub fn attach_lora(&mut self, settings: &LoraSettings, seed: u64) -> Result<AdapterSwitch> {
        let switch = AdapterSwitch::default();
        let device = self.text_device();
        let pass = self.text.pass().clone();
        let (mut n, mut nv) = (0, 0);
        for (slot, lin) in self.sites_mut() {
            let leaf = slot.key.rsplit('.').next().unwrap_or_default();
            let targets = if slot.vision { &settings.vision_targets } else { &settings.targets };
            if targets.iter().any(|t| t == leaf) {
                let s = layer_seed(seed, &slot.key);
                let ad = LoraAdapter::new(lin.out_dim(), lin.in_dim(), settings, switch.clone(), s, &device)?;
                lin.lora = Some(ad.in_pass(pass.clone(), mask_id(&slot.key), settings.dropout));
                if slot.vision {
                    nv += 1;
                } else {
                    n += 1;
                }
            }
        }
        if n == 0 {
            bail!(
                "no language-model layer matches the LoRA targets {:?}; the layers are q_proj, k_proj, v_proj, \
                 o_proj, gate_proj, up_proj, down_proj",
                settings.targets
            );
        }
        if nv == 0 && !settings.vision_targets.is_empty() {
            let mut leaves: Vec<String> = self
                .vision
                .linears()
                .iter()
                .map(|(n, _)| n.rsplit('.').next().unwrap_or_default().to_string())
                .collect();
            leaves.sort();
            leaves.dedup();
            bail!(
                "no vision-tower layer matches lora_vision_targets {:?}; this checkpoint's are {}",
                settings.vision_targets,
                leaves.join(", ")
            );
        }
        self.lora = Some((settings.clone(), switch.clone()));
        Ok(switch)
    }

    /// Load a PEFT adapter folder onto the language model and the vision tower (replacing
    /// any adapters).
    /// Module names are accepted in both layouts (`model.language_model.layers.*`,
    /// `model.layers.*`); a tensor that matches no layer, or a wrong shape, is an error.
    pub fn load_adapter(&mut self, dir: &Path) -> Result<AdapterSwitch> {
        let mut peft = load_peft(dir)?;
        let switch = AdapterSwitch::default();
        let device = self.text_device();
        let pass = self.text.pass().clone();
        let mut used = std::collections::BTreeSet::new();
        let mut vision_leaves = std::collections::BTreeSet::new();
        for (slot, lin) in self.sites_mut() {
            lin.lora = None;
            if let Some((a, b)) = slot.find(&peft.tensors) {
                let want_a = [peft.settings.rank, lin.in_dim()];
                let want_b = [lin.out_dim(), peft.settings.rank];
                if a.dims() != want_a || b.dims() != want_b {
                    bail!(
                        "{}: the adapter of `{}` has shapes {:?} / {:?}, the model needs {:?} / {:?}",
                        dir.display(),
                        slot.peft,
                        a.dims(),
                        b.dims(),
                        want_a,
                        want_b
                    );
                }
                let (a, b) = (a.to_device(&device)?, b.to_device(&device)?);
                let ad = LoraAdapter::from_tensors(&a, &b, peft.scale, switch.clone())?;
                lin.lora = Some(ad.in_pass(pass.clone(), mask_id(&slot.key), peft.settings.dropout));
                if slot.vision {
                    vision_leaves.insert(slot.key.rsplit('.').next().unwrap_or_default().to_string());
                }
                used.insert(if peft.tensors.contains_key(&slot.peft) { slot.peft } else { slot.legacy() });
            }
        }
        if used.len() != peft.tensors.len() {
            let mut unmatched: Vec<&String> = peft.tensors.keys().filter(|k| !used.contains(*k)).collect();
            unmatched.sort();
            bail!(
                "{}: {} of the adapter's {} modules match no linear layer of this checkpoint: {}",
                dir.display(),
                unmatched.len(),
                peft.tensors.len(),
                unmatched.iter().take(5).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        peft.settings.vision_targets = vision_leaves.into_iter().collect();
        let tied_head = self.config.text.tie_word_embeddings;
        for (name, t) in &peft.full {
            // the saved copy of a tied head (see `save_adapter`): the embedding gives it
            if tied_head && name == TIED_HEAD {
                continue;
            }
            let short = name.rsplit('.').next().unwrap_or_default().to_string();
            self.train_whole(std::slice::from_ref(&short))?;
            let (_, _, v) = self.full.iter().find(|(s, _, _)| *s == short).expect("just added");
            if t.dims() != v.dims() {
                bail!("{}: `{name}` has shape {:?}, this model's is {:?}", dir.display(), t.dims(), v.dims());
            }
            v.set(&t.to_dtype(DType::F32)?.to_device(v.device())?)?;
        }
        self.lora = Some((peft.settings, switch.clone()));
        Ok(switch)
    }

    /// Save the adapters as a PEFT folder.
    pub fn save_adapter(&self, dir: &Path) -> Result<()> {
        let Some((settings, _)) = self.lora.clone() else {
            bail!("the model has no adapters to save");
        };
        let base = self.dir.display().to_string();
        let adapters: Vec<(String, LoraAdapter, Option<[usize; 4]>)> = self
            .sites()
            .into_iter()
            .filter_map(|(s, l)| l.lora.clone().map(|a| (s.peft, a, l.kernel)))
            .collect();
        let refs: Vec<(String, &LoraAdapter, Option<[usize; 4]>)> =
            adapters.iter().map(|(n, a, k)| (n.clone(), a, *k)).collect();
        let full = self.whole_to_save(|v| Some(v.as_tensor()));
        if !full.is_empty() {
            static ONCE: std::sync::Once = std::sync::Once::new();
            // Said once a process, without the folder: the first save goes to a temporary
            // folder that is renamed when complete, and the rule holds for every checkpoint.
            ONCE.call_once(|| {
                tracing::warn!(
                    "this run's checkpoints save the modules trained whole ([model] train_modules) as \
                     PEFT's modules_to_save: peft loads the adapter, vLLM does not (it serves LoRA \
                     adapters without modules_to_save)"
                )
            });
        }
        save_peft(dir, &refs, &full, &settings, &base)
    }

    /// The adapters' variables, named `<module>.lora_A` / `.lora_B`, sorted.
    pub fn lora_vars(&self) -> Vec<(String, Var)> {
        let mut out: Vec<(String, Var)> = self
            .sites()
            .into_iter()
            .filter_map(|(s, l)| l.lora.as_ref().map(|a| (s.peft, a.a.clone(), a.b.clone())))
            .flat_map(|(n, a, b)| [(format!("{n}.lora_A"), a), (format!("{n}.lora_B"), b)])
            .chain(self.full.iter().map(|(_, n, v)| (format!("{n}.weight"), v.clone())))
            .collect();
        out.sort_by(|x, y| x.0.cmp(&y.0));
        out
    }
}

impl QwenVl {
    /// The adapters' settings and switch, once attached or loaded.
    pub fn lora(&self) -> Option<&(LoraSettings, AdapterSwitch)> {
        self.lora.as_ref()
    }

    /// Overwrite the attached adapters' values with a PEFT folder's (a resume): the same
    /// modules and shapes must be there, nothing else changes.
    pub fn set_adapter_values(&self, dir: &Path) -> Result<()> {
        let peft = load_peft(dir)?;
        let pairs = self.adapter_values(&peft, dir)?;
        for (ad, (a, b)) in &pairs {
            ad.a.set(a)?;
            ad.b.set(b)?;
        }
        if pairs.len() != peft.tensors.len() {
            bail!("{}: the adapter has modules this policy has no adapter on", dir.display());
        }
        for (short, name, v) in &self.full {
            let t = peft.full.get(name).ok_or_else(|| {
                anyhow::anyhow!("{}: no weights for `{short}`, which this policy trains whole", dir.display())
            })?;
            if t.dims() != v.dims() {
                bail!("{}: `{name}` has shape {:?}, this model's is {:?}", dir.display(), t.dims(), v.dims());
            }
            v.set(&t.to_dtype(DType::F32)?.to_device(v.device())?)?;
        }
        let tied_copy = usize::from(self.tied_embedding().is_some() && peft.full.contains_key(TIED_HEAD));
        if peft.full.len() - tied_copy != self.full.len() {
            bail!(
                "{}: the checkpoint trains {:?} whole, this policy {:?}: give [model] train_modules the run's value",
                dir.display(),
                peft.full.keys().collect::<Vec<_>>(),
                self.full.iter().map(|(s, _, _)| s).collect::<Vec<_>>()
            );
        }
        Ok(())
    }
}

/// The head's name in transformers' tree, under which a tied head is saved.
const TIED_HEAD: &str = "lm_head";

impl QwenVl {
    /// The modules trained whole as a checkpoint saves them, each weight read by `weight`
    /// (the live `Var`'s, or a snapshot's copy; a module it gives none for is left out):
    /// under its full name, and a trained embedding on a tied head again as the head. A
    /// trained embedding on a tied head trains the head too; peft does not tie them back
    /// by default (it would keep the base's head, silently), so the head is saved as a
    /// module of its own with the same weight.
    fn whole_to_save<'a>(
        &'a self,
        weight: impl Fn(&'a Var) -> Option<&'a Tensor>,
    ) -> Vec<(String, &'a Tensor)> {
        let mut out = Vec::new();
        for (short, name, v) in &self.full {
            if let Some(t) = weight(v) {
                out.push((name.clone(), t));
                if self.tied_embedding().is_some_and(|(s, _, _)| s == short) {
                    out.push((TIED_HEAD.to_string(), t));
                }
            }
        }
        out
    }

    /// The embedding trained whole, when the head is tied to it.
    fn tied_embedding(&self) -> Option<&(String, String, Var)> {
        let tied = self.config.text.tie_word_embeddings;
        self.full.iter().find(|(s, _, _)| tied && s == "embed_tokens")
    }

    /// Train these modules whole (any of `embed_tokens`, `lm_head`, `norm`) beside the
    /// adapters. A freshly initialised model needs it (its frozen head caps the logits);
    /// a pretrained one rarely does. Snapshots of the adapters (attached first) copy them
    /// too.
    pub fn train_whole(&mut self, modules: &[String]) -> Result<()> {
        for m in modules {
            if self.full.iter().any(|(s, _, _)| s == m) {
                continue;
            }
            let (name, var) = self.text.unfreeze(m)?;
            self.full.push((m.clone(), name, var));
        }
        if let Some((_, switch)) = &self.lora {
            self.text.follow(switch.clone());
        }
        Ok(())
    }
}

impl QwenVl {
    /// A copy of every adapter's live A and B, and of every module trained whole (the KL
    /// reference's weights, or the weights an overlapped run collects with).
    pub fn snapshot_adapters(&self) -> Result<Arc<AdapterSnapshot>> {
        let mut pairs = Vec::new();
        for (_, lin) in self.sites() {
            if let Some(ad) = &lin.lora {
                pairs.push((ad, ad.copy_weights()?));
            }
        }
        let whole = self
            .full
            .iter()
            .map(|(_, _, v)| Ok((v.id(), v.as_tensor().copy()?.detach())))
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(AdapterSnapshot::new(pairs, whole)))
    }

    /// The adapters `from` selects merged into copies of their layers' weights, for
    /// decoding ([`MergedAdapters`]); None when it selects none (no adapters, or off). The
    /// live adapters are copied first, so the merged layers stay as they are now.
    pub fn merge_adapters(&self, from: &AdapterUse) -> Result<Option<Arc<MergedAdapters>>> {
        let snapshot = match from {
            _ if self.lora.is_none() => return Ok(None),
            AdapterUse::Off => return Ok(None),
            AdapterUse::Live => self.snapshot_adapters()?,
            AdapterUse::Snapshot(s) => s.clone(),
        };
        let merge = |lin: &Linear, ad: &LoraAdapter| -> Result<Tensor> {
            let w = snapshot.whole(lin.weight.id()).unwrap_or(&lin.weight);
            let (a, b) = snapshot.of(ad)?;
            merge_weight(w, (a, b), ad.scale)
        };
        // a layer's q/k/v and its gate/up, all adapted, merged and concatenated a group at a
        // time for one product each when decoding with the fused kernels; the members read
        // views of it, so the copy is made once and never twice at a time
        let mut groups = Vec::new();
        let mut grouped = std::collections::HashSet::new();
        for members in self.text.product_groups() {
            let ads: Option<Vec<&LoraAdapter>> = members.iter().map(|l| l.lora.as_ref()).collect();
            let Some(ads) = ads else { continue };
            let weights = members.iter().zip(&ads).map(|(l, ad)| merge(l, ad)).collect::<Result<Vec<_>>>()?;
            let biases: Option<Vec<&Tensor>> = members.iter().map(|l| l.bias.as_ref()).collect();
            let bias = biases.map(|b| Tensor::cat(&b, 0)).transpose()?;
            grouped.extend(ads.iter().map(|ad| ad.a.id()));
            groups.push((ads, Tensor::cat(&weights, 0)?, bias));
        }
        let mut merged = Vec::new();
        for (_, lin) in self.sites() {
            match &lin.lora {
                Some(ad) if !grouped.contains(&ad.a.id()) => merged.push((ad, merge(lin, ad)?)),
                _ => {}
            }
        }
        let merged = MergedAdapters::new(snapshot, merged).grouped(groups)?;
        Ok(Some(Arc::new(merged)))
    }

    /// Bytes the merged copies of the adapted layers take ([`Self::merge_adapters`]).
    pub fn merged_bytes(&self) -> u64 {
        let sites = self.sites();
        let adapted = sites.iter().filter(|(_, l)| l.lora.is_some());
        adapted.map(|(_, l)| (l.weight.elem_count() * l.weight.dtype().size_in_bytes()) as u64).sum()
    }

    /// Save a snapshot of the adapters as a PEFT folder (a resumed run's KL reference).
    pub fn save_snapshot(&self, snapshot: &AdapterSnapshot, dir: &Path) -> Result<()> {
        let Some((settings, switch)) = self.lora.clone() else {
            bail!("the model has no adapters to save");
        };
        let mut frozen = Vec::new();
        for (slot, l) in self.sites() {
            if let Some(ad) = &l.lora {
                let (a, b) = snapshot.of(ad)?;
                frozen.push((
                    slot.peft,
                    LoraAdapter::from_tensors(a, b, ad.scale, switch.clone())?,
                    l.kernel,
                ));
            }
        }
        let refs: Vec<(String, &LoraAdapter, Option<[usize; 4]>)> =
            frozen.iter().map(|(n, a, k)| (n.clone(), a, *k)).collect();
        let full = self.whole_to_save(|v| snapshot.whole(v.id()));
        save_peft(dir, &refs, &full, &settings, &self.dir.display().to_string())
    }

    /// A snapshot read from a PEFT folder (the live adapters are untouched). A module
    /// trained whole that the folder lacks (a reference saved before snapshots held them)
    /// stays shared with the live policy, as it was then, with a warning.
    pub fn load_snapshot(&self, dir: &Path) -> Result<Arc<AdapterSnapshot>> {
        let peft = load_peft(dir)?;
        let mut whole = Vec::new();
        for (short, name, v) in &self.full {
            match peft.full.get(name) {
                Some(t) if t.dims() == v.dims() => {
                    whole.push((v.id(), t.to_dtype(DType::F32)?.to_device(v.device())?));
                }
                Some(t) => {
                    bail!(
                        "{}: `{name}` has shape {:?}, this model's is {:?}",
                        dir.display(),
                        t.dims(),
                        v.dims()
                    )
                }
                None => tracing::warn!(
                    "{}: no weights for `{short}` (trained whole): this snapshot shares the live policy's",
                    dir.display()
                ),
            }
        }
        Ok(Arc::new(AdapterSnapshot::new(self.adapter_values(&peft, dir)?, whole)))
    }

    /// Each attached adapter with its A and B from `peft` (read from `dir`), in f32 on the
    /// adapter's device; an adapter missing there, or of another shape, is an error.
    fn adapter_values<'a>(
        &'a self,
        peft: &PeftAdapter,
        dir: &Path,
    ) -> Result<Vec<(&'a LoraAdapter, (Tensor, Tensor))>> {
        let mut pairs = Vec::new();
        for (slot, lin) in self.sites() {
            let Some(ad) = &lin.lora else { continue };
            let (a, b) = slot
                .find(&peft.tensors)
                .ok_or_else(|| anyhow::anyhow!("{}: no adapter for `{}`", dir.display(), slot.peft))?;
            if a.dims() != ad.a.dims() || b.dims() != ad.b.dims() {
                bail!(
                    "{}: the adapter of `{}` has another shape than this policy's",
                    dir.display(),
                    slot.peft
                );
            }
            let dev = ad.a.device();
            pairs.push((
                ad,
                (a.to_dtype(DType::F32)?.to_device(dev)?, b.to_dtype(DType::F32)?.to_device(dev)?),
            ));
        }
        Ok(pairs)
    }
}

/// An adapter's share of its dropout masks' key: its layer's name (the run's seed enters
/// through the training pass's key).
fn mask_id(name: &str) -> u64 {
    layer_seed(0, name)
}

/// A layer's own initialisation seed: the run's seed mixed with the layer's name, so the
/// same seed gives the same adapters whatever else is attached.
fn layer_seed(seed: u64, name: &str) -> u64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{seed}:{name}").as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}
