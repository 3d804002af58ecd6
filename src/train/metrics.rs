//! Per-iteration training metrics: one JSON object a line in `metrics.jsonl`, flushed
//! after each line so a killed run leaves every finished iteration readable.

use super::advantage::AdvantageStats;
use super::objective::LossStats;
use super::tensorboard::EventWriter;
use crate::rollout::Recorded;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The fields of [`IterationMetrics`] that measure wall-clock time: they differ between
/// runs that are otherwise bit for bit the same.
pub const CLOCK_FIELDS: &[&str] = &[
    "wall_secs",
    "rollout_secs",
    "update_secs",
    "train_tokens_per_sec",
    "env_steps_per_sec",
    "policy_secs",
    "prefill_secs",
    "decode_secs",
    "score_secs",
    "switch_secs",
    "env_wait_secs",
    "env_action_secs",
    "env_settle_secs",
    "env_screenshot_secs",
];

/// Everything logged about one iteration (collect + update). Missing fields read as 0 /
/// `None`, so older files stay readable when fields are added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IterationMetrics {
    /// Iteration, from 0.
    pub iteration: u64,
    /// Environment steps taken so far (all iterations, eval excluded).
    pub env_steps: u64,
    /// Episodes collected so far.
    pub episodes: u64,
    /// Mean episode reward this iteration (env errors excluded).
    pub reward_mean: f64,
    /// Population std of the episode rewards.
    pub reward_std: f64,
    /// Fraction of episodes (env errors excluded) that ended in success.
    pub success_rate: f64,
    /// Mean over groups of the group's mean reward (the GRPO baseline; PPO: the mean
    /// value V(s_t) of the steps trained on).
    pub baseline_mean: f64,
    /// Mean of `R − baseline` (0 up to rounding; PPO: of the GAE advantages before
    /// whitening).
    pub relative_reward_mean: f64,
    /// Std of `R − baseline` (PPO: of the GAE advantages before whitening).
    pub relative_reward_std: f64,
    /// Mean advantage.
    pub adv_mean: f64,
    /// Std of the advantages.
    pub adv_std: f64,
    /// Policy term of the loss (mean over the update's minibatches).
    pub policy_loss: f64,
    /// Total loss (mean over minibatches).
    pub loss: f64,
    /// KL(π ‖ π_ref), the configured estimator (k3 by default), token-mean; with
    /// `kl_mode = "reward"`, over the rollout's tokens.
    pub kl: f64,
    /// β used this iteration (moves when `kl_target` is set).
    pub kl_coef: f64,
    /// KL(π_old ‖ π) at the end of the update: how far the policy moved.
    pub approx_kl_old: f64,
    /// Token-mean entropy.
    pub entropy: f64,
    /// Fraction of tokens (GSPO: sequences) on the clipped branch.
    pub clip_frac: f64,
    /// Fraction of tokens (GSPO: actions) held at `c·A` by the dual clip.
    pub dual_clip_frac: f64,
    /// Mean importance ratio.
    pub ratio_mean: f64,
    /// PPO: the critic's value loss (mean over its minibatches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_loss: Option<f64>,
    /// PPO: `1 − Var(R − V) / Var(R)` of the values at collection against the GAE returns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explained_variance: Option<f64>,
    /// PPO: mean value at collection of the steps trained on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_mean: Option<f64>,
    /// PPO: mean GAE return of those steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_mean: Option<f64>,
    /// PPO: fraction of samples on the clipped branch of the value loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_clip_frac: Option<f64>,
    /// PPO: the critic's mean gradient norm before clipping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_grad_norm: Option<f64>,
    /// Rollouts that ended with the agent's `done()` before the task did (trained on the
    /// give-up reward).
    pub give_ups: u64,
    /// Minibatches skipped for a non-finite loss or gradient norm (no optimizer step).
    pub skipped_steps: u64,
    /// Minibatches whose gradient was exactly zero (every advantage 0 and no KL or entropy
    /// term): not stepped, so AdamW's momentum does not move the policy without a signal.
    #[serde(default)]
    pub flat_steps: u64,
    /// 1 when `[algo] target_kl` stopped this iteration's update early (a minibatch's
    /// approximate KL(π_old ‖ π) exceeded 1.5 × target_kl), else 0.
    pub kl_early_stop: u64,
    /// The epoch it stopped in, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kl_stop_epoch: Option<u64>,
    /// The minibatch of that epoch it stopped at, from 1 (not stepped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kl_stop_minibatch: Option<u64>,
    /// That minibatch's approximate KL(π_old ‖ π).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kl_stop_approx_kl: Option<f64>,
    /// How many updates old the weights that collected this iteration's rollouts were
    /// (`[rollout] max_staleness = 1`: 1 from the second iteration on); logged only when
    /// `max_staleness` is above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staleness: Option<u64>,
    /// Token-mean of the decoupled objective's weights `min(π_prox / π_behav, cap)` (only
    /// for rollouts of older weights; see `decoupled.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behaviour_weight_mean: Option<f64>,
    /// Fraction of tokens whose weight `algo.behaviour_weight_cap` truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behaviour_weight_capped: Option<f64>,
    /// Mean importance ratio of the first minibatch, before any update: 1 up to float
    /// error when the scored tokens are the sampled ones.
    pub first_ratio_mean: f64,
    /// Mean gradient norm before clipping, over the optimizer steps.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Optimizer steps taken this iteration.
    pub optimizer_steps: u64,
    /// Mean episode length, steps.
    pub episode_len: f64,
    /// Groups collected this iteration that carry no signal: the estimator gives every
    /// member advantage 0, so no policy gradient (`advantage::carries_signal`; judged
    /// before the overlong penalty and any KL shaping). Under an episode-level
    /// group-relative estimator, the groups whose rewards are all equal; under γ < 1 step
    /// credit, GiGPO's step groups or PPO's critic, equal rewards can still carry signal.
    pub all_equal_groups: u64,
    /// Groups in the batch trained on.
    pub groups: u64,
    /// Groups collected this iteration, every collection (dynamic sampling: more than B).
    pub groups_collected: u64,
    /// Of those, groups that carry signal (the rest are `all_equal_groups`).
    pub informative_groups: u64,
    /// `informative_groups / groups_collected` (DAPO's dynamic-sampling pass rate).
    pub pass_rate: f64,
    /// Collections beyond the first (dynamic sampling).
    pub extra_collections: u64,
    /// Env steps taken this iteration, extra collections included (counted in `env_steps`).
    pub iteration_env_steps: u64,
    /// Of those, the extra collections' steps.
    pub extra_env_steps: u64,
    /// Successes replayed into groups whose rollouts all failed (`algo.success_replay`);
    /// they cost no env steps and are not in the rollout figures above.
    pub replayed: u64,
    /// Rollouts branched from mid-episode states (`algo.branch`); not in the rollout
    /// figures above. Their replayed steps are env steps (in `iteration_env_steps`).
    pub branched: u64,
    /// Steps replayed to bring branched rollouts to their branch points.
    pub branch_replayed_steps: u64,
    /// Branched rollouts that ended as an infrastructure failure (a replayed prefix that
    /// diverged from its recording among them).
    pub branch_failures: u64,
    /// Groups that had no branch point (e.g. rollouts that parted at the first step).
    pub unbranched_groups: u64,
    /// Success rate of the counted branched rollouts (`None` without any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_success_rate: Option<f64>,
    /// Rollouts trained on that the overlong penalty reached.
    pub overlong_penalized: u64,
    /// Mean overlong penalty (weighted) over the rollouts trained on (≤ 0).
    pub overlong_penalty_mean: f64,
    /// Tasks with both a success check and a reward model: the fraction of this
    /// iteration's episodes where the model's verdict matched the check's (`None` without
    /// such a task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward_model_agreement: Option<f64>,
    /// GiGPO: anchor-state step groups (two or more steps from the same screenshot).
    pub step_groups: u64,
    /// Episodes left out of training this iteration because the infrastructure failed
    /// (`env_error`, `policy_error`, `judge_error`).
    pub env_errors: u64,
    /// Of those, episodes whose judge gave no verdict (`judge_error`).
    pub judge_errors: u64,
    /// Seconds the iteration waited for its rollouts (with `max_staleness = 1`, the part
    /// of their collection that the last update did not hide).
    pub rollout_secs: f64,
    /// Seconds spent scoring before the update: the reference's KL, the advantages, and
    /// (rollouts of older weights) the current weights' log-probs.
    pub score_secs: f64,
    /// Seconds spent switching weights: the copy the next collection samples with
    /// (`max_staleness = 1`).
    pub switch_secs: f64,
    /// Seconds spent in the update's optimizer steps (and the algorithm's own training).
    pub update_secs: f64,
    /// Of the collection's wall-clock, the time in the policy's calls (forward passes,
    /// sampling); in a data-parallel run one rank's, the mean over ranks.
    pub policy_secs: f64,
    /// Of `policy_secs`, for a policy that decodes token by token: running prompts.
    pub prefill_secs: f64,
    /// ... and decode steps.
    pub decode_secs: f64,
    /// Of the collection's wall-clock, the time the policy waited for envs (the
    /// collection's wall-clock less `policy_secs`).
    pub env_wait_secs: f64,
    /// The envs' action time, summed over envs (with several envs it can exceed the
    /// wall-clock).
    pub env_action_secs: f64,
    /// The envs' settle time (page settling, reward and element reads), summed over envs.
    pub env_settle_secs: f64,
    /// The envs' screenshot time (capture and decode), summed over envs.
    pub env_screenshot_secs: f64,
    /// Environment steps per second during collection.
    pub env_steps_per_sec: f64,
    /// Action tokens trained per second during the update (all epochs).
    pub train_tokens_per_sec: f64,
    /// Success rate on the held-out eval seeds, when evaluated this iteration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_success: Option<f64>,
    /// Mean eval reward, when evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_reward: Option<f64>,
    /// Eval episodes left out of `eval_success`: their browsers failed at every try
    /// (logged only when some were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_env_errors: Option<u64>,
    /// Seconds since the run started (across resumes).
    pub wall_secs: f64,
    /// With two or more tasks: each task's training success this iteration (its counted
    /// collected rollouts, dropped groups included), by task id.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub task_success: std::collections::BTreeMap<String, f64>,
    /// Under `[tasks] sampling = "progress"`: the probability each task was drawn with
    /// this iteration.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub task_weights: std::collections::BTreeMap<String, f64>,
}

