//! `guirl view`: one self-contained HTML page showing every trajectory of a set.
//!
//! The page needs nothing but itself: frames are embedded as base64 PNG data URIs, each
//! distinct frame file once, and the trajectories are a JSON blob that refers to frames
//! by index. A list of trajectories (filterable by task, status and instruction text) sits
//! on the left; the selected one is shown on the right, step by step, each screenshot
//! with its action drawn over it. Keys: ←/→ step, ↑/↓ (or k/j) trajectory.

use super::store::TrajectorySet;
use crate::env::GuiAction;
use anyhow::Context;
use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// Frames no larger than this (both sides) are drawn at 2× with crisp pixels.
const SMALL_FRAME: u32 = 480;
/// The size drawn for an episode that never showed a screen.
const NO_SCREEN: (u32, u32) = (320, 160);

/// Write a self-contained HTML page showing every trajectory of the set to `out`.
pub fn write_html(set: &TrajectorySet, out: &Path) -> anyhow::Result<()> {
    let html = render_html(set)?;
    if out.is_dir() {
        anyhow::bail!(
            "{} is a folder: give the page's file name (e.g. {})",
            out.display(),
            out.join("view.html").display()
        );
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(out, html).with_context(|| format!("cannot write the viewer page {}", out.display()))?;
    Ok(())
}

/// The page for a trajectory set, as a string.
pub fn render_html(set: &TrajectorySet) -> anyhow::Result<String> {
    // Each frame file is read once; files with the same bytes (the same screen in two
    // episodes) share one embedded image.
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut by_content: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut frames: Vec<Value> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    let mut frame_id = |name: &Option<String>| -> Value {
        let Some(name) = name else { return Value::Null };
        if let Some(&id) = by_name.get(name) {
            return json!(id);
        }
        let path = set.frame_path(name);
        let id = match std::fs::read(&path) {
            Ok(bytes) if bytes.starts_with(b"\x89PNG") => {
                if let Some(&id) = by_content.get(&bytes) {
                    id
                } else {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
                    frames.push(json!(format!("data:image/png;base64,{b64}")));
                    by_content.insert(bytes, frames.len() - 1);
                    frames.len() - 1
                }
            }
            Ok(_) => {
                missing.push(format!("{} (not a PNG)", path.display()));
                frames.push(Value::Null);
                frames.len() - 1
            }
            Err(e) => {
                missing.push(format!("{} ({e})", path.display()));
                frames.push(Value::Null);
                frames.len() - 1
            }
        };
        by_name.insert(name.clone(), id);
        json!(id)
    };

    let mut trajs: Vec<Value> = Vec::with_capacity(set.trajectories.len());
    for st in &set.trajectories {
        let t = &st.trajectory;
        let steps: Vec<Value> = t
            .steps
            .iter()
            .map(|s| {
                json!({
                    "a": s.action,
                    "act": action_json(&s.action),
                    "r": s.reward,
                    "s": s.status.as_str(),
                    "f": frame_id(&s.frame),
                    "err": s.action_error,
                    "ans": s.answer,
                    "ms": ((s.timings.total_ms + s.policy_ms) * 10.0).round() / 10.0,
                })
            })
            .collect();
        // An episode that failed before its first screen (at reset) has no size: its cards
        // get a placeholder's, not 1×1 pixels.
        let shown = t.frame.width > 0 && t.frame.height > 0;
        let (w, h) = if shown { (t.frame.width, t.frame.height) } else { NO_SCREEN };
        let scale = if shown && w <= SMALL_FRAME && h <= SMALL_FRAME { 2 } else { 1 };
        let policy = if t.policy.is_empty() { "?" } else { t.policy.as_str() };
        trajs.push(json!({
            "line": st.line,
            "task": t.task_id,
            "seed": t.seed,
            "policy": policy,
            "group": t.group,
            "instruction": t.instruction,
            "w": w,
            "h": h,
            "scale": scale,
            "shown": shown,
            "status": t.outcome.status.as_str(),
            "reward": t.outcome.reward,
            "nsteps": t.outcome.steps,
            "error": t.outcome.error,
            "final": frame_id(&t.final_frame),
            "steps": steps,
            "judge": t.judge,
        }));
    }
    if !missing.is_empty() {
        tracing::warn!(
            "{} frame file(s) could not be read and show as missing, e.g. {}",
            missing.len(),
            missing[0]
        );
    }
    let data = json!({
        "dir": set.dir.display().to_string(),
        "torn_line": set.torn_line,
        "trajectories": trajs,
        "frames": frames,
    });
    let title = format!("guirl · {}", set.dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
    let mut html = String::with_capacity(PAGE_HEAD.len() + PAGE_SCRIPT.len() + 4096);
    html.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    html.push_str(&escape_html(&title));
    html.push_str("</title>\n");
    html.push_str(PAGE_HEAD);
    html.push_str("<script id=\"guirl-data\" type=\"application/json\">");
    html.push_str(&script_safe_json(&data)?);
    html.push_str("</script>\n<script>\n");
    html.push_str(PAGE_SCRIPT);
    html.push_str("</script>\n</body>\n</html>\n");
    Ok(html)
}

/// What the overlay needs to draw an action: kind, points and extras; null if unparsable.
fn action_json(text: &str) -> Value {
    let Ok(a) = GuiAction::parse(text) else { return Value::Null };
    let mut v = json!({ "k": a.kind(), "p": a.points() });
    match &a {
        GuiAction::Scroll { dx, dy, .. } => {
            v["dx"] = json!(dx);
            v["dy"] = json!(dy);
        }
        GuiAction::Type { text } => v["text"] = json!(text),
        GuiAction::Key(k) => v["key"] = json!(k.to_string()),
        GuiAction::Wait { ms } => v["ms"] = json!(ms),
        _ => {}
    }
    v
}

/// JSON that can sit inside a `<script>` element: `<`, `>` and `&` (which JSON only has
/// inside strings) are written as `\u` escapes, so no `</script>` can end it early.
fn script_safe_json(v: &Value) -> anyhow::Result<String> {
    let s = serde_json::to_string(v)?;
    Ok(s.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026"))
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Styles and the static body, up to where the data goes.
const PAGE_HEAD: &str = r##"<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
:root {
  --bg: #f6f7f9; --panel: #ffffff; --line: #e1e4e8; --text: #1f2328; --muted: #656d76;
  --accent: #0969da; --accent-bg: #ddf4ff;
  --success: #1a7f37; --fail: #cf222e; --truncated: #9a6700; --env_error: #8250df;
  --invalid_action: #bc4c00; --running: #6e7781;
}
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", "DejaVu Sans", sans-serif;
  font-size: 14px; color: var(--text); background: var(--bg); display: flex; flex-direction: column; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
header { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; padding: 8px 14px;
  background: var(--panel); border-bottom: 1px solid var(--line); }
header h1 { font-size: 15px; margin: 0; font-weight: 600; white-space: nowrap; }
header .dir { color: var(--muted); font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
  flex: 1 1 0; min-width: 0; }
header .filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin-left: auto; }
select, input[type=search] { font: inherit; font-size: 13px; padding: 4px 6px; border: 1px solid var(--line);
  border-radius: 6px; background: #fff; color: var(--text); }
select { max-width: 15em; }
input[type=search] { width: 14em; }
#count { color: var(--muted); font-size: 12.5px; white-space: nowrap; }
.notice { background: #fff8c5; border-bottom: 1px solid #eed888; padding: 4px 14px; font-size: 12.5px; }
main { flex: 1; display: grid; grid-template-columns: minmax(230px, 300px) 1fr; min-height: 0; }
#list { list-style: none; margin: 0; padding: 0; overflow-y: auto; border-right: 1px solid var(--line); background: var(--panel); }
.traj { padding: 7px 12px 8px 10px; border-bottom: 1px solid var(--line); border-left: 3px solid transparent; cursor: pointer; }
.traj:hover { background: #f3f6fa; }
.traj.current { background: var(--accent-bg); border-left-color: var(--accent); }
.traj .row1 { display: flex; align-items: center; gap: 6px; }
.traj .task { font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; flex: 1; }
.traj .rew { font-variant-numeric: tabular-nums; font-size: 12.5px; color: var(--muted); }
.traj .meta { color: var(--muted); font-size: 12px; margin-top: 1px; }
.traj .instr { font-size: 12.5px; margin-top: 2px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dot { width: 9px; height: 9px; border-radius: 50%; flex: none; background: var(--running); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px; font-weight: 600;
  background: var(--running); white-space: nowrap; }
.st-success { background: var(--success); } .st-fail { background: var(--fail); }
.st-truncated { background: var(--truncated); } .st-env_error, .st-policy_error, .st-judge_error { background: var(--env_error); }
.st-invalid_action { background: var(--invalid_action); } .st-running { background: var(--running); }
.txt-running { color: var(--muted); }
#detail { overflow-y: auto; padding: 0 18px 40px; min-width: 0; }
#detail > :first-child { margin-top: 14px; }
#detail h2 { font-size: 17px; margin: 0 0 4px; display: flex; align-items: center; gap: 10px; flex-wrap: wrap; }
.sub { color: var(--muted); font-size: 12.5px; }
.instruction { margin: 10px 0; padding: 8px 12px; background: var(--panel); border: 1px solid var(--line);
  border-left: 3px solid var(--accent); border-radius: 4px; white-space: pre-wrap; }
.outcome { display: flex; gap: 14px; align-items: center; flex-wrap: wrap; margin: 6px 0 4px; }
.outcome b { font-variant-numeric: tabular-nums; }
.judge { margin: 4px 0 8px; }
.answer pre { white-space: pre-wrap; font-size: 12px; margin: 4px 0; max-height: 16em; overflow: auto; }
.error { color: var(--fail); background: #ffebe9; border: 1px solid #ffcecb; border-radius: 4px; padding: 4px 8px;
  font-size: 12.5px; margin-top: 6px; white-space: pre-wrap; word-break: break-word; }
.navbar { display: flex; justify-content: space-between; align-items: center; gap: 10px; flex-wrap: wrap;
  margin: 12px 0 8px; padding: 8px 0; border-top: 1px solid var(--line); border-bottom: 1px solid var(--line);
  position: sticky; top: 0; z-index: 2; background: var(--bg); }
.navbar .which { color: var(--muted); margin-right: 8px; }
#stepno { font-weight: 600; }
.keys { color: var(--muted); font-size: 12px; }
kbd { font-family: inherit; font-size: 11px; border: 1px solid #d0d7de; border-bottom-width: 2px; border-radius: 4px;
  padding: 0 4px; background: #fff; }
.steps { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.step { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px; cursor: pointer;
  max-width: 100%; }
.step.current { border-color: var(--accent); box-shadow: 0 0 0 2px var(--accent); }
.step .head { display: flex; align-items: center; gap: 8px; margin-bottom: 6px; font-size: 13px; }
.step .head .n { font-weight: 600; }
.step .head .r { margin-left: auto; font-variant-numeric: tabular-nums; color: var(--muted); font-size: 12.5px; }
.step .head .r.nz { color: var(--text); font-weight: 600; }
.step .act { margin-top: 6px; word-break: break-all; }
.step .ms { color: var(--muted); font-size: 11.5px; margin-top: 2px; }
.shot { position: relative; max-width: 100%; border: 1px solid var(--line); background: #fff; line-height: 0; }
.shot img { display: block; width: 100%; height: auto; }
.shot img.pix { image-rendering: pixelated; }
.shot svg { position: absolute; left: 0; top: 0; width: 100%; height: 100%; overflow: visible; pointer-events: none; }
.shot .label { position: absolute; left: 4px; bottom: 4px; max-width: calc(100% - 8px); line-height: 1.3;
  background: rgba(31, 35, 40, 0.85); color: #fff; border-radius: 4px; padding: 2px 6px; font-size: 12px;
  white-space: pre-wrap; word-break: break-all; }
.shot .label.bad { background: rgba(207, 34, 46, 0.9); }
.noframe { display: flex; align-items: center; justify-content: center; color: var(--muted); font-size: 12.5px; line-height: 1.3;
  background: repeating-linear-gradient(45deg, #f6f8fa, #f6f8fa 8px, #eef1f4 8px, #eef1f4 16px); }
.empty { color: var(--muted); padding: 30px; text-align: center; }
</style>
</head>
<body>
<header>
  <h1>guirl trajectories</h1><span class="dir" id="dir"></span>
  <div class="filters">
    <select id="f-task" title="Filter by task"></select>
    <select id="f-status" title="Filter by outcome"></select>
    <input id="f-search" type="search" placeholder="Search instructions  ( / )" autocomplete="off">
    <span id="count"></span>
  </div>
</header>
<div class="notice" id="notice" hidden></div>
<main>
  <ul id="list" aria-label="Trajectories"></ul>
  <section id="detail" aria-live="polite"></section>
</main>
"##;

/// The viewer's script (after the data element).
const PAGE_SCRIPT: &str = r##"(function () {
'use strict';
const D = JSON.parse(document.getElementById('guirl-data').textContent);
const T = D.trajectories;
const SVGNS = 'http://www.w3.org/2000/svg';
const ORDER = ['success', 'fail', 'truncated', 'invalid_action', 'env_error', 'policy_error', 'judge_error', 'running'];
const $ = (s) => document.querySelector(s);
const taskSel = $('#f-task'), statusSel = $('#f-status'), search = $('#f-search');
const countEl = $('#count'), list = $('#list'), detail = $('#detail');
let cur = -1, step = 0;

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const k in attrs || {}) {
    if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
    if (k === 'class') el.className = attrs[k];
    else if (k === 'style') el.style.cssText = attrs[k];
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), attrs[k]);
    else el.setAttribute(k, attrs[k]);
  }
  for (const c of kids.flat()) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}
function sv(tag, attrs) {
  const el = document.createElementNS(SVGNS, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  return el;
}
const fmtR = (r) => (r > 0 ? '+' : '') + (Math.round(r * 100) / 100).toFixed(2);
const badge = (st) => h('span', { class: 'badge st-' + st }, st.replace('_', ' '));
const shortTask = (id) => id;

// ---- header and filters ----
$('#dir').textContent = D.dir;
$('#dir').title = D.dir;
if (D.torn_line) {
  const n = $('#notice');
  n.hidden = false;
  n.textContent = 'Line ' + D.torn_line + ' of trajectories.jsonl was torn (a run was killed while writing it) and is not shown.';
}
function counts(key) {
  const m = new Map();
  for (const t of T) m.set(t[key], (m.get(t[key]) || 0) + 1);
  return m;
}
const tasks = counts('task');
taskSel.append(h('option', { value: '' }, 'All tasks (' + tasks.size + ')'));
for (const k of [...tasks.keys()].sort()) taskSel.append(h('option', { value: k }, k + ' (' + tasks.get(k) + ')'));
const stats = counts('status');
statusSel.append(h('option', { value: '' }, 'All outcomes'));
const statKeys = [...stats.keys()].sort((a, b) => ORDER.indexOf(a) - ORDER.indexOf(b));
for (const k of statKeys) statusSel.append(h('option', { value: k }, k.replace('_', ' ') + ' (' + stats.get(k) + ')'));

// ---- the list ----
T.forEach((t, i) => {
  t.el = h('li', { class: 'traj', 'data-i': i, 'data-task': t.task, 'data-status': t.status, onclick: () => select(i, 0) },
    h('div', { class: 'row1' }, h('span', { class: 'dot st-' + t.status, title: t.status }),
      h('span', { class: 'task', title: t.task }, shortTask(t.task)), h('span', { class: 'rew' }, fmtR(t.reward))),
    h('div', { class: 'meta' }, 'seed ' + t.seed + ' · ' + t.policy + ' · ' + t.nsteps + (t.nsteps === 1 ? ' step' : ' steps')),
    h('div', { class: 'instr', title: t.instruction }, t.instruction));
  list.append(t.el);
});

function visible() {
  const v = [];
  T.forEach((t, i) => { if (!t.el.hidden) v.push(i); });
  return v;
}
function applyFilters() {
  const task = taskSel.value, st = statusSel.value, q = search.value.trim().toLowerCase();
  let n = 0;
  for (const t of T) {
    const ok = (!task || t.task === task) && (!st || t.status === st) && (!q || t.instruction.toLowerCase().includes(q));
    t.el.hidden = !ok;
    if (ok) n++;
  }
  countEl.textContent = n + ' of ' + T.length + ' shown';
  if (cur < 0 || T[cur].el.hidden) {
    const v = visible();
    select(v.length ? v[0] : -1, 0);
  }
}
taskSel.addEventListener('change', applyFilters);
statusSel.addEventListener('change', applyFilters);
search.addEventListener('input', applyFilters);

// ---- one screenshot with its action drawn on it ----
function shot(t, fid, act, err) {
  const W = t.w * t.scale, H = t.h * t.scale;
  const src = fid === null || fid === undefined ? null : D.frames[fid];
  if (!src) {
    return h('div', { class: 'shot noframe', style: 'width:' + W + 'px;height:' + H + 'px' },
      fid === null || fid === undefined ? 'no frame recorded' : 'frame file missing');
  }
  const wrap = h('div', { class: 'shot', style: 'width:' + W + 'px' },
    h('img', { src: src, width: W, height: H, alt: 'screenshot', class: t.scale > 1 ? 'pix' : '', draggable: 'false' }));
  if (act === undefined) return wrap;
  const u = 1 / t.scale;  // one CSS pixel, in frame pixels
  const svg = sv('svg', { viewBox: '0 0 ' + t.w + ' ' + t.h, preserveAspectRatio: 'none' });
  const stroke = (color, extra) => Object.assign({ fill: 'none', stroke: color, 'stroke-width': 2.5, 'vector-effect': 'non-scaling-stroke' }, extra || {});
  const halo = (el) => { const c = el.cloneNode(); c.setAttribute('stroke', '#fff'); c.setAttribute('stroke-width', 5); c.setAttribute('fill', 'none'); svg.append(c); svg.append(el); };
  const arrow = (x1, y1, x2, y2, color) => {
    const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1, ux = dx / len, uy = dy / len;
    const L = 13 * u, Wd = 6 * u;
    halo(sv('line', stroke(color, { x1: x1, y1: y1, x2: x2 - ux * L * 0.6, y2: y2 - uy * L * 0.6 })));
    const pts = [[x2, y2], [x2 - ux * L - uy * Wd, y2 - uy * L + ux * Wd], [x2 - ux * L + uy * Wd, y2 - uy * L - ux * Wd]];
    svg.append(sv('polygon', { points: pts.map((p) => p.join(',')).join(' '), fill: color, stroke: '#fff', 'stroke-width': 1, 'vector-effect': 'non-scaling-stroke' }));
  };
  const dotAt = (x, y, color) => svg.append(sv('circle', { cx: x, cy: y, r: 2 * u, fill: color, stroke: '#fff', 'stroke-width': 1, 'vector-effect': 'non-scaling-stroke' }));
  let label = null, bad = false;
  if (!act) {
    label = 'unparsable action';
    bad = true;
  } else {
    const p = act.p || [];
    switch (act.k) {
      case 'click':
        halo(sv('circle', stroke('#e5091b', { cx: p[0][0], cy: p[0][1], r: 11 * u, fill: 'rgba(229,9,27,0.18)' })));
        dotAt(p[0][0], p[0][1], '#e5091b');
        break;
      case 'double_click':
        halo(sv('circle', stroke('#e5091b', { cx: p[0][0], cy: p[0][1], r: 6 * u })));
        halo(sv('circle', stroke('#e5091b', { cx: p[0][0], cy: p[0][1], r: 13 * u })));
        dotAt(p[0][0], p[0][1], '#e5091b');
        label = 'double click';
        break;
      case 'right_click': {
        const s = 9 * u;
        halo(sv('rect', stroke('#8250df', { x: p[0][0] - s, y: p[0][1] - s, width: 2 * s, height: 2 * s, rx: 2 * u, fill: 'rgba(130,80,223,0.15)' })));
        dotAt(p[0][0], p[0][1], '#8250df');
        label = 'right click';
        break;
      }
      case 'hover':
        halo(sv('circle', stroke('#0969da', { cx: p[0][0], cy: p[0][1], r: 9 * u, 'stroke-dasharray': '4 3' })));
        dotAt(p[0][0], p[0][1], '#0969da');
        label = 'hover';
        break;
      case 'drag':
        svg.append(sv('circle', stroke('#d4600a', { cx: p[0][0], cy: p[0][1], r: 5 * u, fill: 'rgba(212,96,10,0.25)' })));
        arrow(p[0][0], p[0][1], p[1][0], p[1][1], '#d4600a');
        label = 'drag';
        break;
      case 'scroll': {
        const len = Math.hypot(act.dx, act.dy) || 1, L = 30 * u;
        dotAt(p[0][0], p[0][1], '#1b7c83');
        arrow(p[0][0], p[0][1], p[0][0] + act.dx / len * L, p[0][1] + act.dy / len * L, '#1b7c83');
        label = 'scroll ' + (act.dx ? 'dx ' + act.dx + ' ' : '') + (act.dy ? 'dy ' + act.dy : '');
        break;
      }
      case 'type': label = '⌨ type “' + act.text + '”'; break;
      case 'key': label = '⌨ key ' + act.key; break;
      case 'wait': label = 'wait ' + act.ms + ' ms'; break;
      case 'done': label = '✓ done'; break;
    }
  }
  if (err) bad = true;
  wrap.append(svg);
  if (label) wrap.append(h('div', { class: 'label' + (bad ? ' bad' : '') }, label));
  return wrap;
}

// ---- the selected trajectory ----
function renderDetail(i) {
  const t = T[i];
  const cardW = 'width:' + (t.w * t.scale + 18) + 'px';
  const cards = t.steps.map((s, k) => h('div', { class: 'step', style: cardW, 'data-step': k, onclick: () => setStep(k, false) },
    h('div', { class: 'head' }, h('span', { class: 'n' }, 'Step ' + (k + 1)),
      s.s === 'running' ? h('span', { class: 'txt-running' }, 'running') : badge(s.s),
      h('span', { class: 'r' + (s.r ? ' nz' : '') }, 'reward ' + fmtR(s.r))),
    shot(t, s.f, s.act, s.err),
    h('div', { class: 'act' }, h('code', null, s.a)),
    s.err ? h('div', { class: 'error' }, s.err) : null,
    s.ans ? h('details', { class: 'answer' }, h('summary', null, 'model answer'), h('pre', null, s.ans)) : null,
    h('div', { class: 'ms' }, s.ms + ' ms')));
  cards.push(h('div', { class: 'step final', style: cardW, 'data-step': t.steps.length, onclick: () => setStep(t.steps.length, false) },
    h('div', { class: 'head' }, h('span', { class: 'n' }, 'Final'), badge(t.status),
      h('span', { class: 'r nz' }, 'total ' + fmtR(t.reward))),
    shot(t, t.final)));
  detail.replaceChildren(...[
    h('h2', null, h('span', null, t.task), badge(t.status)),
    h('div', { class: 'sub' }, 'seed ' + t.seed + ' · policy ' + t.policy + (t.group !== null && t.group !== undefined ? ' · group ' + t.group : '') +
      ' · ' + (t.shown ? t.w + '×' + t.h : 'no screen') + ' · line ' + t.line + ' · trajectory ' + (i + 1) + ' of ' + T.length),
    h('div', { class: 'instruction' }, t.instruction),
    h('div', { class: 'outcome' }, h('span', null, 'Outcome ', badge(t.status)), h('span', null, 'reward ', h('b', null, fmtR(t.reward))),
      h('span', null, h('b', null, String(t.nsteps)), t.nsteps === 1 ? ' step' : ' steps')),
    t.error ? h('div', { class: 'error' }, t.error) : null,
    t.judge ? judgeBox(t.judge) : null,
    h('div', { class: 'navbar' }, h('span', null, h('span', { class: 'which' }, t.task + ' · seed ' + t.seed), h('span', { id: 'stepno' })),
      h('span', { class: 'keys' }, h('kbd', null, '←'), ' ', h('kbd', null, '→'), ' step   ', h('kbd', null, '↑'), ' ', h('kbd', null, '↓'),
        ' or ', h('kbd', null, 'k'), ' ', h('kbd', null, 'j'), ' trajectory   ', h('kbd', null, '/'), ' search')),
    h('div', { class: 'steps' }, cards)].filter((x) => x));
  detail.scrollTop = 0;
}
// The judge's verdict, votes and each vote's reasoning.
function judgeBox(j) {
  const said = j.error ? 'no verdict' : (j.success ? 'SUCCESS' : 'FAILURE');
  const how = j.success_votes + '/' + j.votes + ' votes SUCCESS, threshold ' + j.threshold +
    (j.decided ? '' : ' (second opinion; the task\'s check decided)') + (j.cached ? ' · cached' : '');
  return h('div', { class: 'judge' }, h('span', null, 'Judge ', h('b', null, said), ' · ' + j.judge + ' · ' + how),
    j.error ? h('div', { class: 'error' }, j.error) : null,
    ...(j.reasoning || []).map((r, k) => h('details', { class: 'answer' }, h('summary', null, 'vote ' + (k + 1) + ' reasoning'), h('pre', null, r))));
}
function select(i, k) {
  if (cur >= 0 && T[cur]) T[cur].el.classList.remove('current');
  cur = i;
  if (i < 0) {
    detail.replaceChildren(h('p', { class: 'empty' }, T.length ? 'No trajectory matches the filters.' : 'This trajectory set is empty.'));
    return;
  }
  T[i].el.classList.add('current');
  T[i].el.scrollIntoView({ block: 'nearest' });
  renderDetail(i);
  setStep(k, k > 0);
}
// Make step k current; scroll it into view (below the sticky bar) unless told not to.
function setStep(k, scroll) {
  if (cur < 0) return;
  const t = T[cur], last = t.steps.length;
  step = Math.max(0, Math.min(last, k));
  for (const c of detail.querySelectorAll('.step')) c.classList.toggle('current', Number(c.dataset.step) === step);
  const c = detail.querySelector('.step.current'), bar = detail.querySelector('.navbar');
  if (c && scroll !== false) {
    // Scroll the detail pane so the card sits below the sticky bar (or fully in view).
    const top = (bar ? bar.offsetHeight : 0) + 8;
    const pane = detail.getBoundingClientRect(), r = c.getBoundingClientRect();
    const above = r.top - (pane.top + top), below = r.bottom + 12 - pane.bottom;
    if (above < 0 || r.height + top + 12 > pane.height) detail.scrollTop += above;
    else if (below > 0) detail.scrollTop += below;
  }
  $('#stepno').textContent = step < last ? 'Step ' + (step + 1) + ' of ' + last : 'Final frame, after ' + last + (last === 1 ? ' step' : ' steps');
  try { history.replaceState(null, '', '#t=' + cur + '&s=' + step); } catch (e) { /* file:// may refuse */ }
}
function moveTraj(d) {
  const v = visible();
  if (!v.length) return;
  const at = v.indexOf(cur);
  const next = at < 0 ? v[0] : v[Math.max(0, Math.min(v.length - 1, at + d))];
  if (next !== cur) select(next, 0);
}
document.addEventListener('keydown', (e) => {
  const tag = e.target && e.target.tagName;
  if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
    if (e.key === 'Escape' || e.key === 'Enter') e.target.blur();
    return;
  }
  if (e.altKey || e.ctrlKey || e.metaKey) return;
  switch (e.key) {
    case 'ArrowLeft': setStep(step - 1); break;
    case 'ArrowRight': setStep(step + 1); break;
    case 'ArrowUp': case 'k': moveTraj(-1); break;
    case 'ArrowDown': case 'j': moveTraj(1); break;
    case 'Home': setStep(0); break;
    case 'End': setStep(1e9); break;
    case '/': search.focus(); break;
    default: return;
  }
  e.preventDefault();
});

// ---- start: the trajectory and step in the URL, else the first ----
const m = /t=(\d+)&s=(\d+)/.exec(location.hash);
applyFilters();
if (m && T[Number(m[1])]) select(Number(m[1]), Number(m[2]));
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_cannot_close_the_script_element() {
        let v = json!({ "instruction": "type </script><b>&" });
        let s = script_safe_json(&v).unwrap();
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'), "{s}");
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn actions_become_overlay_data() {
        assert_eq!(action_json("click(3, 4)"), json!({ "k": "click", "p": [[3, 4]] }));
        assert_eq!(action_json("drag(1, 2, 3, 4)")["p"], json!([[1, 2], [3, 4]]));
        assert_eq!(action_json("scroll(5, 6, 0, -100)")["dy"], json!(-100));
        assert_eq!(action_json("type(\"a\\\"b\")")["text"], json!("a\"b"));
        assert_eq!(action_json("key(ctrl+a)")["key"], json!("ctrl+a"));
        assert_eq!(action_json("click(1,"), Value::Null);
    }
}
