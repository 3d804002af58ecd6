//! Collecting an iteration's groups, with DAPO's dynamic sampling (Yu et al. 2025, §3.2).
//!
//! A group whose members all get advantage 0 adds nothing to the policy gradient, and the
//! fewer informative groups a batch has, the noisier its gradient. DAPO over-samples and
//! filters until the batch is full:
//!
//! ```text
//! kept = []
//! repeat (1 + N times at most):
//!     collect B groups on fresh training seeds             (B = batch_seeds, G rollouts each)
//!     kept += the informative ones (carrying signal), until |kept| = B
//! until |kept| = B
//! train on kept (fewer than B when N extra collections did not find enough: logged)
//! ```
//!
//! Informative means the estimator gives some member a non-zero advantage
//! ([`carries_signal`]): for GRPO, DAPO, GSPO, Dr. GRPO and RLOO with episode credit, the
//! rewards are not all equal (DAPO's rule); a group of equal rewards still carries signal
//! under discounted step credit (γ < 1: equal rewards at different lengths), through
//! GiGPO's step groups, or against a baseline from outside the group (PPO's critic,
//! REINFORCE++'s batch mean). It is judged on the training rewards after the truncation
//! and give-up corrections, before the overlong penalty and any KL shaping (DAPO filters on
//! outcomes, not on its length penalty).
//! Every env step of every collection counts (`env_steps`, `iteration_env_steps`), dropped
//! groups included; `pass_rate` is informative groups / groups collected.
//!
//! [`GroupFilter`] is the bookkeeping alone (which groups are kept, when to stop), a pure
//! function of which groups are informative; [`collect_groups`] runs it against the browsers.

use super::advantage::{carries_signal, state_keys};
use super::config::TrainConfig;
use super::metrics::IterationMetrics;
use super::rewards;
use super::seeds::rng_for;
use super::success_replay::SuccessReplay;
use crate::env::EpisodeStatus;
use crate::policy::{Sampling, TrainablePolicy};
use crate::rollout::{CollectStats, Collector, Job, Outcome, Recorded, TrainingBatch};
use crate::tasks::Task;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which collected groups an iteration trains on, and whether to collect again.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFilter {
    /// B: groups wanted.
    target: usize,
    /// N: extra collections allowed after the first (0: no dynamic sampling).
    max_extra: usize,
    /// Keep only informative groups (false: every group, and never an extra collection).
    drop_all_equal: bool,
    report: SamplingReport,
}

/// What an iteration's sampling did (for the metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingReport {
    /// Collections made (1 + extra).
    pub collections: usize,
    /// Groups collected, over every collection.
    pub groups: usize,
    /// Of those, informative ones.
    pub informative: usize,
    /// Groups kept for training.
    pub kept: usize,
}

impl SamplingReport {
    /// Collections beyond the first.
    pub fn extra(&self) -> usize {
        self.collections.saturating_sub(1)
    }
    /// Informative groups / groups collected (0 before any group).
    pub fn pass_rate(&self) -> f64 {
        self.informative as f64 / self.groups.max(1) as f64
    }
}

impl GroupFilter {
    /// A filter wanting `target` groups, with at most `max_extra` extra collections;
    /// `drop_all_equal = false` keeps every group (and `max_extra` does not apply).
    pub fn new(target: usize, max_extra: usize, drop_all_equal: bool) -> GroupFilter {
        GroupFilter { target, max_extra, drop_all_equal, report: SamplingReport::default() }
    }

    /// One collection's groups, each given by whether it is informative
    /// ([`carries_signal`]); returns which to keep: the informative ones (or all, without
    /// dropping), in order, until `target` are kept.
    pub fn add(&mut self, informative: &[bool]) -> Vec<bool> {
        let r = &mut self.report;
        r.collections += 1;
        r.groups += informative.len();
        informative
            .iter()
            .map(|&signal| {
                r.informative += usize::from(signal);
                let keep = (signal || !self.drop_all_equal) && r.kept < self.target;
                r.kept += usize::from(keep);
                keep
            })
            .collect()
    }

