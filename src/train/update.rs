//! The policy update of one iteration: μ epochs of shuffled minibatches, each scoring the
//! sampled token ids again under the current policy (and the frozen reference), then one
//! optimizer step on the configured objective.
//!
//! With GSPO's trajectory-level ratio (`[algo.gspo] level = "trajectory"`) minibatches hold whole
//! trajectories (shuffled as units, each minibatch at least `minibatch` steps), so the
//! ratio sees every token of a trajectory.
//!
//! A minibatch whose loss or gradient norm is not finite is skipped (no optimizer step)
//! and counted; the means reported leave it out, so one bad minibatch cannot turn the
//! iteration's metrics into NaN.
//!
//! `[algo] target_kl` stops the update early, with Stable-Baselines3's rule (CleanRL's is
//! the same test made once per epoch, on the last minibatch, against `target_kl` itself):
//!
//! ```text
//! approx_kl = Σ_tokens m·((ρ − 1) − log ρ) / Σ m     k3 of KL(π_old ‖ π) over the minibatch's
//!                                                  counted tokens, ρ = π/π_old, measured by
//!                                                  its forward pass, before its step
//! approx_kl > 1.5 · target_kl  ⇒  no step on this minibatch, and none on the remaining
//!                                  minibatches and epochs of the iteration
//! ```

use super::config::{AlgoConfig, AlgoVariant, GspoConfig, GspoLevel, MinibatchOrder};
use super::metrics::mean_loss_stats;
use super::objective::{policy_loss, LossInputs, LossStats, Whole};
use super::optim::{clip_grad_norm, AdamW};
use super::seeds::{pass_key, rng_for};
use crate::dist::ProcessGroup;
use crate::env::ScreenState;
use crate::policy::TrainablePolicy;
use anyhow::ensure;
use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;

/// `pass_key`'s purpose for the update's training passes.
const PASS_PURPOSE: u64 = 0x5CA1E;
/// How far apart the ranks' purposes are (rank 0's is one process's).
const RANK_PURPOSE_STRIDE: u64 = 1 << 24;

/// What a rank adds to a pass purpose, so each rank draws its own dropout masks (0 for rank
/// 0 and for one process, which keep one process's keys).
pub(crate) fn rank_purpose(pg: Option<&crate::dist::ProcessGroup>) -> u64 {
    pg.map_or(0, |g| g.rank() as u64) * RANK_PURPOSE_STRIDE
}

/// The steps of `recs` to train on: every step of every rollout that has an advantage,
/// with the token ids it sampled, less the replayed prefix of a branched rollout. A step whose record lacks them is an error (the
/// log-probs would belong to other tokens).
pub(crate) fn samples(
    recs: &[crate::rollout::Recorded],
    index: &[Vec<usize>],
    adv: &super::advantage::StepAdvantages,
    previous: bool,
) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    for g in 0..index.len() {
        for (j, a) in adv[g].iter().enumerate() {
            let Some(a) = a else { continue };
            let rec = &recs[index[g][j]];
            // A branched rollout's replayed steps were sampled in another rollout.
            for (i, step) in rec.trajectory.steps.iter().enumerate().filter(|(_, s)| !s.prefix) {
                let Some(state) = rec.state_at(i, previous) else { continue };
                anyhow::ensure!(
                    step.tokens.len() == step.token_logprobs.len() && !step.tokens.is_empty(),
                    "rollout {} step {i} (`{}`): {} token ids but {} log-probs recorded",
                    index[g][j],
                    step.action,
                    step.tokens.len(),
                    step.token_logprobs.len()
                );
                out.push(Sample {
                    state,
                    tokens: step.tokens.clone(),
                    old_logp: step.token_logprobs.clone(),
                    adv: a[i] as f32,
                    traj: index[g][j],
                    group: g,
                    behaviour_weight: None,
                });
            }
        }
    }
    Ok(out)
}