impl IterationMetrics {
    /// Where the iteration's time went, for the progress line: the collection split into
    /// the policy's calls and the wait for envs, and the update.
    pub fn time_split(&self) -> String {
        let parts = format!("policy {:.1}s, env wait {:.1}s", self.policy_secs, self.env_wait_secs);
        match self.staleness {
            // collected beside the last update: the wait is what the update did not hide,
            // and the collection's own time is the parts'
            Some(s) if s > 0 => format!(
                "waited {:.1}s for the background collection ({:.1}s: {parts}) update {:.1}s",
                self.rollout_secs,
                self.policy_secs + self.env_wait_secs,
                self.update_secs
            ),
            _ => format!("collect {:.1}s ({parts}) update {:.1}s", self.rollout_secs, self.update_secs),
        }
    }

    /// Copy the advantage statistics in.
    pub fn set_advantage(&mut self, a: &AdvantageStats) {
        self.baseline_mean = a.baseline_mean;
        self.relative_reward_mean = a.relative_reward_mean;
        self.relative_reward_std = a.relative_reward_std;
        self.adv_mean = a.adv_mean;
        self.adv_std = a.adv_std;
        self.all_equal_groups = a.all_equal_groups as u64;
        self.groups = a.groups as u64;
        self.step_groups = a.step_groups as u64;
        self.env_errors = a.env_errors as u64;
    }

