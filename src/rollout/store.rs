//! The trajectory set on disk: a folder with `trajectories.jsonl` (one trajectory a line)
//! and `frames/` (PNG screenshots).
//!
//! Appending is crash-safe: frames are written first, then the trajectory's line in one
//! `write` of the whole line with its newline, then fsync. A run killed at any moment
//! leaves every finished line valid; a torn last line is reported and skipped on read,
//! and cut off when the file is next opened for appending (so the next line starts on a
//! line of its own).

use super::trajectory::{Recorded, Trajectory, FORMAT_VERSION};
use crate::env::encode_png;
use anyhow::{bail, Context};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file holding the trajectories.
pub const TRAJECTORIES_FILE: &str = "trajectories.jsonl";

/// The trajectories (non-empty lines) a set folder holds already: 0 where it has none.
pub fn lines_in(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join(TRAJECTORIES_FILE))
        .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}
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
        cut_torn_tail(&path)?;
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

/// Cut off a torn tail of an append-only JSON-lines file: the bytes after its last `\n`,
/// left by a writer killed mid-line. Appending after them would glue the next line onto
/// the torn one and make both unreadable. Complete lines are never touched (a bad one is
/// the reader's to report). Returns how many bytes were dropped (0 for a missing file).
pub fn cut_torn_tail(path: &Path) -> anyhow::Result<u64> {
    let mut f = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    let len = f.metadata().with_context(|| format!("cannot read {}", path.display()))?.len();
    // Scan back from the end in blocks for the last newline.
    let mut end = len;
    let mut keep = 0;
    let mut block = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let buf = &mut block[..(end - start) as usize];
        f.seek(SeekFrom::Start(start))
            .and_then(|_| f.read_exact(buf))
            .with_context(|| format!("cannot read {}", path.display()))?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    let dropped = len - keep;
    if dropped > 0 {
        f.set_len(keep)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot cut the torn last line of {}", path.display()))?;
        tracing::warn!(
            "{}: dropped a torn last line ({dropped} bytes after the last newline; a run was killed while writing it)",
            path.display()
        );
    }
    Ok(dropped)
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

/// The folders below `dir` (at most `depth` levels down) that hold a trajectory set.
fn sets_below(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if p.join(TRAJECTORIES_FILE).is_file() {
            out.push(p);
        } else if depth > 1 {
            sets_below(&p, depth - 1, out);
        }
    }
}

/// The trajectory sets in `dir`: `dir` itself when it is one, else the sets in its
/// subfolders (a bench's `trajectories/<suite>/<task>`, up to four levels down), sorted.
/// Empty when there are none.
pub fn sets_in(dir: &Path) -> Vec<PathBuf> {
    if dir.join(TRAJECTORIES_FILE).is_file() {
        return vec![dir.to_path_buf()];
    }
    // a training run: the rollouts it kept, not its checkpoints' success replay buffers
    if let Some(kept) = run_rollouts(dir) {
        return kept;
    }
    let mut inside = Vec::new();
    sets_below(dir, 4, &mut inside);
    inside.sort();
    inside
}

/// The first three of `sets`, and how many there are when more.
fn some_of(sets: &[PathBuf]) -> String {
    let some: Vec<String> = sets.iter().take(3).map(|d| d.display().to_string()).collect();
    let more = if sets.len() > 3 { format!(", … ({} in all)", sets.len()) } else { String::new() };
    format!("{}{more}", some.join(", "))
}

/// A training run's metrics file (as `METRICS_FILE` in train/run_folder.rs).
const RUN_METRICS: &str = "metrics.jsonl";

/// The sets in `RUN/rollouts/` (`[rollout] record_every`), sorted, when `dir` is a training
/// run's folder (it holds `metrics.jsonl` or `config.toml`). Its checkpoints' success
/// replay buffers are sets too, but no record of the run.
fn run_rollouts(dir: &Path) -> Option<Vec<PathBuf>> {
    // a training run's files (train/run_folder.rs), named here: rollout sits below train
    if !dir.join(RUN_METRICS).is_file() && !dir.join("config.toml").is_file() {
        return None;
    }
    let mut kept = Vec::new();
    sets_below(&dir.join("rollouts"), 1, &mut kept);
    kept.sort();
    Some(kept)
}

/// For a training run's folder, where its episodes are, if anywhere, and its figures: a
/// new user gives `stats` and `view` the run.
fn run_folder_hint(dir: &Path) -> Option<String> {
    let kept = run_rollouts(dir)?;
    let rollouts = dir.join("rollouts");
    let kept = match kept.len() {
        0 => "this run kept none".to_string(),
        _ => format!("this run kept {}", some_of(&kept)),
    };
    Some(format!(
        "; it is a training run, which keeps its rollouts only with `[rollout] record_every = N`, \
         as trajectory sets in {}/iter-NNNNNN/ that stats and view take ({kept}); the run's figures \
         are in {} and {}/",
        rollouts.display(),
        dir.join(RUN_METRICS).display(),
        dir.join("plots").display()
    ))
}

