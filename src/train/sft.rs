//! Behaviour cloning: token-mean cross-entropy on the action tokens of a recorded
//! trajectory set (demonstrations), at temperature 1.
//!
//! It runs with its own AdamW. Reinforcement learning then starts with a fresh optimizer
//! (TRL's and veRL's convention): the moments of the cloning stage describe another loss
//! and another learning rate, and carrying them over would make RL's first steps follow
//! the cloning gradients. The cloning AdamW is kept with the clone's checkpoint all the
//! same, so that cloning can be continued (`[sft] start_epoch`).
//!
//! What `run.seed` (the `seed` here) drives: the per-epoch shuffles and the keys of each
//! pass's randomness (LoRA dropout); in the trainer also which training seeds the oracle
//! demonstrations are recorded on, and the initial weights unless `[model] init` is set.
//!
//! A demonstration step the policy cannot write (an action kind outside `[model] kinds`,
//! text longer than the policy writes, no frame) is skipped and counted, not an error.
//!
//! The demonstrations are cloned in a canonical order ([`demo_order`]: by task, seed, then
//! the episode's actions), never in file order: several browsers append episodes in the
//! order they finish, and the per-epoch shuffles permute positions, so file order would
//! make the same config clone differently from run to run.

use super::config::SftConfig;
use super::optim::{clip_grad_norm, AdamW, AdamWConfig};
use super::seeds::{pass_key, rng_for};
use crate::dist::ProcessGroup;
use crate::env::{GuiAction, ScreenState};
use crate::policy::{Sampling, TrainablePolicy};
use crate::rollout::store::{StoredTrajectory, TRAJECTORIES_FILE};
use crate::rollout::TrajectorySet;
use anyhow::{bail, Context};
use rand::seq::SliceRandom;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// What behaviour cloning did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SftReport {
    /// Steps trained on.
    pub samples: usize,
    /// Demonstration steps skipped (the policy cannot write their action, the action
    /// could not be taken when recorded, or no frame).
    pub skipped: usize,
    /// Episodes left out whole: recorded as an infrastructure failure (`env_error`,
    /// `policy_error`, `judge_error`), so nothing the demonstrator meant to do.
    pub infrastructure_episodes: usize,
    /// Episodes cloned that did not succeed (cloning imitates them as they are).
    pub unsuccessful_episodes: usize,
    /// The first reason a step was skipped.
    pub first_skip: Option<String>,
    /// Mean NLL of the last epoch.
    pub final_nll: f64,
    /// False when `stop` was raised before the last epoch.
    pub finished: bool,
    /// The epoch reached: `sft.start_epoch` + the epochs run.
    pub epoch: usize,
    /// Mean wall-clock seconds of an epoch.
    pub secs_per_epoch: f64,
}

/// How to clone: `[sft]`, the optimizer settings (its learning rate is `sft.lr`), the
/// gradient-norm clip and the seed of the shuffles.
#[derive(Debug, Clone, Copy)]
pub struct SftSettings<'a> {
    /// `[sft]`.
    pub sft: &'a SftConfig,
    /// AdamW settings (`lr` is replaced by `sft.lr`).
    pub opt: AdamWConfig,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// Seed of the per-epoch shuffles.
    pub seed: u64,
    /// Data parallel ([`crate::dist`]): each rank scores its share of every minibatch and
    /// the gradients are summed; only rank 0 writes the log. `None`: one process.
    pub group: Option<&'a ProcessGroup>,
}

/// The episodes of `set` in the order behaviour cloning reads them: by task id, then seed,
/// then the episode's actions (so two episodes of one seed are ordered by what they did),
/// and only then by line in the file. The order depends on the set's content alone, not
/// on the order in which parallel browsers finished and appended the episodes.
pub fn demo_order(set: &TrajectorySet) -> Vec<&StoredTrajectory> {
    let mut order: Vec<&StoredTrajectory> = set.trajectories.iter().collect();
    // A stable sort: episodes equal in every key keep their file order.
    order.sort_by(|a, b| {
        let (x, y) = (&a.trajectory, &b.trajectory);
        let (ax, ay) = (x.steps.iter().map(|s| &s.action), y.steps.iter().map(|s| &s.action));
        (&x.task_id, x.seed).cmp(&(&y.task_id, y.seed)).then_with(|| ax.cmp(ay))
    });
    order
}