    /// Whether to collect again: groups are dropped, fewer than `target` kept, and an
    /// extra collection is left.
    pub fn wants_more(&self) -> bool {
        self.drop_all_equal && self.report.kept < self.target && self.report.collections <= self.max_extra
    }

    /// The bookkeeping so far.
    pub fn report(&self) -> SamplingReport {
        self.report
    }
}

/// An iteration's rollouts.
pub struct Collection {
    /// The rollouts to train on: every member of each kept group, with the training
    /// rewards (truncation, give-up and overlong corrections applied).
    pub recs: Vec<Recorded>,
    /// Every collected rollout's outcome, dropped groups included, before the overlong
    /// penalty (what the rollout metrics describe).
    pub outcomes: Vec<Outcome>,
    /// The collections' figures, summed.
    pub stats: CollectStats,
    /// Env steps of the extra collections.
    pub extra_env_steps: usize,
    /// Rollouts that gave up (every collection).
    pub give_ups: usize,
    /// Which groups were kept, and how many collections it took.
    pub report: SamplingReport,
    /// Kept rollouts the overlong penalty reached, and its mean over the kept rollouts.
    pub overlong: (usize, f64),
    /// Every collected rollout's task: counted episodes and successes, by task id
    /// (dropped groups included; what the curriculum and per-task metrics use).
    pub task_counts: BTreeMap<String, (usize, usize)>,
    /// Successes replayed into all-failed groups ([`super::success_replay`]), kept or not.
    pub replayed: usize,
    /// Rollouts branched from mid-episode states ([`super::branch`]).
    pub branch: super::branch::BranchReport,
}

impl Collection {
    /// Fill in the rollout figures of an iteration's metrics (call after
    /// [`IterationMetrics::set_advantage`]: `all_equal_groups` and `env_errors` here count
    /// every collected group, not only those trained on).
    pub fn set_metrics(&self, m: &mut IterationMetrics) {
        let counted: Vec<&Outcome> =
            self.outcomes.iter().filter(|o| !o.status.is_infrastructure_failure()).collect();
        let n = counted.len().max(1) as f64;
        let rewards: Vec<f64> = counted.iter().map(|o| o.reward).collect();
        (m.reward_mean, m.reward_std) = super::advantage::mean_std(&rewards);
        m.success_rate = counted.iter().filter(|o| o.status == EpisodeStatus::Success).count() as f64 / n;
        m.episode_len = counted.iter().map(|o| o.steps as f64).sum::<f64>() / n;
        m.episodes = self.outcomes.len() as u64;
        m.env_errors = (self.outcomes.len() - counted.len()) as u64;
        m.judge_errors =
            self.outcomes.iter().filter(|o| o.status == EpisodeStatus::JudgeError).count() as u64;
        m.give_ups = self.give_ups as u64;
        m.env_steps_per_sec = self.stats.steps_per_s();
        m.policy_secs = self.stats.policy_secs;
        m.prefill_secs = self.stats.prefill_secs;
        m.decode_secs = self.stats.decode_secs;
        m.env_wait_secs = self.stats.env_wait_secs();
        m.env_action_secs = self.stats.env_action_secs;
        m.env_settle_secs = self.stats.env_settle_secs;
        m.env_screenshot_secs = self.stats.env_screenshot_secs;
        let r = &self.report;
        m.groups_collected = r.groups as u64;
        m.informative_groups = r.informative as u64;
        m.all_equal_groups = (r.groups - r.informative) as u64;
        m.pass_rate = r.pass_rate();
        m.extra_collections = r.extra() as u64;
        m.iteration_env_steps = self.stats.env_steps as u64;
        m.replayed = self.replayed as u64;
        let br = &self.branch;
        m.branched = br.rollouts as u64;
        m.branch_replayed_steps = br.replayed_steps as u64;
        m.branch_failures = br.failed as u64;
        m.unbranched_groups = br.unbranched_groups as u64;
        m.branch_success_rate = (br.counted > 0).then(|| br.successes as f64 / br.counted as f64);
        m.extra_env_steps = self.extra_env_steps as u64;
        let compared = self.stats.reward_model_agree + self.stats.reward_model_disagree;
        m.reward_model_agreement =
            (compared > 0).then(|| self.stats.reward_model_agree as f64 / compared as f64);
        (m.overlong_penalized, m.overlong_penalty_mean) = (self.overlong.0 as u64, self.overlong.1);
    }
}

