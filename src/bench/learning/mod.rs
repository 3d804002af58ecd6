//! The learning benchmark (`guirl bench-learn PLAN`): every algorithm on the same
//! env-step budget, from several behaviour-cloned policies and over several training
//! seeds, beside the baseline of spending that time on more cloning, so the question
//! "which algorithm lifts a clone, and by how much more than cloning longer" has one
//! answer with its spread.
//!
//! ```text
//! per task, per clone seed K (plan clone_seeds; absent: the config's run.seed):
//!   clone-cK        = the task config's [sft] alone (run.iterations = 0), run.seed = K
//!   ALGO-cK-sS      = [model] init = clone-cK, algo.kind = ALGO (+ overrides),
//!                     run.seed = S, run.max_env_steps = budget
//!   more-sft-cK     = clone-cK trained N more epochs of its [sft] on its demonstrations
//!                     (more_sft.rs: N from the RL cells' wall-clock)
//! each cell         → OUT/TASK/CELL/ (a normal run folder) + cell.json (curve and figures)
//! report            → OUT/report.md (table), OUT/results.json, OUT/learning-TASK.png
//! ```
//!
//! Validation success is the trainer's own evaluation (`[eval]` of the task config:
//! greedy, seeds from 1 000 000), which also picks each run's `best` checkpoint. Every cell
//! then ends with the test split: its *final* policy (not `best`), greedy, on
//! `test_episodes` seeds per task from [`TEST_SEEDS`], the same seeds for every cell.
//!
//! The benchmark resumes: a cell with `cell.json` is done and skipped, a cell killed
//! after a checkpoint (or a cloning epoch) continues from it (`--resume` semantics), and
//! one killed before starts again (it had nothing to keep).

mod cell;
pub mod more_sft;
pub mod plan;
pub mod report;

pub use cell::{Cell, SftFigures, TestResult};
pub use plan::{CloneId, Plan, PlanTask, CLONE, MORE_SFT};

use crate::train::config::TrainConfig;
use crate::train::metrics::read_metrics;
use crate::train::run_folder::METRICS_FILE;
use crate::train::seeds::TEST_SEEDS;
use crate::train::trainer::Trainer;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cell's summary inside its folder; its presence marks the cell done.
pub const CELL_FILE: &str = "cell.json";
/// The baseline's extra epochs, fixed when it starts (a resumed one keeps them).
const MORE_SFT_FILE: &str = "more-sft.json";

/// Options of a benchmark run.
#[derive(Debug, Clone, Default)]
pub struct BenchOptions {
    /// Only cells whose `TASK/CELL` contains this.
    pub only: Option<String>,
    /// Browser settings of every run.
    pub env: crate::env::EnvConfig,
}

/// What every cell of a run shares.
struct Ctx<'a> {
    opts: &'a BenchOptions,
    stop: &'a Arc<AtomicBool>,
    test_episodes: usize,
}

/// Which cell a run is, for its `cell.json` and messages.
struct CellId<'a> {
    task: &'a str,
    algo: &'a str,
    seed: u64,
    clone: CloneId,
    basis: Option<String>,
}

