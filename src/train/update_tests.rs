//! Tests of the update (the tiny policy, real tensors).
use super::*;
use crate::policy::vlm::speed::synthetic_batch;
use crate::policy::vlm::{VlmConfig, VlmPolicy};
use crate::policy::{Policy, Sampling};

/// Rollout-like samples of the real tiny policy (its own sampled tokens and log-probs).
fn rollout(p: &mut VlmPolicy, n: usize) -> Vec<Sample> {
    rollout_with(p, n, 3, 4)
}

/// [`rollout`] sampled with `seed` from the synthetic states drawn with `states_seed`;
/// advantages alternate ±1, two samples a trajectory.
pub(crate) fn rollout_with(p: &mut VlmPolicy, n: usize, seed: u64, states_seed: u64) -> Vec<Sample> {
    p.set_sampling(Sampling { temperature: 1.0, greedy: false, seed });
    let (states, _) = synthetic_batch(n, states_seed);
    let keys: Vec<u64> = (0..n as u64).collect();
    let d = p.act_keyed(&states, &keys).unwrap();
    states
        .into_iter()
        .zip(d)
        .enumerate()
        .map(|(i, (state, d))| Sample {
            state,
            tokens: d.tokens,
            old_logp: d.token_logprobs,
            adv: if i % 2 == 0 { 1.0 } else { -1.0 },
            traj: i / 2,
            group: i / 4,
            behaviour_weight: None,
        })
        .collect()
}

#[test]
fn the_first_ratio_is_one_and_a_non_finite_minibatch_is_skipped() {
    let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
    let mut samples = rollout(&mut p, 8);
    let algo = AlgoConfig { minibatch: 4, epochs: 1, lr: 1e-3, ..Default::default() };
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 0).unwrap();
    let first = up.first.unwrap();
    assert!((first.ratio_mean - 1.0).abs() < 1e-5, "first minibatch ratio {}", first.ratio_mean);
    assert_eq!((up.optimizer_steps, up.skipped_steps), (2, 0));
    // One sample with a NaN advantage poisons its minibatch: that step is skipped and
    // counted, the other one is taken, and the means stay finite.
    samples[0].adv = f32::NAN;
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 1).unwrap();
    assert_eq!((up.optimizer_steps, up.skipped_steps), (1, 1));
    assert!(up.grad_norm.is_finite() && up.loss.loss.is_finite(), "{up:?}");
    // Token ids and log-probs of different lengths are refused before any update.
    samples[0].adv = 1.0;
    samples[1].old_logp.pop();
    let e = update(&p, None, &mut opt, &samples, &algo, 0, 2).unwrap_err().to_string();
    assert!(e.contains("sample 1") && e.contains("log-probs"), "{e}");
}

#[test]
fn a_flat_loss_takes_no_optimizer_step() {
    let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
    let mut samples = rollout(&mut p, 8);
    let algo = AlgoConfig { minibatch: 4, epochs: 1, lr: 1e-3, ..Default::default() };
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    // A real step first, so AdamW holds momentum.
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 0).unwrap();
    assert_eq!(up.optimizer_steps, 2);
    let weights = |p: &VlmPolicy| -> Vec<f32> {
        p.named_vars().iter().flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    };
    let before = weights(&p);
    // All-equal groups: every advantage 0, no KL, no entropy bonus.
    for s in &mut samples {
        s.adv = 0.0;
    }
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 1).unwrap();
    assert_eq!((up.optimizer_steps, up.flat_steps, up.skipped_steps), (0, 2, 0), "{up:?}");
    assert!(before == weights(&p), "a zero gradient moved the weights");
}

