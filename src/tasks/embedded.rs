//! The built-in task pages (`environments/builtin/`), embedded at build time (`build.rs`)
//! so an installed `guirl` serves them from any folder; `$GUIRL_ROOT` serves them from
//! disk instead (see [`super::server`]).

include!(concat!(env!("OUT_DIR"), "/builtin_pages.rs"));

/// The embedded file at `path` below `environments/builtin/` (`counter/index.html`); a
/// folder (`counter/` or empty) gives its `index.html`, as a static file server does.
pub fn builtin_file(path: &str) -> Option<&'static [u8]> {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() || path.ends_with('/') { format!("{path}index.html") } else { path.into() };
    FILES.iter().find(|(p, _)| *p == path).map(|(_, bytes)| *bytes)
}

/// The paths of every embedded file, below `environments/builtin/`.
pub fn builtin_paths() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(p, _)| *p)
}

/// The Content-Type of a file served by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_file_is_embedded_as_it_is_on_disk() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("environments/builtin");
        let mut n = 0;
        for p in builtin_paths() {
            assert_eq!(builtin_file(p), Some(std::fs::read(root.join(p)).unwrap().as_slice()), "{p}");
            n += 1;
        }
        assert!(n >= 20, "only {n} files embedded");
        assert_eq!(builtin_file("counter/"), builtin_file("counter/index.html"));
        assert!(builtin_file("common.js").is_some() && builtin_file("no-such.html").is_none());
    }
}
