//! One episode as the layouts (`rl`, `sft`, `steps`) see it: its rows' shared facts, its
//! screenshots read as stored, and the first prompt.

use super::columns::{EpisodeInfo, Png};
use crate::rollout::store::StoredTrajectory;
use crate::rollout::TrajectorySet;

/// The action grammar told to the model in every prompt (DESIGN's canonical text form).
pub const ACTION_HINT: &str = "Answer with exactly one action: click(x, y), double_click(x, y), \
right_click(x, y), hover(x, y), drag(x1, y1, x2, y2), scroll(x, y, dx, dy), type(\"text\"), \
key(Enter), key(ctrl+a), wait(ms) or done().";

/// A screenshot that could not be exported (missing, unreadable or not a PNG). Kept as
/// its own type so `skip_missing_frames` can tell it from other errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadFrame(pub String);

/// One episode, as the layouts see it.
pub struct Episode<'a> {
    /// The set it comes from (to load frames).
    pub set: &'a TrajectorySet,
    /// The trajectory and its line.
    pub stored: &'a StoredTrajectory,
    /// Group-relative advantage of its reward, when it is in a GRPO group.
    pub advantage: Option<f64>,
    /// Rows written before this episode (the `index` of its first row).
    pub index: usize,
    /// The `split` written in `extra_info` (`rl`, `sft`).
    pub split: &'a str,
    /// Discount of the `return` column (`steps`).
    pub gamma: f64,
}

impl Episode<'_> {
    /// The `extra_info` of the episode's rows.
    pub fn info(&self) -> EpisodeInfo {
        let t = &self.stored.trajectory;
        EpisodeInfo {
            split: self.split.to_string(),
            index: self.index as i64,
            task_id: t.task_id.clone(),
            seed: t.seed,
            episode: self.stored.line as i64,
            group: t.group,
            reward: t.outcome.reward,
            status: t.outcome.status.as_str().to_string(),
            invalid_steps: t.steps.iter().filter(|s| s.action_error.is_some()).count() as u64,
        }
    }

    /// The PNG bytes of frame `name` (step `step`'s screenshot, or the final one), read as
    /// stored: frames are PNG on disk already, so nothing is decoded or re-encoded.
    pub fn png(&self, name: Option<&str>, step: usize) -> Result<Png, BadFrame> {
        let line = self.stored.line;
        let name = name.ok_or_else(|| {
            BadFrame(format!(
                "{}:{line}: step {step} has no screenshot (the set was recorded without frames)",
                self.set.dir.join(crate::rollout::store::TRAJECTORIES_FILE).display()
            ))
        })?;
        let path = self.set.frame_path(name);
        let bytes = std::fs::read(&path).map_err(|e| {
            BadFrame(format!("cannot read frame {} (line {line}, step {step}): {e}", path.display()))
        })?;
        if let Err(why) = png_intact(&bytes) {
            return Err(BadFrame(format!("frame {} (line {line}, step {step}) {why}", path.display())));
        }
        Ok(Png(bytes))
    }

    /// The first user turn: one `<image>` (the screenshot), the instruction, the size of the
    /// screenshot (coordinates are its pixels) and the action grammar.
    pub fn first_prompt(&self, first: &Png) -> String {
        let t = &self.stored.trajectory;
        let size = png_size(&first.0).map(|(w, h)| format!(" The screenshot is {w}x{h} pixels; coordinates are integer pixels of it, origin top-left.")).unwrap_or_default();
        format!("<image>{}\n\n{ACTION_HINT}{size}", no_placeholders(&t.instruction))
    }
}

/// Width and height of a PNG from its header; `None` if the bytes are not a PNG.
pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != SIGNATURE || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&bytes[16..20]), be(&bytes[20..24])))
}

/// Whether `bytes` are a whole PNG: its signature and header, then every chunk in bounds
/// with its checksum, up to the end chunk. A truncated or damaged file
/// (the usual loss: a copy cut short) fails here without decoding any pixels.
pub fn png_intact(bytes: &[u8]) -> Result<(), String> {
    if png_size(bytes).is_none() {
        return Err("is not a PNG".into());
    }
    let mut at = 8;
    loop {
        let Some(head) = bytes.get(at..at + 8) else {
            return Err(format!("is cut short: {} bytes, with no end chunk", bytes.len()));
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(body) = bytes.get(at + 4..at + 8 + len) else {
            return Err(format!("is cut short: {} bytes, a chunk runs past the end", bytes.len()));
        };
        let Some(crc) = bytes.get(at + 8 + len..at + 12 + len) else {
            return Err(format!("is cut short: {} bytes, a chunk's checksum is missing", bytes.len()));
        };
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err(format!(
                "is damaged: the {} chunk at byte {at} fails its checksum",
                String::from_utf8_lossy(&head[4..8])
            ));
        }
        at += 12 + len;
        if &head[4..8] == b"IEND" {
            return Ok(());
        }
    }
}

/// Text with `<image>` / `<video>` defused: readers split message content on them, so
/// one inside an instruction or an action would break the placeholder count.
pub fn no_placeholders(s: &str) -> String {
    s.replace("<image>", "< image>").replace("<video>", "< video>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_or_damaged_png_is_told_from_a_whole_one() {
        let img = image::RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8 * 5, y as u8 * 7, 3]));
        let png = crate::env::encode_png(&img);
        assert_eq!(png_intact(&png), Ok(()));
        let cut = png_intact(&png[..100]).unwrap_err();
        assert!(cut.contains("cut short: 100 bytes"), "{cut}");
        assert!(png_intact(&png[..png.len() - 12]).unwrap_err().contains("no end chunk"));
        let mut bad = png.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x40;
        assert!(png_intact(&bad).unwrap_err().contains("fails its checksum"));
        assert_eq!(png_intact(b"GIF89a..............................").unwrap_err(), "is not a PNG");
    }
}
