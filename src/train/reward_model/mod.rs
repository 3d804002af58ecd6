//! Training the learned reward model (`guirl train-reward DIRS... --out PATH`).
//!
//! ```text
//! episodes  every trajectory of DIRS that ended as the agent's doing (success, fail,
//!           truncated, invalid_action; not env_error / policy_error) and kept its final frame
//! input     the final frame (after the last step) + instruction (+ the actions' text forms)
//! label     y = 1 if the episode succeeded, else 0
//! split     per class, a seeded shuffle; `holdout` of each class is held out (stratified,
//!           by episode, the same for the same seed and folders)
//! train     epochs × shuffled minibatches of BCE(logit, y) → AdamW(lr)
//! report    on the held-out episodes: accuracy at ½, ROC AUC, Brier score, ECE, reliability bins
//! ```
//!
//! The output folder (see [`crate::policy::reward_model`]) is written under a temporary
//! name and renamed into place, so a killed run never leaves half a model at `--out`.

pub mod metrics;
pub mod plot;

pub use metrics::{auc, reward_metrics, ReliabilityBin, RewardMetrics};

use super::optim::{AdamW, AdamWConfig};
use super::seeds::rng_for;
use crate::env::EpisodeStatus;
use crate::policy::reward_model::{bce_with_logits, Provenance, RewardConfig, RewardExample, RewardModel};
use crate::rollout::TrajectorySet;
use anyhow::{bail, Context, Result};
use candle_core::Tensor;
use rand::seq::SliceRandom;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The metrics file in a reward model folder.
pub const REWARD_METRICS: &str = "metrics.json";
/// The reliability plot in a reward model folder.
pub const RELIABILITY_PLOT: &str = "reliability.png";

/// How to train a reward model.
#[derive(Debug, Clone)]
pub struct RewardTrainOptions {
    /// Trajectory set folders (written by `guirl run --record`, `guirl train`, ...).
    pub dirs: Vec<PathBuf>,
    /// The model folder to write.
    pub out: PathBuf,
    /// Replace `out` if it exists.
    pub force: bool,
    /// Passes over the training episodes.
    pub epochs: usize,
    /// AdamW learning rate.
    pub lr: f64,
    /// Episodes per minibatch.
    pub batch_size: usize,
    /// Seed of the split, the init and the shuffles.
    pub seed: u64,
    /// Fraction of each class held out for the metrics.
    pub holdout: f64,
    /// Read the action history too.
    pub history: bool,
    /// Screenshot size the model sees (width, height; multiples of 8).
    pub image_size: (usize, usize),
}

impl Default for RewardTrainOptions {
    fn default() -> Self {
        RewardTrainOptions {
            dirs: vec![],
            out: PathBuf::from("reward-model"),
            force: false,
            epochs: 30,
            lr: 2e-3,
            batch_size: 32,
            seed: 0,
            holdout: 0.2,
            history: false,
            image_size: (96, 96),
        }
    }
}

/// Episodes left out of the training, by why.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Skipped {
    /// Ended by a browser or policy failure (or never finished): not the agent's outcome.
    pub not_the_agents_outcome: usize,
    /// No final frame kept.
    pub no_final_frame: usize,
}

/// One labelled episode.
#[derive(Debug, Clone)]
pub struct LabelledEpisode {
    /// What the model reads.
    pub example: RewardExample,
    /// Whether it succeeded.
    pub success: bool,
    /// Its task.
    pub task_id: String,
}

/// What a training run measured (also written to `metrics.json`).
#[derive(Debug, Clone, Serialize)]
pub struct RewardTrainReport {
    /// The model folder.
    pub out: PathBuf,
    /// Held-out metrics.
    pub heldout: RewardMetrics,
    /// Training episodes and of them successes.
    pub train_episodes: usize,
    /// Successes among the training episodes.
    pub train_successes: usize,
    /// Accuracy at ½ on the training episodes (against the held-out one: overfitting).
    pub train_accuracy: f64,
    /// Mean BCE of each epoch.
    pub epoch_losses: Vec<f64>,
    /// Episodes left out.
    pub skipped: Skipped,
    /// Seconds spent training (reading the folders not included).
    pub train_seconds: f64,
}

