//! A website spec's paths: the task id a spec file's path gives, and the local file its
//! start URL names.

use std::path::{Component, Path, PathBuf};

/// A spec's task id: its path as given, less `.` components, doubled separators and a
/// folder's `x/..` (where `x` is a real folder, not a link), so `./specs/x.toml`,
/// `specs//x.toml`, `other/../specs/x.toml` and `specs/x.toml` are one task in a bench, a
/// resume or a comparison. Through a link `x/..` need not cancel `x`: it stays.
pub(super) fn spec_id(path: &Path) -> String {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if cancels(&clean) => {
                clean.pop();
            }
            c => clean.push(c),
        }
    }
    match clean.as_os_str().is_empty() {
        true => path.display().to_string(),
        false => clean.display().to_string(),
    }
}

/// Whether `..` after `dir` leads back to where `dir` started: its last component is a
/// folder's name (not `..`, a root or a link).
fn cancels(dir: &Path) -> bool {
    matches!(dir.components().next_back(), Some(Component::Normal(_)))
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// The local file a `file://` URL names (`None` for other URLs). A URL with a template
/// variable in its path names the folder above the first one.
pub(super) fn file_of_url(url: &str) -> Option<PathBuf> {
    let fixed = url.split("{{").next().unwrap_or(url);
    let parsed = url::Url::parse(fixed).ok().filter(|u| u.scheme() == "file")?;
    let path = parsed.to_file_path().ok()?;
    if fixed.len() < url.len() && !fixed.ends_with('/') {
        return path.parent().map(Path::to_path_buf);
    }
    Some(path)
}
