//! The learning benchmark's report: a table per task (final held-out success over the
//! training seeds, env steps to the target, wall-clock) and a plot per task of held-out
//! success against env steps, every algorithm on it.

use super::{Cell, Plan, CLONE};
use crate::train::plots::{draw, has_font, Line};
use anyhow::{Context, Result};
use plotters::style::{Color, Palette, Palette99, RGBColor};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One row of the table: an algorithm on a task, over its training seeds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The task.
    pub task: String,
    /// The algorithm, or `clone`.
    pub algo: String,
    /// Finished training seeds.
    pub seeds: usize,
    /// Mean final held-out success over the seeds.
    pub mean: f64,
    /// Lowest and highest final held-out success over the seeds.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// Mean final success minus the clone's.
    pub gain: Option<f64>,
    /// Median over the seeds that reached the target of the env steps at the first
    /// evaluation at or above it.
    pub steps_to_target: Option<u64>,
    /// Seeds that reached the target.
    pub reached: usize,
    /// Mean env steps and wall-clock seconds of a run.
    pub env_steps: f64,
    /// See `env_steps`.
    pub wall_secs: f64,
}

/// The rows of every task and algorithm with at least one finished seed, in plan order.
pub fn rows(plan: &Plan, cells: &[Cell]) -> Vec<Row> {
    let mut out = Vec::new();
    for t in &plan.tasks {
        let clone = cells.iter().find(|c| c.task == t.name && c.algo == CLONE).map(|c| c.final_success);
        for algo in std::iter::once(CLONE).chain(plan.algos.iter().map(String::as_str)) {
            let cs: Vec<&Cell> = cells.iter().filter(|c| c.task == t.name && c.algo == algo).collect();
            if cs.is_empty() {
                continue;
            }
            let n = cs.len() as f64;
            let finals = cs.iter().map(|c| c.final_success);
            let mean = finals.clone().sum::<f64>() / n;
            let mut reached: Vec<u64> = cs
                .iter()
                .filter_map(|c| c.curve.iter().find(|(_, s)| *s >= plan.target).map(|(e, _)| *e))
                .collect();
            reached.sort_unstable();
            out.push(Row {
                task: t.name.clone(),
                algo: algo.to_string(),
                seeds: cs.len(),
                mean,
                min: finals.clone().fold(f64::INFINITY, f64::min),
                max: finals.fold(f64::NEG_INFINITY, f64::max),
                gain: clone.filter(|_| algo != CLONE).map(|c| mean - c),
                steps_to_target: reached.get(reached.len().saturating_sub(1) / 2).copied(),
                reached: reached.len(),
                env_steps: cs.iter().map(|c| c.env_steps as f64).sum::<f64>() / n,
                wall_secs: cs.iter().map(|c| c.wall_secs).sum::<f64>() / n,
            });
        }
    }
    out
}

/// The Markdown table of `rows`.
pub fn markdown(plan: &Plan, rows: &[Row]) -> String {
    let mut s = format!(
        "Held-out success (the trainer's greedy evaluation on held-out seeds) after {} env steps of RL from \
         the clone; mean [min–max] over training seeds {:?}; env steps to {:.0} %: the median over the seeds \
         that reached it.\n",
        plan.env_steps,
        plan.seeds,
        plan.target * 100.0
    );
    let mut task = "";
    for r in rows {
        if r.task != task {
            task = &r.task;
            let _ = write!(
                s,
                "\n**{task}**\n\n| algorithm | held-out success | vs clone | env steps to {:.0} % | env steps | wall-clock |\n|---|---|---|---|---|---|\n",
                plan.target * 100.0
            );
        }
        let spread = if r.seeds > 1 { format!(" [{:.2}–{:.2}]", r.min, r.max) } else { String::new() };
        let gain = r.gain.map_or("—".into(), |g| format!("{:+.0} pts", g * 100.0));
        let to = match r.steps_to_target {
            Some(e) => format!("{e} ({}/{})", r.reached, r.seeds),
            None => format!("— (0/{})", r.seeds),
        };
        let _ = writeln!(
            s,
            "| {} | {:.2}{spread} | {gain} | {to} | {:.0} | {:.0} s |",
            r.algo, r.mean, r.env_steps, r.wall_secs
        );
    }
    s
}

