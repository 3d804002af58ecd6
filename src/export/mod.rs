//! Trajectory sets → files a Python pipeline loads directly (`guirl export`).
//!
//! Three layouts, each as parquet or JSON lines (docs/export.md has the full schema):
//!
//! - [`Layout::Rl`]: one row per episode, veRL's `RLHFDataset` prompt format (the first
//!   screenshot and the instruction; the environment plays the rest online).
//! - [`Layout::Sft`]: one row per episode, a multi-turn chat (veRL's multi-turn SFT, TRL's
//!   VLM SFT): one user turn with a screenshot per step, one assistant turn with its action.
//! - [`Layout::Steps`]: one row per step for offline RL: screenshot, action, reward, the
//!   discounted return from the step and, for GRPO groups, the group-relative advantage.
//!
//! Every row's `<image>` placeholders match its images one to one (veRL asserts it). Rows
//! go out in chunks (one parquet row group each), so memory stays bounded on large sets;
//! the file is written under a temporary name and renamed when complete.

mod columns;
mod episode;
mod jsonl;
mod parquet;
mod rl;
mod sft;
mod steps;

pub use columns::{EpisodeInfo, Image, Message, Png, Row};
use episode::Episode;
pub use episode::{no_placeholders, png_size, BadFrame, ACTION_HINT};
pub use rl::RlRow;
pub use sft::SftRow;
pub use steps::StepRow;

use crate::rollout::{TrainingBatch, TrajectorySet};
use crate::train::advantage::{group_advantages, AdvStd};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The file format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Apache Parquet (snappy): images as binary PNG.
    Parquet,
    /// JSON lines: the same rows, images as base64 strings of the PNG bytes.
    Jsonl,
}

impl Format {
    /// The file extension.
    pub fn ext(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Jsonl => "jsonl",
        }
    }
}

/// What a row is (`--layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// One row per episode: a veRL RL prompt (first screenshot + instruction).
    Rl,
    /// One row per episode: the whole episode as a multi-turn chat.
    Sft,
    /// One row per step: screenshot, action, reward, return, advantage.
    Steps,
}

impl Layout {
    /// The name used on the command line and in default file names.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Rl => "rl",
            Layout::Sft => "sft",
            Layout::Steps => "steps",
        }
    }

    /// Whether episodes that failed through no fault of the agent (`env_error`,
    /// `policy_error`) are left out. A prompt (`rl`) stays a valid task instance after a
    /// browser crash; training targets (`sft`, `steps`) from a crashed episode do not.
    pub fn skips_infrastructure_failures(self) -> bool {
        !matches!(self, Layout::Rl)
    }
}

/// What to export and where.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// File format.
    pub format: Format,
    /// Row layout.
    pub layout: Layout,
    /// Output file (default: `DIR/export-<layout>.<ext>`, see [`default_out`]).
    pub out: Option<PathBuf>,
    /// Overwrite an existing output file.
    pub force: bool,
    /// The `split` written in `extra_info` (`rl`, `sft`).
    pub split: String,
    /// Discount of the `return` column (`steps`).
    pub gamma: f64,
    /// Skip (with a warning) episodes whose screenshots are missing or unreadable
    /// instead of failing.
    pub skip_missing_frames: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            format: Format::Parquet,
            layout: Layout::Rl,
            out: None,
            force: false,
            split: "train".into(),
            gamma: 1.0,
            skip_missing_frames: false,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExportReport {
    /// The file written.
    pub out: PathBuf,
    /// Rows written.
    pub rows: usize,
    /// Episodes that gave rows.
    pub episodes: usize,
    /// `env_error` / `policy_error` episodes left out (`sft`, `steps`).
    pub skipped_infrastructure: usize,
    /// Episodes with nothing to export: no steps (`sft`, `steps`), no screenshot (`rl`).
    pub skipped_empty: usize,
    /// Episodes left out for a missing or unreadable screenshot (`skip_missing_frames`).
    pub skipped_missing_frames: usize,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Wall time of the export in seconds.
    pub seconds: f64,
}

/// The ε of the group-relative advantage `(R − mean) / (std + ε)`.
pub const ADV_EPS: f64 = 1e-6;

/// Rows per chunk: one record batch, one parquet row group. Small groups keep memory
/// bounded and let readers (datasets, veRL) stream image rows.
const CHUNK_ROWS: usize = 64;

/// Default output file: `DIR/export-<layout>.<ext>`.
pub fn default_out(dir: &Path, layout: Layout, format: Format) -> PathBuf {
    dir.join(format!("export-{}.{}", layout.name(), format.ext()))
}

/// Group-relative advantage of each trajectory's reward, `(R − mean_g R) / (std_g R + ε)`
/// (population std, [`group_advantages`] as GRPO trains with it), for trajectories that
/// share a recorded `group` id with at least one other; `None` for the rest and for
/// `env_error` / `policy_error` / `judge_error` rollouts (left out of their group's statistics).
pub fn episode_advantages(set: &TrajectorySet) -> Vec<Option<f64>> {
    let grouped: Vec<usize> =
        (0..set.trajectories.len()).filter(|&i| set.trajectories[i].trajectory.group.is_some()).collect();
    // Only trajectories with an id go in, so groups are by id alone (the trainer's rule
    // would also merge id-less trajectories of one task and seed).
    let (batch, members) = TrainingBatch::group(grouped.iter().map(|&i| &set.trajectories[i].trajectory));
    let (adv, _) = group_advantages(&batch, AdvStd::Group, ADV_EPS);
    let mut out = vec![None; set.trajectories.len()];
    for (row, members) in adv.into_iter().zip(members) {
        if members.len() < 2 {
            continue;
        }
        for (a, m) in row.into_iter().zip(members) {
            out[grouped[m]] = a;
        }
    }
    out
}