/// One step to learn from: the state it was taken in, the token ids the policy sampled,
/// their log-probs at sampling time, and the step's advantage.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The observation acted on.
    pub state: ScreenState,
    /// The sampled token ids.
    pub tokens: Vec<u32>,
    /// log π_old of each token: recorded when it was sampled, or, for a rollout of
    /// older weights (`[rollout] max_staleness = 1`), scored by the policy when the update
    /// starts (π_prox, see `decoupled.rs`).
    pub old_logp: Vec<f32>,
    /// The advantage.
    pub adv: f32,
    /// Which trajectory of the iteration the step belongs to (any id, equal for the steps
    /// of one trajectory).
    pub traj: usize,
    /// Which group of the iteration its trajectory belongs to (any id, equal for the
    /// rollouts of one group; `minibatch_order = "group_steps"` keeps a group's samples of
    /// one env step together).
    pub group: usize,
    /// Each token's decoupled-objective weight `min(π_prox / π_behav, cap)` when the
    /// rollout's policy is older than π_old (see `decoupled.rs`); `None`: it is π_old.
    pub behaviour_weight: Option<Vec<f32>>,
}

impl Sample {
    /// Its group and env step: the samples of a group's one step (at its first, one screen
    /// and one prompt) go together where the order lets them.
    pub fn group_step(&self) -> (usize, u32) {
        (self.group, self.state.step)
    }
}

/// What the update did.
#[derive(Debug, Clone, Default)]
pub struct UpdateStats {
    /// Token-weighted mean of the minibatches' loss statistics (finite ones).
    pub loss: LossStats,
    /// The first minibatch's statistics (its ratio is 1 up to float error: the policy has
    /// not moved yet).
    pub first: Option<LossStats>,
    /// Mean gradient norm before clipping, over the steps taken.
    pub grad_norm: f64,
    /// Optimizer steps taken.
    pub optimizer_steps: u64,
    /// Minibatches skipped for a non-finite loss or gradient norm.
    pub skipped_steps: u64,
    /// Minibatches with a zero gradient, not stepped (see [`update`]).
    pub flat_steps: u64,
    /// Tokens trained on (all epochs).
    pub tokens: usize,
    /// Where `target_kl` stopped the update (`None`: it ran every epoch).
    pub kl_stop: Option<KlStop>,
}

/// Where the approximate-KL early stop (`[algo] target_kl`) ended an update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlStop {
    /// The epoch, from 1.
    pub epoch: usize,
    /// The minibatch within that epoch, from 1 (it took no step).
    pub minibatch: usize,
    /// Its approximate KL(π_old ‖ π), which exceeded 1.5 × `target_kl`.
    pub approx_kl: f64,
}

/// Pad per-sample rows into a `[B, T]` tensor; every row must fit.
fn padded(rows: &[&[f32]], t: usize, device: &Device) -> candle_core::Result<Tensor> {
    let mut flat = vec![0f32; rows.len() * t];
    for (b, r) in rows.iter().enumerate() {
        flat[b * t..b * t + r.len()].copy_from_slice(r);
    }
    Tensor::from_vec(flat, (rows.len(), t), device)
}

/// What a minibatch keeps together ([`minibatches`]).
#[derive(Clone, Copy)]
enum Units {
    /// Nothing: samples one by one.
    Samples,
    /// Whole trajectories (GSPO's trajectory-level ratio).
    Trajectories,
    /// A group's samples of one env step (`minibatch_order = "group_steps"`).
    GroupSteps,
}

impl Units {
    fn of(algo: &AlgoConfig) -> Units {
        match (&algo.variant, algo.minibatch_order) {
            (AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory }), _) => Units::Trajectories,
            (_, MinibatchOrder::GroupSteps) => Units::GroupSteps,
            (_, MinibatchOrder::Shuffled) => Units::Samples,
        }
    }
}

