//! `guirl export`.

use crate::export::{export as export_set, ExportOptions, Format, Layout};
use crate::rollout::TrajectorySet;
use std::path::PathBuf;

/// Arguments of `guirl export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A trajectory set folder (written by `guirl run --record`, `guirl play --record`,
    /// `guirl bench`).
    dir: PathBuf,
    /// File format: parquet (images as PNG bytes) or jsonl (images as base64 strings).
    #[arg(long, value_enum, default_value = "parquet")]
    format: Format,
    /// Rows: rl (a veRL prompt per episode), sft (a chat per episode) or steps (a row per
    /// step with reward, return and advantage). See docs/export.md.
    #[arg(long, value_enum, default_value = "rl")]
    layout: Layout,
    /// Output file (default: DIR/export-<layout>.<parquet|jsonl>).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    force: bool,
    /// The split written in extra_info.split (not empty).
    #[arg(long, default_value = "train", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    split: String,
    /// Discount of the steps layout's `return` column, in [0, 1].
    #[arg(long, default_value_t = 1.0)]
    gamma: f64,
    /// Leave out, with a warning, episodes whose screenshots are missing or unreadable
    /// (default: stop with an error naming the file).
    #[arg(long)]
    skip_missing_frames: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `guirl export`.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let set = TrajectorySet::read(&args.dir)?;
    let opts = ExportOptions {
        format: args.format,
        layout: args.layout,
        out: args.out,
        force: args.force,
        split: args.split,
        gamma: args.gamma,
        skip_missing_frames: args.skip_missing_frames,
    };
    let r = export_set(&set, &opts)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let mut skipped = Vec::new();
    if r.skipped_infrastructure > 0 {
        skipped.push(format!("{} env_error/policy_error/judge_error", r.skipped_infrastructure));
    }
    if r.skipped_empty > 0 {
        skipped.push(format!("{} without steps or screenshots", r.skipped_empty));
    }
    if r.skipped_missing_frames > 0 {
        skipped.push(format!("{} with missing frames", r.skipped_missing_frames));
    }
    let skipped =
        if skipped.is_empty() { String::new() } else { format!(" (skipped {})", skipped.join(", ")) };
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    outln!(
        "wrote {} from {} to {} ({:.1} MB, {:.2} s){skipped}",
        plural(r.rows, "row", "rows"),
        plural(r.episodes, "episode", "episodes"),
        r.out.display(),
        r.bytes as f64 / 1e6,
        r.seconds
    );
    Ok(())
}
