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

/// Where a task's `file://` pages are on this machine ([`super::Task::local_site`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSite {
    /// The folder whose files its pages may load: the start page's own folder or, where a
    /// template variable is in the start page's path, the folder above the variable.
    pub folder: PathBuf,
    /// The start page, where its path holds no variable.
    pub page: Option<PathBuf>,
}

impl LocalSite {
    /// What a sandboxed browser's user must be able to read: the page, else its folder.
    pub fn entry(&self) -> &Path {
        self.page.as_deref().unwrap_or(&self.folder)
    }
}

/// The local site a start URL names (`None` for a URL that is not `file:`). A template
/// variable (`{name}`, as [`super::template`] fills it) in the path leaves the page open:
/// the folder is then the one above the variable, whichever page a draw names.
pub(super) fn local_site(url: &str) -> Option<LocalSite> {
    let url = url.trim();
    let fixed = url.split('{').next().unwrap_or(url);
    let in_path = fixed.len() < url.len() && !fixed.contains(['?', '#']);
    let parsed = url::Url::parse(fixed).ok().filter(|u| u.scheme() == "file")?;
    let path = parsed.to_file_path().ok()?;
    if !in_path {
        let folder = path.parent()?.to_path_buf();
        return Some(LocalSite { folder, page: Some(path) });
    }
    // `file:///a/b/{page}.html` is under /a/b; `file:///a/b-{page}.html` under /a.
    let folder = match fixed.ends_with('/') {
        true => path.components().collect(),
        false => path.parent()?.to_path_buf(),
    };
    Some(LocalSite { folder, page: None })
}
