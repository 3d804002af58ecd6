//! `TrainConfig`: the TOML file `guirl train` reads. Every table rejects unknown keys;
//! [`TrainConfig::validate`] rejects out-of-range values naming the key (`algo.clip_low
//! must be in (0, 1), got 1.5`). [`TrainConfig::to_toml`] writes the resolved config
//! (defaults filled in) into the run folder. [`EXAMPLE_CONFIG`] shows every key.

use super::objective::LossAgg;
use crate::policy::device::DeviceName;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use super::algo_config::{
    AlgoConfig, AlgoKind, AlgoVariant, DynamicSampling, GigpoConfig, GspoConfig, GspoLevel, KlMode,
    MinibatchOrder, OverlongPenalty, PpoConfig,
};
pub use super::model::{ModelConfig, ModelKind, ModelPreset, ModelVariant};
pub use super::model_kind::SmallModel;

pub use super::example_config::{example_config, with_model_kind, EXAMPLE_CONFIG};

/// The whole training configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
    /// `[run]`.
    pub run: RunConfig,
    /// `[tasks]`.
    pub tasks: TasksConfig,
    /// `[model]`.
    #[serde(default)]
    pub model: ModelConfig,
    /// `[algo]`.
    #[serde(default)]
    pub algo: AlgoConfig,
    /// `[rollout]`.
    #[serde(default)]
    pub rollout: RolloutConfig,
    /// `[eval]`.
    #[serde(default)]
    pub eval: EvalConfig,
    /// `[checkpoint]`.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// `[sft]`: optional supervised warm start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sft: Option<SftConfig>,
}

fn default_device() -> String {
    "cpu".into()
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Run name: the folder `<dir>/<name>`.
    pub name: String,
    /// Seed of everything random in the trainer (sampling, seed choice, init).
    #[serde(default)]
    pub seed: u64,
    /// Collect-and-update rounds.
    pub iterations: u64,
    /// Stop after the iteration in which the run's env steps reach this many (`iterations`
    /// stays the upper bound); that iteration is evaluated and checkpointed like the last.
    /// Comparisons of algorithms give each the same env-step budget this way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_env_steps: Option<u64>,
    /// Parent folder of run folders (default `runs`).
    #[serde(default = "default_runs_dir")]
    pub dir: PathBuf,
    /// Also write the metrics (and a few screenshots) as TensorBoard event files in
    /// `RUN/tensorboard/` (default true; see [`super::tensorboard`]).
    #[serde(default = "default_tensorboard")]
    pub tensorboard: bool,
}

fn default_runs_dir() -> PathBuf {
    "runs".into()
}

fn default_tensorboard() -> bool {
    true
}

/// `[tasks]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksConfig {
    /// Task ids (as `guirl run` takes them).
    pub ids: Vec<String>,
    /// Seeds rollouts are drawn from, `[start, end)` (default 0..1 000 000).
    #[serde(default = "default_train_seeds")]
    pub train_seeds: SeedRange,
    /// Held-out seeds for evaluation, `start..start+count` (default 1 000 000, 100).
    #[serde(default = "default_eval_seeds")]
    pub eval_seeds: EvalSeeds,
    /// How each group's task is drawn: `uniform` (default) or `progress` (by recent
    /// training success, [`super::curriculum`]).
    #[serde(default)]
    pub sampling: super::curriculum::TaskSampling,
    /// Under `progress`, the share of draws spread evenly over the tasks (default 0.2).
    #[serde(default = "default_progress_mix")]
    pub progress_mix: f64,
}

fn default_progress_mix() -> f64 {
    0.2
}

/// A half-open seed range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeedRange {
    /// First seed.
    pub start: u64,
    /// One past the last seed.
    pub end: u64,
}

/// `count` seeds from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSeeds {
    /// First seed.
    pub start: u64,
    /// How many.
    pub count: u64,
}

fn default_train_seeds() -> SeedRange {
    SeedRange::default()
}

fn default_eval_seeds() -> EvalSeeds {
    EvalSeeds::default()
}

