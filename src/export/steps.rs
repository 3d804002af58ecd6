//! The `steps` layout: one row per step, for offline RL. Rewards are the step rewards
//! with the last one carrying whatever makes them sum to the episode's reward (as the
//! trainer credits them), returns are discounted from each step, and the advantage is
//! the episode's group-relative one (GRPO) where the set has groups.

use super::columns::{self, field, Image, Png, Row};
use super::episode::{no_placeholders, Episode};
use crate::train::advantage::reinforce_pp::{discounted_returns, step_rewards};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::Serialize;
use std::sync::Arc;

/// One `steps` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRow {
    /// 1-based line of the trajectory in `trajectories.jsonl`.
    pub episode: i64,
    /// GRPO group id, if recorded.
    pub group: Option<u64>,
    /// Step index in the episode (0-based).
    pub step: i64,
    /// Task id.
    pub task_id: String,
    /// Seed of the task instance.
    pub seed: u64,
    /// The instruction.
    pub prompt: String,
    /// The screenshot the action was taken on.
    pub image: Image,
    /// The action, in its text form (for an answer with no action in it, the answer).
    pub action: String,
    /// Why the action could not be taken, when it could not: such a step is no example
    /// of an action to imitate.
    pub action_error: Option<String>,
    /// The step's reward.
    pub reward: f64,
    /// `Σ_{k≥t} γ^{k−t} r_k`: this and the later rewards, discounted by `--gamma`.
    #[serde(rename = "return")]
    pub ret: f64,
    /// `(R − mean_g R) / (std_g R + 1e-6)` of the episode's reward `R` within its GRPO
    /// group (shared by all its steps); null outside groups.
    pub advantage: Option<f64>,
    /// Status after the step (`running` until the last step).
    pub status: String,
    /// How the episode ended.
    pub episode_status: String,
}

impl Row for StepRow {
    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            field("episode", DataType::Int64),
            Field::new("group", DataType::UInt64, true),
            field("step", DataType::Int64),
            field("task_id", DataType::Utf8),
            field("seed", DataType::UInt64),
            field("prompt", DataType::Utf8),
            field("image", columns::image_type()),
            field("action", DataType::Utf8),
            Field::new("action_error", DataType::Utf8, true),
            field("reward", DataType::Float64),
            field("return", DataType::Float64),
            Field::new("advantage", DataType::Float64, true),
            field("status", DataType::Utf8),
            field("episode_status", DataType::Utf8),
        ]))
    }

    fn to_batch(rows: &[StepRow]) -> anyhow::Result<RecordBatch> {
        let float = |f: fn(&StepRow) -> f64| -> ArrayRef {
            Arc::new(Float64Array::from_iter_values(rows.iter().map(f)))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.episode))),
            Arc::new(rows.iter().map(|r| r.group).collect::<UInt64Array>()),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.step))),
            columns::strings(rows.iter().map(|r| r.task_id.as_str())),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.seed))),
            columns::strings(rows.iter().map(|r| r.prompt.as_str())),
            columns::images(rows.iter().map(|r| &r.image))?,
            columns::strings(rows.iter().map(|r| r.action.as_str())),
            Arc::new(rows.iter().map(|r| r.action_error.as_deref()).collect::<StringArray>()),
            float(|r| r.reward),
            float(|r| r.ret),
            Arc::new(rows.iter().map(|r| r.advantage).collect::<Float64Array>()),
            columns::strings(rows.iter().map(|r| r.status.as_str())),
            columns::strings(rows.iter().map(|r| r.episode_status.as_str())),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

/// The episode's steps, each with its screenshot.
pub fn rows(ep: &Episode) -> anyhow::Result<Vec<StepRow>> {
    let t = &ep.stored.trajectory;
    let rewards = step_rewards(t);
    let returns = discounted_returns(&rewards, ep.gamma);
    let mut out = Vec::with_capacity(t.steps.len());
    for (i, step) in t.steps.iter().enumerate() {
        let png: Png = ep.png(step.frame.as_deref(), i)?;
        out.push(StepRow {
            episode: ep.stored.line as i64,
            group: t.group,
            step: i as i64,
            task_id: t.task_id.clone(),
            seed: t.seed,
            prompt: no_placeholders(&t.instruction),
            image: Image { bytes: png },
            action: no_placeholders(&step.action),
            action_error: step.action_error.clone(),
            reward: rewards[i],
            ret: returns[i],
            advantage: ep.advantage,
            status: step.status.as_str().to_string(),
            episode_status: t.outcome.status.as_str().to_string(),
        });
    }
    Ok(out)
}
