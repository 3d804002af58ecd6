//! `guirl bench compare A B`: per-task success deltas between two bench folders, flagging
//! the tasks whose Wilson intervals do not overlap (a difference the seeds cannot explain
//! away; overlapping intervals do not prove there is none).

use super::report::{Report, TaskStats};
use anyhow::Context;
use std::path::Path;

/// One task's comparison.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Delta {
    /// Task id (`[ALL TASKS]` for the pooled row).
    pub task: String,
    /// Success rate in A, if A ran the task.
    pub a: Option<f64>,
    /// Success rate in B, if B ran it.
    pub b: Option<f64>,
    /// B − A.
    pub delta: Option<f64>,
    /// The two 95 % intervals are disjoint.
    pub significant: bool,
}

/// Read `report.json` of a bench folder (or the file itself).
pub fn read_report(path: &Path) -> anyhow::Result<Report> {
    let file = if path.is_dir() { path.join("report.json") } else { path.to_path_buf() };
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "reading {}: give a bench folder written by `guirl bench` (it holds report.json)",
            file.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a guirl bench report", file.display()))
}

/// Per-task deltas, A's task order first, then tasks only B ran, then the pooled row.
pub fn compare(a: &Report, b: &Report) -> Vec<Delta> {
    let find = |r: &Report, t: &str| r.tasks.iter().find(|x| x.task == t).cloned();
    let mut names: Vec<String> = a.tasks.iter().map(|t| t.task.clone()).collect();
    names.extend(b.tasks.iter().map(|t| t.task.clone()).filter(|t| !a.tasks.iter().any(|x| &x.task == t)));
    let mut out: Vec<Delta> =
        names.iter().map(|n| delta(n, find(a, n).as_ref(), find(b, n).as_ref())).collect();
    out.push(delta("[ALL TASKS]", Some(&a.all), Some(&b.all)));
    out
}

fn delta(task: &str, a: Option<&TaskStats>, b: Option<&TaskStats>) -> Delta {
    let rate = |t: Option<&TaskStats>| t.filter(|t| t.completed > 0).map(|t| t.success_rate);
    let significant = match (a, b) {
        (Some(a), Some(b)) if a.completed > 0 && b.completed > 0 => {
            a.success_ci95.1 < b.success_ci95.0 || b.success_ci95.1 < a.success_ci95.0
        }
        _ => false,
    };
    let (ra, rb) = (rate(a), rate(b));
    Delta { task: task.to_string(), a: ra, b: rb, delta: ra.zip(rb).map(|(x, y)| y - x), significant }
}

/// The comparison as a text table.
pub fn table(deltas: &[Delta]) -> String {
    let f = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
    let w = deltas.iter().map(|d| d.task.len()).max().unwrap_or(4).max(4);
    let mut s = format!("{:w$}  {:>7}  {:>7}  {:>7}\n", "task", "A", "B", "B-A");
    for d in deltas {
        let delta = d.delta.map(|v| format!("{v:+.3}")).unwrap_or_else(|| "-".into());
        let flag = if d.significant { "  * intervals do not overlap" } else { "" };
        s.push_str(&format!("{:w$}  {:>7}  {:>7}  {:>7}{flag}\n", d.task, f(d.a), f(d.b), delta));
    }
    s
}