/// Minibatches of sample indices: `order` cut into `size`-long pieces; with
/// [`Units::GroupSteps`], first reordered so a group's samples of one env step follow each
/// other (the sets in the order their first sample appears in `order`), then cut alike;
/// with [`Units::Trajectories`], whole trajectories in the order their first sample
/// appears in `order`, cut once a piece holds at least `size` samples.
fn minibatches(samples: &[Sample], order: &[usize], size: usize, units: Units) -> Vec<Vec<usize>> {
    let key = |k: usize| match units {
        Units::Samples => None,
        Units::Trajectories => Some((samples[k].traj, 0)),
        Units::GroupSteps => Some(samples[k].group_step()),
    };
    if let Units::Samples = units {
        return order.chunks(size).map(<[usize]>::to_vec).collect();
    }
    let mut sets: Vec<Vec<usize>> = Vec::new();
    let mut at: std::collections::HashMap<(usize, u32), usize> = Default::default();
    for &k in order {
        let set = *at.entry(key(k).expect("units")).or_insert_with(|| {
            sets.push(Vec::new());
            sets.len() - 1
        });
        sets[set].push(k);
    }
    if let Units::GroupSteps = units {
        return sets.concat().chunks(size).map(<[usize]>::to_vec).collect();
    }
    let mut out: Vec<Vec<usize>> = vec![Vec::new()];
    for mut set in sets {
        set.sort_unstable(); // a trajectory's samples in their order
        if out.last().is_some_and(|c| c.len() >= size) {
            out.push(Vec::new());
        }
        out.last_mut().expect("one").extend(set);
    }
    out.retain(|c| !c.is_empty());
    out
}

/// `[K, B]` 0/1 membership of the chunk's samples in its K trajectories.
fn segments(samples: &[Sample], chunk: &[usize], device: &Device) -> candle_core::Result<Tensor> {
    let mut ids: Vec<usize> = chunk.iter().map(|&k| samples[k].traj).collect();
    ids.sort_unstable();
    ids.dedup();
    let b = chunk.len();
    let mut flat = vec![0f32; ids.len() * b];
    for (j, &k) in chunk.iter().enumerate() {
        let row = ids.binary_search(&samples[k].traj).expect("listed");
        flat[row * b + j] = 1.0;
    }
    Tensor::from_vec(flat, (ids.len(), b), device)
}

/// This rank's part of a minibatch: its share of the chunk's samples, or, `by_traj`, of
/// its trajectories (a chunk lists each trajectory's samples together).
fn part_of(samples: &[Sample], chunk: &[usize], by_traj: bool, pg: &ProcessGroup) -> Vec<usize> {
    if !by_traj {
        return chunk[pg.share(chunk.len())].to_vec();
    }
    let mut units: Vec<Vec<usize>> = Vec::new();
    for &k in chunk {
        match units.last_mut() {
            Some(u) if samples[u[0]].traj == samples[k].traj => u.push(k),
            _ => units.push(vec![k]),
        }
    }
    units[pg.share(units.len())].concat()
}

/// The statistics of every rank's part summed: with [`Whole`] counts, the minibatch's.
fn sum_over_ranks(pg: &ProcessGroup, s: LossStats) -> anyhow::Result<LossStats> {
    let mut v = [
        s.loss,
        s.policy_loss,
        s.kl,
        s.entropy,
        s.clip_frac,
        s.dual_clip_frac,
        s.ratio_mean,
        s.approx_kl_old,
        s.tokens as f64,
    ];
    pg.all_reduce_f64(&mut v)?;
    let [loss, policy_loss, kl, entropy, clip_frac, dual_clip_frac, ratio_mean, approx_kl_old, tokens] = v;
    Ok(LossStats {
        loss,
        policy_loss,
        kl,
        entropy,
        clip_frac,
        dual_clip_frac,
        ratio_mean,
        approx_kl_old,
        tokens: tokens as usize,
    })
}