/// Write `report.md`, `results.json` (the rows and every cell's curve) and one plot per
/// task into `out`; returns the plots written.
pub fn write(plan: &Plan, cells: &[Cell], out: &Path) -> Result<Vec<PathBuf>> {
    let rows = rows(plan, cells);
    let md = markdown(plan, &rows);
    std::fs::write(out.join("report.md"), &md).with_context(|| format!("cannot write {}", out.display()))?;
    let json =
        serde_json::json!({ "env_steps": plan.env_steps, "seeds": plan.seeds, "rows": rows, "cells": cells });
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    let mut plots = Vec::new();
    for t in &plan.tasks {
        let lines = lines(plan, cells, &t.name);
        if lines.iter().all(|l| l.points.is_empty()) {
            continue;
        }
        let path = out.join(format!("learning-{}.png", t.name));
        let title = format!("{}: held-out success, mean over training seeds", t.name);
        draw(&path, &title, ("RL environment steps", "held-out success"), true, &lines, has_font())?;
        plots.push(path);
    }
    Ok(plots)
}

/// One line per algorithm: the mean over seeds of the i-th evaluation (at the seeds' mean
/// env steps), as far as every seed has one; the clone a flat line over the budget.
fn lines(plan: &Plan, cells: &[Cell], task: &str) -> Vec<Line> {
    let color = |i: usize| {
        let (r, g, b) = Palette99::pick(i).rgb();
        RGBColor(r, g, b)
    };
    let mut out = Vec::new();
    if let Some(c) = cells.iter().find(|c| c.task == task && c.algo == CLONE) {
        let points = vec![(0.0, c.final_success), (plan.env_steps as f64, c.final_success)];
        out.push(Line { label: "clone".into(), color: RGBColor(120, 120, 120), points });
    }
    for (i, algo) in plan.algos.iter().enumerate() {
        let cs: Vec<&Cell> = cells.iter().filter(|c| c.task == task && &c.algo == algo).collect();
        let n = cs.iter().map(|c| c.curve.len()).min().unwrap_or(0);
        let points = (0..n)
            .map(|k| {
                let m = cs.len() as f64;
                let x = cs.iter().map(|c| c.curve[k].0 as f64).sum::<f64>() / m;
                (x, cs.iter().map(|c| c.curve[k].1).sum::<f64>() / m)
            })
            .collect();
        out.push(Line {
            label: format!("{algo} ({} seed{})", cs.len(), if cs.len() == 1 { "" } else { "s" }),
            color: color(i),
            points,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        toml::from_str(
            r#"
env_steps = 1000
seeds = [0, 1]
algos = ["grpo", "ppo"]
[[tasks]]
name = "t"
config = "x.toml"
"#,
        )
        .unwrap()
    }

    fn cell(algo: &str, seed: u64, curve: &[(u64, f64)]) -> Cell {
        Cell {
            task: "t".into(),
            algo: algo.into(),
            seed,
            curve: curve.to_vec(),
            final_success: curve.last().unwrap().1,
            env_steps: curve.last().unwrap().0,
            wall_secs: 10.0 * (seed + 1) as f64,
        }
    }

    /// Mean, spread, gain over the clone and the median env steps to 0.8, by hand:
    /// ppo finals 0.9 and 0.7 → mean 0.8, [0.7–0.9], +60 points over 0.2; only seed 0
    /// reaches 0.8 (at 600 steps) → 600 (1/2).
    #[test]
    fn rows_by_hand() {
        let cells = vec![
            cell(CLONE, 0, &[(0, 0.2)]),
            cell("ppo", 0, &[(0, 0.2), (600, 0.85), (1000, 0.9)]),
            cell("ppo", 1, &[(0, 0.2), (500, 0.5), (1000, 0.7)]),
        ];
        let rows = rows(&plan(), &cells);
        assert_eq!(rows.len(), 2, "the clone and ppo; grpo has no cell");
        let r = &rows[1];
        assert_eq!((r.algo.as_str(), r.seeds, r.reached, r.steps_to_target), ("ppo", 2, 1, Some(600)));
        assert!((r.mean - 0.8).abs() < 1e-12 && (r.min - 0.7).abs() < 1e-12 && (r.max - 0.9).abs() < 1e-12);
        assert!((r.gain.unwrap() - 0.6).abs() < 1e-12);
        assert!((r.wall_secs - 15.0).abs() < 1e-12);
        let md = markdown(&plan(), &rows);
        assert!(md.contains("| ppo | 0.80 [0.70–0.90] | +60 pts | 600 (1/2) | 1000 | 15 s |"), "{md}");
        assert!(md.contains("| clone | 0.20 | — | — (0/1) |"), "{md}");
        let dir = tempfile::tempdir().unwrap();
        let plots = write(&plan(), &cells, dir.path()).unwrap();
        assert_eq!(plots.len(), 1);
        assert!(std::fs::metadata(&plots[0]).unwrap().len() > 1000);
        assert!(dir.path().join("results.json").is_file());
    }
}