/// Each field defaults on its own: `train_seeds = { start = 5 }` keeps `end`'s default.
impl Default for SeedRange {
    fn default() -> Self {
        SeedRange { start: 0, end: 1_000_000 }
    }
}

/// Each field defaults on its own, as [`SeedRange`]'s.
impl Default for EvalSeeds {
    fn default() -> Self {
        EvalSeeds { start: 1_000_000, count: 100 }
    }
}

/// `[rollout]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Browsers in parallel.
    pub envs: usize,
    /// Step limit per episode.
    pub max_steps: u32,
    /// How many updates old the weights that collect an iteration's rollouts may be: 0
    /// (default) takes turns, collect then update; 1 collects iteration k + 1 with the
    /// weights update k starts from while update k runs (see
    /// [`super::trainer::overlap`] and `docs/rollout-overlap.md`).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub max_staleness: u32,
    /// Keep every Nth iteration's rollouts as a trajectory set in the run's
    /// `rollouts/iter-NNNNNN/` (frames, groups, tokens and log-probs; `guirl view`, `replay`
    /// and `export` read it); 0 (default) keeps none.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub record_every: u64,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig { envs: 4, max_steps: 10, max_staleness: 0, record_every: 0 }
    }
}

/// `[eval]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Iterations between evaluations (0: never).
    pub interval: u64,
    /// Episodes per evaluation, on the eval seeds.
    pub episodes: usize,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig { interval: 10, episodes: 50 }
    }
}

/// `[checkpoint]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Iterations between checkpoints (0: only at the end).
    pub interval: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig { interval: 20 }
    }
}

/// `[sft]`: supervised training on recorded trajectories before RL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// A trajectory set folder (recorded demonstrations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Or: record this many oracle episodes per task first (on training seeds, into the
    /// run's `demos/` folder), so a recipe needs nothing prepared by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oracle_episodes: Option<usize>,
    /// Per-task counts that replace `oracle_episodes` for the tasks named (ids as in
    /// `[tasks] ids`), for a task whose skill needs more demonstrations than the rest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub oracle_episodes_for: BTreeMap<String, usize>,
    /// Passes over the set (default 3).
    #[serde(default = "default_sft_epochs")]
    pub epochs: usize,
    /// Learning rate (default 1e-4).
    #[serde(default = "default_sft_lr")]
    pub lr: f64,
    /// Samples per optimizer step (default 16).
    #[serde(default = "default_sft_minibatch")]
    pub minibatch: usize,
    /// Continue cloning rather than start it (default 0: start). `[model] init` is then a
    /// clone's checkpoint (its `iter-000000`) made with this `[sft]` on these same
    /// demonstrations (`dir`: the clone run's `demos/`) and the same `run.seed`, for
    /// `start_epoch` epochs: this run trains epochs `start_epoch + 1 ..= start_epoch +
    /// epochs` with the shuffles a longer run would have drawn, and its AdamW moments
    /// from the clone's `sft_optimizer.safetensors`, so N more epochs here are the clone
    /// trained N more epochs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_epoch: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn default_sft_epochs() -> usize {
    3
}
fn default_sft_lr() -> f64 {
    1e-4
}
fn default_sft_minibatch() -> usize {
    16
}