#[test]
fn target_kl_stops_the_update_early_and_only_when_set() {
    let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
    let samples = rollout(&mut p, 8);
    let algo = AlgoConfig { minibatch: 2, epochs: 3, lr: 1e-2, ..Default::default() };
    let before: Vec<(String, Tensor)> =
        p.named_vars().into_iter().map(|(n, v)| (n, v.as_tensor().copy().unwrap())).collect();
    let reset = |p: &VlmPolicy| {
        for ((_, v), (_, w)) in p.named_vars().iter().zip(&before) {
            v.set(w).unwrap();
        }
    };
    // Off (the default): 3 epochs × 4 minibatches, every one stepped.
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 0).unwrap();
    assert_eq!((up.optimizer_steps, up.kl_stop), (12, None), "{up:?}");
    // A target no update reaches: the same.
    reset(&p);
    let loose = AlgoConfig { target_kl: Some(1e3), ..algo.clone() };
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &samples, &loose, 0, 0).unwrap();
    assert_eq!((up.optimizer_steps, up.kl_stop), (12, None), "{up:?}");
    // A small target: the first minibatch sees ρ = 1 (approx KL = (ρ − 1) − log ρ = 0 up
    // to f32 rounding, ~1e-7), steps; the second already sees the policy that step moved
    // (lr 1e-2), approx KL > 1.5 × 1e-5, and the update stops there without stepping it.
    reset(&p);
    let tight = AlgoConfig { target_kl: Some(1e-5), ..algo.clone() };
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &samples, &tight, 0, 0).unwrap();
    let stop = up.kl_stop.expect("the early stop fires");
    assert_eq!((stop.epoch, stop.minibatch, up.optimizer_steps), (1, 2, 1), "{up:?}");
    assert!(stop.approx_kl > 1.5e-5, "{stop:?}");
    assert!(up.first.unwrap().approx_kl_old < 1.5e-5, "{:?}", up.first);
}

/// `minibatch_order = "group_steps"`: a group's samples of one env step follow each other
/// (a GRPO group's first steps, one prompt, then share a minibatch), the sets in the order
/// their first sample appears; minibatches keep their size, so the optimizer steps are as
/// many as shuffled.
#[test]
fn group_step_minibatches_keep_a_groups_steps_together() {
    let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
    let mut samples = rollout(&mut p, 8);
    // groups 0 and 1, each of two rollouts of steps 0 and 1
    for (k, s) in samples.iter_mut().enumerate() {
        (s.group, s.traj, s.state.step) = (k / 4, k / 2, (k % 2) as u32);
    }
    let order = [5, 2, 7, 1, 0, 4, 3, 6];
    let mb = minibatches(&samples, &order, 3, Units::GroupSteps);
    // (group, step) (1, 1): 5 7 | (0, 0): 2 0 | (0, 1): 1 3 | (1, 0): 4 6, cut in threes
    assert_eq!(mb, vec![vec![5, 7, 2], vec![0, 1, 3], vec![4, 6]]);
    assert_eq!(
        minibatches(&samples, &order, 3, Units::Samples),
        vec![vec![5, 2, 7], vec![1, 0, 4], vec![3, 6]]
    );
    // no samples (every group flat): no minibatch, whatever the units
    for units in [Units::Samples, Units::Trajectories, Units::GroupSteps] {
        assert!(minibatches(&[], &[], 3, units).is_empty());
    }
    // A real update in that order takes as many steps as shuffled, and starts at ratio 1.
    let shuffled = AlgoConfig { minibatch: 3, lr: 1e-3, ..Default::default() };
    let grouped = AlgoConfig { minibatch_order: MinibatchOrder::GroupSteps, ..shuffled.clone() };
    for algo in [shuffled, grouped] {
        let p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap(); // the weights that sampled
        let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
        let up = update(&p, None, &mut opt, &samples, &algo, 0, 0).unwrap();
        assert!((up.first.unwrap().ratio_mean - 1.0).abs() < 1e-5);
        assert_eq!((up.optimizer_steps, up.skipped_steps), (3, 0), "{:?}: {up:?}", algo.minibatch_order);
    }
}

