//! `bench.json`: what a bench folder was asked to run, what `--resume` must ask again, and
//! how two benches' settings are compared.

use crate::env::EnvConfig;
use crate::tasks::Task;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `bench.json`: what a bench folder was asked to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Task ids.
    pub tasks: Vec<String>,
    /// The policy as given.
    pub policy: String,
    /// The checkpoint folder it was loaded from, for a checkpoint policy (absent in
    /// benches written before guirl recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<PathBuf>,
    /// First seed.
    pub seed: u64,
    /// Episodes per task.
    pub episodes_per_task: u64,
    /// Environment options that change outcomes.
    pub env: serde_json::Value,
    /// When the bench first started.
    pub started: String,
    /// Wall-clock spent running so far (all sessions), seconds.
    pub seconds: f64,
    /// Browser versions, once a browser has run.
    #[serde(default)]
    pub browser: Option<crate::env::BrowserVersions>,
    /// What the policy reported about itself when the bench started ([`policy_settings`]:
    /// an API policy's model, prompt hash, coordinate frame, sampling, whether it is sent
    /// the elements); absent in benches written before guirl recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_settings: Option<serde_json::Value>,
    /// What reaches the policy (`pixels`, `pixels+dom`, `n/a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<String>,
    /// The SHA-256 of each website spec task ([`spec_hashes`]), by task id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub specs: BTreeMap<String, String>,
}

/// A policy's [`crate::policy::Policy::info`] less what its server may change between sessions without
/// changing the policy (the model list it serves).
pub fn policy_settings(info: &serde_json::Value) -> serde_json::Value {
    let mut v = info.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("served_models");
    }
    v
}

/// The SHA-256 of each website spec task's file and of the local files its pages load, by
/// task id. (MiniWoB++ and built-in tasks come with guirl, whose commit the report names.)
pub fn spec_hashes(tasks: &[Arc<dyn Task>]) -> BTreeMap<String, String> {
    use sha2::Digest;
    let hash = |t: &Arc<dyn Task>| {
        let spec = Path::new(t.id());
        spec.is_file().then(|| {
            let mut h = sha2::Sha256::new();
            for f in std::iter::once(spec.to_path_buf()).chain(t.local_site().and_then(|s| s.page)) {
                h.update(std::fs::read(&f).unwrap_or_default());
            }
            (t.id().to_string(), format!("{:x}", h.finalize()))
        })
    };
    tasks.iter().filter_map(hash).collect()
}

/// The keys whose values differ between two objects, as `WHAT key: old → new` (a key one
/// side lacks, from an older guirl, or does not know, `null`, is not counted).
pub(crate) fn value_differences(what: &str, a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return if a == b { vec![] } else { vec![format!("{what}: {a} → {b}")] };
    };
    let known = |v: &&serde_json::Value| !v.is_null();
    a.iter()
        .filter(|(_, v)| known(v))
        .filter_map(|(k, v)| {
            b.get(k).filter(known).filter(|w| *w != v).map(|w| format!("{what} {k}: {v} → {w}"))
        })
        .collect()
}

/// The bench folder's manifest file.
pub const MANIFEST_FILE: &str = "bench.json";

pub(crate) fn env_json(env: &EnvConfig) -> serde_json::Value {
    serde_json::json!({
        "max_steps": env.max_steps,
        "strict_actions": env.rules.strict_actions,
        "wall_clock_ms": env.rules.wall_clock_ms,
        "virtual_time_ms": env.rules.virtual_time_ms,
    })
}

/// Whether two benches' env options differ. A key one side lacks (written before guirl
/// recorded it) is not counted: what it was is unknown.
pub(crate) fn env_options_differ(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => a.iter().any(|(k, v)| b.get(k).is_some_and(|w| w != v)),
        _ => a != b,
    }
}

/// The manifest of the bench in `out`, if it holds one.
pub fn read_manifest(out: &Path) -> anyhow::Result<Option<Manifest>> {
    let path = out.join(MANIFEST_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            Ok(Some(serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
}
