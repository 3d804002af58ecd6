//! The learning benchmark (`guirl bench-learn PLAN`): every algorithm on the same
//! env-step budget, over several training seeds, on tasks that start from a behaviour-
//! cloned policy, so the question "which algorithm lifts a clone, and by how much" has
//! one answer with its spread.
//!
//! ```text
//! per task:   clone    = the task config's [sft] alone (run.iterations = 0), evaluated once
//!             per algo × seed: [model] init = the clone, algo.kind = algo (+ overrides),
//!                              run.seed = seed, run.max_env_steps = budget
//! each cell   → OUT/TASK/CELL/ (a normal run folder) + cell.json (its curve and figures)
//! report      → OUT/report.md (table), OUT/results.json, OUT/learning-TASK.png
//! ```
//!
//! The benchmark resumes: a cell with `cell.json` is done and skipped, a cell killed
//! after a checkpoint continues from it (`--resume` semantics), and one killed before
//! its first checkpoint starts again (it had nothing to keep). Held-out success is the
//! trainer's own evaluation (`[eval]` of the task config: greedy, held-out seeds).

pub mod report;

use crate::train::config::{AlgoKind, TrainConfig};
use crate::train::metrics::read_metrics;
use crate::train::run_folder::METRICS_FILE;
use crate::train::trainer::Trainer;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cell's summary inside its folder; its presence marks the cell done.
pub const CELL_FILE: &str = "cell.json";

/// A benchmark plan (TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Env-step budget of every RL run (`run.max_env_steps`).
    pub env_steps: u64,
    /// Training seeds (`run.seed`) of every algorithm.
    pub seeds: Vec<u64>,
    /// The algorithms (`algo.kind` values).
    pub algos: Vec<String>,
    /// Held-out success the "env steps to" column measures (default 0.8).
    #[serde(default = "default_target")]
    pub target: f64,
    /// `[algo]` keys per algorithm, for every task (`[overrides.ppo] critic_warmup = 2`).
    #[serde(default)]
    pub overrides: BTreeMap<String, toml::Table>,
    /// The tasks.
    pub tasks: Vec<PlanTask>,
}

fn default_target() -> f64 {
    0.8
}

/// One task of a plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanTask {
    /// Its name in the report and its folder.
    pub name: String,
    /// A training config (relative to the plan) whose `[sft]` makes the clone; its
    /// `[algo]`, `[rollout]` and `[eval]` are every algorithm's starting point.
    pub config: PathBuf,
    /// `[algo]` keys for every algorithm on this task (over the plan's per-algorithm
    /// overrides), such as a learning rate the task's clone needs whatever the estimator.
    #[serde(default)]
    pub algo: toml::Table,
    /// `[algo]` keys per algorithm for this task (over the plan's and `algo`).
    #[serde(default)]
    pub overrides: BTreeMap<String, toml::Table>,
}

impl Plan {
    /// Read and check a plan; config paths become relative to the working directory.
    pub fn load(path: &Path) -> Result<Plan> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read plan {}", path.display()))?;
        let mut plan: Plan = toml::from_str(&text).with_context(|| format!("plan {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for t in &mut plan.tasks {
            t.config = base.join(&t.config);
        }
        plan.check()?;
        Ok(plan)
    }

    fn check(&self) -> Result<()> {
        ensure!(self.env_steps >= 1, "plan: env_steps must be at least 1");
        ensure!(!self.seeds.is_empty(), "plan: seeds must list at least one training seed");
        ensure!(!self.tasks.is_empty(), "plan: add at least one [[tasks]] entry");
        ensure!((0.0..=1.0).contains(&self.target), "plan: target must be in [0, 1], got {}", self.target);
        ensure!(!self.algos.is_empty(), "plan: algos must list at least one algorithm");
        let names: Vec<&str> = self.algos.iter().map(String::as_str).collect();
        for a in &self.algos {
            parse_kind(a)?;
        }
        let over = self.overrides.keys().chain(self.tasks.iter().flat_map(|t| t.overrides.keys()));
        for a in over {
            ensure!(
                names.contains(&a.as_str()),
                "plan: overrides.{a} names an algorithm not in algos {names:?}"
            );
        }
        self.check_algo_keys()?;
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.tasks {
            ensure!(
                !t.name.is_empty() && !t.name.contains(['/', '\\']) && t.name != "." && t.name != "..",
                "plan: task name {:?} must be a folder name",
                t.name
            );
            ensure!(seen.insert(&t.name), "plan: task name {:?} is given twice", t.name);
            let cfg = TrainConfig::load(&t.config).with_context(|| format!("plan task {:?}", t.name))?;
            ensure!(
                cfg.sft.is_some(),
                "plan task {:?}: {} has no [sft]; the benchmark measures algorithms from a behaviour-cloned policy",
                t.name,
                t.config.display()
            );
            ensure!(
                cfg.eval.interval > 0,
                "plan task {:?}: {} has eval.interval = 0; the success curves come from the trainer's evaluations",
                t.name,
                t.config.display()
            );
        }
        Ok(())
    }

