//! The benchmark plan (TOML) and the names of its cells.

use crate::train::config::{AlgoKind, TrainConfig};
use anyhow::{ensure, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name of a clone cell, and of the more-behaviour-cloning baseline (reserved: no
/// algorithm may be called so).
pub const CLONE: &str = "clone";
/// See [`CLONE`].
pub const MORE_SFT: &str = "more-sft";

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
    /// Seeds of the clones: each makes its own clone with the task config's `[sft]` and
    /// `run.seed` = that seed, which draws the training seeds its oracle demonstrations
    /// are recorded on, the order of its epochs' shuffles (and each pass's randomness),
    /// and its initial weights; every algorithm × training seed then runs from every
    /// clone. Absent: one clone with the config's own `run.seed` (cells `clone`,
    /// `ALGO-sS`; with the key they are `clone-cK`, `ALGO-cK-sS`).
    #[serde(default)]
    pub clone_seeds: Option<Vec<u64>>,
    /// The more-behaviour-cloning baseline beside the RL cells (default true): per clone,
    /// the clone trained more epochs of its own `[sft]` on its own demonstrations.
    #[serde(default = "yes")]
    pub more_sft: bool,
    /// Most extra epochs of the baseline (default 20).
    #[serde(default = "default_more_sft_max_epochs")]
    pub more_sft_max_epochs: usize,
    /// Extra epochs of the baseline when no RL cell of its clone has finished (else they
    /// come from the RL cells' wall-clock; without this key the baseline waits for them).
    #[serde(default)]
    pub more_sft_epochs: Option<usize>,
    /// Test-split episodes per task every cell ends with (default 100): seeds from
    /// [`crate::train::seeds::TEST_SEEDS`], the same for every cell.
    #[serde(default = "default_test_episodes")]
    pub test_episodes: usize,
    /// Held-out success the "env steps to" column measures (default 0.8).
    #[serde(default = "default_target")]
    pub target: f64,
    /// `[algo]` keys per algorithm, for every task (`[overrides.ppo] ppo = { critic_warmup = 2 }`).
    #[serde(default)]
    pub overrides: BTreeMap<String, toml::Table>,
    /// The tasks.
    pub tasks: Vec<PlanTask>,
}

fn yes() -> bool {
    true
}
fn default_more_sft_max_epochs() -> usize {
    20
}
fn default_test_episodes() -> usize {
    100
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
    /// `[tasks] sampling` of this task's RL cells, over the config's (`"uniform"` or
    /// `"progress"`): two plan tasks on one config compare the curricula from the same
    /// clones. The clone and the baseline do not sample tasks.
    #[serde(default)]
    pub sampling: Option<crate::train::curriculum::TaskSampling>,
}

/// One clone of a task: its `run.seed`, and its tag in cell names (`None` without
/// `clone_seeds`: the task's one clone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloneId {
    /// `run.seed` of its cloning run.
    pub seed: u64,
    /// `Some(seed)` when the plan lists clone seeds.
    pub tag: Option<u64>,
}

impl CloneId {
    /// The clone's cell: `clone` or `clone-cK`.
    pub fn clone_cell(&self) -> String {
        format!("{CLONE}{}", self.suffix())
    }

    /// An RL cell from this clone: `ALGO-sS` or `ALGO-cK-sS`.
    pub fn rl_cell(&self, algo: &str, seed: u64) -> String {
        format!("{algo}{}-s{seed}", self.suffix())
    }

    /// The baseline's cell: `more-sft` or `more-sft-cK`.
    pub fn more_sft_cell(&self) -> String {
        format!("{MORE_SFT}{}", self.suffix())
    }

