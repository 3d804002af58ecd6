//! `report.html`: the report's table, sortable by any column, each task linking to its
//! episodes in the trajectory viewer (`trajectories/<task>/view.html`, one anchor per
//! episode). Self-contained: no scripts or styles from elsewhere.

use super::journal::ResultRow;
use super::report::{Report, TaskStats};

/// Escape text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn row(t: &TaskStats, link: Option<&str>) -> String {
    // (a task with no episode has nothing to link to; `None` is the pooled row)
    let name = match link {
        Some("") => esc(&t.task),
        Some(href) => format!("<a href=\"{}\">{}</a>", esc(href), esc(&t.task)),
        None => format!("<b>{}</b>", esc(&t.task)),
    };
    let (Some(rate), Some(reward)) = (t.success_rate, t.mean_reward) else {
        // Nothing the agent completed: no figures (sorted below every rate).
        return format!(
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td data-v=\"-1\">n/a</td><td></td><td data-v=\"-1\"></td><td></td><td></td><td></td></tr>\n",
            t.episodes, t.env_errors, t.policy_errors
        );
    };
    format!(
        "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td data-v=\"{rate}\">{rate:.3}</td><td>[{:.3}, {:.3}]</td><td data-v=\"{reward}\">{reward:.3} ± {:.3}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td></tr>\n",
        t.episodes,
        t.env_errors,
        t.policy_errors,
        t.success_ci95.0,
        t.success_ci95.1,
        t.reward_se,
        t.mean_steps,
        t.step_ms_p50,
        t.step_ms_p95
    )
}

/// The page. `episodes` are the settled rows with their line index in their trajectory
/// set, so each seed links to its own episode in the viewer.
pub fn render(report: &Report, episodes: &[(ResultRow, usize)]) -> String {
    let mut body = String::new();
    for t in &report.tasks {
        let dir = episodes.iter().find(|(r, _)| r.task == t.task).map(|(r, _)| r.trajectory.clone());
        let href = dir.as_ref().map(|d| format!("{d}/view.html"));
        body.push_str(&row(t, href.as_deref().or(Some(""))));
    }
    let all = row(&report.all, None);
    // Tasks left out, and those whose page did not load, as report.md lists them.
    let mut left_out = String::new();
    for (t, why) in &report.skipped {
        left_out.push_str(&format!("<p>Skipped {}: {}</p>\n", esc(t), esc(why)));
    }
    for (t, why) in &report.unreachable {
        left_out.push_str(&format!(
            "<p>Not run: {}: its first page did not load ({})</p>\n",
            esc(t),
            esc(why)
        ));
    }
    let mut eps = String::new();
    for (r, i) in episodes {
        eps.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td><a href=\"{}/view.html#t={i}&amp;s=0\">{}</a></td><td>{:.3}</td><td>{}</td><td>{:.1}</td><td>{}</td></tr>\n",
            esc(&r.task),
            r.seed,
            esc(&r.trajectory),
            r.status,
            r.reward,
            r.steps,
            r.step_ms_mean,
            esc(r.policy_error.as_deref().or(r.env_error.as_deref()).or(r.first_action_error.as_deref()).unwrap_or(""))
        ));
    }
    let repro = esc(&serde_json::to_string_pretty(&report.reproducibility).unwrap_or_default());
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>guirl bench</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ cursor: pointer; background: #f4f4f4; position: sticky; top: 0; }}
th.asc::after {{ content: " ▲"; }} th.desc::after {{ content: " ▼"; }}
tfoot td {{ border-top: 2px solid #999; }}
pre {{ background: #f7f7f7; padding: 1em; overflow-x: auto; }}
details {{ margin-top: 1.5em; }}
</style></head><body>
<h1>guirl bench</h1>
<p>Success is over the episodes the agent completed; env errors (re-run up to 3 times on the same seed) and policy errors are counted apart. Interval: Wilson 95 %. Click a column to sort; click a task for its episodes in the trajectory viewer.</p>
<table class="sortable"><thead><tr><th>task</th><th>episodes</th><th>env errors</th><th>policy errors</th><th>success</th><th>95 % CI</th><th>reward ± s.e.</th><th>steps</th><th>p50 ms</th><th>p95 ms</th></tr></thead>
<tbody>
{body}</tbody><tfoot>{all}</tfoot></table>
<p>Mean of per-task success rates: {macro_rate}. {eps_per_s:.2} episodes/s over {secs:.1} s.</p>
{left_out}<details><summary>Episodes ({n})</summary>
<table class="sortable"><thead><tr><th>task</th><th>seed</th><th>status</th><th>reward</th><th>steps</th><th>ms/step</th><th>error</th></tr></thead><tbody>
{eps}</tbody></table></details>
<details><summary>Reproducibility</summary><pre>{repro}</pre></details>
<script>
for (const table of document.querySelectorAll('table.sortable')) {{
  const heads = table.tHead.rows[0].cells;
  for (let c = 0; c < heads.length; c++) {{
    heads[c].addEventListener('click', () => {{
      const asc = !heads[c].classList.contains('asc');
      for (const h of heads) h.classList.remove('asc', 'desc');
      heads[c].classList.add(asc ? 'asc' : 'desc');
      const body = table.tBodies[0];
      const key = r => {{ const d = r.cells[c]; const v = d.dataset.v ?? d.textContent; const x = parseFloat(v); return isNaN(x) ? v : x; }};
      const rows = [...body.rows].sort((a, b) => {{ const x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); }});
      for (const r of rows) body.appendChild(r);
    }});
  }}
}}
</script></body></html>
"#,
        macro_rate = esc(&report.macro_text()),
        eps_per_s = report.episodes_per_s,
        secs = report.seconds,
        n = episodes.len(),
    )
}
