//! The trajectory set on disk: a folder with `trajectories.jsonl` (one trajectory a line)
//! and `frames/` (PNG screenshots).
//!
//! Appending is crash-safe: frames are written first, then the trajectory's line in one
//! `write` of the whole line with its newline, then fsync. A run killed at any moment
//! leaves every finished line valid; a torn last line is reported and skipped on read.

use super::trajectory::{Recorded, Trajectory, FORMAT_VERSION};
use crate::env::encode_png;
use anyhow::{bail, Context};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The file holding the trajectories.
pub const TRAJECTORIES_FILE: &str = "trajectories.jsonl";
/// The folder holding the frames.
pub const FRAMES_DIR: &str = "frames";

/// Appends trajectories (and their frames) to a trajectory set folder.
#[derive(Debug)]
pub struct TrajectoryWriter {
    dir: PathBuf,
    file: File,
    /// Unique per writer, so two runs appending to one folder never share frame names.
    prefix: String,
    count: usize,
}

impl TrajectoryWriter {
    /// Open (creating if needed) a trajectory set folder for appending.
    pub fn open(dir: &Path) -> anyhow::Result<TrajectoryWriter> {
        std::fs::create_dir_all(dir.join(FRAMES_DIR))
            .with_context(|| format!("cannot create the trajectory folder {}", dir.display()))?;
        let path = dir.join(TRAJECTORIES_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {} for appending", path.display()))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let prefix = format!("{:x}{:x}", std::process::id(), nanos % 0xffff_ffff);
        Ok(TrajectoryWriter { dir: dir.to_path_buf(), file, prefix, count: 0 })
    }

    /// The folder this writer appends to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write a recorded episode: its frames (identical consecutive frames stored once),
    /// then its line. Returns the trajectory with frame names filled in.
    pub fn append(&mut self, rec: &Recorded) -> anyhow::Result<Trajectory> {
        let mut t = rec.trajectory.clone();
        let n = self.count;
        self.count += 1;
        let mut names: Vec<String> = Vec::with_capacity(rec.frames.len());
        for (i, img) in rec.frames.iter().enumerate() {
            if i > 0 && rec.frames[i - 1] == *img {
                let prev = names[i - 1].clone();
                names.push(prev);
                continue;
            }
            let name = format!("{}-{n:05}-{i:03}.png", self.prefix);
            let path = self.dir.join(FRAMES_DIR).join(&name);
            std::fs::write(&path, encode_png(img)).with_context(|| format!("writing {}", path.display()))?;
            names.push(name);
        }
        for (step, name) in t.steps.iter_mut().zip(names.iter()) {
            step.frame = Some(name.clone());
        }
        if names.len() > t.steps.len() {
            t.final_frame = names.last().cloned();
        }
        self.append_line(&t)?;
        Ok(t)
    }

    /// Append one trajectory line (its frames, if named, must already be in the folder):
    /// the whole line in one write, then fsync.
    pub fn append_line(&mut self, t: &Trajectory) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(t)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .with_context(|| format!("appending to {}", self.dir.display()))?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// A trajectory read from disk, with where it came from.
#[derive(Debug, Clone)]
pub struct StoredTrajectory {
    /// 1-based line number in `trajectories.jsonl`.
    pub line: usize,
    /// The trajectory.
    pub trajectory: Trajectory,
}

/// A trajectory set read from a folder.
#[derive(Debug, Clone)]
pub struct TrajectorySet {
    /// The folder.
    pub dir: PathBuf,
    /// The trajectories, in file order.
    pub trajectories: Vec<StoredTrajectory>,
    /// A torn last line (a run killed while writing it) that was skipped, if any.
    pub torn_line: Option<usize>,
}

impl TrajectorySet {
    /// Read a trajectory set folder; errors name the file and line.
    pub fn read(dir: &Path) -> anyhow::Result<TrajectorySet> {
        let path = dir.join(TRAJECTORIES_FILE);
        if !dir.is_dir() {
            bail!("{} is not a folder: give the folder a run wrote with --record", dir.display());
        }
        if !path.is_file() {
            bail!("{} is not a trajectory set: it has no {TRAJECTORIES_FILE}", dir.display());
        }
        let f = File::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut lines: Vec<String> = Vec::new();
        let mut reader = BufReader::new(f);
        let mut last_complete = true;
        loop {
            let mut buf = String::new();
            let n = reader.read_line(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
            if n == 0 {
                break;
            }
            last_complete = buf.ends_with('\n');
            lines.push(buf);
        }
        let mut trajectories = Vec::new();
        let mut torn_line = None;
        let count = lines.len();
        for (i, text) in lines.iter().enumerate() {
            let line = i + 1;
            if text.trim().is_empty() {
                continue;
            }
            // Peek at the version first, so a newer format gets its own message.
            let value: serde_json::Value = match serde_json::from_str(text) {
                Ok(v) => v,
                Err(e) => {
                    if line == count && !last_complete {
                        tracing::warn!(
                            "{}:{line}: torn last line (a run was killed while writing it); skipped",
                            path.display()
                        );
                        torn_line = Some(line);
                        continue;
                    }
                    bail!("{}:{line}: not a valid trajectory line: {e}", path.display());
                }
            };
            let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
            if version > FORMAT_VERSION as u64 {
                bail!(
                    "{}:{line}: written in trajectory format v{version} by a newer guirl; this build reads up to v{FORMAT_VERSION}: upgrade guirl",
                    path.display()
                );
            }
            let trajectory: Trajectory = serde_json::from_value(value)
                .with_context(|| format!("{}:{line}: not a valid trajectory", path.display()))?;
            trajectories.push(StoredTrajectory { line, trajectory });
        }
        Ok(TrajectorySet { dir: dir.to_path_buf(), trajectories, torn_line })
    }

    /// Path of a frame file named in a trajectory.
    pub fn frame_path(&self, name: &str) -> PathBuf {
        self.dir.join(FRAMES_DIR).join(name)
    }

    /// Load a frame as RGB.
    pub fn load_frame(&self, name: &str) -> anyhow::Result<image::RgbImage> {
        let p = self.frame_path(name);
        let bytes = std::fs::read(&p).with_context(|| format!("cannot read frame {}", p.display()))?;
        crate::env::decode_png(&bytes).with_context(|| format!("frame {} is not a PNG", p.display()))
    }
}