/// Read the labelled episodes of `dirs`; errors name the folder.
pub fn read_episodes(dirs: &[PathBuf]) -> Result<(Vec<LabelledEpisode>, Skipped)> {
    let mut out = Vec::new();
    let mut skipped = Skipped::default();
    for dir in dirs {
        let set = TrajectorySet::read(dir)?;
        // Parallel browsers write episodes in the order they finish; read them in task and
        // seed order so the held-out split depends on the folders' content alone.
        let mut order: Vec<_> = set.trajectories.iter().collect();
        order.sort_by(|a, b| {
            let (x, y) = (&a.trajectory, &b.trajectory);
            (&x.task_id, x.seed, a.line).cmp(&(&y.task_id, y.seed, b.line))
        });
        for st in order {
            let t = &st.trajectory;
            let status = t.outcome.status;
            if matches!(status, EpisodeStatus::Running | EpisodeStatus::EnvError | EpisodeStatus::PolicyError)
            {
                skipped.not_the_agents_outcome += 1;
                continue;
            }
            let Some(name) = &t.final_frame else {
                skipped.no_final_frame += 1;
                continue;
            };
            let image = set.load_frame(name).with_context(|| format!("{}:{}", dir.display(), st.line))?;
            out.push(LabelledEpisode {
                example: RewardExample {
                    image,
                    instruction: t.instruction.clone(),
                    history: t.steps.iter().map(|s| s.action.clone()).collect(),
                },
                success: status == EpisodeStatus::Success,
                task_id: t.task_id.clone(),
            });
        }
    }
    Ok((out, skipped))
}

fn check_options(o: &RewardTrainOptions) -> Result<()> {
    if o.dirs.is_empty() {
        bail!("give at least one trajectory folder (written by `guirl run --record DIR`)");
    }
    if o.out.exists() && !o.force {
        bail!("--out {} exists: pick another path, or pass --force to replace it", o.out.display());
    }
    if o.epochs == 0 {
        bail!("--epochs must be at least 1");
    }
    if !(o.lr > 0.0 && o.lr <= 1.0) {
        bail!("--lr must be in (0, 1], got {}", o.lr);
    }
    if o.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    if !(o.holdout > 0.0 && o.holdout < 1.0) {
        bail!("--holdout must be in (0, 1), got {}: the metrics need held-out episodes", o.holdout);
    }
    let (w, h) = o.image_size;
    if w < 8 || h < 8 || w > 1024 || h > 1024 || w % 8 != 0 || h % 8 != 0 {
        bail!("--image-size {w}x{h}: use multiples of 8 from 8 to 1024");
    }
    Ok(())
}

/// Split `eps` by class: from each class a seeded shuffle, `holdout` of it (at least one,
/// never all) held out. Returns (train, held-out) indices.
pub fn split(eps: &[LabelledEpisode], holdout: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut rng = rng_for(seed, 0, 0x5e7);
    let (mut train, mut held) = (Vec::new(), Vec::new());
    for class in [true, false] {
        let mut idx: Vec<usize> = (0..eps.len()).filter(|&i| eps[i].success == class).collect();
        idx.shuffle(&mut rng);
        let k = ((holdout * idx.len() as f64).round() as usize).clamp(1, idx.len().saturating_sub(1));
        held.extend_from_slice(&idx[..k]);
        train.extend_from_slice(&idx[k..]);
    }
    (train, held)
}

