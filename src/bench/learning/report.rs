//! The learning benchmark's report: a table per task with test and validation side by
//! side (over every clone × RL-seed cell, each RL cell's gain paired with its own clone),
//! and a plot per task of validation success against env steps, every algorithm on it.

use super::{Cell, Plan, CLONE, MORE_SFT};
use crate::bench::harness::report::{wilson, Z95};
use crate::train::plots::{draw, has_font, Line};
use anyhow::{Context, Result};
use plotters::style::{Color, Palette, Palette99, RGBColor};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Mean, sample standard deviation, lowest and highest of some values.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    /// How many values.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (n − 1; 0 for one value).
    pub sd: f64,
    /// The lowest.
    pub min: f64,
    /// The highest.
    pub max: f64,
}

impl Spread {
    /// The spread of `xs`, `None` when empty.
    pub fn of(xs: &[f64]) -> Option<Spread> {
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let ss = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
        Some(Spread {
            n,
            mean,
            sd: if n > 1 { (ss / (n - 1) as f64).sqrt() } else { 0.0 },
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// Test episodes pooled over cells: every cell's episodes counted together.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Pooled {
    /// Successful episodes.
    pub successes: usize,
    /// Episodes.
    pub episodes: usize,
    /// successes / episodes.
    pub rate: f64,
    /// Wilson 95 % interval of `rate`.
    pub ci95: (f64, f64),
}

/// Two policies compared episode by episode on the same test seeds, pooled over cells:
/// the episodes only one of them won, and the exact two-sided sign test of those.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Paired {
    /// Episodes this row's cells won and their baseline lost.
    pub won: usize,
    /// Episodes the baseline won and this row's cells lost.
    pub lost: usize,
    /// The sign test's two-sided p-value: how likely a split at least this uneven is if
    /// either side were as likely to win a discordant episode. Episodes are its unit: it
    /// says nothing of the spread over training seeds (the other columns show that).
    pub p: f64,
}

impl Paired {
    /// The comparison of these (won, lost) counts, `None` when no pair was found.
    pub fn of(pairs: &[(usize, usize)]) -> Option<Paired> {
        if pairs.is_empty() {
            return None;
        }
        let (won, lost) = pairs.iter().fold((0, 0), |(a, b), (w, l)| (a + w, b + l));
        Some(Paired { won, lost, p: sign_test(won, lost) })
    }
}

/// The exact two-sided sign test of `a` against `b` discordant pairs: twice the binomial
/// (n = a + b, ½) tail at min(a, b), at most 1 (1 when there is no pair). Summed in log
/// space, so a thousand pairs neither overflow nor underflow.
pub fn sign_test(a: usize, b: usize) -> f64 {
    let n = a + b;
    let k = a.min(b);
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        tail += (ln_choose + ln_half_n).exp();
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (2.0 * tail).min(1.0)
}

/// One row of a task's table: the clone, an algorithm, or the more-cloning baseline,
/// over its cells.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The task.
    pub task: String,
    /// The algorithm, `clone` or `more-sft`.
    pub algo: String,
    /// Finished cells (clones × training seeds for an algorithm; clones otherwise).
    pub cells: usize,
    /// Test success over the cells that have one (the final policy's).
    pub test: Option<Spread>,
    /// Test success pooled over those cells' episodes.
    pub test_pooled: Option<Pooled>,
    /// Final validation success over the cells.
    pub validation: Spread,
    /// Test success minus the paired clone's (a cell's own clone), over the cells where
    /// both have one.
    pub gain: Option<Spread>,
    /// Each cell against its own clone, episode by episode on the test seeds.
    pub paired_clone: Option<Paired>,
    /// Each RL cell against its clone's more-cloning baseline, episode by episode: what RL
    /// has to beat.
    pub paired_more_sft: Option<Paired>,
    /// Median over the cells that reached the target of the env steps at the first
    /// validation at or above it.
    pub steps_to_target: Option<u64>,
    /// Cells that reached the target.
    pub reached: usize,
    /// Mean env steps of a cell: RL's; for the clone and the baseline the demonstrations'.
    pub env_steps: f64,
    /// Whether `env_steps` counts demonstrations.
    pub demo_steps: bool,
    /// Mean wall-clock seconds of a cell.
    pub wall_secs: f64,
    /// The baseline's extra epochs, lowest and highest over its clones.
    pub extra_epochs: Option<(usize, usize)>,
}

/// The rows of every task and algorithm with at least one finished cell, in plan order:
/// the clone, the algorithms, the baseline.
pub fn rows(plan: &Plan, cells: &[Cell]) -> Vec<Row> {
    let mut out = Vec::new();
    for t in &plan.tasks {
        let of_task: Vec<&Cell> = cells.iter().filter(|c| c.task == t.name).collect();
        // A cell's clone (or its clone's baseline): the task's cell of that kind with the
        // same clone seed.
        let basis_test = |c: &Cell, kind: &str| {
            of_task
                .iter()
                .find(|k| k.algo == kind && k.clone_seed == c.clone_seed)
                .and_then(|k| k.test.as_ref())
        };
        let names = plan.algos.iter().map(String::as_str);
        for algo in std::iter::once(CLONE).chain(names).chain(std::iter::once(MORE_SFT)) {
            let cs: Vec<&Cell> = of_task.iter().copied().filter(|c| c.algo == algo).collect();
            let validation: Vec<f64> = cs.iter().map(|c| c.final_success).collect();
            let Some(validation) = Spread::of(&validation) else { continue };
            let tests: Vec<_> = cs.iter().filter_map(|c| c.test.as_ref()).collect();
            let rates: Vec<f64> = tests.iter().map(|t| t.rate()).collect();
            let (k, n) = tests.iter().fold((0, 0), |(k, n), t| (k + t.successes, n + t.episodes));
            let against = |kind: &str| -> Vec<(usize, usize)> {
                match algo {
                    CLONE => vec![],
                    _ if algo == kind => vec![],
                    _ => {
                        cs.iter().filter_map(|c| c.test.as_ref()?.discordant(basis_test(c, kind)?)).collect()
                    }
                }
            };
            let gains: Vec<f64> = match algo {
                CLONE => vec![],
                _ => cs
                    .iter()
                    .filter_map(|c| Some(c.test.as_ref()?.rate() - basis_test(c, CLONE)?.rate()))
                    .collect(),
            };
            let mut reached: Vec<u64> = cs
                .iter()
                .filter_map(|c| c.curve.iter().find(|(_, s)| *s >= plan.target).map(|(e, _)| *e))
                .collect();
            reached.sort_unstable();
            let demo_steps = algo == CLONE || algo == MORE_SFT;
            let steps = |c: &&Cell| match (demo_steps, &c.sft) {
                (true, Some(s)) => s.demo_env_steps as f64,
                _ => c.env_steps as f64,
            };
            let extra: Vec<usize> = cs
                .iter()
                .filter(|_| algo == MORE_SFT)
                .filter_map(|c| c.sft.as_ref().map(|s| s.epochs))
                .collect();
            let m = cs.len() as f64;
            out.push(Row {
                task: t.name.clone(),
                algo: algo.to_string(),
                cells: cs.len(),
                test: Spread::of(&rates),
                test_pooled: (n > 0).then(|| Pooled {
                    successes: k,
                    episodes: n,
                    rate: k as f64 / n as f64,
                    ci95: wilson(k, n, Z95),
                }),
                validation,
                gain: Spread::of(&gains),
                paired_clone: Paired::of(&against(CLONE)),
                paired_more_sft: Paired::of(&against(MORE_SFT)),
                steps_to_target: reached.get(reached.len().saturating_sub(1) / 2).copied(),
                reached: reached.len(),
                env_steps: cs.iter().map(steps).sum::<f64>() / m,
                demo_steps,
                wall_secs: cs.iter().map(|c| c.wall_secs).sum::<f64>() / m,
                extra_epochs: extra.iter().min().zip(extra.iter().max()).map(|(a, b)| (*a, *b)),
            });
        }
    }
    out
}

/// Each task's observation setting (what reaches the policy: `pixels` or `pixels+dom`),
/// from its config.
pub fn observations(plan: &Plan) -> BTreeMap<String, String> {
    plan.tasks
        .iter()
        .map(|t| {
            let o = crate::train::config::TrainConfig::load(&t.config)
                .and_then(|c| c.model.observation())
                .map_or_else(|e| format!("unknown ({e:#})"), |o| o.to_string());
            (t.name.clone(), o)
        })
        .collect()
}

/// `0.62 ± 0.05 [0.55–0.68]` (one cell: `0.62`).
fn show_spread(s: &Spread) -> String {
    match s.n {
        1 => format!("{:.2}", s.mean),
        _ => format!("{:.2} ± {:.2} [{:.2}–{:.2}]", s.mean, s.sd, s.min, s.max),
    }
}

/// `+5 pts [−3, +12]` (one pair: `+5 pts`).
fn show_gain(g: &Spread) -> String {
    let pts = |x: f64| format!("{:+.0}", x * 100.0);
    match g.n {
        1 => format!("{} pts", pts(g.mean)),
        _ => format!("{} pts [{}, {}]", pts(g.mean), pts(g.min), pts(g.max)),
    }
}

/// `+14/−4 episodes, p 0.031` (`p < 0.001` below that).
fn show_paired(p: &Paired) -> String {
    let pv = if p.p < 0.001 { "p < 0.001".to_string() } else { format!("p {:.3}", p.p) };
    format!("+{}/−{} episodes, {pv}", p.won, p.lost)
}

/// The Markdown report of `rows`, with each task's observation setting (`obs`).
pub fn markdown(plan: &Plan, rows: &[Row], cells: &[Cell], obs: &BTreeMap<String, String>) -> String {
    let tested: BTreeSet<(u64, usize)> =
        cells.iter().filter_map(|c| c.test.as_ref().map(|t| (t.first_seed, t.per_task))).collect();
    let seeds = match tested.iter().collect::<Vec<_>>()[..] {
        [] => "no cell has a test result yet".to_string(),
        [(s, n)] => format!("seeds {s}..{} of every task", s + *n as u64 - 1),
        _ => format!(
            "seeds from {}, per task {:?} (cells made with different test_episodes)",
            tested.iter().next().map_or(0, |t| t.0),
            tested.iter().map(|t| t.1).collect::<Vec<_>>()
        ),
    };
    let clones = match &plan.clone_seeds {
        Some(k) => format!("clone seeds {k:?}"),
        None => "one clone (the task config's run.seed)".to_string(),
    };
    let mut s = format!(
        "**Test** (the test split, {seeds}; the same for every cell): each cell's final policy, greedy — not \
         its `best` checkpoint, which validation picks. Mean ± sd [min–max] over the cells, and pooled over \
         all their episodes with its Wilson 95 % interval. **Validation**: the trainer's own greedy \
         evaluation on the task config's `[eval]` seeds at the end, mean over the cells. Cells: {clones} × \
         training seeds {:?}, {} env steps of RL from their clone. **vs clone**: a cell's test success minus \
         its own clone's, mean [min–max]; then episode by episode on the same seeds, pooled over the cells: \
         +episodes only the cell won / −episodes only its clone won, and the exact two-sided sign test of \
         that split (its unit is the episode: it does not cover the spread over training seeds). **vs \
         more-sft**: the same against the cell's clone's more-sft baseline. **more-sft**: the clone trained N more epochs on its \
         demonstrations (same lr, minibatch, shuffles and optimizer; N = ceil(median RL-cell wall-clock of \
         that clone ÷ the clone's seconds per epoch), at most {}); its env steps, like the clone's, are its \
         demonstrations'. Env steps to {:.0} %: validation, median over the cells that reached it.\n",
        plan.seeds,
        plan.env_steps,
        plan.more_sft_max_epochs,
        plan.target * 100.0
    );
    let mut task = "";
    for r in rows {
        if r.task != task {
            task = &r.task;
            let o = obs.get(task).map_or("unknown", String::as_str);
            let _ = write!(
                s,
                "\n**{task}** — observation: {o}\n\n| cell | n | test success | test pooled [Wilson 95 %] | \
                 validation | vs clone (test) | vs more-sft (test) | env steps to {:.0} % | env steps | \
                 wall-clock |\n|---|---|---|---|---|---|---|---|---|---|\n",
                plan.target * 100.0
            );
        }
        let label = match r.extra_epochs {
            Some((a, b)) if a == b => format!("{} (+{a} epochs)", r.algo),
            Some((a, b)) => format!("{} (+{a}–{b} epochs)", r.algo),
            None => r.algo.clone(),
        };
        let test = r.test.as_ref().map_or("—".into(), show_spread);
        let pooled = r.test_pooled.map_or("—".into(), |p| {
            format!("{:.2} [{:.2}, {:.2}] ({}/{})", p.rate, p.ci95.0, p.ci95.1, p.successes, p.episodes)
        });
        let gain = match (r.gain.as_ref().map(show_gain), r.paired_clone.as_ref().map(show_paired)) {
            (Some(g), Some(p)) => format!("{g}; {p}"),
            (g, p) => g.or(p).unwrap_or_else(|| "—".into()),
        };
        let more = r.paired_more_sft.as_ref().map_or("—".into(), show_paired);
        let to = match r.steps_to_target {
            // the clone and the baseline run no RL: their only evaluation is at 0 env steps
            _ if r.demo_steps => "n/a".to_string(),
            Some(e) => format!("{e} ({}/{})", r.reached, r.cells),
            None => format!("— (0/{})", r.cells),
        };
        let demos = if r.demo_steps { " (demos)" } else { "" };
        let _ = writeln!(
            s,
            "| {label} | {} | {test} | {pooled} | {:.2} | {gain} | {more} | {to} | {:.0}{demos} | {:.0} s |",
            r.cells, r.validation.mean, r.env_steps, r.wall_secs
        );
    }
    s
}

/// Write `report.md`, `results.json` (the rows, every cell, the observation settings)
/// and one plot per task into `out`; returns the plots written.
pub fn write(plan: &Plan, cells: &[Cell], out: &Path) -> Result<Vec<PathBuf>> {
    let rows = rows(plan, cells);
    let obs = observations(plan);
    let md = markdown(plan, &rows, cells, &obs);
    let w = |name: &str, bytes: &[u8]| {
        crate::train::checkpoint::write_file_atomically(&out.join(name), bytes)
            .with_context(|| format!("cannot write {}", out.join(name).display()))
    };
    w("report.md", md.as_bytes())?;
    let json = serde_json::json!({
        "env_steps": plan.env_steps,
        "seeds": plan.seeds,
        "clone_seeds": plan.clone_seeds,
        "test_episodes": plan.test_episodes,
        "test_first_seed": crate::train::seeds::TEST_SEEDS,
        "test_policy": "final",
        "observation": obs,
        "rows": rows,
        "cells": cells,
    });
    w("results.json", serde_json::to_string_pretty(&json)?.as_bytes())?;
    let mut plots = Vec::new();
    for t in &plan.tasks {
        let lines = lines(plan, cells, &t.name);
        if lines.iter().all(|l| l.points.is_empty()) {
            continue;
        }
        let path = out.join(format!("learning-{}.png", t.name));
        let title = format!("{}: validation success, mean over cells", t.name);
        draw(&path, &title, ("RL environment steps", "validation success"), true, &lines, has_font())?;
        plots.push(path);
    }
    Ok(plots)
}

/// One line per algorithm: the mean over cells of the i-th validation (at the cells'
/// mean env steps), as far as every cell has one; the clone and the baseline flat lines
/// over the budget at their mean final validation.
fn lines(plan: &Plan, cells: &[Cell], task: &str) -> Vec<Line> {
    let color = |i: usize| {
        let (r, g, b) = Palette99::pick(i).rgb();
        RGBColor(r, g, b)
    };
    let flat = |algo: &str| {
        let v: Vec<f64> =
            cells.iter().filter(|c| c.task == task && c.algo == algo).map(|c| c.final_success).collect();
        Spread::of(&v).map(|s| vec![(0.0, s.mean), (plan.env_steps as f64, s.mean)])
    };
    let mut out = Vec::new();
    if let Some(points) = flat(CLONE) {
        out.push(Line { label: "clone".into(), color: RGBColor(120, 120, 120), points });
    }
    if let Some(points) = flat(MORE_SFT) {
        out.push(Line { label: "more-sft".into(), color: RGBColor(40, 40, 40), points });
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
            label: format!("{algo} ({} cell{})", cs.len(), if cs.len() == 1 { "" } else { "s" }),
            color: color(i),
            points,
        });
    }
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
