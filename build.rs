//! Embeds the built-in task pages (`environments/builtin/`) in the library, so an
//! installed `guirl` serves them wherever it runs (see `src/tasks/embedded.rs`): writes
//! `$OUT_DIR/builtin_pages.rs`, a table of (path below the folder, `include_bytes!`).

use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("environments/builtin");
    // A folder here makes cargo rebuild when any file below it changes.
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed=build.rs");
    embed_git_hash();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    let mut table = String::from("pub(crate) static FILES: &[(&str, &[u8])] = &[\n");
    for (rel, abs) in &files {
        table.push_str(&format!("    ({rel:?}, include_bytes!({abs:?})),\n"));
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("builtin_pages.rs");
    std::fs::write(out, table).expect("writing the embedded page table");
}

/// Every file below `dir`, as (path relative to `root` with `/`, absolute path).
fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            walk(root, &path, files);
        } else {
            let rel = path.strip_prefix(root).expect("below root").components();
            let rel: Vec<_> = rel.map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            files.push((rel.join("/"), path.display().to_string()));
        }
    }
}

/// `GUIRL_GIT_HASH`: the commit this binary was built from, for reproducibility records
/// (empty outside a git checkout), with `-dirty` when tracked files had uncommitted changes
/// at build time. Rebuilt when HEAD moves, the index changes or a source changes.
fn embed_git_hash() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            // `git status` would otherwise refresh and rewrite .git/index, which this
            // script watches: every build would then find the library dirty again.
            .arg("--no-optional-locks")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mut hash = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    // A report from a build with uncommitted changes must not pass for the commit's.
    if !hash.is_empty()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty())
    {
        hash.push_str("-dirty");
    }
    println!("cargo:rustc-env=GUIRL_GIT_HASH={hash}");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        // Staging and committing change the index; editing a source changes src/.
        println!("cargo:rerun-if-changed={}", dir.join("index").display());
    }
    // Branch heads live in the common folder: in a `git worktree` the git dir above has no
    // refs/heads, and a watched path that does not exist makes cargo rerun this script
    // (and rebuild the library) on every build.
    if let Some(dir) = git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", dir.join("refs/heads").display());
    }
    println!("cargo:rerun-if-changed=src");
}