/// The iteration's stream of training (task, seed) instances: collection 0 draws the first
/// `batch_seeds`, each extra collection the next ones, all from `tasks.train_seeds` (the
/// held-out eval seeds never), the same draws on a resume.
pub struct SeedStream<'a> {
    rng: ChaCha8Rng,
    tasks: &'a [Arc<dyn Task>],
    seeds: std::ops::Range<u64>,
    /// Task weights (progress sampling); `None`: uniform.
    weights: Option<rand::distributions::WeightedIndex<f64>>,
}

impl<'a> SeedStream<'a> {
    /// The stream of iteration `it`, drawing tasks uniformly.
    pub fn new(cfg: &TrainConfig, tasks: &'a [Arc<dyn Task>], it: u64) -> SeedStream<'a> {
        let tr = cfg.tasks.train_seeds;
        SeedStream { rng: rng_for(cfg.run.seed, it, 1), tasks, seeds: tr.start..tr.end, weights: None }
    }

    /// Draw tasks in proportion to `weights` (one per task, in `tasks`' order) instead.
    pub fn weighted(mut self, weights: &[f64]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            weights.len() == self.tasks.len(),
            "{} task weights for {} tasks",
            weights.len(),
            self.tasks.len()
        );
        self.weights = Some(rand::distributions::WeightedIndex::new(weights)?);
        Ok(self)
    }

    /// The next `n` instances.
    pub fn next_batch(&mut self, n: usize) -> Vec<(Arc<dyn Task>, u64)> {
        use rand::distributions::Distribution;
        (0..n)
            .map(|_| {
                let i = match &self.weights {
                    Some(w) => w.sample(&mut self.rng),
                    None => self.rng.gen_range(0..self.tasks.len()),
                };
                (self.tasks[i].clone(), self.rng.gen_range(self.seeds.clone()))
            })
            .collect()
    }
}

/// Each task's counted episodes and successes among `recs` (infrastructure failures left
/// out), by task id.
pub fn task_counts(recs: &[Recorded]) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in recs {
        let o = &r.trajectory.outcome;
        if o.status.is_infrastructure_failure() {
            continue;
        }
        let c = out.entry(r.trajectory.task_id.clone()).or_default();
        c.0 += 1;
        c.1 += usize::from(o.status == EpisodeStatus::Success);
    }
    out
}