    /// Copy the critic's statistics in (PPO).
    pub fn set_value(&mut self, v: &super::value::ValueStats) {
        self.value_loss = Some(v.loss);
        self.explained_variance = v.explained_variance;
        self.value_mean = Some(v.value_mean);
        self.return_mean = Some(v.return_mean);
        self.value_clip_frac = Some(v.clip_frac);
        self.value_grad_norm = Some(v.grad_norm);
    }

    /// Copy loss statistics in (e.g. [`mean_loss_stats`] of the update's minibatches).
    pub fn set_loss(&mut self, l: &LossStats) {
        self.loss = l.loss;
        self.policy_loss = l.policy_loss;
        self.kl = l.kl;
        self.approx_kl_old = l.approx_kl_old;
        self.entropy = l.entropy;
        self.clip_frac = l.clip_frac;
        self.dual_clip_frac = l.dual_clip_frac;
        self.ratio_mean = l.ratio_mean;
    }
}

/// The mean of several minibatches' statistics, each weighted by its token count
/// (`tokens` is the sum).
pub fn mean_loss_stats(all: &[LossStats]) -> LossStats {
    let n: usize = all.iter().map(|s| s.tokens).sum();
    let w = |f: fn(&LossStats) -> f64| {
        if n == 0 {
            return 0.0;
        }
        all.iter().map(|s| f(s) * s.tokens as f64).sum::<f64>() / n as f64
    };
    LossStats {
        loss: w(|s| s.loss),
        policy_loss: w(|s| s.policy_loss),
        kl: w(|s| s.kl),
        entropy: w(|s| s.entropy),
        clip_frac: w(|s| s.clip_frac),
        dual_clip_frac: w(|s| s.dual_clip_frac),
        ratio_mean: w(|s| s.ratio_mean),
        approx_kl_old: w(|s| s.approx_kl_old),
        tokens: n,
    }
}