/// The (state, action tokens) pairs cloning trains on, in [`demo_order`]; steps the policy
/// cannot learn are counted in `report`.
fn demo_samples(
    policy: &dyn TrainablePolicy,
    set: &TrajectorySet,
    report: &mut SftReport,
) -> anyhow::Result<Vec<(ScreenState, Vec<u32>)>> {
    let mut samples: Vec<(ScreenState, Vec<u32>)> = Vec::new();
    let previous = policy.reads_previous_screenshot();
    for st in demo_order(set) {
        let t = &st.trajectory;
        // As `guirl export` does: a browser that failed says nothing of the task.
        if t.outcome.status.is_infrastructure_failure() {
            report.infrastructure_episodes += 1;
            continue;
        }
        report.unsuccessful_episodes += usize::from(t.outcome.status != crate::env::EpisodeStatus::Success);
        // The frame each step acted on is the one the next step sees as previous.
        let mut before: Option<std::sync::Arc<image::RgbImage>> = None;
        for (i, step) in t.steps.iter().enumerate() {
            let Some(frame) = &step.frame else {
                report.skipped += 1;
                before = None;
                continue;
            };
            let shot = std::sync::Arc::new(set.load_frame(frame).with_context(|| {
                format!("{}:{} step {i}: its screenshot", set.dir.join(TRAJECTORIES_FILE).display(), st.line)
            })?);
            let prev = std::mem::replace(&mut before, previous.then(|| shot.clone()));
            let state = t.state_at(i, shot, prev);
            // An action that could not be taken (off the page, typing with nothing focused)
            // demonstrates nothing.
            let tokens = match &step.action_error {
                Some(e) => Err(anyhow::anyhow!("it could not be taken when recorded: {e}")),
                None => GuiAction::parse(&step.action).map_err(anyhow::Error::from),
            }
            .and_then(|a| policy.encode(&state, &a));
            match tokens {
                Ok(tokens) => samples.push((state, tokens)),
                Err(e) => {
                    report.skipped += 1;
                    report.first_skip.get_or_insert_with(|| {
                        format!("{}:{} step {i} `{}`: {e:#}", set.dir.display(), st.line, step.action)
                    });
                }
            }
        }
    }
    Ok(samples)
}

/// The AdamW cloning steps with: `how.opt` at `sft.lr`, over `policy`'s trainable variables.
pub fn sft_optimizer(policy: &dyn TrainablePolicy, how: &SftSettings) -> anyhow::Result<AdamW> {
    Ok(AdamW::new(policy.trainable_vars(), AdamWConfig { lr: how.sft.lr, ..how.opt })?)
}

/// What runs after each epoch, given the epoch reached, the policy and the optimizer (the
/// trainer saves the cloning there).
pub type AfterEpoch<'a> = &'a mut dyn FnMut(usize, &dyn TrainablePolicy, &AdamW) -> anyhow::Result<()>;