impl TrainConfig {
    /// Parse TOML text (no validation). Errors name the unknown key and its table; an
    /// `[algo]` or `[model]` of the old form is refused with its new form (see
    /// [`super::algo_migrate`], [`super::model_migrate`]).
    pub fn parse(text: &str) -> anyhow::Result<TrainConfig> {
        let old: Vec<String> = [
            old_form(text, "algo", super::algo_migrate::old_keys)
                .map(|a| super::algo_migrate::old_form_error(&a)),
            old_form(text, "model", super::model_migrate::old_keys)
                .map(|m| super::model_migrate::old_form_error(&m)),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !old.is_empty() {
            bail!("{}", old.join("\n\n"));
        }
        toml::from_str(text).map_err(|e| super::config_errors::parse_error(text, e))
    }

    /// Parse TOML text as [`TrainConfig::parse`] does, but read an old-form `[algo]` or
    /// `[model]` as its new form instead of refusing it. Returns what moved (empty for a
    /// new-form config; [`super::model_migrate::migrated_tables`] names the tables), for the caller to announce:
    /// `--resume` reads a run folder's saved config this way. A small policy of guirl 0.1
    /// that the new form would read as another policy is refused, naming the guirl that
    /// reads it ([`super::model_migrate::resume_refusal`]).
    pub fn parse_migrating(text: &str) -> anyhow::Result<(TrainConfig, Vec<String>)> {
        if let Some(refusal) = old_form(text, "model", super::model_migrate::old_keys)
            .and_then(|m| super::model_migrate::resume_refusal(&m))
        {
            bail!("{refusal}");
        }
        let algo =
            old_form(text, "algo", super::algo_migrate::old_keys).map(|a| super::algo_migrate::migrate(&a));
        let model = old_form(text, "model", super::model_migrate::old_keys)
            .map(|m| super::model_migrate::migrate(&m));
        if algo.is_none() && model.is_none() {
            return Ok((TrainConfig::parse(text)?, Vec::new()));
        }
        let mut doc: toml::Table = toml::from_str(text)?;
        let mut notes = Vec::new();
        for (name, m) in [("algo", algo), ("model", model)] {
            if let Some(m) = m {
                doc.insert(name.into(), toml::Value::Table(m.table));
                notes.extend(m.notes);
            }
        }
        Ok((TrainConfig::parse(&toml::to_string(&doc)?)?, notes))
    }

    /// [`TrainConfig::load`] through [`TrainConfig::parse_migrating`]: the config and what
    /// moved in its `[algo]` and `[model]`.
    pub fn load_migrating(path: &Path) -> anyhow::Result<(TrainConfig, Vec<String>)> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read train config {}", path.display()))?;
        let (mut c, notes) =
            TrainConfig::parse_migrating(&text).with_context(|| format!("in {}", path.display()))?;
        c.resolve();
        c.validate().with_context(|| format!("invalid train config {}", path.display()))?;
        Ok((c, notes))
    }

    /// Read and parse a config file as written: no defaults resolved, no validation.
    pub fn load_written(path: &Path) -> anyhow::Result<TrainConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read train config {}", path.display()))?;
        TrainConfig::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Read, resolve defaults and validate a config file.
    pub fn load(path: &Path) -> anyhow::Result<TrainConfig> {
        let mut c = TrainConfig::load_written(path)?;
        c.resolve();
        c.validate().with_context(|| format!("invalid train config {}", path.display()))?;
        Ok(c)
    }

    /// Fill in defaults that depend on other keys (clip ranges by algorithm).
    pub fn resolve(&mut self) {
        let a = &mut self.algo;
        a.clip_low = Some(a.clip_low());
        a.clip_high = Some(a.clip_high());
        if let Some(p) = &mut a.overlong_penalty {
            p.window = Some(p.window(self.rollout.max_steps));
        }
        a.loss_agg = Some(a.loss_agg());
        // written where it is used, so a run folder says the cap its samples were weighted by
        if self.rollout.max_staleness > 0 {
            a.behaviour_weight_cap = Some(a.behaviour_weight_cap());
        }
        if a.kind().group_normalized() {
            a.adv_std = Some(a.adv_std());
        }
        if a.loss_agg == Some(LossAgg::SeqMeanTokenSumNorm) && a.loss_agg_norm.is_none() {
            // Dr. GRPO's constant: the most tokens an action can have.
            a.loss_agg_norm = match &self.model.variant {
                ModelVariant::Qwen(b) => Some(b.max_new_tokens as f64),
                ModelVariant::Small(s) => s.vlm_config().ok().map(|v| v.actions.max_action_tokens as f64),
            };
        }
    }

    /// The config as TOML (write the resolved one into the run folder).
    pub fn to_toml(&self) -> anyhow::Result<String> {
        Ok(toml::to_string_pretty(self)?)
    }

    /// The run folder, `<run.dir>/<run.name>`.
    pub fn run_dir(&self) -> PathBuf {
        self.run.dir.join(&self.run.name)
    }