/// Collect iteration `it`'s groups: B task seeds × G rollouts, with the training rewards;
/// with dynamic sampling, B more groups at a time until B are informative ([`GroupFilter`]).
/// Collection 0 samples with `sampling`; each extra collection with a seed of its own
/// (the policy's sampling is left at the last one). With success replay, each collection's
/// successes go into `replay` and all-failed groups get one of them before the filter.
#[allow(clippy::too_many_arguments)] // the iteration's inputs, each used once
pub async fn collect_groups(
    collector: &mut Collector,
    policy: &mut dyn TrainablePolicy,
    tasks: &[Arc<dyn Task>],
    cfg: &TrainConfig,
    it: u64,
    sampling: Sampling,
    task_weights: Option<&[f64]>,
    replay: &mut SuccessReplay,
) -> anyhow::Result<Collection> {
    let algo = &cfg.algo;
    let b = algo.batch_seeds;
    let max_extra = algo.max_extra_collections();
    let mut filter = GroupFilter::new(b, max_extra, algo.drop_all_equal_groups());
    let mut seeds = SeedStream::new(cfg, tasks, it);
    if let Some(w) = task_weights {
        seeds = seeds.weighted(w)?;
    }
    let mut extra_seeds = rng_for(cfg.run.seed, it, 3);
    let mut replay_draws = rng_for(cfg.run.seed, it, 4);
    let mut branch_draws = rng_for(cfg.run.seed, it, 5);
    let mut out = Collection {
        recs: Vec::new(),
        outcomes: Vec::new(),
        stats: CollectStats::default(),
        extra_env_steps: 0,
        give_ups: 0,
        report: SamplingReport::default(),
        overlong: (0, 0.0),
        task_counts: BTreeMap::new(),
        replayed: 0,
        branch: super::branch::BranchReport::default(),
    };
    for k in 0.. {
        let seed = if k == 0 { sampling.seed } else { extra_seeds.gen() };
        policy.set_sampling(Sampling { seed, ..sampling });
        // Group ids are unique within the run: (iteration · (1 + N) + collection) · B + g.
        let first_group = (it * (1 + max_extra as u64) + k) * b as u64;
        let jobs = Job::groups(&seeds.next_batch(b), algo.group_size, first_group);
        let (mut recs, mut st) = collector.collect(policy, jobs, |_, _| {}).await?;
        // The rollout figures and the curriculum describe the flat groups.
        out.outcomes.extend(recs.iter().map(|r| r.trajectory.outcome.clone()));
        for (id, (n, k)) in task_counts(&recs) {
            let c = out.task_counts.entry(id).or_default();
            c.0 += n;
            c.1 += k;
        }
        if let Some(bc) = algo.branch {
            let (jobs, unbranched) = super::branch::jobs(bc, &recs, tasks, &mut branch_draws)?;
            out.branch.unbranched_groups += unbranched;
            if !jobs.is_empty() {
                policy.set_sampling(Sampling { seed: branch_draws.gen(), ..sampling });
                let (more, bst) = collector.collect(policy, jobs, |_, _| {}).await?;
                out.branch.add(&more);
                st.add(&bst);
                recs.extend(more);
            }
        }
        out.give_ups += rewards::shape(&mut recs, tasks, algo.reward_overrides());
        out.stats.add(&st);
        if k > 0 {
            out.extra_env_steps += st.env_steps;
        }
        replay.remember(&recs);
        out.replayed += replay.fill(&mut recs, &mut replay_draws);
        let (batch, index) = TrainingBatch::group(recs.iter().map(|r| &r.trajectory));
        let keys = state_keys(algo, &recs, &index);
        let informative: Vec<bool> = batch
            .groups
            .iter()
            .enumerate()
            .map(|(g, group)| carries_signal(algo, group, keys.get(g).map_or(&[][..], Vec::as_slice)))
            .collect();
        let keep = filter.add(&informative);
        // Take the kept groups' rollouts; the rest (and their screenshots) go now.
        let mut slots: Vec<Option<Recorded>> = recs.into_iter().map(Some).collect();
        for (members, _) in index.iter().zip(&keep).filter(|(_, &k)| k) {
            out.recs.extend(members.iter().filter_map(|&i| slots[i].take()));
        }
        if !filter.wants_more() {
            break;
        }
    }
    out.report = filter.report();
    let r = out.report;
    if algo.drop_all_equal_groups() && r.kept < b {
        tracing::warn!(
            "iteration {}: {} of {b} groups informative after {} collection(s) ({} groups, pass rate {:.2}{}); \
             training on those",
            it + 1,
            r.kept,
            r.collections,
            r.groups,
            r.pass_rate(),
            if max_extra > 0 { "; raise [algo.dynamic_sampling] max_extra to look further" } else { "" }
        );
    }
    if let Some(p) = algo.overlong_penalty {
        let max = cfg.rollout.max_steps;
        let (n, sum) = rewards::penalize_overlong(&mut out.recs, max, p.window(max), p.weight);
        out.overlong = (n, sum / out.recs.len().max(1) as f64);
    }
    Ok(out)
}