/// Appends one line per iteration to `metrics.jsonl` (and, once asked, the same to a
/// TensorBoard event file).
pub struct MetricsWriter {
    path: PathBuf,
    file: File,
    tensorboard: Option<EventWriter>,
    /// Where the TensorBoard file goes, until the first line opens it (a resume with
    /// nothing left to train writes no empty event file).
    tensorboard_dir: Option<PathBuf>,
}

impl MetricsWriter {
    /// Open (create or append to) `path`. A torn last line (a run killed mid-write) is
    /// cut off first, with a warning, so the next line is not glued onto it.
    pub fn open(path: &Path) -> anyhow::Result<MetricsWriter> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        crate::rollout::store::cut_torn_tail(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open metrics file {}", path.display()))?;
        Ok(MetricsWriter { path: path.to_path_buf(), file, tensorboard: None, tensorboard_dir: None })
    }

    /// Open `path` for a run resumed after iteration `last`: lines of later iterations
    /// (written after that checkpoint) and any torn last line are dropped first.
    pub fn resume(path: &Path, last: u64) -> anyhow::Result<MetricsWriter> {
        // Cut (and warn of) a torn line before reading: the reader skips it silently.
        crate::rollout::store::cut_torn_tail(path)?;
        if path.exists() {
            let (keep, lost): (Vec<IterationMetrics>, Vec<IterationMetrics>) =
                read_metrics(path)?.into_iter().partition(|m| m.iteration <= last);
            if let (Some(first), Some(end)) = (lost.first(), lost.last()) {
                // their weights died with the process: said, not silently logged over
                let which = match (first.iteration, end.iteration) {
                    (a, b) if a == b => format!("iteration {a} ran"),
                    (a, b) => format!("iterations {a}–{b} ran"),
                };
                tracing::warn!(
                    "{which} after the last checkpoint (iteration {last}) and died with the process: \
                     training goes on from that checkpoint (a shorter checkpoint.interval loses less)"
                );
            }
            let mut text = String::new();
            for m in &keep {
                text.push_str(&metrics_line(m)?);
            }
            super::checkpoint::write_file_atomically(path, text.as_bytes())?;
        }
        MetricsWriter::open(path)
    }

