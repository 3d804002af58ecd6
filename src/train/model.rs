//! `[model]` of a training config: which policy (`kind`) with that kind's own settings
//! ([`ModelVariant`]), and the starting weights (`init`). The table as a config writes it is
//! [`super::model_table::ModelTable`]; old-form configs (`backbone = ...`) are recognised
//! in [`super::model_migrate`].

use super::model_kind::SmallModel;
pub use super::model_kind::{ModelKind, ModelPreset};
use super::model_table::ModelTable;
use crate::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use crate::policy::vlm::{VlmConfig, VlmPolicy, CONFIG_FILE, WEIGHTS_FILE};
use crate::policy::TrainablePolicy;
use anyhow::{bail, Context};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[model]`, read: the policy with its own settings, and the weights to start from.
/// It is read and written through [`ModelTable`], the table as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(try_from = "ModelTable", into = "ModelTable")]
pub struct ModelConfig {
    /// The policy (`kind`) with its own keys.
    pub variant: ModelVariant,
    /// Weights to start from: a checkpoint folder (e.g. a cloned policy's
    /// `checkpoints/iter-000000`; its architecture must be the one `[model]` describes)
    /// or a safetensors file. A resumed run starts from its own checkpoint instead.
    pub init: Option<PathBuf>,
}

/// The policy `[model]` describes, with the keys of its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelVariant {
    /// `kind = "small"`: guirl's small policy, a preset plus overrides.
    Small(SmallModel),
    /// `kind = "qwen3_vl"` or `"qwen2_5_vl"`: a pretrained backbone with LoRA; its
    /// `backbone` is the kind's name.
    Qwen(QwenPolicySettings),
}

impl Default for ModelVariant {
    fn default() -> Self {
        ModelVariant::Small(SmallModel::default())
    }
}

impl ModelVariant {
    /// The kind it is.
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelVariant::Small(_) => ModelKind::Small,
            ModelVariant::Qwen(s) if s.backbone == ModelKind::Qwen25Vl.name() => ModelKind::Qwen25Vl,
            ModelVariant::Qwen(_) => ModelKind::Qwen3Vl,
        }
    }
}

impl ModelConfig {
    /// The policy's kind.
    pub fn kind(&self) -> ModelKind {
        self.variant.kind()
    }

    /// The small policy's settings (`None` for a Qwen-VL kind).
    pub fn small(&self) -> Option<&SmallModel> {
        match &self.variant {
            ModelVariant::Small(s) => Some(s),
            ModelVariant::Qwen(_) => None,
        }
    }

    /// The small policy's settings, to change (`None` for a Qwen-VL kind).
    pub fn small_mut(&mut self) -> Option<&mut SmallModel> {
        match &mut self.variant {
            ModelVariant::Small(s) => Some(s),
            ModelVariant::Qwen(_) => None,
        }
    }

    /// A Qwen-VL backbone's settings (`None` for the small policy).
    pub fn qwen(&self) -> Option<&QwenPolicySettings> {
        match &self.variant {
            ModelVariant::Qwen(s) => Some(s),
            ModelVariant::Small(_) => None,
        }
    }

    /// What reaches the policy (see [`crate::policy::observation`]): a pretrained backbone
    /// reads the screenshot and the instruction only (`pixels`); the small policy says
    /// itself ([`VlmConfig::observation`]).
    pub fn observation(&self) -> anyhow::Result<crate::policy::observation::Observation> {
        match &self.variant {
            ModelVariant::Qwen(_) => Ok(crate::policy::observation::Observation::Pixels),
            ModelVariant::Small(s) => Ok(s.vlm_config()?.observation()),
        }
    }

    /// The trainable policy `[model]` describes (initialised from `seed`), holding
    /// `init`'s weights when it is set, as the trainer holds it.
    pub fn build(&self, device: &Device, seed: u64) -> anyhow::Result<Box<dyn TrainablePolicy>> {
        match &self.variant {
            ModelVariant::Qwen(settings) => {
                // an adapter is a folder (adapter_config.json beside its weights)
                if let Some(init) = self.init.as_ref().filter(|i| i.is_file()) {
                    anyhow::bail!(
                        "model.init = {}: a Qwen-VL kind starts from an adapter folder (holding \
                         adapter_config.json and adapter_model.safetensors), not a file: give its folder",
                        init.display()
                    );
                }
                let mut policy = QwenVlPolicy::new(settings.clone(), device, seed)?;
                if let Some(init) = &self.init {
                    let dir = super::checkpoint::resolve_policy_dir(init)
                        .map(|p| p.dir)
                        .unwrap_or_else(|_| init.to_path_buf());
                    policy
                        .load(&dir)
                        .with_context(|| format!("model.init: cannot start from {}", dir.display()))?;
                }
                Ok(Box::new(policy))
            }
            ModelVariant::Small(s) => {
                let policy = VlmPolicy::new(s.vlm_config()?, device, seed)?;
                if let Some(init) = &self.init {
                    start_from(&policy, init, device)?;
                }
                Ok(Box::new(policy))
            }
        }
    }

    /// The values a type cannot rule out, each bad one reported through `check` by its
    /// dotted name.
    pub(crate) fn check(&self, check: &mut impl FnMut(bool, String)) {
        match &self.variant {
            ModelVariant::Small(s) => s.check(check),
            // Checked here too so that a bad value stops `guirl train` before a browser starts.
            ModelVariant::Qwen(q) => {
                if let Err(e) = q.check() {
                    check(false, e.to_string());
                }
            }
        }
    }
}

/// `TryFrom<ModelTable>`: the keys written must all be `kind`'s (the fields of its
/// settings); they are then read as those settings, with their defaults.
impl TryFrom<ModelTable> for ModelConfig {
    type Error = String;

    fn try_from(t: ModelTable) -> Result<Self, String> {
        let kind = t.kind.unwrap_or_default();
        let serde_json::Value::Object(mut keys) = serde_json::to_value(&t).map_err(|e| e.to_string())? else {
            unreachable!("a struct is written as an object")
        };
        keys.retain(|k, v| !v.is_null() && k != "kind" && k != "init");
        if let Some(k) = keys.keys().find(|k| !kind_keys(kind).contains(&k.as_str())) {
            return Err(wrong_kind(k, kind, t.kind.is_some()));
        }
        let variant = match kind {
            ModelKind::Small => {
                ModelVariant::Small(serde_json::from_value(keys.into()).map_err(|e| format!("[model]: {e}"))?)
            }
            ModelKind::Qwen3Vl | ModelKind::Qwen25Vl => {
                // serde's "missing field" alone would not say what the path names.
                if !keys.contains_key("path") {
                    return Err(format!(
                        "model.kind = \"{kind}\" needs model.path: a Hugging Face checkpoint folder, or \
                         hf:ORG/NAME in the Hugging Face cache"
                    ));
                }
                keys.insert("backbone".into(), kind.name().into());
                ModelVariant::Qwen(
                    serde_json::from_value(keys.into())
                        .map_err(|e| format!("[model] kind = \"{kind}\": {e}"))?,
                )
            }
        };
        Ok(ModelConfig { variant, init: t.init })
    }
}

/// `Into<ModelTable>`: `kind`, the kind's settings (a Qwen-VL backbone's with their
/// defaults written out) and `init`.
impl From<ModelConfig> for ModelTable {
    fn from(c: ModelConfig) -> ModelTable {
        let kind = c.kind();
        let settings = match &c.variant {
            ModelVariant::Small(s) => serde_json::to_value(s),
            ModelVariant::Qwen(q) => serde_json::to_value(q),
        };
        let Ok(serde_json::Value::Object(mut keys)) = settings else {
            unreachable!("settings are written as an object")
        };
        // The kind says it.
        keys.remove("backbone");
        let mut t: ModelTable = serde_json::from_value(keys.into())
            .expect("every kind's settings are ModelTable keys (model_tests::every_kind_key_is_a_table_key)");
        (t.kind, t.init) = (Some(kind), c.init);
        t
    }
}

/// The keys `kind` accepts in `[model]` besides `kind` and `init`: its settings' fields.
pub(crate) fn kind_keys(kind: ModelKind) -> Vec<&'static str> {
    match kind {
        ModelKind::Small => serde_fields::<SmallModel>(),
        ModelKind::Qwen3Vl | ModelKind::Qwen25Vl => {
            serde_fields::<QwenPolicySettings>().into_iter().filter(|k| *k != "backbone").collect()
        }
    }
}

/// serde's unknown-key error for `[model]` lists every kind's keys; this names the key and
/// those of the kind the table sets (`text`: the table's TOML), with the closest first.
pub(crate) fn unknown_key_error(key: &str, table: Option<&toml::Table>) -> String {
    let kind = table
        .and_then(|t| t.get("kind")?.as_str().map(str::to_string))
        .and_then(|k| serde_json::from_value::<ModelKind>(k.into()).ok())
        .unwrap_or_default();
    let mut keys = kind_keys(kind);
    keys.extend(["kind", "init"]);
    let close = keys.iter().copied().filter(|k| strsim::jaro_winkler(k, key) > 0.85).collect::<Vec<_>>();
    let hint = match close.first() {
        Some(k) => format!("did you mean {k}? "),
        None => String::new(),
    };
    format!("unknown key model.{key}: {hint}kind = \"{kind}\" takes {}", keys.join(", "))
}

/// The error for a key of another kind than `kind` (`written`: whether `kind` was written
/// or is the default).
fn wrong_kind(key: &str, kind: ModelKind, written: bool) -> String {
    let owners: Vec<ModelKind> =
        ModelKind::all().iter().copied().filter(|o| kind_keys(*o).contains(&key)).collect();
    let names: Vec<String> = owners.iter().map(|o| format!("\"{o}\"")).collect();
    let Some(owner) = owners.first() else { return format!("model.{key} is not a [model] key") };
    let default = if written { "" } else { ", the default when kind is left out" };
    let fix = match kind {
        ModelKind::Small => {
            format!("set model.kind = {} (with model.path), or remove it", names.join(" or "))
        }
        _ => "remove it".to_string(),
    };
    format!(
        "model.{key} is a key of kind = {} ({}), not of kind = \"{kind}\" ({}{default}): {fix}",
        names.join(" or "),
        owner.described(),
        kind.described()
    )
}

/// The field names serde's derive gives struct `T`: the names its `deserialize_struct`
/// call passes, caught by a deserializer that reads nothing else.
fn serde_fields<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    use serde::de::{Error, Visitor};
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Error::custom("names read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut fields));
    fields.to_vec()
}

/// `[model] init`: load a checkpoint folder's (a run folder's best, or a safetensors file's) weights into
/// the freshly built `policy`, whose architecture `[model]` describes.
fn start_from(policy: &VlmPolicy, init: &Path, device: &Device) -> anyhow::Result<()> {
    // A run folder or its `latest` / `best` link names a checkpoint folder, as for
    // `--policy`; anything else keeps its own message below.
    let resolved = match init.is_dir() {
        true => {
            super::checkpoint::resolve_policy_dir(init).map(|p| p.dir).unwrap_or_else(|_| init.to_path_buf())
        }
        false => init.to_path_buf(),
    };
    let init = resolved.as_path();
    let weights = if init.is_dir() {
        let cfg_path = init.join(CONFIG_FILE);
        if cfg_path.is_file() {
            let theirs = VlmConfig::from_file(&cfg_path)?;
            let diff = config_diff(&theirs, policy.config())?;
            if !diff.is_empty() {
                bail!(
                    "model.init: {} holds a policy with another architecture than [model] describes \
                     ({}); give [model] the settings of the run that wrote it",
                    init.display(),
                    diff.join(", ")
                );
            }
        }
        init.join(WEIGHTS_FILE)
    } else {
        init.to_path_buf()
    };
    if !weights.is_file() {
        bail!(
            "model.init: {} does not exist (expected a checkpoint folder such as runs/NAME/checkpoints/iter-000000, or a .safetensors file)",
            weights.display()
        );
    }
    policy
        .load_weights(&weights, device)
        .with_context(|| format!("model.init: cannot start from {}", init.display()))
}

/// The settings in which two architectures differ, as `name: theirs (checkpoint) vs
/// ours ([model])`.
fn config_diff(theirs: &VlmConfig, ours: &VlmConfig) -> anyhow::Result<Vec<String>> {
    fn flat(prefix: &str, v: serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match v {
            serde_json::Value::Object(m) => {
                m.into_iter().for_each(|(k, v)| flat(&format!("{prefix}{k}."), v, out))
            }
            v => out.push((prefix.trim_end_matches('.').to_string(), v)),
        }
    }
    let (mut a, mut b) = (vec![], vec![]);
    flat("", serde_json::to_value(theirs)?, &mut a);
    flat("", serde_json::to_value(ours)?, &mut b);
    Ok(a.into_iter()
        .zip(b)
        .filter(|((_, x), (_, y))| x != y)
        .map(|((k, x), (_, y))| format!("{k}: {x} in the checkpoint, {y} in [model]"))
        .collect())
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
