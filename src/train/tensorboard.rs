//! TensorBoard event files in the run folder (`RUN/tensorboard/events.out.tfevents.<time>.<host>`):
//! each `metrics.jsonl` line again as scalars, and a few screenshots as images, for
//! `tensorboard --logdir runs/`.
//!
//! No maintained Rust crate writes these files (`tensorboard-rs`: protobuf 2, last release
//! 2022; `tboard`: one release, 2024, protoc needed at build time), so the four protobuf
//! messages TensorBoard reads are declared here with prost's derive macros, field numbers
//! from TensorFlow's `event.proto` and `summary.proto`. The file is a sequence of TFRecords,
//! each: the length (u64, little-endian), the masked CRC-32C of those 8 bytes, the
//! serialized `Event`, the masked CRC-32C of it. The first event names the format
//! (`brain.Event:2`).
//!
//! Each start of a run (`--resume` included) writes a new file: TensorBoard merges the
//! files of a folder in name order, and when a resumed run repeats an iteration the
//! killed one had logged after its last checkpoint, TensorBoard drops the older points
//! from that step on (its reader's `purge_orphaned_data`).

use crate::rollout::Recorded;
use anyhow::Context;
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The folder of a run folder that holds its event files.
pub const TENSORBOARD_DIR: &str = "tensorboard";

/// The first event of every file: the event-file format version TensorBoard expects.
pub const FILE_VERSION: &str = "brain.Event:2";

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The x-axis position (here the iteration, or the env steps for `by_env_steps/` tags).
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What the event carries.
    #[prost(oneof = "EventKind", tags = "3, 5")]
    pub what: Option<EventKind>,
}

/// `Event.what`: the two kinds written here.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum EventKind {
    /// The file's format, in its first event.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Scalars and images.
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`: tagged values at one step.
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    /// The values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryValue {
    /// The name TensorBoard plots it under.
    #[prost(string, tag = "1")]
    pub tag: String,
    /// The value.
    #[prost(oneof = "ValueKind", tags = "2, 4")]
    pub value: Option<ValueKind>,
}

/// `Summary.Value.value`: the two kinds written here.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ValueKind {
    /// A scalar (TensorBoard's `simple_value` is 32-bit).
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    /// An image.
    #[prost(message, tag = "4")]
    Image(SummaryImage),
}

/// `tensorflow.Summary.Image`: an encoded (here PNG) image.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryImage {
    /// Height in pixels.
    #[prost(int32, tag = "1")]
    pub height: i32,
    /// Width in pixels.
    #[prost(int32, tag = "2")]
    pub width: i32,
    /// Channels: 3 for RGB.
    #[prost(int32, tag = "3")]
    pub colorspace: i32,
    /// The PNG file's bytes.
    #[prost(bytes = "vec", tag = "4")]
    pub encoded_image_string: Vec<u8>,
}

/// TFRecord's masked CRC-32C (a checksum of data holding checksums is weak unmasked).
pub fn masked_crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` as one TFRecord, appended to `out`.
pub fn frame_record(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// Writes one event file; events wait in memory until [`EventWriter::flush`].
pub struct EventWriter {
    path: PathBuf,
    file: File,
    pending: Vec<u8>,
}

impl EventWriter {
    /// A new event file in `dir` (made if missing), `events.out.tfevents.<unix time>.<host>`
    /// (with `.N` added when a file of that name exists), its version event on disk.
    pub fn create(dir: &Path) -> anyhow::Result<EventWriter> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let base = format!("events.out.tfevents.{:010}.{}", now.as_secs(), hostname());
        let mut n = 0;
        let (path, file) = loop {
            let path = dir.join(if n == 0 { base.clone() } else { format!("{base}.{n}") });
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
            }
        };
        let mut w = EventWriter { path, file, pending: Vec::new() };
        w.write(&Event {
            wall_time: now.as_secs_f64(),
            step: 0,
            what: Some(EventKind::FileVersion(FILE_VERSION.into())),
        });
        w.flush()?;
        Ok(w)
    }

    /// Queue one event.
    pub fn write(&mut self, event: &Event) {
        frame_record(&event.encode_to_vec(), &mut self.pending);
    }

    /// Queue a summary of `values` at `step`, stamped now.
    pub fn summary(&mut self, step: i64, values: Vec<SummaryValue>) {
        let wall_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.write(&Event { wall_time, step, what: Some(EventKind::Summary(Summary { value: values })) });
    }

    /// Write the queued events in one write, then fsync: a run killed at any point leaves
    /// whole records (at worst a torn last one, which TensorBoard's reader stops at).
    pub fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file
            .write_all(&self.pending)
            .and_then(|_| self.file.sync_data())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.pending.clear();
        Ok(())
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queue one metrics line's `scalars` (tag, value) at step `iteration`; a line with an
    /// evaluation also puts `eval_success` under `by_env_steps/eval_success` at step =
    /// `env_steps`.
    pub fn log_metrics(
        &mut self,
        iteration: u64,
        env_steps: u64,
        scalars: Vec<(String, f64)>,
        eval_success: Option<f64>,
    ) {
        let values = scalars.into_iter().map(|(tag, v)| scalar(tag, v)).collect();
        self.summary(iteration as i64, values);
        if let Some(s) = eval_success {
            self.summary(env_steps as i64, vec![scalar("by_env_steps/eval_success".into(), s)]);
        }
    }

    /// Queue the first and the last screenshot of `rec` as images `frames/start` and
    /// `frames/end` at step `iteration` (nothing if it kept no frames).
    pub fn log_frames(&mut self, iteration: u64, rec: &Recorded) {
        let (Some(first), Some(last)) = (rec.frames.first(), rec.frames.last()) else {
            return;
        };
        let values = [("frames/start", first), ("frames/end", last)]
            .into_iter()
            .map(|(tag, img)| SummaryValue {
                tag: tag.into(),
                value: Some(ValueKind::Image(SummaryImage {
                    height: img.height() as i32,
                    width: img.width() as i32,
                    colorspace: 3,
                    encoded_image_string: crate::env::encode_png(img),
                })),
            })
            .collect();
        self.summary(iteration as i64, values);
    }
}

fn scalar(tag: String, v: f64) -> SummaryValue {
    SummaryValue { tag, value: Some(ValueKind::SimpleValue(v as f32)) }
}

/// This machine's name, as TensorBoard's own writers put it in the file name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().replace(['/', '\\'], "_"))
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