/// Run every cell of `plan` not done yet in `out`, then write the report. Returns the
/// finished cells.
pub async fn run(plan: &Plan, out: &Path, opts: &BenchOptions, stop: Arc<AtomicBool>) -> Result<Vec<Cell>> {
    if let Some(o) = &opts.only {
        // A filter that names no cell would run nothing and report old results as if new.
        let all = plan.all_cells();
        if !all.iter().any(|c| c.contains(o.as_str())) {
            let forms = match plan.clone_seeds {
                Some(_) => "TASK/clone-cK, TASK/ALGO-cK-sSEED or TASK/more-sft-cK",
                None => "TASK/clone, TASK/ALGO-sSEED or TASK/more-sft",
            };
            bail!(
                "--only {o:?} matches no cell of the plan; cells are {forms}, e.g. {}",
                all.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let ctx = Ctx { opts, stop: &stop, test_episodes: plan.test_episodes };
    for task in &plan.tasks {
        let base = TrainConfig::load(&task.config)?;
        // The cells start from the file as written: `base` is resolved, and its
        // kind-dependent defaults (clip range, dynamic sampling, loss aggregation, std)
        // are GRPO's when the task trains GRPO, which would turn every cell into GRPO.
        let written = TrainConfig::load_written(&task.config)?;
        let task_dir = out.join(&task.name);
        let wanted =
            |cell: &str| opts.only.as_deref().is_none_or(|o| format!("{}/{cell}", task.name).contains(o));
        for c in plan.clones(base.run.seed) {
            if !plan.cells_of(&c).iter().any(|n| wanted(n)) {
                continue;
            }
            // The clone: the starting point of its RL cells and of its baseline.
            let clone_dir = task_dir.join(c.clone_cell());
            let mut clone_cfg = base.clone();
            clone_cfg.run.seed = c.seed;
            clone_cfg.run.iterations = 0;
            clone_cfg.run.max_env_steps = None;
            let id = CellId { task: &task.name, algo: CLONE, seed: c.seed, clone: c, basis: None };
            run_cell(&clone_cfg, &clone_dir, id, &ctx).await?;
            let init = clone_checkpoint(&clone_dir);
            for algo in &plan.algos {
                for &seed in &plan.seeds {
                    if !wanted(&c.rl_cell(algo, seed)) {
                        continue;
                    }
                    if stop.load(Ordering::SeqCst) {
                        bail!("stopped; run the same command again to continue where it left off");
                    }
                    let cfg = cell_config(plan, task, &written, algo, seed, &init)?;
                    let id = CellId { task: &task.name, algo, seed, clone: c, basis: None };
                    run_cell(&cfg, &task_dir.join(c.rl_cell(algo, seed)), id, &ctx).await?;
                }
            }
            if plan.more_sft && wanted(&c.more_sft_cell()) {
                run_more_sft(plan, &task.name, &base, c, &task_dir, &ctx).await?;
            }
        }
    }
    let cells = read_cells(out)?;
    report::write(plan, &cells, out)?;
    Ok(cells)
}

/// The clone's checkpoint in its cell folder (`iter-000000`: cloning alone).
fn clone_checkpoint(clone_dir: &Path) -> PathBuf {
    crate::train::checkpoint::checkpoints_dir(clone_dir).join(crate::train::checkpoint::name(0))
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
    if let Some(sampling) = task.sampling {
        let mut tasks = table(&mut v, "tasks")?;
        tasks.insert("sampling".into(), toml::Value::try_from(sampling)?);
        v.insert("tasks".into(), tasks.into());
    }
    let mut model = table(&mut v, "model")?;
    model.insert("init".into(), init.display().to_string().into());
    v.insert("model".into(), model.into());
    let mut a = table(&mut v, "algo")?;
    a.insert("kind".into(), algo.into());
    for o in [plan.overrides.get(algo), Some(&task.algo), task.overrides.get(algo)].into_iter().flatten() {
        for (k, v) in o {
            // A sub-table (`ppo = { critic_warmup = 2 }`) is merged key by key, so a later
            // override of one of its keys keeps the others.
            match (a.get_mut(k), v) {
                (Some(toml::Value::Table(mine)), toml::Value::Table(theirs)) => mine.extend(theirs.clone()),
                _ => {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
    }
    // Success replay starts from the clone's demonstrations, as in a run that clones.
    let replays = a.get("success_replay").and_then(toml::Value::as_integer).is_some_and(|n| n > 0);
    if replays && !a.contains_key("success_replay_demos") {
        if let Some(sft) = &written.sft {
            let clone_dir =
                init.parent().and_then(Path::parent).context("the clone checkpoint's run folder")?;
            let demos = sft.dir.clone().unwrap_or_else(|| clone_dir.join("demos"));
            a.insert("success_replay_demos".into(), demos.display().to_string().into());
        }
    }
    v.insert("algo".into(), a.into());
    let mut cfg = TrainConfig::parse(&toml::to_string(&v)?)
        .with_context(|| format!("task {:?} with {algo}", task.name))?;
    cfg.resolve();
    Ok(cfg)
}

/// The more-cloning baseline of clone `c`: its extra epochs are fixed when it starts
/// (from the RL cells of that clone finished by then, see [`more_sft::extra_epochs`]) and
/// kept in its folder, so a resumed baseline trains what it started with.
async fn run_more_sft(
    plan: &Plan,
    task: &str,
    base: &TrainConfig,
    c: CloneId,
    task_dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<()> {
    let dir = task_dir.join(c.more_sft_cell());
    let clone_dir = task_dir.join(c.clone_cell());
    let resume = match cell_state(&dir)? {
        None => return Ok(()),
        Some(resume) => resume,
    };
    let decided = dir.join(MORE_SFT_FILE);
    let d = if resume && decided.is_file() {
        let text = std::fs::read_to_string(&decided)?;
        serde_json::from_str::<more_sft::Decision>(&text).with_context(|| format!("{}", decided.display()))?
    } else {
        let rl: Vec<f64> = plan
            .algos
            .iter()
            .flat_map(|a| plan.seeds.iter().map(move |&s| c.rl_cell(a, s)))
            .filter_map(|name| read_cell(&task_dir.join(name)).ok().flatten())
            .map(|cell| cell.wall_secs)
            .collect();
        let per_epoch = read_cell(&clone_dir)?.and_then(|cl| cl.sft).and_then(|s| s.secs_per_epoch);
        let Some(d) = more_sft::extra_epochs(&rl, per_epoch, plan.more_sft_epochs, plan.more_sft_max_epochs)
        else {
            tracing::warn!(
                "bench-learn: {task}/{} not run: no RL cell of {} has finished to time it against; run \
                 the RL cells first, or set more_sft_epochs in the plan",
                c.more_sft_cell(),
                c.clone_cell()
            );
            return Ok(());
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        crate::train::checkpoint::write_file_atomically(&decided, serde_json::to_string(&d)?.as_bytes())?;
        d
    };
    let cfg = more_sft::config(base, c, &clone_dir, &clone_checkpoint(&clone_dir), d.extra_epochs)?;
    let id = CellId { task, algo: MORE_SFT, seed: c.seed, clone: c, basis: Some(d.basis) };
    train_cell(&cfg, &dir, id, ctx, resume).await
}

/// `None` when the cell is done; else whether it resumes from a checkpoint (or a
/// behaviour cloning under way). A folder killed before either is cleared: it had nothing
/// to keep.
fn cell_state(dir: &Path) -> Result<Option<bool>> {
    if dir.join(CELL_FILE).is_file() {
        return Ok(None);
    }
    let has_checkpoint = crate::train::checkpoint::resume_point(dir)?.is_some();
    if dir.exists() && !has_checkpoint {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    Ok(Some(has_checkpoint))
}

/// Train one cell unless its `cell.json` says it is done (see [`train_cell`]).
async fn run_cell(cfg: &TrainConfig, dir: &Path, id: CellId<'_>, ctx: &Ctx<'_>) -> Result<()> {
    match cell_state(dir)? {
        Some(resume) => train_cell(cfg, dir, id, ctx, resume).await,
        None => Ok(()),
    }
}

/// Train one cell (continuing from its checkpoint with `resume`), evaluate its final
/// policy on the test split, then summarise it in `cell.json`.
async fn train_cell(
    cfg: &TrainConfig,
    dir: &Path,
    id: CellId<'_>,
    ctx: &Ctx<'_>,
    resume: bool,
) -> Result<()> {
    let (task, algo, seed) = (id.task, id.algo, id.seed);
    let what = || format!("{task} {algo} seed {seed}");
    tracing::info!("bench-learn: {} → {}", what(), dir.display());
    let mut trainer = Trainer::new(cfg.clone(), dir.to_path_buf(), resume, false).with_context(what)?;
    trainer.set_env_config(ctx.opts.env.clone());
    let state = trainer.run(ctx.stop.clone()).await.with_context(what)?;
    if ctx.stop.load(Ordering::SeqCst) {
        bail!("stopped during {} (checkpoint kept); run the same command again to continue", what());
    }
    let t =
        trainer.evaluate_test(ctx.test_episodes).await.with_context(|| format!("{}: test split", what()))?;
    let ms = read_metrics(&dir.join(METRICS_FILE))?;
    let curve: Vec<(u64, f64)> = ms.iter().filter_map(|m| m.eval_success.map(|s| (m.env_steps, s))).collect();
    let Some(&(_, final_success)) = curve.last() else {
        bail!("{}: the run has no evaluation", dir.display());
    };
    let test = TestResult {
        successes: t.successes,
        episodes: t.episodes,
        first_seed: TEST_SEEDS,
        per_task: ctx.test_episodes,
        won: Some(t.won),
    };
    let cell = Cell {
        task: task.to_string(),
        algo: algo.to_string(),
        seed,
        clone_seed: id.clone.tag,
        curve,
        final_success,
        env_steps: state.env_steps,
        wall_secs: state.wall_secs,
        test: Some(test),
        sft: sft_figures(cfg, dir, id.basis)?,
    };
    crate::train::checkpoint::write_file_atomically(
        &dir.join(CELL_FILE),
        serde_json::to_string_pretty(&cell)?.as_bytes(),
    )
}

/// The cloning figures of a run with `[sft]`: its epochs, their mean time (`sft.jsonl`'s
/// `secs`), and its demonstrations (`sft.dir`, or the oracle's in `demos/`).
fn sft_figures(cfg: &TrainConfig, dir: &Path, basis: Option<String>) -> Result<Option<SftFigures>> {
    let Some(sft) = &cfg.sft else { return Ok(None) };
    let demos = sft.dir.clone().unwrap_or_else(|| dir.join("demos"));
    let set = crate::rollout::TrajectorySet::read(&demos)?;
    let secs: Vec<f64> = std::fs::read_to_string(dir.join("sft.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["secs"].as_f64())
        .collect();
    Ok(Some(SftFigures {
        epochs: sft.epochs,
        start_epoch: sft.start_epoch,
        secs_per_epoch: (!secs.is_empty()).then(|| secs.iter().sum::<f64>() / secs.len() as f64),
        demo_episodes: set.trajectories.len(),
        demo_env_steps: set.trajectories.iter().map(|t| t.trajectory.steps.len() as u64).sum(),
        basis,
    }))
}

/// The cell in `dir`, if it is done.
fn read_cell(dir: &Path) -> Result<Option<Cell>> {
    let f = dir.join(CELL_FILE);
    if !f.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
    Ok(Some(serde_json::from_str(&text).with_context(|| format!("{}", f.display()))?))
}

/// Every finished cell under `out` (`TASK/CELL/cell.json`), in a stable order.
pub fn read_cells(out: &Path) -> Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for task in std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))?.flatten() {
        let Ok(runs) = std::fs::read_dir(task.path()) else { continue };
        for run in runs.flatten() {
            cells.extend(read_cell(&run.path())?);
        }
    }
    cells.sort_by(|a: &Cell, b: &Cell| {
        (&a.task, &a.algo, a.clone_seed, a.seed).cmp(&(&b.task, &b.algo, b.clone_seed, b.seed))
    });
    Ok(cells)
}

#[cfg(test)]
#[path = "cell_tests.rs"]
mod tests;
