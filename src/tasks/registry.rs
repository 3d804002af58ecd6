//! Task ids and the task each one names: the one place that knows every kind of task, kept
//! out of the module root so the root (the `Task` trait) depends on no kind.

use super::{builtin, builtin_specs, miniwob, website, Task};
use std::path::Path;
use std::sync::Arc;

/// Every task id guirl knows, in order: MiniWoB++ (if its pages are installed), then built-in.
pub fn all_task_ids(suite: Option<&str>) -> Vec<String> {
    let mut ids = Vec::new();
    if suite.is_none() || suite == Some("miniwob") {
        ids.extend(miniwob::task_names().into_iter().map(|n| format!("miniwob/{n}")));
    }
    if suite.is_none() || suite == Some("builtin") {
        ids.extend(builtin_specs::BUILTIN_TASKS.iter().map(|s| format!("builtin/{}", s.name)));
    }
    ids
}

/// Resolve a task id (`miniwob/NAME`, `builtin/NAME`) or a path to a website spec (`.toml`).
pub fn load_task(id_or_path: &str) -> anyhow::Result<Arc<dyn Task>> {
    let ext = Path::new(id_or_path).extension().and_then(|e| e.to_str()).unwrap_or_default();
    if ["html", "htm", "xhtml"].contains(&ext.to_ascii_lowercase().as_str()) {
        anyhow::bail!(
            "{id_or_path} is a page, not a task: write a website spec (.toml) whose start_url points at \
             it (file:///absolute/path/{}, or serve it and give its http:// URL) and pass the spec's \
             path; see docs/tasks.md",
            Path::new(id_or_path).file_name().and_then(|n| n.to_str()).unwrap_or_default()
        );
    }
    if id_or_path.ends_with(".toml") || Path::new(id_or_path).is_file() {
        return Ok(Arc::new(website::WebsiteTask::load(Path::new(id_or_path))?));
    }
    if let Some(name) = id_or_path.strip_prefix("miniwob/") {
        if let Some(t) = miniwob::MiniwobTask::new(name)? {
            return Ok(Arc::new(t));
        }
    } else if let Some(name) = id_or_path.strip_prefix("builtin/") {
        if let Some(t) = builtin::BuiltinTask::new(name) {
            return Ok(Arc::new(t));
        }
    }
    Err(unknown_task(id_or_path))
}

fn unknown_task(id: &str) -> anyhow::Error {
    let ids = all_task_ids(None);
    // Names are compared without their suite (every MiniWoB++ id shares `miniwob/`, which
    // made any name look close), another suite's a little less close.
    let (suite, name) = id.split_once('/').unwrap_or(("", id));
    let score = |c: &str| {
        let (s, n) = c.split_once('/').unwrap_or(("", c));
        strsim::jaro_winkler(name, n) - if s == suite { 0.0 } else { 0.1 }
    };
    let mut scored: Vec<(f64, &String)> = ids.iter().map(|c| (score(c), c)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let close: Vec<&str> =
        scored.iter().take(5).filter(|(s, _)| *s >= 0.75).map(|(_, c)| c.as_str()).collect();
    let close = match close.is_empty() {
        true => "No task id is close to it".to_string(),
        false => format!("Closest task ids: {}", close.join(", ")),
    };
    anyhow::anyhow!(
        "unknown task {id:?}. {close}. Run `guirl tasks` for the full list, or pass a path to a \
         website task spec (.toml)."
    )
}