    /// Every override table must be `[algo]` keys, so a misspelt key fails when the plan is
    /// read, not when its first cell starts.
    fn check_algo_keys(&self) -> Result<()> {
        let plan = self.overrides.iter().map(|(a, o)| (format!("[overrides.{a}]"), o));
        let tasks = self.tasks.iter().flat_map(|t| {
            let per_algo =
                t.overrides.iter().map(|(a, o)| (format!("task {:?} [tasks.overrides.{a}]", t.name), o));
            std::iter::once((format!("task {:?} [tasks.algo]", t.name), &t.algo)).chain(per_algo)
        });
        for (place, table) in plan.chain(tasks) {
            // Through text, so the error quotes the offending line.
            let text = toml::to_string(table)?;
            toml::from_str::<crate::train::algo_config::AlgoConfig>(&text).map_err(|e| {
                anyhow::anyhow!(
                    "plan: {place}: the keys are those of a config's [algo]: {}",
                    e.to_string().trim()
                )
            })?;
        }
        Ok(())
    }
}

/// `algo.kind` from its TOML name, with the valid names in the error.
fn parse_kind(name: &str) -> Result<AlgoKind> {
    let v = toml::Value::String(name.to_string());
    AlgoKind::deserialize(v).map_err(|e| anyhow::anyhow!("plan: algos: {e}"))
}

/// One finished cell: a clone, or an algorithm on a task with one training seed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// The plan's task name.
    pub task: String,
    /// The algorithm, or `clone`.
    pub algo: String,
    /// The training seed.
    pub seed: u64,
    /// Held-out success against env steps, the clone's at 0 first.
    pub curve: Vec<(u64, f64)>,
    /// Held-out success at the end.
    pub final_success: f64,
    /// Env steps of RL (0 for the clone).
    pub env_steps: u64,
    /// Wall-clock of the run, seconds (the clone's: demonstrations and cloning).
    pub wall_secs: f64,
}

/// The name of a clone cell.
pub const CLONE: &str = "clone";

/// Options of a benchmark run.
#[derive(Debug, Clone, Default)]
pub struct BenchOptions {
    /// Only cells whose `TASK/ALGO` contains this.
    pub only: Option<String>,
    /// Browser settings of every run.
    pub env: crate::env::EnvConfig,
}

