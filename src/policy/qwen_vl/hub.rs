//! Where a checkpoint is: a local folder, or `hf:ORG/NAME[@REVISION]` in the Hugging Face
//! cache (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`), downloaded into it through
//! the `hf-hub` crate when a network is there and `HF_HUB_OFFLINE` is not set.

use anyhow::{bail, Context, Result};
use hf_hub::{Cache, Repo, RepoType};
use std::path::{Path, PathBuf};

/// Files a checkpoint folder may have besides its weights (missing ones are skipped).
const OPTIONAL: &[&str] = &[
    "tokenizer_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "generation_config.json",
];

/// The local folder of `path`: itself, or the cached snapshot of an `hf:` repository.
pub fn resolve(path: &str) -> Result<PathBuf> {
    let Some(spec) = path.strip_prefix("hf:") else {
        let dir = Path::new(path);
        if !dir.is_dir() {
            bail!(
                "{path}: no such checkpoint folder (give a folder with config.json, *.safetensors and \
                 tokenizer.json, or hf:ORG/NAME for the Hugging Face cache)"
            );
        }
        return Ok(dir.to_path_buf());
    };
    let (id, revision) = match spec.split_once('@') {
        Some((id, rev)) => (id.to_string(), rev.to_string()),
        None => (spec.to_string(), "main".to_string()),
    };
    if id.split('/').count() != 2 || id.starts_with('/') || id.ends_with('/') {
        bail!("{path}: expected hf:ORG/NAME (e.g. hf:Qwen/Qwen3-VL-2B-Instruct), optionally @REVISION");
    }
    let repo = Repo::with_revision(id.clone(), RepoType::Model, revision.clone());
    let cache = Cache::from_env();
    if let Some(dir) = cached_snapshot(&cache, &repo) {
        return Ok(dir);
    }
    let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v != "0" && !v.is_empty());
    let advice = format!(
        "download it where a network exists (`huggingface-cli download {id}`) and copy {} here, or set \
         [model] path to a local folder",
        cache.path().display()
    );
    if offline {
        bail!(
            "{path}: not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set; {advice}",
            cache.path().display()
        );
    }
    download(&repo, &cache).with_context(|| {
        format!(
            "{path}: not in the Hugging Face cache ({}) and the download failed; {advice}",
            cache.path().display()
        )
    })
}

/// The snapshot folder if config, tokenizer and every weight file are cached.
fn cached_snapshot(cache: &Cache, repo: &Repo) -> Option<PathBuf> {
    let c = cache.repo(repo.clone());
    let config = c.get("config.json")?;
    c.get("tokenizer.json")?;
    let dir = config.parent()?.to_path_buf();
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        let files = json.get("weight_map")?.as_object()?;
        if files.values().filter_map(|v| v.as_str()).all(|f| dir.join(f).exists()) {
            return Some(dir);
        }
        return None;
    }
    dir.join("model.safetensors").exists().then_some(dir)
}

fn download(repo: &Repo, cache: &Cache) -> Result<PathBuf> {
    let api = hf_hub::api::sync::ApiBuilder::from_cache(cache.clone()).with_progress(true).build()?;
    let r = api.repo(repo.clone());
    let config = r.get("config.json")?;
    r.get("tokenizer.json")?;
    for f in OPTIONAL {
        // optional files: a 404 is fine
        let _ = r.get(f);
    }
    match r.get("model.safetensors.index.json") {
        Ok(index) => {
            let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&index)?)?;
            let mut files: Vec<String> = json["weight_map"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_str().map(String::from)).collect())
                .unwrap_or_default();
            files.sort();
            files.dedup();
            for f in files {
                r.get(&f)?;
            }
        }
        Err(_) => {
            r.get("model.safetensors")?;
        }
    }
    Ok(config.parent().map(Path::to_path_buf).unwrap_or_default())
}
