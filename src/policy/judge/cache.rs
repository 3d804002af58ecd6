//! The verdict cache: one small JSON file per verdict in a folder, named by the SHA-256 of
//! what decided it (the screenshots' pixels, the instruction, the actions shown, the
//! rubric's hash, the model and the number of votes). The threshold is not in the key: it
//! is applied to the cached vote counts. Files are written under a temporary name and
//! renamed, so envs writing at once and a killed run leave only whole files; a file that
//! does not read is a miss.

use super::verdict::Verdict;
use crate::tasks::JudgeSpec;
use anyhow::Context;
use image::RgbImage;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// A folder of cached verdicts.
#[derive(Debug, Clone)]
pub struct VerdictCache {
    dir: PathBuf,
}

/// The cache key of a verdict, hex.
pub fn key<F: std::borrow::Borrow<RgbImage>>(
    spec: &JudgeSpec,
    rubric_hash: &str,
    frames: &[F],
    instruction: &str,
    actions: &[String],
) -> String {
    let mut h = Sha256::new();
    // Lengths before each variable part, so no two inputs hash the same bytes.
    let mut part = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(b"guirl-judge-v1");
    part(spec.model.as_bytes());
    part(&spec.votes.to_le_bytes());
    part(rubric_hash.as_bytes());
    part(instruction.as_bytes());
    for a in actions {
        part(a.as_bytes());
    }
    part(b"frames");
    for f in frames {
        let f = f.borrow();
        part(&f.width().to_le_bytes());
        part(&f.height().to_le_bytes());
        part(f.as_raw());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl VerdictCache {
    /// The cache in folder `dir`, made with its first verdict (a run that stops before
    /// any, at an unreachable judge, leaves no empty folder); a file in its place is an error.
    pub fn open(dir: &Path) -> anyhow::Result<VerdictCache> {
        if dir.exists() && !dir.is_dir() {
            anyhow::bail!(
                "the judge's cache {} is a file, not a folder: remove it or give another",
                dir.display()
            );
        }
        Ok(VerdictCache { dir: dir.to_path_buf() })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The cached verdict of `key`, if any.
    pub fn get(&self, key: &str) -> Option<Verdict> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Keep `v` as the verdict of `key`.
    pub fn put(&self, key: &str, v: &Verdict) -> anyhow::Result<()> {
        let path = self.path(key);
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot make the judge's cache folder {}", self.dir.display()))?;
        let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_string(v)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_comes_with_the_first_verdict() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run/judge-cache");
        let c = VerdictCache::open(&dir).unwrap();
        assert!(!dir.exists() && c.get("k").is_none());
        let v = Verdict { success_votes: 1, votes: 1, reasoning: vec!["VERDICT: SUCCESS".into()] };
        c.put("k", &v).unwrap();
        assert_eq!(c.get("k").map(|g| g.success_votes), Some(1));
        let file = tmp.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(VerdictCache::open(&file).unwrap_err().to_string().contains("is a file, not a folder"));
    }

    #[test]
    fn keys_follow_what_the_judge_saw() {
        let spec = JudgeSpec::parse("m@http://h/v1").unwrap();
        let a = RgbImage::new(4, 3);
        let mut b = a.clone();
        b.put_pixel(1, 1, image::Rgb([1, 0, 0]));
        let one = std::slice::from_ref(&a);
        let k = key(&spec, "r", one, "do x", &[]);
        assert_eq!(k, key(&spec, "r", one, "do x", &[]));
        assert_eq!(k.len(), 64);
        assert_ne!(k, key(&spec, "r", &[b], "do x", &[]));
        assert_ne!(k, key(&spec, "r", one, "do y", &[]));
        assert_ne!(k, key(&spec, "r2", one, "do x", &[]));
        assert_ne!(k, key(&spec, "r", one, "do x", &["click(1, 1)".into()]));
        let three = JudgeSpec { votes: 3, ..spec.clone() };
        assert_ne!(k, key(&three, "r", one, "do x", &[]));
        let other = JudgeSpec { model: "n".into(), ..spec.clone() };
        assert_ne!(k, key(&other, "r", &[a], "do x", &[]));

        let dir = tempfile::tempdir().unwrap();
        let c = VerdictCache::open(&dir.path().join("c")).unwrap();
        assert_eq!(c.get(&k), None);
        let v = Verdict { success_votes: 1, votes: 1, reasoning: vec!["VERDICT: SUCCESS".into()] };
        c.put(&k, &v).unwrap();
        assert_eq!(c.get(&k), Some(v));
        std::fs::write(c.path(&k), "{torn").unwrap();
        assert_eq!(c.get(&k), None, "an unreadable file is a miss");
    }
}