impl TrajectorySet {
    /// Read a trajectory set folder; errors name the file and line.
    pub fn read(dir: &Path) -> anyhow::Result<TrajectorySet> {
        let path = dir.join(TRAJECTORIES_FILE);
        if !dir.is_dir() {
            let what = if dir.exists() { "is not a folder" } else { "does not exist" };
            bail!("{} {what}: give the folder a run wrote with --record", dir.display());
        }
        if !path.is_file() {
            // A folder of sets (a bench's `trajectories/<suite>/<task>`): name them.
            let mut inside = Vec::new();
            sets_below(dir, 4, &mut inside);
            inside.sort();
            let hint = match (run_folder_hint(dir), inside.len()) {
                (Some(hint), _) => hint,
                (None, 0) => String::new(),
                (None, _) => {
                    format!(
                        "; it holds trajectory sets in subfolders: give one of them ({})",
                        some_of(&inside)
                    )
                }
            };
            bail!("{} is not a trajectory set: it has no {TRAJECTORIES_FILE}{hint}", dir.display());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::trajectory::Outcome;

    fn traj(seed: u64) -> Trajectory {
        let outcome = Outcome { reward: 1.0, status: EpisodeStatus::Success, steps: 0, error: None };
        Trajectory::new("t", seed, vec![], outcome)
    }

    fn seeds(dir: &Path) -> Vec<u64> {
        let set = TrajectorySet::read(dir).unwrap();
        assert_eq!(set.torn_line, None);
        set.trajectories.iter().map(|t| t.trajectory.seed).collect()
    }

    #[test]
    fn a_training_run_is_said_to_keep_its_rollouts_only_when_asked() {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join("metrics.jsonl"), "").unwrap();
        let e = TrajectorySet::read(run.path()).unwrap_err().to_string();
        assert!(
            e.contains("is not a trajectory set: it has no trajectories.jsonl; it is a training run")
                && e.contains("only with `[rollout] record_every = N`")
                && e.contains("(this run kept none)")
                && e.contains(&format!("{}/metrics.jsonl and {0}/plots", run.path().display())),
            "{e}"
        );
        // the sets it kept are named (not its checkpoints' success replay buffers)
        for set in ["rollouts/iter-000002", "rollouts/iter-000004", "checkpoints/iter-000004/success_replay"]
        {
            TrajectoryWriter::open(&run.path().join(set)).unwrap();
        }
        let e = TrajectorySet::read(run.path()).unwrap_err().to_string();
        let kept = format!(
            "this run kept {0}/rollouts/iter-000002, {0}/rollouts/iter-000004)",
            run.path().display()
        );
        assert!(e.contains(&kept) && !e.contains("success_replay"), "{e}");
        // `stats RUN` pools those, and only those
        let sets = sets_in(run.path());
        assert_eq!(sets, ["rollouts/iter-000002", "rollouts/iter-000004"].map(|s| run.path().join(s)));
    }

    #[test]
    fn open_cuts_a_torn_tail_and_keeps_complete_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = TrajectoryWriter::open(dir.path()).unwrap();
        w.append_line(&traj(1)).unwrap();
        w.append_line(&traj(2)).unwrap();
        drop(w);
        let path = dir.path().join(TRAJECTORIES_FILE);
        let torn = serde_json::to_string(&traj(3)).unwrap();
        OpenOptions::new().append(true).open(&path).unwrap().write_all(&torn.as_bytes()[..40]).unwrap();
        let mut w = TrajectoryWriter::open(dir.path()).unwrap();
        w.append_line(&traj(4)).unwrap();
        assert_eq!(seeds(dir.path()), vec![1, 2, 4]);
        // A complete last line that does not parse is not the writer's to delete.
        let before = std::fs::read(&path).unwrap();
        OpenOptions::new().append(true).open(&path).unwrap().write_all(b"not json\n").unwrap();
        assert_eq!(cut_torn_tail(&path).unwrap(), 0);
        assert_eq!(std::fs::read(&path).unwrap().len(), before.len() + 9);
        // A file that is all torn line is emptied; a missing one is left missing.
        std::fs::write(&path, "{\"version\": 1, \"ta").unwrap();
        assert_eq!(cut_torn_tail(&path).unwrap(), 18);
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        assert_eq!(cut_torn_tail(&dir.path().join("none.jsonl")).unwrap(), 0);
        assert!(!dir.path().join("none.jsonl").exists());
    }
}