/// Train a reward model on the episodes of `o.dirs` and write its folder at `o.out`.
pub fn train_reward_model(o: &RewardTrainOptions) -> Result<RewardTrainReport> {
    check_options(o)?;
    let (eps, skipped) = read_episodes(&o.dirs)?;
    let folders = o.dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" ");
    if eps.is_empty() {
        if skipped.no_final_frame > 0 {
            bail!(
                "no episode in {folders} kept its final frame ({} without one): record with \
                 `guirl run --task TASK --policy POLICY --record DIR`, which keeps every frame",
                skipped.no_final_frame
            );
        }
        bail!(
            "{folders}: no finished episodes to learn from ({} ended by a browser or policy failure)",
            skipped.not_the_agents_outcome
        );
    }
    let wins = eps.iter().filter(|e| e.success).count();
    let losses = eps.len() - wins;
    if wins < 2 || losses < 2 {
        let task = eps[0].task_id.clone();
        let hint = if losses < 2 {
            format!("record failures too, e.g. `guirl run --task {task} --policy random --episodes 50 --record DIR`")
        } else {
            format!(
                "record successes too, e.g. `guirl run --task {task} --policy oracle --episodes 50 --record DIR` \
                 (built-in and MiniWoB++ tasks), or with a trained checkpoint"
            )
        };
        bail!(
            "{folders}: {wins} successful and {losses} failed episodes; the reward model needs at least 2 of each \
             (1 to train on, 1 held out): {hint}"
        );
    }
    let (train_idx, held_idx) = split(&eps, o.holdout, o.seed);
    let t0 = Instant::now();
    let model = RewardModel::new(
        RewardConfig::new(o.image_size.0, o.image_size.1, o.history),
        &candle_core::Device::Cpu,
        o.seed,
    )?;
    let examples = |idx: &[usize]| idx.iter().map(|&i| eps[i].example.clone()).collect::<Vec<_>>();
    let labels = |idx: &[usize]| idx.iter().map(|&i| eps[i].success).collect::<Vec<bool>>();
    let x_train = model.inputs(&examples(&train_idx))?;
    let y_train = labels(&train_idx);
    let y_tensor = Tensor::from_vec(
        y_train.iter().map(|&b| f32::from(u8::from(b))).collect::<Vec<_>>(),
        y_train.len(),
        model.device(),
    )?;
    let mut opt = AdamW::new(model.named_vars(), AdamWConfig { lr: o.lr, ..Default::default() })?;
    let mut rng = rng_for(o.seed, 0, 0xba7c);
    let mut epoch_losses = Vec::with_capacity(o.epochs);
    for epoch in 0..o.epochs {
        let mut rows: Vec<usize> = (0..y_train.len()).collect();
        rows.shuffle(&mut rng);
        let (mut sum, mut n) = (0.0, 0usize);
        for mb in rows.chunks(o.batch_size) {
            let idx =
                Tensor::from_vec(mb.iter().map(|&r| r as u32).collect::<Vec<_>>(), mb.len(), model.device())?;
            let loss = bce_with_logits(
                &model.net().forward(&x_train.select(mb)?)?,
                &y_tensor.index_select(&idx, 0)?,
            )?;
            opt.step(&loss.backward()?)?;
            sum += f64::from(loss.to_scalar::<f32>()?) * mb.len() as f64;
            n += mb.len();
        }
        let mean = sum / n.max(1) as f64;
        tracing::info!("reward model: epoch {}/{} loss {mean:.4}", epoch + 1, o.epochs);
        epoch_losses.push(mean);
    }
    let train_seconds = t0.elapsed().as_secs_f64();
    let to_f64 = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
    let p_train = to_f64(model.predict_inputs(&x_train)?);
    let train_accuracy = reward_metrics(&p_train, &y_train).accuracy;
    let p_held = to_f64(model.predict_batch(&examples(&held_idx))?);
    let heldout = reward_metrics(&p_held, &labels(&held_idx));

    let mut tasks: Vec<String> = eps.iter().map(|e| e.task_id.clone()).collect();
    tasks.sort();
    tasks.dedup();
    let provenance = Provenance {
        guirl_version: env!("CARGO_PKG_VERSION").into(),
        trajectory_dirs: o.dirs.iter().map(|d| d.display().to_string()).collect(),
        tasks,
        train_episodes: train_idx.len(),
        train_successes: y_train.iter().filter(|&&b| b).count(),
        heldout_episodes: held_idx.len(),
        epochs: o.epochs,
        lr: o.lr,
        batch_size: o.batch_size,
        seed: o.seed,
        holdout: o.holdout,
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let report = RewardTrainReport {
        out: o.out.clone(),
        heldout,
        train_episodes: train_idx.len(),
        train_successes: provenance.train_successes,
        train_accuracy,
        epoch_losses,
        skipped,
        train_seconds,
    };
    write_model_folder(&model, provenance, &report, &o.out)?;
    Ok(report)
}

/// Write the model, its metrics and its plot under a temporary name beside `out`, then
/// move it into place (replacing what was there).
fn write_model_folder(
    model: &RewardModel,
    provenance: Provenance,
    report: &RewardTrainReport,
    out: &Path,
) -> Result<()> {
    let name =
        out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "reward-model".into());
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    model.save(&tmp, provenance)?;
    let metrics = tmp.join(REWARD_METRICS);
    std::fs::write(&metrics, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("cannot write {}", metrics.display()))?;
    plot::write_reliability_plot(&report.heldout, &tmp.join(RELIABILITY_PLOT))?;
    if out.is_dir() {
        std::fs::remove_dir_all(out).with_context(|| format!("cannot replace {}", out.display()))?;
    } else if out.exists() {
        std::fs::remove_file(out).with_context(|| format!("cannot replace {}", out.display()))?;
    }
    std::fs::rename(&tmp, out).with_context(|| format!("cannot move {} to {}", tmp.display(), out.display()))
}
