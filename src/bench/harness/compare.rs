//! `guirl bench compare A B`: per-task success deltas between two bench folders, flagging
//! the tasks whose Wilson intervals do not overlap (a difference the seeds cannot explain
//! away; overlapping intervals do not prove there is none), with notes on what differs
//! between the two runs besides the policy (seeds, observation, env options).

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
    /// Episodes A completed on the task (the rate's denominator; 0 if it did not run it).
    pub a_episodes: usize,
    /// Episodes B completed on it.
    pub b_episodes: usize,
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
    let rate = |t: Option<&TaskStats>| t.filter(|t| t.completed > 0).and_then(|t| t.success_rate);
    let significant = match (a, b) {
        (Some(a), Some(b)) if a.completed > 0 && b.completed > 0 => {
            a.success_ci95.1 < b.success_ci95.0 || b.success_ci95.1 < a.success_ci95.0
        }
        _ => false,
    };
    let (ra, rb) = (rate(a), rate(b));
    let n = |t: Option<&TaskStats>| t.map_or(0, |t| t.completed);
    Delta {
        task: task.to_string(),
        a: ra,
        b: rb,
        a_episodes: n(a),
        b_episodes: n(b),
        delta: ra.zip(rb).map(|(x, y)| y - x),
        significant,
    }
}

/// What differs between the two runs besides the policy, one sentence each: other tasks (the
/// pooled row then pools different sets), other seeds (the episodes are then not the same
/// task instances), another observation setting, other env options. Fields a report
/// written before they were recorded leaves empty are skipped.
pub fn notes(a: &Report, b: &Report) -> Vec<String> {
    let (ra, rb) = (&a.reproducibility, &b.reproducibility);
    let mut out = Vec::new();
    let only = |x: &Report, y: &Report| -> Vec<String> {
        x.tasks.iter().filter(|t| !y.tasks.iter().any(|u| u.task == t.task)).map(|t| t.task.clone()).collect()
    };
    let (only_a, only_b) = (only(a, b), only(b, a));
    if !only_a.is_empty() || !only_b.is_empty() {
        let mut who = Vec::new();
        for (side, only) in [("A", &only_a), ("B", &only_b)] {
            if !only.is_empty() {
                who.push(format!("only {side} ran {}", only.join(", ")));
            }
        }
        out.push(format!(
            "tasks differ: {}; [ALL TASKS] pools each run's own tasks, so it compares different sets: \
             compare the tasks both ran",
            who.join("; ")
        ));
    }
    let seeds = |r: &super::report::Reproducibility| {
        format!("{}..{}", r.seed, (r.seed + r.episodes_per_task).saturating_sub(1))
    };
    if (ra.seed, ra.episodes_per_task) != (rb.seed, rb.episodes_per_task) {
        out.push(format!(
            "seeds differ: A ran {} per task, B {}; only the seeds both ran are the same task instances",
            seeds(ra),
            seeds(rb)
        ));
    }
    // A scripted policy (`n/a`: random, oracle) reads nothing to compare with.
    let stated = |o: &str| !o.is_empty() && o != "n/a";
    if stated(&ra.observation) && stated(&rb.observation) && ra.observation != rb.observation {
        out.push(format!("observation differs: A {}, B {}", ra.observation, rb.observation));
    }
    if !ra.env.is_null() && !rb.env.is_null() && super::manifest::env_options_differ(&ra.env, &rb.env) {
        out.push(format!("env options differ: A {}, B {}", ra.env, rb.env));
    }
    out
}

/// The comparison as a text table: each rate with its episodes in brackets.
pub fn table(deltas: &[Delta]) -> String {
    let f = |x: Option<f64>, n: usize| x.map(|v| format!("{v:.3} ({n})")).unwrap_or_else(|| "-".into());
    let w = deltas.iter().map(|d| d.task.len()).max().unwrap_or(4).max(4);
    let mut s = format!("{:w$}  {:>13}  {:>13}  {:>7}\n", "task", "A (episodes)", "B (episodes)", "B-A");
    for d in deltas {
        let delta = d.delta.map(|v| format!("{v:+.3}")).unwrap_or_else(|| "-".into());
        let flag = if d.significant { "  * intervals do not overlap" } else { "" };
        let (a, b) = (f(d.a, d.a_episodes), f(d.b, d.b_episodes));
        s.push_str(&format!("{:w$}  {a:>13}  {b:>13}  {delta:>7}{flag}\n", d.task));
    }
    s
}
