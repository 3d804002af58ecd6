//! A collection split over the ranks of a data-parallel run ([`crate::dist`]): each rank
//! runs jobs `r, r + W, …`, then the ranks exchange their episodes (trajectory as JSON,
//! screenshots as raw RGB) so that every rank holds all of them in job order.

use super::runtime::off_runtime;
use super::stats::CollectStats;
use super::trajectory::{Recorded, Trajectory};
use crate::dist::ProcessGroup;
use anyhow::{ensure, Context};
use image::RgbImage;

/// Every rank's episodes of a collection of `n` jobs, with their job indices in order,
/// from this rank's (`ran`: the jobs `r, r + W, …`, or its error, which every rank then
/// reports); the stats as [`combine`] puts them on one clock.
pub(super) fn exchange(
    pg: &ProcessGroup,
    n: usize,
    ran: anyhow::Result<(Vec<(usize, Recorded)>, CollectStats)>,
) -> anyhow::Result<(Vec<(usize, Recorded)>, CollectStats)> {
    let w = pg.world();
    let payload = ran.map(|(recs, stats)| encode(&recs, &stats)).map_err(|e| format!("{e:#}"));
    let parts = off_runtime(|| pg.all_gather(payload))?;
    let mut slots: Vec<Option<Recorded>> = vec![None; n];
    let mut each = Vec::with_capacity(parts.len());
    for (rank, part) in parts.iter().enumerate() {
        let (recs, s) = decode(part).with_context(|| format!("the episodes rank {rank} sent"))?;
        each.push(s);
        for (i, rec) in recs {
            ensure!(
                i < n && i % w == rank && slots[i].is_none(),
                "rank {rank} sent episode {i}, not one of its jobs"
            );
            slots[i] = Some(rec);
        }
    }
    let stats = combine(&each);
    Ok((slots.into_iter().enumerate().filter_map(|(i, rec)| Some((i, rec?))).collect(), stats))
}

/// The ranks' stats of one round on one clock. Counts and the envs' per-step times add up.
/// The ranks ran side by side: the round took as long as the slowest, and the policy's
/// times (its calls, prompts, decode steps) are a rank's, the mean over ranks, so that the
/// envs' wait (the round less the policy's time) is one rank's too. Summed, two ranks'
/// policy time passed the round's and the wait read 0.
fn combine(each: &[CollectStats]) -> CollectStats {
    let mut stats = CollectStats::default();
    for s in each {
        stats.add(s);
    }
    let w = each.len().max(1) as f64;
    stats.seconds = each.iter().map(|s| s.seconds).fold(0.0, f64::max);
    stats.policy_secs /= w;
    stats.prefill_secs /= w;
    stats.decode_secs /= w;
    stats
}

/// `[stats JSON][count]{[index][trajectory JSON][frames]{[w][h][rgb]}}`, every number a
/// little-endian u64 and every byte string length-prefixed.
fn encode(recs: &[(usize, Recorded)], stats: &CollectStats) -> Vec<u8> {
    let mut out = Vec::new();
    let bytes = |b: &[u8], out: &mut Vec<u8>| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    bytes(&serde_json::to_vec(stats).expect("plain numbers"), &mut out);
    out.extend_from_slice(&(recs.len() as u64).to_le_bytes());
    for (i, rec) in recs {
        out.extend_from_slice(&(*i as u64).to_le_bytes());
        bytes(&serde_json::to_vec(&rec.trajectory).expect("a trajectory serializes"), &mut out);
        out.extend_from_slice(&(rec.frames.len() as u64).to_le_bytes());
        for f in &rec.frames {
            out.extend_from_slice(&u64::from(f.width()).to_le_bytes());
            out.extend_from_slice(&u64::from(f.height()).to_le_bytes());
            bytes(f.as_raw(), &mut out);
        }
    }
    out
}

fn decode(b: &[u8]) -> anyhow::Result<(Vec<(usize, Recorded)>, CollectStats)> {
    let mut r = crate::dist::Reader(b);
    let stats: CollectStats = serde_json::from_slice(&r.bytes()?)?;
    let n = r.u64()? as usize;
    let mut recs = Vec::with_capacity(n);
    for _ in 0..n {
        let i = r.u64()? as usize;
        let trajectory: Trajectory = serde_json::from_slice(&r.bytes()?)?;
        let frames = (0..r.u64()?)
            .map(|_| {
                let (w, h) = (r.u64()? as u32, r.u64()? as u32);
                let img = RgbImage::from_raw(w, h, r.bytes()?);
                img.map(Into::into).context("a frame's size does not match its pixels")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        recs.push((i, Recorded { trajectory, frames }));
    }
    ensure!(r.0.is_empty(), "{} bytes left over", r.0.len());
    Ok((recs, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{EpisodeStatus, Frame};
    use crate::rollout::{Outcome, TrajStep};

    #[test]
    fn episodes_travel_exactly() {
        let mut step = TrajStep::new("click(3, 4)", 0.25, EpisodeStatus::Success);
        step.tokens = vec![5, 9, 2];
        step.token_logprobs = vec![-0.1, -1.0e-7, -3.333_333_3];
        let trajectory = Trajectory {
            version: 1,
            task_id: "miniwob/click-test".into(),
            task_digest: None,
            seed: 7,
            instruction: "Click the button.".into(),
            frame: Frame::default(),
            max_steps: Some(3),
            rules: crate::env::EpisodeRules { strict_actions: true, ..Default::default() },
            policy: "vlm".into(),
            group: Some(12),
            steps: vec![step],
            final_frame: None,
            outcome: Outcome { reward: 0.25, status: EpisodeStatus::Success, steps: 1, error: None },
            judge: None,
        };
        let frames = vec![RgbImage::from_fn(3, 2, |x, y| image::Rgb([x as u8, y as u8, 9])).into(); 2];
        let rec = Recorded { trajectory, frames };
        let stats = CollectStats { episodes: 1, env_steps: 1, seconds: 0.5, ..Default::default() };
        let (back, s) = decode(&encode(&[(4, rec.clone())], &stats)).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0, 4);
        assert_eq!(back[0].1.trajectory, rec.trajectory);
        assert_eq!(back[0].1.frames, rec.frames);
        assert_eq!((s.episodes, s.env_steps, s.seconds), (1, 1, 0.5));
        let mut cut = encode(&[(4, rec)], &stats);
        cut.pop();
        assert!(decode(&cut).is_err());
    }

    /// Two ranks' rounds: counts add up, the round is the slower rank's, the policy's time
    /// one rank's (the mean), so the envs' wait is the round less it, not 0.
    #[test]
    fn two_ranks_rounds_are_put_on_one_clock() {
        let rank = |seconds: f64, policy: f64| CollectStats {
            episodes: 4,
            env_steps: 10,
            seconds,
            policy_secs: policy,
            decode_secs: policy,
            env_settle_secs: 0.2,
            ..Default::default()
        };
        let s = combine(&[rank(0.9, 0.5), rank(0.8, 0.48)]);
        assert_eq!((s.episodes, s.env_steps), (8, 20));
        assert!((s.seconds - 0.9).abs() < 1e-12, "{s:?}");
        assert!((s.policy_secs - 0.49).abs() < 1e-12 && (s.decode_secs - 0.49).abs() < 1e-12, "{s:?}");
        assert!((s.env_wait_secs() - 0.41).abs() < 1e-9, "{s:?}");
        assert!((s.env_settle_secs - 0.4).abs() < 1e-12, "summed over envs, as env_steps: {s:?}");
    }
}
