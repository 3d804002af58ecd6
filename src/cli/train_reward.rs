//! `guirl train-reward`.

use crate::train::reward_model::{train_reward_model, RewardTrainOptions};
use anyhow::bail;
use std::path::PathBuf;

/// Arguments of `guirl train-reward`.
#[derive(Debug, clap::Args)]
pub struct TrainRewardArgs {
    /// Trajectory set folders (written by `guirl run --record DIR`); their episodes'
    /// outcomes are the labels, so record failures as well as successes.
    #[arg(required = true, value_name = "DIRS")]
    dirs: Vec<PathBuf>,
    /// The model folder to write (weights, reward_model.json, metrics.json, reliability.png).
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    /// Replace --out if it exists.
    #[arg(long)]
    force: bool,
    /// Passes over the training episodes.
    #[arg(long, default_value_t = RewardTrainOptions::default().epochs)]
    epochs: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = RewardTrainOptions::default().lr)]
    lr: f64,
    /// Episodes per minibatch.
    #[arg(long, default_value_t = RewardTrainOptions::default().batch_size)]
    batch_size: usize,
    /// Seed of the held-out split, the initial weights and the shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fraction of each class (successes, failures) held out for the metrics.
    #[arg(long, default_value_t = RewardTrainOptions::default().holdout)]
    holdout: f64,
    /// Also read the action history (the actions' verbs, keys and typed text, and their count).
    #[arg(long)]
    history: bool,
    /// Screenshot size the model sees: N (square) or WxH, multiples of 8.
    #[arg(long, default_value = "96", value_name = "N|WxH")]
    image_size: String,
}

fn parse_size(s: &str) -> anyhow::Result<(usize, usize)> {
    let (w, h) = s.split_once(['x', 'X']).unwrap_or((s, s));
    match (w.trim().parse(), h.trim().parse()) {
        (Ok(w), Ok(h)) => Ok((w, h)),
        _ => bail!("--image-size {s:?}: give N or WxH, e.g. 96 or 128x96"),
    }
}

/// `guirl train-reward`.
pub fn train_reward(args: TrainRewardArgs) -> anyhow::Result<()> {
    let opts = RewardTrainOptions {
        dirs: args.dirs,
        out: args.out,
        force: args.force,
        epochs: args.epochs,
        lr: args.lr,
        batch_size: args.batch_size,
        seed: args.seed,
        holdout: args.holdout,
        history: args.history,
        image_size: parse_size(&args.image_size)?,
    };
    let r = train_reward_model(&opts)?;
    let m = &r.heldout;
    outln!(
        "out={} train_episodes={} heldout_episodes={} heldout_successes={} accuracy={:.3} auc={} brier={:.4} ece={:.4} \
         train_accuracy={:.3} train_secs={:.1}",
        r.out.display(),
        r.train_episodes,
        m.episodes,
        m.successes,
        m.accuracy,
        m.auc.map_or("-".into(), |a| format!("{a:.3}")),
        m.brier,
        m.ece,
        r.train_accuracy,
        r.train_seconds
    );
    Ok(())
}
