//! The `rl` layout: one row per episode in veRL's `RLHFDataset` format. A row is a prompt
//! for online RL: the task instance's first screenshot and its instruction; the
//! environment plays the episode itself (reset with `extra_info.task_id` and `seed`).

use super::columns::{self, field, list_type, EpisodeInfo, Image, Message, Row};
use super::episode::Episode;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Fields, Schema, SchemaRef};
use serde::Serialize;
use std::sync::Arc;

/// One `rl` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RlRow {
    /// `guirl/<task id>`: veRL picks the reward function by it.
    pub data_source: String,
    /// One user message: `<image>`, the instruction and the action grammar.
    pub prompt: Vec<Message>,
    /// The first screenshot (one image: the prompt has one `<image>`).
    pub images: Vec<Image>,
    /// Always `gui`.
    pub ability: String,
    /// `{style: "rule", ground_truth: ""}`: the task's own check is the reward.
    pub reward_model: RewardModel,
    /// Where the row comes from and how the recorded episode went.
    pub extra_info: EpisodeInfo,
}

/// veRL's `reward_model` column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardModel {
    /// Always `rule`.
    pub style: String,
    /// Empty: the task's success check, run by the environment, decides.
    pub ground_truth: String,
}

fn reward_model_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        field("style", DataType::Utf8),
        field("ground_truth", DataType::Utf8),
    ]))
}

impl Row for RlRow {
    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            field("data_source", DataType::Utf8),
            field("prompt", list_type(columns::message_type())),
            field("images", list_type(columns::image_type())),
            field("ability", DataType::Utf8),
            field("reward_model", reward_model_type()),
            field("extra_info", columns::episode_info_type()),
        ]))
    }

    fn to_batch(rows: &[RlRow]) -> anyhow::Result<RecordBatch> {
        let prompts: Vec<&[Message]> = rows.iter().map(|r| r.prompt.as_slice()).collect();
        let images: Vec<&[Image]> = rows.iter().map(|r| r.images.as_slice()).collect();
        let infos: Vec<&EpisodeInfo> = rows.iter().map(|r| &r.extra_info).collect();
        let reward_model = columns::structs(
            reward_model_type(),
            vec![
                columns::strings(rows.iter().map(|r| r.reward_model.style.as_str())),
                columns::strings(rows.iter().map(|r| r.reward_model.ground_truth.as_str())),
            ],
        )?;
        let columns = vec![
            columns::strings(rows.iter().map(|r| r.data_source.as_str())),
            columns::message_lists(&prompts)?,
            columns::image_lists(&images)?,
            columns::strings(rows.iter().map(|r| r.ability.as_str())),
            reward_model,
            columns::episode_infos(&infos)?,
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

/// The episode's row: its first screenshot is the one before step 0, or for an episode
/// without steps the one after reset (`final_frame`). None without any screenshot.
pub fn rows(ep: &Episode) -> anyhow::Result<Vec<RlRow>> {
    let t = &ep.stored.trajectory;
    let first = match t.steps.first() {
        Some(s) => s.frame.as_deref(),
        None => match t.final_frame.as_deref() {
            Some(f) => Some(f),
            None => return Ok(Vec::new()),
        },
    };
    let png = ep.png(first, 0)?;
    Ok(vec![RlRow {
        data_source: format!("guirl/{}", t.task_id),
        prompt: vec![Message::new("user", ep.first_prompt(&png))],
        images: vec![Image { bytes: png }],
        ability: "gui".into(),
        reward_model: RewardModel { style: "rule".into(), ground_truth: String::new() },
        extra_info: ep.info(),
    }])
}
