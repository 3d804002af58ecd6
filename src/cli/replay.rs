//! `guirl replay`.

use super::browser::BrowserArgs;
use crate::env::EnvConfig;
use crate::rollout::replay::replay_set;
use crate::rollout::TrajectorySet;
use std::path::PathBuf;

/// Arguments of `guirl replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A trajectory set folder (written by `guirl run --record`).
    dir: PathBuf,
    /// Exit with status 1 unless every trajectory reproduces (those recorded as an
    /// infrastructure failure are skipped and said so), at least one was replayed, and
    /// every recorded frame could be read and compared.
    #[arg(long)]
    verify: bool,
    /// Print one JSON object instead of text lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl replay`. Returns whether everything reproduced.
pub async fn replay(args: ReplayArgs) -> anyhow::Result<bool> {
    let set = TrajectorySet::read(&args.dir)?;
    let cfg = EnvConfig { browser: args.browser.config(), ..Default::default() };
    let reports = replay_set(&set, &cfg).await?;
    let unread: usize = reports.iter().map(|r| r.unreadable_frames.len()).sum();
    let reproduced = reports.iter().filter(|r| r.reproduced).count();
    let skipped = reports.iter().filter(|r| r.skipped.is_some()).count();
    let replayed = reports.len() - skipped;
    if args.json {
        let out = serde_json::json!({"replayed": replayed, "reproduced": reproduced, "skipped": skipped,
            "unreadable_frames": unread, "trajectories": reports});
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for r in &reports {
            if let Some(why) = &r.skipped {
                outln!("line={} task={} seed={} skipped={why:?}", r.line, r.task_id, r.seed);
                continue;
            }
            let max_diff = r.frame_diffs.iter().copied().fold(0.0, f64::max);
            let div = r
                .divergence
                .as_ref()
                .map(|d| format!(" diverged_at_step={} why={:?}", d.step, d.what))
                .unwrap_or_default();
            let unread = match r.unreadable_frames.len() {
                0 => String::new(),
                n => format!(" unreadable_frames={n}"),
            };
            outln!(
                "line={} task={} seed={} reproduced={} recorded={}/{} replayed={}/{} max_frame_diff={max_diff:.2}{unread}{div}",
                r.line, r.task_id, r.seed, r.reproduced, r.recorded.0, r.recorded.1, r.replayed.0, r.replayed.1
            );
        }
        let skipped = if skipped > 0 { format!(" skipped={skipped}") } else { String::new() };
        let unread =
            if unread > 0 { format!(" unreadable_frames={unread} (not compared)") } else { String::new() };
        outln!("replayed={replayed} reproduced={reproduced}{skipped}{unread}");
    }
    if args.verify && replayed == 0 {
        // A check that checked nothing must not pass (an empty set, only failures skipped).
        errln!(
            "--verify: nothing was replayed ({} trajectories, {skipped} skipped as infrastructure failures), \
             so nothing is verified",
            reports.len()
        );
        return Ok(false);
    }
    if args.verify && unread > 0 {
        // Screens that were not compared are not verified either.
        errln!(
            "--verify: {unread} recorded frames could not be read (missing or damaged files under {}), so \
             those screens were not compared: restore them, or replay without --verify to check the rest",
            args.dir.join(crate::rollout::store::FRAMES_DIR).display()
        );
        return Ok(false);
    }
    Ok(!args.verify || reproduced == replayed)
}