#[test]
fn gspo_trajectory_minibatches_hold_whole_trajectories() {
    let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
    let mut samples = rollout(&mut p, 7);
    for (s, t) in samples.iter_mut().zip([0, 0, 1, 2, 2, 2, 3]) {
        s.traj = t;
    }
    // Trajectories in the order their first step appears: 3 (k6), 0 (k0), 2 (k3), 1 (k2);
    // a minibatch is closed once it holds >= 3 steps.
    let mb = minibatches(&samples, &[6, 0, 3, 2, 5, 1, 4], 3, Units::Trajectories);
    assert_eq!(mb, vec![vec![6, 0, 1], vec![3, 4, 5], vec![2]]);
    let seg = segments(&samples, &mb[0], &Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
    assert_eq!(seg, vec![vec![0.0, 1.0, 1.0], vec![1.0, 0.0, 0.0]]);
    assert_eq!(minibatches(&samples, &[6, 0, 3], 2, Units::Samples), vec![vec![6, 0], vec![3]]);
    // A real update with the trajectory-level ratio starts at ratio 1.
    let algo = AlgoConfig {
        variant: AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory }),
        minibatch: 3,
        lr: 1e-3,
        ..Default::default()
    };
    let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
    let up = update(&p, None, &mut opt, &samples, &algo, 0, 0).unwrap();
    assert!((up.first.unwrap().ratio_mean - 1.0).abs() < 1e-5);
    assert!(up.optimizer_steps >= 2 && up.skipped_steps == 0, "{up:?}");
}

/// Two ranks, each scoring its part of every minibatch, take the steps one process
/// takes on the whole minibatches: token- and trajectory-level ratios, and minibatches
/// of one sample (one rank then has no rows).
#[test]
fn two_ranks_train_as_one_process() {
    let weights = |p: &VlmPolicy| -> Vec<f32> {
        p.named_vars().iter().flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    };
    let cases = [
        AlgoConfig { minibatch: 4, epochs: 2, lr: 1e-3, ..Default::default() },
        AlgoConfig { minibatch: 1, epochs: 1, lr: 1e-3, ..Default::default() },
        AlgoConfig {
            variant: AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory }),
            minibatch: 4,
            lr: 1e-3,
            ..Default::default()
        },
    ];
    for algo in cases {
        fn train(algo: &AlgoConfig, pg: Option<&ProcessGroup>) -> (Vec<f32>, UpdateStats) {
            let weights = |p: &VlmPolicy| -> Vec<f32> {
                p.named_vars()
                    .iter()
                    .flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap())
                    .collect()
            };
            let mut p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap();
            let samples = rollout(&mut p, 8);
            let mut opt = AdamW::new(p.named_vars(), algo.adamw_config()).unwrap();
            let up = update_parallel(&p, None, &mut opt, &samples, algo, 0, 0, pg).unwrap();
            (weights(&p), up)
        }
        let (alone, up1) = train(&algo, None);
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let algo = algo.clone();
                std::thread::spawn(move || {
                    let rv = crate::dist::Rendezvous {
                        rank,
                        world: 2,
                        local_rank: rank,
                        addr: format!("127.0.0.1:{port}"),
                        timeout: std::time::Duration::from_secs(30),
                        gpu_sum: Default::default(),
                    };
                    let pg = ProcessGroup::connect(&rv, "test").unwrap();
                    train(&algo, Some(&pg))
                })
            })
            .collect();
        let out: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(out[0].0 == out[1].0, "the ranks' weights differ");
        let moved = alone
            .iter()
            .zip(&weights(&VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 2).unwrap()))
            .any(|(a, b)| a != b);
        assert!(moved, "the update did not move the weights");
        let worst = alone.iter().zip(&out[0].0).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "{:?}: the ranks' weights are up to {worst} from one process's", algo.variant);
        let up2 = &out[0].1;
        assert_eq!((up2.optimizer_steps, up2.tokens), (up1.optimizer_steps, up1.tokens));
        assert!((up2.loss.loss - up1.loss.loss).abs() < 1e-5, "{} vs {}", up2.loss.loss, up1.loss.loss);
        assert!(
            (up2.grad_norm - up1.grad_norm).abs() < 1e-4 * up1.grad_norm,
            "{} vs {}",
            up2.grad_norm,
            up1.grad_norm
        );
    }
}