/// Run the update on `samples` (see the module docs).
pub fn update(
    policy: &dyn TrainablePolicy,
    reference: Option<&dyn TrainablePolicy>,
    opt: &mut AdamW,
    samples: &[Sample],
    algo: &AlgoConfig,
    seed: u64,
    iteration: u64,
) -> anyhow::Result<UpdateStats> {
    update_parallel(policy, reference, opt, samples, algo, seed, iteration, None)
}

/// [`update`] on one rank of a data-parallel run: every rank holds all of `samples`, scores
/// its part of each minibatch with the whole minibatch's counts ([`Whole`]), and the
/// gradients and statistics are summed over the ranks before anything is decided, so every
/// rank takes the same steps (see [`crate::dist`]). `None`: one process.
#[allow(clippy::too_many_arguments)]
pub fn update_parallel(
    policy: &dyn TrainablePolicy,
    reference: Option<&dyn TrainablePolicy>,
    opt: &mut AdamW,
    samples: &[Sample],
    algo: &AlgoConfig,
    seed: u64,
    iteration: u64,
    pg: Option<&ProcessGroup>,
) -> anyhow::Result<UpdateStats> {
    for (k, s) in samples.iter().enumerate() {
        ensure!(
            s.tokens.len() == s.old_logp.len() && !s.tokens.is_empty(),
            "sample {k}: {} sampled tokens but {} recorded log-probs; the rollout's record is inconsistent",
            s.tokens.len(),
            s.old_logp.len()
        );
    }
    let loss_cfg = algo.loss_config();
    let units = Units::of(algo);
    let by_traj = matches!(units, Units::Trajectories);
    let mut out = UpdateStats::default();
    let (mut all, mut norms) = (Vec::new(), Vec::new());
    'epochs: for epoch in 0..algo.epochs {
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.shuffle(&mut rng_for(seed, iteration, 100 + epoch as u64));
        for (mb, chunk) in minibatches(samples, &order, algo.minibatch.max(1), units).into_iter().enumerate()
        {
            // Data parallel: this rank's part, with the whole minibatch's counts.
            let (part, whole) = match pg {
                None => (chunk, None),
                Some(g) => {
                    let tokens = chunk.iter().map(|&k| samples[k].tokens.len()).sum::<usize>() as f64;
                    let longest = chunk.iter().map(|&k| samples[k].tokens.len()).max().unwrap_or(0);
                    let whole = Whole { tokens, actions: chunk.len() as f64, padded_len: longest };
                    (part_of(samples, &chunk, by_traj, g), Some(whole))
                }
            };
            // Each rank's rows draw their own LoRA dropout masks (masks are keyed by a
            // row's place in the pass, and every rank's part starts at row 0).
            let purpose = PASS_PURPOSE + rank_purpose(pg);
            let pass = pass_key(seed, iteration, purpose, epoch as u64, mb as u64);
            let (loss, ls) = match part.is_empty() {
                // A minibatch smaller than the ranks leaves some of them without rows.
                true => (None, LossStats::default()),
                false => {
                    let (loss, ls) =
                        part_loss(policy, reference, samples, &part, &loss_cfg, by_traj, whole, pass)?;
                    (Some(loss), ls)
                }
            };
            let ls = match pg {
                Some(g) => sum_over_ranks(g, ls)?,
                None => ls,
            };
            out.first.get_or_insert(ls);
            // target_kl (SB3's rule, see the module docs): the policy has moved too far
            // from the one that collected the rollouts; stop before this minibatch's step.
            if let Some(target) = algo.target_kl.filter(|&t| ls.approx_kl_old > 1.5 * t) {
                let stop = KlStop { epoch: epoch + 1, minibatch: mb + 1, approx_kl: ls.approx_kl_old };
                tracing::info!(
                    "iteration {}: approximate KL {:.4} > 1.5 × target_kl {target} at epoch {}/{}, \
                     minibatch {}: the update stops there ({} optimizer steps taken)",
                    iteration + 1,
                    stop.approx_kl,
                    stop.epoch,
                    algo.epochs,
                    stop.minibatch,
                    norms.len()
                );
                out.kl_stop = Some(stop);
                break 'epochs;
            }
            if !ls.loss.is_finite() {
                out.skipped_steps += 1;
                continue;
            }
            let mut grads = match &loss {
                Some(l) => policy.gradients(l)?,
                None => crate::dist::tensors::no_gradients()?,
            };
            if let Some(g) = pg {
                crate::dist::tensors::all_reduce_grads(g, &mut grads, opt.vars())?;
            }
            let norm = clip_grad_norm(&mut grads, opt.vars(), algo.max_grad_norm)?;
            if !norm.is_finite() {
                out.skipped_steps += 1;
                continue;
            }
            out.tokens += ls.tokens;
            all.push(ls);
            // A flat loss (every advantage 0, no KL or entropy term) has nothing to teach,
            // but an AdamW step would still move the weights by its stale momentum: for an
            // iteration of all-equal groups, several steps along the last update's direction.
            if norm == 0.0 {
                out.flat_steps += 1;
                continue;
            }
            opt.step(&grads)?;
            norms.push(norm);
        }
    }
    if out.skipped_steps > 0 {
        tracing::warn!("{} minibatch(es) skipped: non-finite loss or gradient norm", out.skipped_steps);
    }
    out.optimizer_steps = norms.len() as u64;
    out.grad_norm = norms.iter().sum::<f64>() / norms.len().max(1) as f64;
    out.loss = mean_loss_stats(&all);
    Ok(out)
}