/// Clone the demonstrations of `set` into `policy` (in [`demo_order`]) with `opt` (from
/// [`sft_optimizer`], or a clone's saved one to continue it), for epochs `sft.start_epoch
/// ..` `+ sft.epochs`; one JSON line per epoch goes to `log`, after the lines it holds of
/// the epochs before `sft.start_epoch` (a resumed cloning's).
pub fn clone_demonstrations(
    policy: &mut dyn TrainablePolicy,
    set: &TrajectorySet,
    how: SftSettings,
    opt: &mut AdamW,
    log: &Path,
    stop: &AtomicBool,
    after_epoch: AfterEpoch,
) -> anyhow::Result<SftReport> {
    let SftSettings { sft, max_grad_norm, seed, group, .. } = how;
    let mut report = SftReport::default();
    let samples = demo_samples(policy, set, &mut report)?;
    if report.infrastructure_episodes > 0 {
        tracing::warn!(
            "behaviour cloning leaves out {} episode(s) of {} recorded as an infrastructure failure \
             (env_error, policy_error, judge_error)",
            report.infrastructure_episodes,
            set.dir.display()
        );
    }
    if report.unsuccessful_episodes > 0 {
        tracing::warn!(
            "{} of the {} episodes cloned from {} did not succeed: cloning imitates them too \
             (record demonstrations that succeed, or a set of those only)",
            report.unsuccessful_episodes,
            set.trajectories.len() - report.infrastructure_episodes,
            set.dir.display()
        );
    }
    if report.skipped > 0 {
        tracing::warn!(
            "behaviour cloning skips {} of {} demonstration steps the policy cannot learn (first: {})",
            report.skipped,
            report.skipped + samples.len(),
            report.first_skip.as_deref().unwrap_or("a step without a frame")
        );
    }
    if samples.is_empty() {
        bail!(
            "{} has no steps the policy can learn from ({} skipped{})",
            set.dir.display(),
            report.skipped,
            report.first_skip.as_ref().map(|s| format!("; first: {s}")).unwrap_or_default()
        );
    }
    report.samples = samples.len();
    let mut log = match group.is_none_or(ProcessGroup::is_root) {
        true => Some(open_log(log, sft.start_epoch)?),
        false => None,
    };
    let sampling = policy.sampling();
    policy.set_sampling(Sampling { temperature: 1.0, ..sampling });
    report.finished = true;
    report.epoch = sft.start_epoch;
    let (started, mut ran) = (std::time::Instant::now(), 0);
    // Epochs are numbered from the clone's start, so a continued run draws what one
    // longer run would have.
    for epoch in sft.start_epoch..sft.start_epoch + sft.epochs {
        let stopping = stop.load(Ordering::SeqCst);
        if group.map_or(Ok(stopping), |g| g.any(stopping))? {
            report.finished = false;
            break;
        }
        let t0 = std::time::Instant::now();
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.shuffle(&mut rng_for(seed, epoch as u64, 7));
        let (mut total, mut count) = (0.0, 0);
        for (mb, chunk) in order.chunks(sft.minibatch.max(1)).enumerate() {
            // Data parallel: this rank's share of the minibatch; the mean still divides by
            // the whole minibatch's tokens, so the ranks' losses add up to its loss.
            let part = group.map_or(chunk, |g| &chunk[g.share(chunk.len())]);
            let tokens_all = chunk.iter().map(|&k| samples[k].1.len()).sum::<usize>().max(1) as f64;
            let states: Vec<ScreenState> = part.iter().map(|&k| samples[k].0.clone()).collect();
            let tokens: Vec<Vec<u32>> = part.iter().map(|&k| samples[k].1.clone()).collect();
            // behaviour cloning's purpose for its passes' keys
            let pass = pass_key(seed, 0, 0xB0C + super::update::rank_purpose(group), epoch as u64, mb as u64);
            let (mut grads, mut nll) = match part.is_empty() {
                true => (crate::dist::tensors::no_gradients()?, [0.0]),
                false => {
                    let s = policy.score_train(&states, &tokens, pass)?;
                    // Token-mean negative log-likelihood over the real action tokens.
                    let loss = (s.logp.sum_all()?.neg()? / tokens_all)?;
                    (policy.gradients(&loss)?, [loss.to_scalar::<f32>()? as f64])
                }
            };
            if let Some(g) = group {
                crate::dist::tensors::all_reduce_grads(g, &mut grads, opt.vars())?;
                g.all_reduce_f64(&mut nll)?;
            }
            let norm = clip_grad_norm(&mut grads, opt.vars(), max_grad_norm)?;
            if norm.is_finite() {
                opt.step(&grads)?;
            }
            total += nll[0];
            count += 1;
        }
        report.final_nll = total / count.max(1) as f64;
        let secs = t0.elapsed().as_secs_f64();
        if let Some(log) = log.as_mut() {
            // The same line for a log file or CI, where nothing else says the clone moves.
            tracing::info!(
                "behaviour cloning: epoch {}/{} nll {:.4} ({secs:.1} s)",
                epoch + 1,
                sft.start_epoch + sft.epochs,
                report.final_nll
            );
            writeln!(
                log,
                "{}",
                serde_json::json!({"epoch": epoch + 1, "nll": report.final_nll, "samples": samples.len(), "skipped": report.skipped, "secs": secs})
            )?;
        }
        ran += 1;
        report.epoch = epoch + 1;
        after_epoch(report.epoch, &*policy, opt)?;
    }
    report.secs_per_epoch = started.elapsed().as_secs_f64() / f64::from(ran.max(1));
    policy.set_sampling(sampling);
    Ok(report)
}