    /// Append one iteration: the whole line in one write, then fsync; then its scalars to
    /// the TensorBoard file, if one is open.
    pub fn append(&mut self, m: &IterationMetrics) -> anyhow::Result<()> {
        let line = metrics_line(m)?;
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.sync_data())
            .with_context(|| format!("cannot write metrics to {}", self.path.display()))?;
        if let Some(tb) = self.tensorboard() {
            tb.log_metrics(m.iteration, m.env_steps, metric_scalars(m), m.eval_success);
        }
        self.flush_tensorboard();
        Ok(())
    }

    /// [`MetricsWriter::append`], and on the iterations that evaluate (and the first) the
    /// first and last screenshot of the iteration's first rollout as TensorBoard images.
    /// (An evaluation keeps no frames; a training rollout's last screenshot shows what the
    /// policy did, where every evaluation's first screenshot would be the same page.)
    pub fn append_with_frames(&mut self, m: &IterationMetrics, recs: &[Recorded]) -> anyhow::Result<()> {
        if let (Some(rec), Some(tb)) = (recs.first(), self.tensorboard()) {
            if m.eval_success.is_some() || m.iteration == 1 {
                tb.log_frames(m.iteration, rec);
            }
        }
        self.append(m)
    }

    /// From now on, also write every line as scalars to a new TensorBoard event file in
    /// `dir` (see [`super::tensorboard`]), created with the first line. The folder is made
    /// now, so an unwritable one fails here rather than mid-run.
    pub fn log_to_tensorboard(&mut self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        self.tensorboard_dir = Some(dir.to_path_buf());
        Ok(())
    }

    /// The open TensorBoard writer, opening it on first use; a file that cannot be created
    /// stops TensorBoard logging with a warning, as a failed write does.
    fn tensorboard(&mut self) -> Option<&mut EventWriter> {
        if let Some(dir) = self.tensorboard_dir.take() {
            match EventWriter::create(&dir) {
                Ok(w) => self.tensorboard = Some(w),
                Err(e) => tracing::warn!("TensorBoard logging stopped: {e:#}"),
            }
        }
        self.tensorboard.as_mut()
    }

    /// The TensorBoard event file being written, once the first line has opened it.
    pub fn tensorboard_path(&self) -> Option<&Path> {
        self.tensorboard.as_ref().map(EventWriter::path)
    }

    /// A TensorBoard file that cannot be written (a full disk) stops being written, with a
    /// warning; the run and metrics.jsonl go on.
    fn flush_tensorboard(&mut self) {
        if let Some(Err(e)) = self.tensorboard.as_mut().map(EventWriter::flush) {
            tracing::warn!("TensorBoard logging stopped: {e:#}");
            self.tensorboard = None;
        }
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Read a `metrics.jsonl`. A torn last line (a run killed mid-write) is skipped; a bad
/// line elsewhere is an error naming its line number.
pub fn read_metrics(path: &Path) -> anyhow::Result<Vec<IterationMetrics>> {
    // serde_json writes a non-finite f64 as `null`, which it then refuses to read as f64:
    // a `null` field reads as missing (its default), so every line the writer wrote reads.
    fn parse_line(line: &str) -> serde_json::Result<IterationMetrics> {
        let mut v: serde_json::Value = serde_json::from_str(line)?;
        if let Some(o) = v.as_object_mut() {
            o.retain(|_, x| !x.is_null());
        }
        serde_json::from_value(v)
    }
    let f = File::open(path).with_context(|| format!("cannot open metrics file {}", path.display()))?;
    let lines: Vec<String> = BufReader::new(f).lines().collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(m) => out.push(m),
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => anyhow::bail!("{}:{}: not a metrics line: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

/// One `metrics.jsonl` line, newline included. Iteration 0 trained nothing: its line holds
/// only the starting policy's evaluation and the counters, so a reader (pandas, jq) finds no
/// 0 % success or 0 loss there; the missing fields read back as their defaults.
fn metrics_line(m: &IterationMetrics) -> anyhow::Result<String> {
    let mut v = serde_json::to_value(m)?;
    if let (0, Some(o)) = (m.iteration, v.as_object_mut()) {
        o.retain(|k, _| BASELINE_FIELDS.contains(&k.as_str()) || k.starts_with("eval_"));
    }
    let mut line = serde_json::to_string(&v)?;
    line.push('\n');
    Ok(line)
}

/// The fields of the iteration-0 line besides its `eval_*` ones.
const BASELINE_FIELDS: [&str; 4] = ["iteration", "env_steps", "episodes", "wall_secs"];

/// The scalars of one metrics line, tagged by field name: every numeric field as
/// `metrics.jsonl` holds it (absent optional fields and non-finite values, written there as
/// `null`, are left out; a per-task map as `FIELD/TASK`), `iteration` aside (it is the
/// step). Iteration 0 holds only the
/// starting policy's evaluation, so only its `eval_*` fields and `wall_secs` are taken.
pub fn metric_scalars(m: &IterationMetrics) -> Vec<(String, f64)> {
    let serde_json::Value::Object(fields) = serde_json::to_value(m).unwrap_or_default() else {
        return Vec::new();
    };
    fields
        .into_iter()
        .filter(|(k, _)| k != "iteration")
        .filter(|(k, _)| m.iteration > 0 || k.starts_with("eval_") || k == "wall_secs")
        .flat_map(|(k, v)| match v {
            // Per-task maps (`task_success`) become one scalar per task: `task_success/ID`.
            serde_json::Value::Object(o) => {
                o.into_iter().filter_map(|(id, v)| Some((format!("{k}/{id}"), v.as_f64()?))).collect()
            }
            v => v.as_f64().map(|x| (k, x)).into_iter().collect::<Vec<_>>(),
        })
        .collect()
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