    /// The candle device named by `device`.
    pub fn candle_device(&self) -> anyhow::Result<candle_core::Device> {
        self.candle_device_for_rank(0)
    }

    /// The device of the process with this `LOCAL_RANK` in a data-parallel run: `cuda:N`
    /// becomes `cuda:(N + local_rank)`, one GPU per process; `cpu` stays the CPU.
    pub fn candle_device_for_rank(&self, local_rank: usize) -> anyhow::Result<candle_core::Device> {
        match self.device.parse::<DeviceName>()? {
            DeviceName::Cpu => Ok(candle_core::Device::Cpu),
            DeviceName::Cuda(n) => crate::policy::device::cuda(n + local_rank).with_context(|| {
                let rank = match local_rank {
                    0 => String::new(),
                    r => format!(" (GPU {} for LOCAL_RANK {r}: one GPU per process)", n + r),
                };
                format!(
                    "device = \"{}\"{rank}: no CUDA device (was guirl built with --features cuda?)",
                    self.device
                )
            }),
        }
    }

    /// Check every value; the error lists each bad key by its dotted name.
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut errs: Vec<String> = Vec::new();
        let mut check = |ok: bool, msg: String| {
            if !ok {
                errs.push(msg)
            }
        };
        if let Err(e) = self.device.parse::<DeviceName>() {
            check(false, e.to_string());
        }
        // [run]
        let r = &self.run;
        check(!r.name.trim().is_empty(), "run.name must not be empty".into());
        check(
            !r.name.contains(['/', '\\']) && r.name != "." && r.name != "..",
            format!("run.name must be a folder name, not a path, got {:?}", r.name),
        );
        check(
            r.iterations >= 1 || self.sft.is_some(),
            "run.iterations must be at least 1 (0 only with [sft]: behaviour cloning alone)".into(),
        );
        check(
            self.sft.is_none() || self.algo.success_replay_demos.is_none(),
            "algo.success_replay_demos is for runs that start from a clone through [model] init; \
             with [sft] the buffer is seeded from the demonstrations being cloned: leave it out"
                .into(),
        );
        check(
            r.max_env_steps != Some(0),
            "run.max_env_steps must be at least 1 (leave it out for no budget)".into(),
        );
        // [tasks]
        let t = &self.tasks;
        check(!t.ids.is_empty(), "tasks.ids must list at least one task".into());
        check(t.ids.iter().all(|i| !i.trim().is_empty()), "tasks.ids must not contain an empty id".into());
        let twice = t.ids.iter().enumerate().find_map(|(k, i)| t.ids[..k].contains(i).then_some(i));
        check(
            twice.is_none(),
            format!(
                "tasks.ids lists {:?} twice: list each task once (a repeat would double its share of the draws \
                 and of evaluation; tasks.sampling sets how draws are shared)",
                twice.map_or("", |s| s.as_str())
            ),
        );
        let (tr, ev) = (t.train_seeds, t.eval_seeds);
        check(
            tr.start < tr.end,
            format!("tasks.train_seeds must have start < end, got {}..{}", tr.start, tr.end),
        );
        check(ev.count >= 1, "tasks.eval_seeds.count must be at least 1".into());
        check(
            (0.0..=1.0).contains(&t.progress_mix),
            format!(
                "tasks.progress_mix must be in [0, 1] (the uniform share of draws), got {}",
                t.progress_mix
            ),
        );
        let ev_end = ev.start.saturating_add(ev.count);
        let test = super::seeds::TEST_SEEDS;
        for (key, end) in [("train_seeds", tr.end), ("eval_seeds", ev_end)] {
            check(
                end <= test,
                format!(
                    "tasks.{key} reaches the test split (seeds from {test}): no config may train or validate \
                     on it, so figures measured there stay unbiased; use seeds below {test}"
                ),
            );
        }
        check(
            ev_end <= tr.start || ev.start >= tr.end,
            format!(
                "tasks.eval_seeds ({}..{}) overlaps tasks.train_seeds ({}..{}): eval seeds must be held out",
                ev.start, ev_end, tr.start, tr.end
            ),
        );
        // [model]
        self.model.check(&mut check);
        // [algo]
        self.algo.check(r.iterations, &mut check);
        // [rollout]
        check(self.rollout.envs >= 1, "rollout.envs must be at least 1".into());
        check(self.rollout.max_steps >= 1, "rollout.max_steps must be at least 1".into());
        check(
            self.rollout.max_staleness <= 1,
            format!(
                "rollout.max_staleness must be 0 (collect, then update) or 1 (collect the next iteration \
                 during the update), got {}: larger bounds are not built (docs/rollout-overlap.md says why)",
                self.rollout.max_staleness
            ),
        );
        // The window counts steps before the step limit, a [rollout] key.
        if let Some(w) = self.algo.overlong_penalty.and_then(|p| p.window) {
            check(
                w >= 1 && w <= self.rollout.max_steps,
                format!(
                    "algo.overlong_penalty.window must be in [1, rollout.max_steps = {}], got {w}",
                    self.rollout.max_steps
                ),
            );
        }
        // [eval]
        check(
            self.eval.interval == 0 || self.eval.episodes >= 1,
            "eval.episodes must be at least 1 (or set eval.interval = 0 to never evaluate)".into(),
        );
        // [sft]
        if let Some(s) = &self.sft {
            check(
                s.dir.is_some() != s.oracle_episodes.is_some(),
                "[sft] needs exactly one of sft.dir (recorded demonstrations) or sft.oracle_episodes".into(),
            );
            check(
                s.dir.as_ref().is_none_or(|d| !d.as_os_str().is_empty()),
                "sft.dir must not be empty".into(),
            );
            check(s.oracle_episodes != Some(0), "sft.oracle_episodes must be at least 1".into());
            // Refused here, before any browser starts, as `guirl run --policy oracle` does.
            if s.oracle_episodes.is_some() {
                for id in self.tasks.ids.iter().filter(|id| !crate::policy::oracle::has_oracle(id)) {
                    // a mistyped id is said as such, with the closest ids, not as lacking an oracle
                    let why = match crate::tasks::load_task(id) {
                        Err(e) => format!("{e:#}"),
                        Ok(_) => crate::policy::oracle::no_oracle_message(
                            id,
                            "record demonstrations for it and set sft.dir instead of sft.oracle_episodes",
                        ),
                    };
                    check(false, why);
                }
            }
            check(
                s.oracle_episodes_for.is_empty() || s.oracle_episodes.is_some(),
                "sft.oracle_episodes_for needs sft.oracle_episodes (the count for the other tasks)".into(),
            );
            for (id, &n) in &s.oracle_episodes_for {
                check(
                    self.tasks.ids.contains(id),
                    format!("sft.oracle_episodes_for names {id:?}, which is not in [tasks] ids (correct it or add the task there)"),
                );
                check(n >= 1, format!("sft.oracle_episodes_for.{id:?} must be at least 1"));
            }
            check(s.epochs >= 1, "sft.epochs must be at least 1".into());
            check(s.lr > 0.0 && s.lr <= 1.0, format!("sft.lr must be in (0, 1], got {}", s.lr));
            check(s.minibatch >= 1, "sft.minibatch must be at least 1".into());
            check(
                s.start_epoch == 0 || self.model.init.is_some(),
                "sft.start_epoch continues the cloning of the policy in [model] init: set model.init to that \
                 clone's checkpoint (RUN/checkpoints/iter-000000), or remove sft.start_epoch"
                    .into(),
            );
        }
        if errs.is_empty() {
            Ok(())
        } else {
            bail!("{}", errs.join("\n"))
        }
    }
}

/// The table `name` of `text` when `old_keys` finds keys of its old form in it (`None` for
/// the new form, and for text that is not TOML: the parse then says why).
fn old_form(text: &str, name: &str, old_keys: fn(&toml::Table) -> Vec<String>) -> Option<toml::Table> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let table = doc.get(name)?.as_table()?;
    (!old_keys(table).is_empty()).then(|| table.clone())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