    fn suffix(&self) -> String {
        self.tag.map(|k| format!("-c{k}")).unwrap_or_default()
    }
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
        for t in &plan.tasks {
            t.check()?;
        }
        Ok(plan)
    }

    /// The clones of a task whose config has `run.seed` = `config_seed`.
    pub fn clones(&self, config_seed: u64) -> Vec<CloneId> {
        match &self.clone_seeds {
            Some(seeds) => seeds.iter().map(|&k| CloneId { seed: k, tag: Some(k) }).collect(),
            None => vec![CloneId { seed: config_seed, tag: None }],
        }
    }

    /// Every cell of one task's clone, in the order they run: the clone, the RL cells,
    /// the baseline (when on).
    pub fn cells_of(&self, c: &CloneId) -> Vec<String> {
        let rl = self.algos.iter().flat_map(|a| self.seeds.iter().map(move |&s| c.rl_cell(a, s)));
        let more = self.more_sft.then(|| c.more_sft_cell());
        std::iter::once(c.clone_cell()).chain(rl).chain(more).collect()
    }

    /// Every `TASK/CELL` of the plan (the clone seeds' names do not depend on configs).
    pub fn all_cells(&self) -> Vec<String> {
        // Without clone_seeds the one clone's name holds no seed: any stands in.
        let tags = self.clones(0);
        self.tasks
            .iter()
            .flat_map(|t| tags.iter().flat_map(|c| self.cells_of(c)).map(move |c| format!("{}/{c}", t.name)))
            .collect()
    }

    /// The checks that need no task config.
    pub(super) fn check(&self) -> Result<()> {
        ensure!(self.env_steps >= 1, "plan: env_steps must be at least 1");
        ensure!(!self.seeds.is_empty(), "plan: seeds must list at least one training seed");
        if let Some(c) = &self.clone_seeds {
            ensure!(
                !c.is_empty(),
                "plan: clone_seeds is empty: list at least one clone seed (e.g. clone_seeds = [0, 1, 2]), \
                 or leave the key out for one clone with the task config's run.seed"
            );
            let mut seen = std::collections::BTreeSet::new();
            for k in c {
                ensure!(seen.insert(k), "plan: clone_seeds lists {k} twice: each clone seed once");
            }
        }
        ensure!(
            self.test_episodes >= 1,
            "plan: test_episodes must be at least 1 (the test-split episodes per task every cell ends \
             with; leave it out for 100)"
        );
        ensure!(
            self.more_sft_max_epochs >= 1,
            "plan: more_sft_max_epochs must be at least 1 (or set more_sft = false to skip the baseline)"
        );
        ensure!(
            self.more_sft_epochs != Some(0),
            "plan: more_sft_epochs must be at least 1 (or set more_sft = false to skip the baseline)"
        );
        ensure!(!self.tasks.is_empty(), "plan: add at least one [[tasks]] entry");
        ensure!((0.0..=1.0).contains(&self.target), "plan: target must be in [0, 1], got {}", self.target);
        ensure!(!self.algos.is_empty(), "plan: algos must list at least one algorithm");
        let names: Vec<&str> = self.algos.iter().map(String::as_str).collect();
        for a in &self.algos {
            ensure!(
                a != MORE_SFT && a != CLONE,
                "plan: algos: {a:?} is not an algorithm but a cell the benchmark makes itself (the clone, \
                 and the more-behaviour-cloning baseline, on unless more_sft = false): remove it from algos"
            );
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
        }
        Ok(())
    }

    /// Every override table must be `[algo]` keys, so a misspelt key fails when the plan is
    /// read, not when its first cell starts.
    pub(super) fn check_algo_keys(&self) -> Result<()> {
        let plan = self.overrides.iter().map(|(a, o)| (format!("[overrides.{a}]"), Some(a), o));
        let tasks = self.tasks.iter().flat_map(|t| {
            let per_algo = t
                .overrides
                .iter()
                .map(|(a, o)| (format!("task {:?} [tasks.overrides.{a}]", t.name), Some(a), o));
            std::iter::once((format!("task {:?} [tasks.algo]", t.name), None, &t.algo)).chain(per_algo)
        });
        for (place, algo, table) in plan.chain(tasks) {
            // An algorithm's overrides are read under its kind, so its own table
            // (`ppo = { critic_warmup = 2 }`) is accepted there.
            let mut table = table.clone();
            if let Some(a) = algo {
                table.entry("kind").or_insert_with(|| a.as_str().into());
            }
            // Through text, so the error quotes the offending line.
            let text = toml::to_string(&table)?;
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

impl PlanTask {
    /// The task's config must clone and evaluate.
    fn check(&self) -> Result<()> {
        let cfg = TrainConfig::load(&self.config).with_context(|| format!("plan task {:?}", self.name))?;
        ensure!(
            cfg.sft.is_some(),
            "plan task {:?}: {} has no [sft]; the benchmark measures algorithms from a behaviour-cloned policy",
            self.name,
            self.config.display()
        );
        ensure!(
            cfg.eval.interval > 0,
            "plan task {:?}: {} has eval.interval = 0; the success curves come from the trainer's evaluations",
            self.name,
            self.config.display()
        );
        Ok(())
    }
}

/// `algo.kind` from its TOML name, with the valid names in the error.
fn parse_kind(name: &str) -> Result<AlgoKind> {
    let v = toml::Value::String(name.to_string());
    AlgoKind::deserialize(v).map_err(|e| anyhow::anyhow!("plan: algos: {e}"))
}