/// Run every cell of `plan` not done yet in `out`, then write the report. Returns the
/// finished cells.
pub async fn run(plan: &Plan, out: &Path, opts: &BenchOptions, stop: Arc<AtomicBool>) -> Result<Vec<Cell>> {
    if let Some(o) = &opts.only {
        // A filter that names no cell would run nothing and report old results as if new.
        let all: Vec<String> = plan
            .tasks
            .iter()
            .flat_map(|t| {
                let algos =
                    plan.algos.iter().flat_map(|a| plan.seeds.iter().map(move |s| format!("{a}-s{s}")));
                std::iter::once(CLONE.to_string()).chain(algos).map(move |c| format!("{}/{c}", t.name))
            })
            .collect();
        if !all.iter().any(|c| c.contains(o.as_str())) {
            bail!(
                "--only {o:?} matches no cell of the plan; cells are TASK/ALGO-sSEED or TASK/clone, e.g. {}",
                all.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for task in &plan.tasks {
        let base = TrainConfig::load(&task.config)?;
        // The cells start from the file as written: `base` is resolved, and its
        // kind-dependent defaults (clip range, dynamic sampling, loss aggregation, std)
        // are GRPO's when the task trains GRPO, which would turn every cell into GRPO.
        let written = TrainConfig::load_written(&task.config)?;
        let wanted =
            |cell: &str| opts.only.as_deref().is_none_or(|o| format!("{}/{cell}", task.name).contains(o));
        let cells: Vec<(&String, u64)> = plan
            .algos
            .iter()
            .flat_map(|a| plan.seeds.iter().map(move |&s| (a, s)))
            .filter(|(a, s)| wanted(&format!("{a}-s{s}")))
            .collect();
        if cells.is_empty() && !wanted(CLONE) {
            continue;
        }
        // The clone: every algorithm's starting point.
        let clone_dir = out.join(&task.name).join(CLONE);
        let mut clone_cfg = base.clone();
        clone_cfg.run.iterations = 0;
        clone_cfg.run.max_env_steps = None;
        run_cell(&clone_cfg, &clone_dir, (&task.name, CLONE, base.run.seed), opts, &stop).await?;
        let init =
            crate::train::checkpoint::checkpoints_dir(&clone_dir).join(crate::train::checkpoint::name(0));
        for (algo, seed) in cells {
            if stop.load(Ordering::SeqCst) {
                bail!("stopped; run the same command again to continue where it left off");
            }
            let cfg = cell_config(plan, task, &written, algo, seed, &init)?;
            let dir = out.join(&task.name).join(format!("{algo}-s{seed}"));
            run_cell(&cfg, &dir, (&task.name, algo, seed), opts, &stop).await?;
        }
    }
    let cells = read_cells(out)?;
    report::write(plan, &cells, out)?;
    Ok(cells)
}

/// The config of one algorithm cell: the task's (`written`: as in its file, unresolved),
/// without `[sft]`, starting from the clone, with the algorithm's own defaults resolved.
fn cell_config(
    plan: &Plan,
    task: &PlanTask,
    written: &TrainConfig,
    algo: &str,
    seed: u64,
    init: &Path,
) -> Result<TrainConfig> {
    let mut v: toml::Table = toml::from_str(&written.to_toml()?)?;
    v.remove("sft");
    let table = |v: &mut toml::Table, k: &str| -> Result<toml::Table> {
        match v.remove(k) {
            Some(toml::Value::Table(t)) => Ok(t),
            None => Ok(toml::Table::new()),
            Some(_) => bail!("[{k}] is not a table"),
        }
    };
    let mut run = table(&mut v, "run")?;
    run.insert("seed".into(), (seed as i64).into());
    run.insert("max_env_steps".into(), (plan.env_steps as i64).into());
    // An upper bound the budget ends first: each iteration takes at least B·G steps.
    let per_iter = (written.algo.batch_seeds * written.algo.group_size).max(1) as u64;
    run.insert("iterations".into(), (plan.env_steps.div_ceil(per_iter) as i64).into());
    v.insert("run".into(), run.into());
    let mut model = table(&mut v, "model")?;
    model.insert("init".into(), init.display().to_string().into());
    v.insert("model".into(), model.into());
    let mut a = table(&mut v, "algo")?;
    a.insert("kind".into(), algo.into());
    for o in [plan.overrides.get(algo), Some(&task.algo), task.overrides.get(algo)].into_iter().flatten() {
        a.extend(o.clone());
    }
    v.insert("algo".into(), a.into());
    let mut cfg = TrainConfig::parse(&toml::to_string(&v)?)
        .with_context(|| format!("task {:?} with {algo}", task.name))?;
    cfg.resolve();
    Ok(cfg)
}

/// Train one cell unless its `cell.json` says it is done, then summarise it.
async fn run_cell(
    cfg: &TrainConfig,
    dir: &Path,
    (task, algo, seed): (&str, &str, u64),
    opts: &BenchOptions,
    stop: &Arc<AtomicBool>,
) -> Result<()> {
    if dir.join(CELL_FILE).is_file() {
        return Ok(());
    }
    let has_checkpoint = crate::train::checkpoint::latest(dir)?.is_some();
    if dir.exists() && !has_checkpoint {
        // Killed before its first checkpoint: nothing to keep.
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    tracing::info!("bench-learn: {task} {algo} seed {seed} → {}", dir.display());
    let mut trainer = Trainer::new(cfg.clone(), dir.to_path_buf(), has_checkpoint, false)
        .with_context(|| format!("{task} {algo} seed {seed}"))?;
    trainer.set_env_config(opts.env.clone());
    let state = trainer.run(stop.clone()).await.with_context(|| format!("{task} {algo} seed {seed}"))?;
    if stop.load(Ordering::SeqCst) {
        bail!("stopped during {task} {algo} seed {seed} (checkpoint kept); run the same command again to continue");
    }
    let ms = read_metrics(&dir.join(METRICS_FILE))?;
    let curve: Vec<(u64, f64)> = ms.iter().filter_map(|m| m.eval_success.map(|s| (m.env_steps, s))).collect();
    let Some(&(_, final_success)) = curve.last() else {
        bail!("{}: the run has no evaluation", dir.display());
    };
    let cell = Cell {
        task: task.to_string(),
        algo: algo.to_string(),
        seed,
        curve,
        final_success,
        env_steps: state.env_steps,
        wall_secs: state.wall_secs,
    };
    crate::train::checkpoint::write_file_atomically(
        &dir.join(CELL_FILE),
        serde_json::to_string_pretty(&cell)?.as_bytes(),
    )
}

/// Every finished cell under `out` (`TASK/CELL/cell.json`), in a stable order.
pub fn read_cells(out: &Path) -> Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for task in std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))?.flatten() {
        let Ok(runs) = std::fs::read_dir(task.path()) else { continue };
        for run in runs.flatten() {
            let f = run.path().join(CELL_FILE);
            if f.is_file() {
                let text = std::fs::read_to_string(&f)?;
                cells.push(serde_json::from_str(&text).with_context(|| format!("{}", f.display()))?);
            }
        }
    }
    cells.sort_by(|a: &Cell, b: &Cell| (&a.task, &a.algo, a.seed).cmp(&(&b.task, &b.algo, b.seed)));
    Ok(cells)
}

#[cfg(test)]
#[path = "cell_tests.rs"]
mod tests;
