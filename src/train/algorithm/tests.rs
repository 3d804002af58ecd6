use super::kl_term::KlTerm;
use super::*;
use crate::env::EpisodeStatus::{self, Fail, Running, Success};
use crate::rollout::{Group, Outcome, TrajStep, Trajectory};
use crate::train::advantage::{anchor_keys, estimate};
use crate::train::config::{example_config, AlgoKind, TrainConfig};
use crate::train::kl::{adaptive_beta, KlMode};
use candle_core::Device;

fn config(kind: AlgoKind) -> TrainConfig {
    let text = example_config(kind).replace("critic_warmup = 0", "critic_warmup = 3");
    let mut c = TrainConfig::parse(&text).unwrap();
    c.resolve();
    c
}

#[test]
fn every_kind_gets_its_family_and_only_ppo_waits_and_saves() {
    for &kind in AlgoKind::all() {
        let cfg = config(kind);
        let a = for_run(&cfg, &Device::Cpu, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        a.save(dir.path()).unwrap();
        let saved = std::fs::read_dir(dir.path()).unwrap().count();
        if kind == AlgoKind::Ppo {
            // critic_warmup = 3: iterations 0, 1, 2 train only the critic.
            assert!(!a.trains_policy(0) && !a.trains_policy(2) && a.trains_policy(3), "{kind}");
            assert_eq!(saved, 3, "PPO keeps its critic's weights, architecture and optimizer");
        } else {
            assert!(a.trains_policy(0), "{kind}");
            assert_eq!(saved, 0, "{kind} keeps nothing of its own");
        }
    }
}

#[test]
fn ppo_trains_its_critic_only_on_values_of_this_iteration() {
    let cfg = config(AlgoKind::Ppo);
    let mut a = for_run(&cfg, &Device::Cpu, None).unwrap();
    let e = a.after_update(&cfg.algo, 0, 4).unwrap_err();
    assert!(format!("{e:#}").contains("iteration 5: PPO's critic has no values"), "{e:#}");
}

fn rec(shades: &[u8], step_rewards: &[f64], reward: f64, status: EpisodeStatus) -> Recorded {
    let steps = step_rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, Running)).collect();
    let outcome = Outcome { reward, status, steps: step_rewards.len() as u32, error: None };
    let frames =
        shades.iter().map(|&v| image::RgbImage::from_pixel(4, 3, image::Rgb([v, 0, 0])).into()).collect();
    Recorded { trajectory: Trajectory::new("t", 0, steps, outcome), frames }
}

fn scored(recs: &[Recorded]) -> Scored<'_> {
    let trajectories = recs.iter().map(|r| r.trajectory.clone()).collect();
    Scored {
        recs,
        batch: TrainingBatch { groups: vec![Group { task_id: "t".into(), seed: 0, id: None, trajectories }] },
        index: vec![(0..recs.len()).collect()],
        beta: 0.0,
        rollout_kl: None,
    }
}

#[test]
fn gigpo_keys_its_steps_by_screenshot_and_the_group_relative_kinds_do_not() {
    // Both rollouts start from the same screenshot; one succeeds from there, one fails.
    let recs = vec![rec(&[1, 2, 9], &[0.0, 1.0], 1.0, Success), rec(&[1, 3, 9], &[0.0, 0.0], 0.0, Fail)];
    let s = scored(&recs);
    let gigpo = AlgoConfig::of(AlgoKind::Gigpo);
    let (a, st) = relative::Gigpo.advantages(&gigpo, &s).unwrap();
    let keys = anchor_keys(&recs, &s.index);
    assert_eq!((a.clone(), st), estimate(&gigpo, &s.batch, &keys));
    assert_eq!(st.step_groups, 1, "the first steps share a screenshot");
    assert_ne!(a, estimate(&gigpo, &s.batch, &Vec::new()).0, "the step advantage adds to the episode's");
    let grpo = AlgoConfig::of(AlgoKind::Grpo);
    let (g, gst) = relative::GroupRelative.advantages(&grpo, &s).unwrap();
    assert_eq!(gst.step_groups, 0);
    // Every step carries its episode's advantage.
    assert!(g[0].iter().flatten().all(|steps| steps.windows(2).all(|w| w[0] == w[1])), "{g:?}");
}

#[test]
fn the_kl_term_without_a_reference_leaves_the_rewards_and_beta_adapts_only_with_a_target() {
    let recs = vec![rec(&[1, 9], &[1.0], 1.0, Success), rec(&[1, 9], &[0.0], 0.0, Fail)];
    let mut algo = AlgoConfig { beta: 0.1, kl_mode: KlMode::Reward, ..Default::default() };
    let s = KlTerm::default().score(&algo, 0.1, &recs).unwrap();
    assert_eq!(s.rollout_kl, None);
    let rewards: Vec<f64> = s.batch.groups[0].trajectories.iter().map(|t| t.outcome.reward).collect();
    assert_eq!(rewards, vec![1.0, 0.0]);
    assert_eq!((KlTerm::beta(&algo, None), KlTerm::beta(&algo, Some(0.3))), (0.1, 0.3));
    assert_eq!(KlTerm::adapt(&algo, 0.1, 0.5, 10), None);
    algo.kl_target = Some(0.01);
    let want = adaptive_beta(0.1, 0.5, 0.01, 10, algo.kl_horizon);
    assert_eq!(KlTerm::adapt(&algo, 0.1, 0.5, 10), Some(want));
    assert!(want > 0.1, "a KL above the target raises β");
}