/// `sft.jsonl`, for appending after its lines of epochs `..= before` (the rest, a stopped
/// cloning's epochs that are cloned again, go).
fn open_log(path: &Path, before: usize) -> anyhow::Result<std::fs::File> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let epoch = |l: &str| serde_json::from_str::<serde_json::Value>(l).ok()?.get("epoch")?.as_u64();
    let keep: String = text
        .lines()
        .filter(|l| epoch(l).is_some_and(|e| e <= before as u64))
        .map(|l| format!("{l}\n"))
        .collect();
    crate::train::checkpoint::write_file_atomically(path, keep.as_bytes())?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::policy::vlm::speed::square_state;
    use crate::policy::vlm::{VlmConfig, VlmPolicy};
    use crate::rollout::store::TrajectoryWriter;
    use crate::rollout::{Outcome, Recorded, TrajStep, Trajectory};
    use candle_core::Device;

    fn keep_nothing(_: usize, _: &dyn TrainablePolicy, _: &AdamW) -> anyhow::Result<()> {
        Ok(())
    }

    /// A demonstration set with one click step and one `type` step.
    fn demos(dir: &Path) -> TrajectorySet {
        let state = square_state(160, 210, 20, 30, 30, [220, 30, 30], "Click the square, type hi");
        let step = |action: &str| TrajStep::new(action, 0.0, EpisodeStatus::Running);
        let outcome = Outcome { reward: 1.0, status: EpisodeStatus::Success, steps: 2, error: None };
        let mut t =
            Trajectory::new("builtin/demo", 0, vec![step("click(35, 45)"), step("type(\"hi\")")], outcome);
        t.instruction = state.instruction.clone();
        let shots = vec![state.screenshot.clone(), state.screenshot.clone(), state.screenshot];
        TrajectoryWriter::open(dir).unwrap().append(&Recorded { trajectory: t, frames: shots }).unwrap();
        TrajectorySet::read(dir).unwrap()
    }

    #[test]
    fn steps_the_policy_cannot_write_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let set = demos(&dir.path().join("demos"));
        let cfg: SftConfig = toml::from_str("dir = \"demos\"\nepochs = 2\nlr = 1e-3").unwrap();
        let stop = AtomicBool::new(false);
        let log = dir.path().join("sft.jsonl");
        // The tiny policy writes clicks only: the `type` step is skipped, the click learned.
        let mut vlm = VlmConfig::tiny();
        vlm.actions.kinds = vec!["click".into()];
        let mut p = VlmPolicy::new(vlm, &Device::Cpu, 0).unwrap();
        let how =
            SftSettings { sft: &cfg, opt: AdamWConfig::default(), max_grad_norm: 1.0, seed: 0, group: None };
        let mut opt = sft_optimizer(&p, &how).unwrap();
        let r = clone_demonstrations(&mut p, &set, how, &mut opt, &log, &stop, &mut keep_nothing).unwrap();
        assert_eq!((r.samples, r.skipped, r.finished), (1, 1, true), "{r:?}");
        assert!(r.first_skip.as_deref().unwrap().contains("type(\"hi\")"), "{r:?}");
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
        // A policy that can write neither has nothing to learn: an error that says why.
        let mut vlm = VlmConfig::tiny();
        vlm.actions.kinds = vec!["scroll".into()];
        let mut p = VlmPolicy::new(vlm, &Device::Cpu, 0).unwrap();
        let mut opt = sft_optimizer(&p, &how).unwrap();
        let e = clone_demonstrations(&mut p, &set, how, &mut opt, &log, &stop, &mut keep_nothing)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no steps the policy can learn from") && e.contains("2 skipped"), "{e}");
    }

    /// An episode the browser failed is left out whole, a step whose action could not be
    /// taken is skipped, and a failed episode is cloned but counted (each was trained on,
    /// silently, before).
    #[test]
    fn failures_and_untaken_actions_are_not_demonstrations() {
        let dir = tempfile::tempdir().unwrap();
        let set_dir = dir.path().join("demos");
        let state = square_state(160, 210, 20, 30, 30, [220, 30, 30], "Click the square");
        let mut w = TrajectoryWriter::open(&set_dir).unwrap();
        let episode = |seed: u64, status: EpisodeStatus, error: Option<&str>| {
            let mut step = TrajStep::new("click(35, 45)", 0.0, EpisodeStatus::Running);
            step.action_error = error.map(String::from);
            let outcome = Outcome { reward: 0.0, status, steps: 1, error: None };
            let mut t = Trajectory::new("builtin/demo", seed, vec![step], outcome);
            t.instruction = state.instruction.clone();
            Recorded { trajectory: t, frames: vec![state.screenshot.clone(), state.screenshot.clone()] }
        };
        w.append(&episode(0, EpisodeStatus::Success, None)).unwrap();
        w.append(&episode(1, EpisodeStatus::EnvError, None)).unwrap();
        w.append(&episode(2, EpisodeStatus::Fail, None)).unwrap();
        w.append(&episode(3, EpisodeStatus::Truncated, Some("(900, 5) is outside the screenshot"))).unwrap();
        let set = TrajectorySet::read(&set_dir).unwrap();
        let cfg: SftConfig = toml::from_str("dir = \"demos\"\nepochs = 1\nlr = 1e-3").unwrap();
        let how =
            SftSettings { sft: &cfg, opt: AdamWConfig::default(), max_grad_norm: 1.0, seed: 0, group: None };
        let mut vlm = VlmConfig::tiny();
        vlm.actions.kinds = vec!["click".into()];
        let mut p = VlmPolicy::new(vlm, &Device::Cpu, 0).unwrap();
        let mut opt = sft_optimizer(&p, &how).unwrap();
        let (log, stop) = (dir.path().join("sft.jsonl"), AtomicBool::new(false));
        let r = clone_demonstrations(&mut p, &set, how, &mut opt, &log, &stop, &mut keep_nothing).unwrap();
        assert_eq!(
            (r.samples, r.skipped, r.infrastructure_episodes, r.unsuccessful_episodes),
            (2, 1, 1, 2),
            "{r:?}"
        );
        assert!(r.first_skip.as_deref().unwrap().contains("could not be taken"), "{r:?}");
    }

    /// One-click episodes `(task, seed, x, y)`, appended to `dir` in the order given (as
    /// parallel browsers append them in the order they finish).
    fn clicks(dir: &Path, episodes: &[(&str, u64, u32, u32)]) -> TrajectorySet {
        let mut w = TrajectoryWriter::open(dir).unwrap();
        for &(task, seed, x, y) in episodes {
            let state = square_state(160, 210, x - 15, y - 15, 30, [220, 30, 30], "Click the square");
            let steps = vec![TrajStep::new(format!("click({x}, {y})"), 1.0, EpisodeStatus::Success)];
            let outcome = Outcome { reward: 1.0, status: EpisodeStatus::Success, steps: 1, error: None };
            let mut t = Trajectory::new(task, seed, steps, outcome);
            t.instruction = state.instruction.clone();
            let shots = vec![state.screenshot.clone(), state.screenshot];
            w.append(&Recorded { trajectory: t, frames: shots }).unwrap();
        }
        TrajectorySet::read(dir).unwrap()
    }

    #[test]
    fn demonstrations_clone_the_same_whatever_order_they_finished_in() {
        // The same five episodes (two of them on one seed), written in two finish orders.
        let eps = [
            ("builtin/b", 1, 35, 45),
            ("builtin/a", 7, 100, 60),
            ("builtin/a", 3, 80, 150),
            ("builtin/a", 3, 40, 120),
            ("builtin/a", 10, 120, 100),
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut reversed = eps;
        reversed.reverse();
        let (x, y) = (clicks(&dir.path().join("x"), &eps), clicks(&dir.path().join("y"), &reversed));
        // Ordered by task, then seed (numerically), then the episode's actions.
        let key = |set: &TrajectorySet| -> Vec<(String, u64, String)> {
            demo_order(set)
                .iter()
                .map(|s| {
                    (s.trajectory.task_id.clone(), s.trajectory.seed, s.trajectory.steps[0].action.clone())
                })
                .collect()
        };
        let want = [("a", 3, "click(40, 120)"), ("a", 3, "click(80, 150)"), ("a", 7, "click(100, 60)")]
            .into_iter()
            .chain([("a", 10, "click(120, 100)"), ("b", 1, "click(35, 45)")])
            .map(|(t, s, a)| (format!("builtin/{t}"), s, a.to_string()))
            .collect::<Vec<_>>();
        assert_eq!(key(&x), want);
        assert_eq!(key(&y), want);
        // Cloning both from the same initial weights gives the same weights, bit for bit
        // (the shuffles permute positions: in file order the minibatches would differ).
        let cfg: SftConfig = toml::from_str("dir = \"x\"\nepochs = 2\nlr = 1e-3\nminibatch = 2").unwrap();
        let stop = AtomicBool::new(false);
        let how =
            SftSettings { sft: &cfg, opt: AdamWConfig::default(), max_grad_norm: 1.0, seed: 3, group: None };
        let clone = |set: &TrajectorySet| {
            let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 0).unwrap();
            let mut opt = sft_optimizer(&p, &how).unwrap();
            let log = dir.path().join("sft.jsonl");
            let r = clone_demonstrations(&mut p, set, how, &mut opt, &log, &stop, &mut keep_nothing).unwrap();
            let w: Vec<f32> = p
                .named_vars()
                .iter()
                .flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap())
                .collect();
            (r.final_nll, w)
        };
        let (a, b) = (clone(&x), clone(&y));
        assert_eq!(a.0.to_bits(), b.0.to_bits(), "final NLL {} vs {}", a.0, b.0);
        assert!(a.1 == b.1, "the two orders cloned to different weights");
    }

    /// The weights of `p`, flattened in variable order.
    fn weights(p: &VlmPolicy) -> Vec<f32> {
        p.named_vars().iter().flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    }

    #[test]
    fn two_more_epochs_from_a_saved_clone_are_epochs_three_and_four_of_one_run() {
        let dir = tempfile::tempdir().unwrap();
        let set = clicks(
            &dir.path().join("d"),
            &[("builtin/a", 1, 35, 45), ("builtin/a", 2, 100, 60), ("builtin/a", 3, 80, 150)],
        );
        let stop = AtomicBool::new(false);
        let log = dir.path().join("sft.jsonl");
        let settings =
            |sft| SftSettings { sft, opt: AdamWConfig::default(), max_grad_norm: 1.0, seed: 5, group: None };
        let cfg = |epochs: usize, start_epoch: usize| SftConfig {
            epochs,
            start_epoch,
            ..toml::from_str("dir = \"d\"\nlr = 1e-3\nminibatch = 2").unwrap()
        };
        // One run of four epochs.
        let four = cfg(4, 0);
        let mut long = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 0).unwrap();
        let mut opt = sft_optimizer(&long, &settings(&four)).unwrap();
        clone_demonstrations(&mut long, &set, settings(&four), &mut opt, &log, &stop, &mut keep_nothing)
            .unwrap();
        // Two epochs, the clone saved (weights and its AdamW), then two more from it.
        let two = cfg(2, 0);
        let clone = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 0).unwrap();
        let mut p = clone;
        let mut opt = sft_optimizer(&p, &settings(&two)).unwrap();
        clone_demonstrations(&mut p, &set, settings(&two), &mut opt, &log, &stop, &mut keep_nothing).unwrap();
        p.save(&dir.path().join("clone")).unwrap();
        opt.save(&dir.path().join("clone/sft_optimizer.safetensors")).unwrap();
        let more = cfg(2, 2);
        // Another seed's initial weights: the clone's are loaded over them.
        let mut q = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 9).unwrap();
        q.load(&dir.path().join("clone")).unwrap();
        let mut opt = sft_optimizer(&q, &settings(&more)).unwrap();
        opt.load(&dir.path().join("clone/sft_optimizer.safetensors")).unwrap();
        clone_demonstrations(&mut q, &set, settings(&more), &mut opt, &log, &stop, &mut keep_nothing)
            .unwrap();
        assert!(weights(&q) == weights(&long), "2 + 2 epochs differ from 4");
        let epochs: Vec<u64> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["epoch"].as_u64().unwrap())
            .collect();
        // The same log: the clone's epochs, then the continuation's, numbered on.
        assert_eq!(epochs, [1, 2, 3, 4], "the log counts the clone's epochs too");
        // Without the clone's optimizer (fresh moments) the continuation is another run.
        let mut r = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 0).unwrap();
        r.load(&dir.path().join("clone")).unwrap();
        let mut fresh = sft_optimizer(&r, &settings(&more)).unwrap();
        clone_demonstrations(&mut r, &set, settings(&more), &mut fresh, &log, &stop, &mut keep_nothing)
            .unwrap();
        assert!(weights(&r) != weights(&long));
    }
}