/// Export `set` as `opts` says. Fails, writing nothing, on an empty set, an existing
/// output (unless `force`), a bad frame (unless `skip_missing_frames`) or when no episode
/// is left to export.
pub fn export(set: &TrajectorySet, opts: &ExportOptions) -> anyhow::Result<ExportReport> {
    let t0 = Instant::now();
    if set.trajectories.is_empty() {
        bail!("{} has no trajectories: nothing to export", set.dir.display());
    }
    if !(0.0..=1.0).contains(&opts.gamma) {
        bail!("--gamma must be in [0, 1], got {}", opts.gamma);
    }
    let out = opts.out.clone().unwrap_or_else(|| default_out(&set.dir, opts.layout, opts.format));
    if out.is_dir() {
        bail!(
            "--out {} is a folder: give a file path, e.g. {}",
            out.display(),
            out.join("export.parquet").display()
        );
    }
    if out.exists() && !opts.force {
        bail!("{} exists: pass --force to overwrite it, or --out to write elsewhere", out.display());
    }
    // Not even --force writes over what is being exported.
    let real = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    if let Some(target) = real(&out) {
        let own_file =
            real(&set.dir.join(crate::rollout::store::TRAJECTORIES_FILE)).as_ref() == Some(&target);
        let own_frame =
            real(&set.dir.join(crate::rollout::store::FRAMES_DIR)).is_some_and(|f| target.starts_with(f));
        if own_file || own_frame {
            bail!("--out {} is a file of the trajectory set being exported: write elsewhere", out.display());
        }
    }
    let mut report = ExportReport { out: out.clone(), ..Default::default() };
    match opts.layout {
        Layout::Rl => write_rows(set, opts, &out, &mut report, rl::rows)?,
        Layout::Sft => write_rows(set, opts, &out, &mut report, sft::rows)?,
        Layout::Steps => write_rows(set, opts, &out, &mut report, steps::rows)?,
    }
    report.bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Where rows go: a parquet or JSON-lines file under a temporary name.
enum Sink {
    // Boxed: the parquet writer's state is large, the JSON one a buffer.
    Parquet(Box<parquet::ParquetSink>),
    Jsonl(jsonl::JsonlSink),
}

impl Sink {
    fn write<R: Row>(&mut self, rows: &[R]) -> anyhow::Result<()> {
        match self {
            Sink::Parquet(s) => s.write(rows),
            Sink::Jsonl(s) => s.write(rows),
        }
    }
}

/// Turn every episode into rows with `make`, in chunks, then move the file into place.
fn write_rows<R: Row>(
    set: &TrajectorySet,
    opts: &ExportOptions,
    out: &Path,
    report: &mut ExportReport,
    make: fn(&Episode) -> anyhow::Result<Vec<R>>,
) -> anyhow::Result<()> {
    let folder = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder).with_context(|| format!("cannot create {}", folder.display()))?;
    // In the output's folder, so the final rename never crosses file systems.
    let tmp = tempfile::Builder::new()
        .prefix(".export-")
        .tempfile_in(folder)
        .with_context(|| format!("cannot create a file in {}", folder.display()))?;
    let mut perms = tmp.as_file().metadata()?.permissions();
    // Temporary files are private (0600); the export is a file like any other.
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    tmp.as_file().set_permissions(perms)?;
    let file = tmp.reopen().with_context(|| format!("cannot write in {}", folder.display()))?;
    let mut sink = match opts.format {
        Format::Parquet => Sink::Parquet(Box::new(parquet::ParquetSink::new::<R>(file)?)),
        Format::Jsonl => Sink::Jsonl(jsonl::JsonlSink::new(file)),
    };
    let advantages = episode_advantages(set);
    let mut chunk: Vec<R> = Vec::with_capacity(CHUNK_ROWS);
    for (stored, advantage) in set.trajectories.iter().zip(advantages) {
        if opts.layout.skips_infrastructure_failures()
            && stored.trajectory.outcome.status.is_infrastructure_failure()
        {
            report.skipped_infrastructure += 1;
            continue;
        }
        let ep =
            Episode { set, stored, advantage, index: report.rows, split: &opts.split, gamma: opts.gamma };
        let rows = match make(&ep) {
            Ok(rows) => rows,
            Err(e) if opts.skip_missing_frames && e.is::<BadFrame>() => {
                tracing::warn!("skipping episode at line {}: {e}", stored.line);
                report.skipped_missing_frames += 1;
                continue;
            }
            Err(e) if e.is::<BadFrame>() => {
                return Err(anyhow::anyhow!("{e}: pass --skip-missing-frames to leave such episodes out"));
            }
            Err(e) => return Err(e),
        };
        if rows.is_empty() {
            report.skipped_empty += 1;
            continue;
        }
        report.episodes += 1;
        report.rows += rows.len();
        chunk.extend(rows);
        if chunk.len() >= CHUNK_ROWS {
            sink.write(&chunk)?;
            chunk.clear();
        }
    }
    if report.rows == 0 {
        bail!(
            "no episode of {} left to export as {} ({} env_error/policy_error/judge_error, {} without steps or screenshots, {} with missing frames)",
            set.dir.display(),
            opts.layout.name(),
            report.skipped_infrastructure,
            report.skipped_empty,
            report.skipped_missing_frames
        );
    }
    if !chunk.is_empty() {
        sink.write(&chunk)?;
    }
    match sink {
        Sink::Parquet(s) => s.finish()?,
        Sink::Jsonl(s) => s.finish()?,
    }
    tmp.persist(out).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}