/// Score `part` (sample indices) and return its loss with its statistics.
#[allow(clippy::too_many_arguments)]
fn part_loss(
    policy: &dyn TrainablePolicy,
    reference: Option<&dyn TrainablePolicy>,
    samples: &[Sample],
    part: &[usize],
    loss_cfg: &super::objective::LossConfig,
    by_traj: bool,
    whole: Option<Whole>,
    pass: u64,
) -> anyhow::Result<(Tensor, LossStats)> {
    let states: Vec<ScreenState> = part.iter().map(|&k| samples[k].state.clone()).collect();
    let tokens: Vec<Vec<u32>> = part.iter().map(|&k| samples[k].tokens.clone()).collect();
    let scores = policy.score_train(&states, &tokens, pass)?;
    let (b, t) = scores.logp.dims2()?;
    let dev = scores.logp.device().clone();
    let longest = tokens.iter().map(Vec::len).max().unwrap_or(0);
    ensure!(t == longest, "the policy scored {t} positions for sequences of up to {longest} tokens");
    let old_rows: Vec<&[f32]> = part.iter().map(|&k| samples[k].old_logp.as_slice()).collect();
    let old = padded(&old_rows, t, &dev)?;
    let advs = Tensor::from_vec(part.iter().map(|&k| samples[k].adv).collect::<Vec<_>>(), b, &dev)?;
    let ref_logp = match reference {
        Some(r) => Some(r.score(&states, &tokens)?.logp.detach()),
        None => None,
    };
    let segs = if by_traj { Some(segments(samples, part, &dev)?) } else { None };
    // Every sample of an iteration has a weight or none has (see `decoupled::decouple`).
    let weight_rows: Option<Vec<&[f32]>> =
        part.iter().map(|&k| samples[k].behaviour_weight.as_deref()).collect();
    let weights = match weight_rows {
        Some(rows) => Some(padded(&rows, t, &dev)?),
        None => None,
    };
    let inputs = LossInputs {
        logp: &scores.logp,
        old_logp: &old,
        ref_logp: ref_logp.as_ref(),
        adv: &advs,
        mask: &scores.mask,
        entropy: Some(&scores.entropy),
        segments: segs.as_ref(),
        whole,
        behaviour_weight: weights.as_ref(),
    };
    Ok(policy_loss(loss_cfg, &inputs)?)
}

#[cfg(test)]
#[path = "update_tests.rs"]
pub(crate) mod tests;