/// Add one collection's figures to the iteration's.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Group, TrajStep, Trajectory};
    use crate::train::config::AlgoConfig;

    /// Run the filter over successive collections (each a list of groups' rewards) the way
    /// [`collect_groups`] does: stop when it wants no more or the collections run out.
    /// Returns the keep flags of each collection made, and the report.
    fn run(
        target: usize,
        max_extra: usize,
        drop: bool,
        collections: &[Vec<Vec<f64>>],
    ) -> (Vec<Vec<bool>>, SamplingReport) {
        let mut f = GroupFilter::new(target, max_extra, drop);
        let mut kept = Vec::new();
        for c in collections {
            // Episode-level GRPO: informative when two counted rewards differ.
            let grpo = AlgoConfig::default();
            let informative: Vec<bool> = c.iter().map(|r| carries_signal(&grpo, &group(r), &[])).collect();
            kept.push(f.add(&informative));
            if !f.wants_more() {
                break;
            }
        }
        (kept, f.report())
    }

    const T: bool = true;
    const F: bool = false;

    /// A group of one-step rollouts with these rewards.
    fn group(rewards: &[f64]) -> Group {
        let t = |&r: &f64| {
            let steps = vec![TrajStep::new("click(1, 1)", r, EpisodeStatus::Running)];
            let status = if r > 0.0 { EpisodeStatus::Success } else { EpisodeStatus::Fail };
            Trajectory::new("t", 0, steps, Outcome { reward: r, status, steps: 1, error: None })
        };
        Group { task_id: "t".into(), seed: 0, id: None, trajectories: rewards.iter().map(t).collect() }
    }

    /// A rollout with these step rewards (the outcome their sum, success when positive).
    fn stepped(rewards: &[f64]) -> Trajectory {
        let steps =
            rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, EpisodeStatus::Running)).collect();
        let reward: f64 = rewards.iter().sum();
        let status = if reward > 0.0 { EpisodeStatus::Success } else { EpisodeStatus::Fail };
        Trajectory::new("t", 0, steps, Outcome { reward, status, steps: rewards.len() as u32, error: None })
    }

    #[test]
    fn episode_level_groups_are_informative_when_two_rewards_differ() {
        let grpo = AlgoConfig::default();
        let signal = |r: &[f64]| carries_signal(&grpo, &group(r), &[]);
        assert!(signal(&[1.0, 0.0]) && signal(&[0.0, 0.0, 0.5]));
        assert!(!signal(&[1.0, 1.0, 1.0]) && !signal(&[-1.0]) && !signal(&[]));
    }

    #[test]
    fn equal_rewards_still_carry_signal_under_discounting_gigpo_and_ppo() {
        // Two successes with reward 1, one in 2 steps (r = [0, 1]), one in 1 (r = [1]), and
        // an env_error (left out). Episode-level GRPO: rewards {1, 1}, advantage 0 for both:
        // no signal, dropped.
        let mut g = Group {
            task_id: "t".into(),
            seed: 0,
            id: None,
            trajectories: vec![stepped(&[0.0, 1.0]), stepped(&[1.0]), stepped(&[0.0])],
        };
        g.trajectories[2].outcome.status = EpisodeStatus::EnvError;
        let batch = TrainingBatch { groups: vec![g.clone()] };
        let algo = |text: &str| -> AlgoConfig { toml::from_str(text).unwrap() };
        let zero =
            |a: &crate::train::advantage::StepAdvantages| a[0].iter().flatten().flatten().all(|&x| x == 0.0);
        let grpo = algo("");
        let (a, st) = crate::train::advantage::estimate(&grpo, &batch, &Vec::new());
        assert!(zero(&a) && !carries_signal(&grpo, &g, &[]) && st.all_equal_groups == 1);
        // Discounted step credit, γ = 0.5: G = [0.5, 1] and [1]; pooled mean 2.5/3 = 5/6,
        // so the first step gets (0.5 − 5/6) / std < 0: signal, kept.
        let disc = algo("step_credit = \"discounted\"\ngamma = 0.5");
        let (a, st) = crate::train::advantage::estimate(&disc, &batch, &Vec::new());
        assert!(!zero(&a) && carries_signal(&disc, &g, &[]) && st.all_equal_groups == 0, "{a:?}");
        // ... but at γ = 1 every G is 1: no signal, and exactly 0.
        let undiscounted = algo("step_credit = \"discounted\"\ngamma = 1.0");
        let (a, _) = crate::train::advantage::estimate(&undiscounted, &batch, &Vec::new());
        assert!(zero(&a) && !carries_signal(&undiscounted, &g, &[]), "{a:?}");
        // GiGPO, γ = 0.5: both start on screen 7 (G = 0.5 and 1 there): a step group whose
        // returns differ, so signal; with ω = 0 only the (equal) episode part is left.
        let keys = vec![vec![Some(7), Some(8)], vec![Some(7)], vec![Some(7)]];
        let gigpo = algo("kind = \"gigpo\"\ngamma = 0.5");
        let (a, _) = crate::train::advantage::estimate(&gigpo, &batch, &vec![keys.clone()]);
        assert!(!zero(&a) && carries_signal(&gigpo, &g, &keys), "{a:?}");
        let omega0 = algo("kind = \"gigpo\"\ngamma = 0.5\n[gigpo]\nomega = 0.0");
        let (a, _) = crate::train::advantage::estimate(&omega0, &batch, &vec![keys.clone()]);
        assert!(zero(&a) && !carries_signal(&omega0, &g, &keys), "{a:?}");
        // PPO and REINFORCE++: the baseline is the critic or the batch, not the group.
        for kind in ["ppo", "reinforce_pp"] {
            assert!(carries_signal(&algo(&format!("kind = \"{kind}\"")), &g, &[]), "{kind}");
        }
        // A group of env_errors carries nothing under any estimator.
        let mut dead = g.clone();
        dead.trajectories.iter_mut().for_each(|t| t.outcome.status = EpisodeStatus::EnvError);
        assert!(!carries_signal(&algo("kind = \"ppo\""), &dead, &[]));
        // The filter keeps what carries signal: GiGPO's group is informative, GRPO's not.
        let mut f = GroupFilter::new(1, 3, true);
        assert_eq!(f.add(&[carries_signal(&grpo, &g, &[])]), vec![F]);
        assert!(f.wants_more());
        assert_eq!(f.add(&[carries_signal(&gigpo, &g, &keys)]), vec![T]);
        assert_eq!(f.report(), SamplingReport { collections: 2, groups: 2, informative: 1, kept: 1 });
    }

    #[test]
    fn enough_in_the_first_collection_stops_at_once() {
        // B = 2: groups 0 and 2 are informative; no extra collection.
        let c0 = vec![vec![1.0, 0.0], vec![0.0, 0.0], vec![0.0, 1.0]];
        let (kept, r) = run(2, 3, true, &[c0, vec![vec![1.0, 0.0]]]);
        assert_eq!(kept, vec![vec![T, F, T]]);
        assert_eq!(r, SamplingReport { collections: 1, groups: 3, informative: 2, kept: 2 });
        assert_eq!((r.extra(), r.pass_rate()), (0, 2.0 / 3.0));
    }

    #[test]
    fn short_batches_are_filled_from_later_collections_and_cut_at_b() {
        // B = 3, N = 3. Collection 0: 1 informative (group 1). Collection 1: none.
        // Collection 2: 3 informative, of which the first 2 fill the batch; the third is
        // surplus (counted as informative, not kept). Collection 3 is never made.
        let c0 = vec![vec![1.0, 1.0], vec![1.0, 0.0], vec![0.0, 0.0]];
        let c1 = vec![vec![0.0, 0.0], vec![1.0, 1.0], vec![0.0]];
        let c2 = vec![vec![0.0, 1.0], vec![1.0, 0.0, 1.0], vec![0.5, 0.0]];
        let c3 = vec![vec![0.0, 1.0]; 3];
        let (kept, r) = run(3, 3, true, &[c0, c1, c2, c3]);
        assert_eq!(kept, vec![vec![F, T, F], vec![F, F, F], vec![T, T, F]]);
        assert_eq!(r, SamplingReport { collections: 3, groups: 9, informative: 4, kept: 3 });
        assert_eq!((r.extra(), r.pass_rate()), (2, 4.0 / 9.0));
    }

    #[test]
    fn it_stops_after_n_extra_collections_and_trains_on_what_it_has() {
        // B = 2, N = 2: all-equal groups everywhere but one: 1 + 2 collections, then stop
        // short with the one informative group.
        let none = vec![vec![1.0, 1.0], vec![0.0, 0.0]];
        let one = vec![vec![0.0, 0.0], vec![0.0, -1.0]];
        let (kept, r) = run(2, 2, true, &[none.clone(), one, none.clone(), none.clone(), none.clone()]);
        assert_eq!(kept, vec![vec![F, F], vec![F, T], vec![F, F]]);
        assert_eq!(r, SamplingReport { collections: 3, groups: 6, informative: 1, kept: 1 });
        assert_eq!((r.extra(), r.pass_rate()), (2, 1.0 / 6.0));
        // N = 0 (`[algo.dynamic_sampling] max_extra = 0`): one collection, no refill.
        let (kept, r) = run(2, 0, true, &[none.clone(), none.clone()]);
        assert_eq!((kept, r.collections, r.kept, r.pass_rate()), (vec![vec![F, F]], 1, 0, 0.0));
    }

    #[test]
    fn without_dropping_every_group_is_kept_in_one_collection() {
        let c0 = vec![vec![1.0, 1.0], vec![0.0, 1.0]];
        let (kept, r) = run(2, 3, false, &[c0.clone(), c0]);
        assert_eq!(kept, vec![vec![T, T]]);
        assert_eq!(r, SamplingReport { collections: 1, groups: 2, informative: 1, kept: 2 });
    }

    #[test]
    fn extra_collections_draw_fresh_training_seeds() {
        let mut cfg = TrainConfig::parse(
            "[run]\nname = \"r\"\nseed = 5\niterations = 1\n[tasks]\nids = [\"t\"]\n\
             train_seeds = { start = 100, end = 200 }\neval_seeds = { start = 0, count = 100 }\n",
        )
        .unwrap();
        cfg.resolve();
        let tasks = vec![crate::tasks::load_task("fixtures/tasks/two-buttons.toml").unwrap()];
        let draws = |n: usize| {
            let mut s = SeedStream::new(&cfg, &tasks, 4);
            (0..n)
                .map(|_| s.next_batch(8).into_iter().map(|(_, seed)| seed).collect())
                .collect::<Vec<Vec<u64>>>()
        };
        let d = draws(3);
        assert!(d.iter().flatten().all(|s| (100..200).contains(s)), "{d:?}");
        assert_ne!(d[0], d[1]);
        // the first collection draws what an iteration always drew (rng purpose 1), and a
        // resume draws the same
        let mut rng = rng_for(5, 4, 1);
        let first: Vec<u64> = (0..8)
            .map(|_| {
                let _task = rng.gen_range(0..1usize);
                rng.gen_range(100..200u64)
            })
            .collect();
        assert_eq!(d[0], first);
        assert_eq!(draws(3), d);
    }
}
