//! The `sft` layout: one row per episode as a multi-turn chat (veRL's multi-turn SFT
//! dataset, TRL's VLM SFT). Each step is a user turn with the screenshot the policy saw
//! (`<image>`, plus the instruction on the first) and an assistant turn with its action.

use super::columns::{self, field, list_type, EpisodeInfo, Image, Message, Row};
use super::episode::{no_placeholders, Episode};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema, SchemaRef};
use serde::Serialize;
use std::sync::Arc;

/// One `sft` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SftRow {
    /// user, assistant, user, assistant, …: one pair per step.
    pub messages: Vec<Message>,
    /// The screenshot of each step, in the order of the `<image>`s.
    pub images: Vec<Image>,
    /// Tool schemas (none: actions are plain text), for veRL's `tools_key`.
    pub tools: Vec<String>,
    /// Where the row comes from and how the episode went (to filter, e.g. successes only).
    pub extra_info: EpisodeInfo,
}

impl Row for SftRow {
    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            field("messages", list_type(columns::message_type())),
            field("images", list_type(columns::image_type())),
            field("tools", list_type(DataType::Utf8)),
            field("extra_info", columns::episode_info_type()),
        ]))
    }

    fn to_batch(rows: &[SftRow]) -> anyhow::Result<RecordBatch> {
        let messages: Vec<&[Message]> = rows.iter().map(|r| r.messages.as_slice()).collect();
        let images: Vec<&[Image]> = rows.iter().map(|r| r.images.as_slice()).collect();
        let infos: Vec<&EpisodeInfo> = rows.iter().map(|r| &r.extra_info).collect();
        let tool_names: ArrayRef =
            Arc::new(StringArray::from_iter_values(rows.iter().flat_map(|r| r.tools.iter())));
        let columns = vec![
            columns::message_lists(&messages)?,
            columns::image_lists(&images)?,
            columns::lists(DataType::Utf8, tool_names, rows.iter().map(|r| r.tools.len()))?,
            columns::episode_infos(&infos)?,
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

/// The episode's conversation; none for an episode without steps.
pub fn rows(ep: &Episode) -> anyhow::Result<Vec<SftRow>> {
    let t = &ep.stored.trajectory;
    if t.steps.is_empty() {
        return Ok(Vec::new());
    }
    let mut messages = Vec::with_capacity(2 * t.steps.len());
    let mut images = Vec::with_capacity(t.steps.len());
    for (i, step) in t.steps.iter().enumerate() {
        let png = ep.png(step.frame.as_deref(), i)?;
        let user = if i == 0 { ep.first_prompt(&png) } else { "<image>".to_string() };
        messages.push(Message::new("user", user));
        messages.push(Message::new("assistant", no_placeholders(&step.action)));
        images.push(Image { bytes: png });
    }
    Ok(vec![SftRow { messages, images, tools: Vec::new(), extra_info: ep.info() }])
}
