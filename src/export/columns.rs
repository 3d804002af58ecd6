//! Column types shared by the layouts (chat messages, PNG images, episode metadata) and
//! the Arrow arrays they become. Every value has one Rust type that serde writes as JSON
//! and these helpers write as Arrow, so the two formats cannot drift apart.

use arrow_array::{
    ArrayRef, BinaryArray, Float64Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    UInt64Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields};
use base64::Engine;
use serde::{Serialize, Serializer};
use std::sync::Arc;

/// A layout's row: written as a JSON line through serde, or as Arrow columns.
pub trait Row: Serialize + Sized {
    /// The layout's Arrow schema.
    fn schema() -> arrow_schema::SchemaRef;
    /// `rows` as one record batch of that schema.
    fn to_batch(rows: &[Self]) -> anyhow::Result<RecordBatch>;
}

/// PNG bytes: binary in parquet, a base64 (standard alphabet, padded) string in JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Png(pub Vec<u8>);

impl Serialize for Png {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

/// An image as veRL and HF datasets store it: `{bytes}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Image {
    /// The PNG file's bytes.
    pub bytes: Png,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    /// The text, with one `<image>` where each image of the row goes.
    pub content: String,
}

impl Message {
    /// A message from `role`.
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message { role: role.into(), content: content.into() }
    }
}

/// Where a row comes from and how its episode went (`extra_info` of `rl` and `sft`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeInfo {
    /// The `--split` given.
    pub split: String,
    /// Row number in the file (0-based).
    pub index: i64,
    /// Task id.
    pub task_id: String,
    /// Seed of the task instance.
    pub seed: u64,
    /// 1-based line of the trajectory in `trajectories.jsonl`.
    pub episode: i64,
    /// GRPO group id, if recorded.
    pub group: Option<u64>,
    /// The episode's total reward.
    pub reward: f64,
    /// How it ended (`success`, `fail`, `truncated`, …).
    pub status: String,
    /// Steps whose action could not be taken (an answer with no action in it, a click off
    /// the page): 0 keeps only episodes whose every turn is an action that ran.
    pub invalid_steps: u64,
}

/// A non-null field.
pub fn field(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, false)
}

/// `struct{role: string, content: string}`.
pub fn message_type() -> DataType {
    DataType::Struct(Fields::from(vec![field("role", DataType::Utf8), field("content", DataType::Utf8)]))
}

/// `struct{bytes: binary}`.
pub fn image_type() -> DataType {
    DataType::Struct(Fields::from(vec![field("bytes", DataType::Binary)]))
}

/// `list<item>`.
pub fn list_type(item: DataType) -> DataType {
    DataType::List(Arc::new(field("item", item)))
}

/// The struct type of [`EpisodeInfo`].
pub fn episode_info_type() -> DataType {
    DataType::Struct(episode_info_fields())
}

fn episode_info_fields() -> Fields {
    Fields::from(vec![
        field("split", DataType::Utf8),
        field("index", DataType::Int64),
        field("task_id", DataType::Utf8),
        field("seed", DataType::UInt64),
        field("episode", DataType::Int64),
        Field::new("group", DataType::UInt64, true),
        field("reward", DataType::Float64),
        field("status", DataType::Utf8),
        field("invalid_steps", DataType::UInt64),
    ])
}

/// A string column.
pub fn strings<'a>(values: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// A struct column from its fields' types and columns.
pub fn structs(dt: DataType, columns: Vec<ArrayRef>) -> anyhow::Result<ArrayRef> {
    let DataType::Struct(fields) = dt else { anyhow::bail!("not a struct type: {dt}") };
    Ok(Arc::new(StructArray::try_new(fields, columns, None)?))
}

/// A `list<item>` column: `values` cut into consecutive lists of the given lengths.
pub fn lists(
    item: DataType,
    values: ArrayRef,
    lengths: impl IntoIterator<Item = usize>,
) -> anyhow::Result<ArrayRef> {
    let offsets = OffsetBuffer::from_lengths(lengths);
    Ok(Arc::new(ListArray::try_new(Arc::new(field("item", item)), offsets, values, None)?))
}

/// A column of [`Image`] structs.
pub fn images<'a>(values: impl IntoIterator<Item = &'a Image>) -> anyhow::Result<ArrayRef> {
    let bytes = BinaryArray::from_iter_values(values.into_iter().map(|i| i.bytes.0.as_slice()));
    structs(image_type(), vec![Arc::new(bytes)])
}

/// A column of [`Message`] structs.
pub fn messages<'a>(values: impl IntoIterator<Item = &'a Message> + Clone) -> anyhow::Result<ArrayRef> {
    let role = strings(values.clone().into_iter().map(|m| m.role.as_str()));
    let content = strings(values.into_iter().map(|m| m.content.as_str()));
    structs(message_type(), vec![role, content])
}

/// A `list<struct{bytes}>` column: one list of images per row.
pub fn image_lists(rows: &[&[Image]]) -> anyhow::Result<ArrayRef> {
    lists(image_type(), images(rows.iter().flat_map(|r| r.iter()))?, rows.iter().map(|r| r.len()))
}

/// A `list<struct{role, content}>` column: one conversation per row.
pub fn message_lists(rows: &[&[Message]]) -> anyhow::Result<ArrayRef> {
    lists(message_type(), messages(rows.iter().flat_map(|r| r.iter()))?, rows.iter().map(|r| r.len()))
}

/// A column of [`EpisodeInfo`] structs.
pub fn episode_infos(rows: &[&EpisodeInfo]) -> anyhow::Result<ArrayRef> {
    let columns: Vec<ArrayRef> = vec![
        strings(rows.iter().map(|r| r.split.as_str())),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.index))),
        strings(rows.iter().map(|r| r.task_id.as_str())),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.seed))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.episode))),
        Arc::new(rows.iter().map(|r| r.group).collect::<UInt64Array>()),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.reward))),
        strings(rows.iter().map(|r| r.status.as_str())),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.invalid_steps))),
    ];
    structs(episode_info_type(), columns)
}
