//! Every `[algo]` option on a real iteration, and what fills an iteration's batch: DAPO's
//! dynamic sampling, success replay, branched rollouts (real browsers, the tiny policy).

use crate::common;
use crate::train::config;

use common::repo;
use common::trainer::{metrics_lines, train};
use guirl::train::TrainConfig;

/// Every `[algo]` option a config can set runs a real iteration on the tiny task, each
/// within seconds, with finite metrics.
#[tokio::test]
async fn every_algorithm_option_runs_an_iteration() {
    use guirl::train::advantage::{AdvStd, StepCredit};
    use guirl::train::config::{
        AlgoConfig, AlgoKind, AlgoVariant, DynamicSampling, GigpoConfig, GspoConfig, GspoLevel, KlMode,
        OverlongPenalty, PpoConfig,
    };
    use guirl::train::{KlEstimator, LossAgg};
    type Variant = (&'static str, fn(&mut AlgoConfig));
    let variants: Vec<Variant> = vec![
        ("grpo-kl", |a| a.beta = 0.05),
        ("gspo", |a| a.set_kind(AlgoKind::Gspo)),
        ("dapo", |a| a.set_kind(AlgoKind::Dapo)),
        ("dr-grpo", |a| a.adv_std = Some(AdvStd::None)),
        ("dr-grpo-kind", |a| a.set_kind(AlgoKind::DrGrpo)),
        ("batch-std-discounted", |a| {
            (a.adv_std, a.step_credit, a.gamma) = (Some(AdvStd::Batch), StepCredit::Discounted, 0.9)
        }),
        ("gspo-trajectory", |a| a.variant = AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory })),
        ("dual-clip-seq-sum", |a| (a.dual_clip, a.loss_agg) = (Some(3.0), Some(LossAgg::SeqMeanTokenSum))),
        ("kl-k2-adaptive", |a| (a.beta, a.kl_estimator, a.kl_target) = (0.05, KlEstimator::K2, Some(1e-3))),
        ("kl-k1-reward", |a| {
            (a.beta, a.kl_estimator, a.kl_mode, a.kl_target) =
                (0.05, KlEstimator::K1, KlMode::Reward, Some(1e-3))
        }),
        ("gigpo", |a| {
            (a.variant, a.gamma) = (AlgoVariant::Gigpo(GigpoConfig { omega: 0.5, step_std: true }), 0.9)
        }),
        ("dapo-no-refill", |a| {
            a.set_kind(AlgoKind::Dapo);
            a.dynamic_sampling = Some(DynamicSampling { max_extra: 0 });
        }),
        ("grpo-dynamic-sampling-overlong", |a| {
            a.dynamic_sampling = Some(DynamicSampling { max_extra: 1 });
            a.overlong_penalty = Some(OverlongPenalty { window: None, weight: 0.5 });
        }),
        ("drop", |a| a.dynamic_sampling = Some(DynamicSampling { max_extra: 0 })),
        ("truncation", |a| a.truncation_reward = Some(-1.0)),
        ("give-up", |a| (a.give_up_reward, a.entropy_coef) = (Some(-0.5), 0.01)),
        ("rloo", |a| a.set_kind(AlgoKind::Rloo)),
        ("reinforce-pp", |a| (a.variant, a.gamma) = (AlgoVariant::ReinforcePp, 0.9)),
        ("ppo", |a| (a.variant, a.gamma) = (AlgoVariant::Ppo(PpoConfig::default()), 0.9)),
        // 2 epochs of one minibatch: the entropy bonus makes epoch 1 step (lr 1e-2), so
        // epoch 2's approximate KL exceeds 1.5 × 1e-5 and the update stops there.
        ("target-kl", |a| (a.target_kl, a.entropy_coef) = (Some(1e-5), 0.01)),
        // The critic sees only the groups dynamic sampling kept.
        ("ppo-dynamic-sampling-value-clip", |a| {
            a.variant = AlgoVariant::Ppo(PpoConfig { value_clip: Some(0.2), ..Default::default() });
            a.dynamic_sampling = Some(DynamicSampling::default());
        }),
    ];
    let root = tempfile::tempdir().unwrap();
    for (name, set) in variants {
        let mut cfg = config(1);
        set(&mut cfg.algo);
        // Round trip through TOML: the key is written and read back like a user's config.
        let cfg = TrainConfig::parse(&cfg.to_toml().unwrap()).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let dir = root.path().join(name);
        train(cfg, &dir, false).await;
        let m = metrics_lines(&dir);
        let last = m.last().unwrap();
        for key in ["loss", "grad_norm", "reward_mean", "first_ratio_mean"] {
            assert!(last[key].as_f64().is_some_and(f64::is_finite), "{name}: {key} = {}", last[key]);
        }
        assert!(dir.join("checkpoints/latest").exists(), "{name}");
        let stop = ["kl_early_stop", "kl_stop_epoch", "kl_stop_minibatch", "optimizer_steps"]
            .map(|k| last[k].as_u64());
        if name == "target-kl" {
            assert_eq!(stop, [Some(1), Some(2), Some(1), Some(1)], "{name}: {last}");
        } else {
            assert_eq!(stop[..3], [Some(0), None, None], "{name}: {last}");
        }
        if name.contains("kl") && name != "target-kl" {
            assert!(dir.join("reference/model.safetensors").is_file(), "{name}");
        }
        if name.contains("adaptive") || name.contains("reward") {
            // the adaptive β is kept in the trainer state (exact resume)
            let state: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join("checkpoints/latest/trainer.json")).unwrap(),
            )
            .unwrap();
            let b = state["kl_coef"].as_f64().unwrap_or_else(|| panic!("{name}: {state}"));
            assert!(b.is_finite() && b > 0.0 && b != 0.05, "{name}: β = {b}");
            assert_eq!(last["kl_coef"].as_f64(), Some(0.05), "{name}: the first iteration uses beta");
        }
    }
}

/// DAPO's dynamic sampling on real browsers. First a task no rollout can pass (two-buttons
/// with the success check `false`): every group is all-equal, so each iteration makes all
/// N = 2 extra collections, trains on nothing, and counts every step of the three
/// collections (B·G = 4 one-step rollouts each) in `env_steps`. Then the real two-button
/// task, where groups differ by chance: whatever the draw, the bookkeeping holds (collect
/// again only while fewer than B groups are informative, at most N times; train on
/// min(B, informative) groups; every collection's steps counted), and the overlong penalty
/// reaches every rollout trained on (T = max_steps = 1).
#[tokio::test]
async fn dapo_dynamic_sampling_collects_again_and_counts_every_step() {
    let root = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(repo("fixtures/tasks/two-buttons.toml")).unwrap();
    let never = root.path().join("never.toml");
    assert!(spec.contains("js = \"window.clicked === '{b}'\""), "{spec}");
    std::fs::write(&never, spec.replace("js = \"window.clicked === '{b}'\"", "js = \"false\"")).unwrap();
    let dapo = |ids: Vec<String>, iterations: u64| {
        let mut cfg = config(iterations);
        cfg.tasks.ids = ids;
        cfg.algo.set_kind(guirl::train::config::AlgoKind::Dapo);
        cfg.algo.dynamic_sampling = Some(guirl::train::config::DynamicSampling { max_extra: 2 });
        cfg.resolve();
        cfg.validate().unwrap();
        cfg
    };
    let int = |m: &serde_json::Value, k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k}: {m}"));

    let dir = root.path().join("never");
    train(dapo(vec![never.display().to_string()], 2), &dir, false).await;
    let ms = metrics_lines(&dir);
    assert_eq!(ms.len(), 2);
    for (i, m) in ms.iter().enumerate() {
        assert_eq!(m["success_rate"].as_f64(), Some(0.0), "{m}");
        assert_eq!((int(m, "extra_collections"), int(m, "groups_collected")), (2, 6), "{m}");
        assert_eq!(
            (int(m, "informative_groups"), int(m, "all_equal_groups"), int(m, "groups")),
            (0, 6, 0),
            "{m}"
        );
        assert_eq!(m["pass_rate"].as_f64(), Some(0.0), "{m}");
        assert_eq!(
            (int(m, "episodes"), int(m, "iteration_env_steps"), int(m, "extra_env_steps")),
            (12, 12, 8),
            "{m}"
        );
        assert_eq!(int(m, "env_steps"), 12 * (i as u64 + 1), "every collection's steps count: {m}");
        assert_eq!(int(m, "optimizer_steps"), 0, "nothing to train on: {m}");
    }
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("checkpoints/latest/trainer.json")).unwrap())
            .unwrap();
    assert_eq!(state["env_steps"].as_u64(), Some(24), "{state}");

    let dir = root.path().join("two-buttons");
    let cfg = dapo(vec![repo("fixtures/tasks/two-buttons.toml").display().to_string()], 2);
    let (b, n) = (cfg.algo.batch_seeds as u64, cfg.algo.max_extra_collections() as u64);
    train(cfg, &dir, false).await;
    let mut total = 0;
    for m in metrics_lines(&dir) {
        let (extra, collected, informative) =
            (int(&m, "extra_collections"), int(&m, "groups_collected"), int(&m, "informative_groups"));
        assert!(extra <= n && collected == b * (1 + extra), "{m}");
        // it collects again only while short of B informative groups
        assert!(extra == n || informative >= b, "{m}");
        assert!(extra == 0 || informative - informative.min(b) < b, "no collection past a full batch: {m}");
        assert_eq!(int(&m, "groups"), informative.min(b), "{m}");
        assert_eq!(m["pass_rate"].as_f64(), Some(informative as f64 / collected as f64), "{m}");
        assert_eq!(int(&m, "iteration_env_steps"), collected * 2, "G = 2 one-step rollouts a group: {m}");
        assert_eq!(int(&m, "extra_env_steps"), extra * b * 2, "{m}");
        total += int(&m, "iteration_env_steps");
        assert_eq!(int(&m, "env_steps"), total, "{m}");
        let trained = informative.min(b) * 2;
        assert_eq!(int(&m, "overlong_penalized"), trained, "T = max_steps = 1: R_len = −1 for each: {m}");
        let mean = m["overlong_penalty_mean"].as_f64().unwrap();
        assert_eq!(mean, if trained > 0 { -1.0 } else { 0.0 }, "{m}");
    }
}

/// Success replay on a task no rollout can pass (its check is `false`), seeded from one
/// successful demonstration: every group fails in every rollout, so without replay there
/// is nothing to train on; with it each group gets the demonstration in place of a failure
/// and the policy is updated. The buffer is in every checkpoint and comes back on resume
/// (no new success can refill it).
#[tokio::test]
async fn success_replay_fills_groups_that_all_failed_and_survives_a_resume() {
    use guirl::env::EpisodeStatus;
    use guirl::rollout::{Outcome, Recorded, TrajStep, Trajectory, TrajectoryWriter};
    let root = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(repo("fixtures/tasks/two-buttons.toml")).unwrap();
    let never = root.path().join("never.toml");
    std::fs::write(&never, spec.replace("js = \"window.clicked === '{b}'\"", "js = \"false\"")).unwrap();
    let task_id = guirl::tasks::load_task(&never.display().to_string()).unwrap().id().to_string();
    // One successful demonstration of the task, as a recorded set holds it.
    let demos = root.path().join("demos");
    let demos_dir = demos.clone();
    let step = TrajStep::new("click(40, 60)", 1.0, EpisodeStatus::Success);
    let outcome = Outcome { reward: 1.0, status: EpisodeStatus::Success, steps: 1, error: None };
    let mut t = Trajectory::new(task_id.clone(), 5, vec![step], outcome);
    t.instruction = "Click A".into();
    let shot = image::RgbImage::from_pixel(160, 110, image::Rgb([240, 240, 240]));
    TrajectoryWriter::open(&demos)
        .unwrap()
        .append(&Recorded { trajectory: t, frames: vec![shot.clone().into(), shot.into()] })
        .unwrap();
    let cfg = |replay: usize, iterations: u64| {
        let mut cfg = config(iterations);
        cfg.tasks.ids = vec![never.display().to_string()];
        cfg.sft =
            Some(toml::from_str(&format!("dir = {:?}\nepochs = 1\nlr = 1e-3", demos.display())).unwrap());
        cfg.algo.success_replay = replay;
        // the loss is the advantages' alone: without signal there is no optimizer step
        (cfg.algo.beta, cfg.algo.entropy_coef) = (0.0, 0.0);
        cfg.resolve();
        cfg.validate().unwrap();
        cfg
    };
    let int = |m: &serde_json::Value, k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k}: {m}"));

    let off = root.path().join("off");
    train(cfg(0, 1), &off, false).await;
    let m = metrics_lines(&off).pop().unwrap();
    assert_eq!(
        (int(&m, "replayed"), int(&m, "optimizer_steps")),
        (0, 0),
        "all failed, nothing to learn: {m}"
    );

    let on = root.path().join("on");
    train(cfg(4, 2), &on, false).await;
    assert!(on.join("checkpoints/iter-000000/success_replay/trajectories.jsonl").is_file());
    train(cfg(4, 4), &on, true).await;
    let ms = metrics_lines(&on);
    assert_eq!(ms.len(), 4);
    for m in &ms {
        assert_eq!(m["success_rate"].as_f64(), Some(0.0), "the rollout figures are the real ones: {m}");
        assert_eq!(int(m, "replayed"), 2, "one per group (B = 2): {m}");
        assert_eq!(int(m, "iteration_env_steps"), 4, "replays cost no env steps: {m}");
        assert!(int(m, "optimizer_steps") > 0, "{m}");
    }
    let kept = guirl::rollout::TrajectorySet::read(&on.join("checkpoints/latest/success_replay")).unwrap();
    assert_eq!(kept.trajectories.len(), 1);

    // A run that starts from the clone (no [sft]) seeds its buffer from the demonstrations
    // named by algo.success_replay_demos.
    let from_clone = |demos: bool| {
        let mut c = cfg(4, 1);
        c.sft = None;
        c.model.init = Some(on.join("checkpoints/iter-000000"));
        c.algo.success_replay_demos = demos.then(|| demos_dir.clone());
        c.validate().unwrap();
        c
    };
    let seeded = root.path().join("seeded");
    train(from_clone(true), &seeded, false).await;
    assert_eq!(int(&metrics_lines(&seeded).pop().unwrap(), "replayed"), 2, "seeded from the demonstrations");
    let unseeded = root.path().join("unseeded");
    train(from_clone(false), &unseeded, false).await;
    assert_eq!(int(&metrics_lines(&unseeded).pop().unwrap(), "replayed"), 0, "nothing to replay");
    let step = &kept.trajectories[0].trajectory.steps[0];
    assert!(!step.tokens.is_empty() && step.tokens.len() == step.token_logprobs.len(), "scored by the clone");
}

/// Rollout trees (`algo.branch`): each group gets K rollouts branched from one of its
/// rollouts' mid-episode states; they join the group (GiGPO's step groups see them),
/// their replayed steps are env steps, and the rollout figures stay the flat groups'.
#[tokio::test]
async fn branched_rollouts_join_their_groups_and_count_their_replayed_steps() {
    use guirl::train::branch::{BranchAt, BranchConfig};
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(1);
    // A wrong click does not end the episode: failures run to the step limit.
    cfg.rollout.max_steps = 3;
    cfg.algo.group_size = 4;
    cfg.algo.set_kind(guirl::train::config::AlgoKind::Gigpo);
    cfg.algo.branch = Some(BranchConfig { at: BranchAt::Random, k: 2 });
    cfg.resolve();
    cfg.validate().unwrap();
    train(cfg, root.path(), false).await;
    let m = metrics_lines(root.path()).pop().unwrap();
    let int = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k}: {m}"));
    let branched = int("branched");
    assert_eq!(branched + 2 * int("unbranched_groups"), 4, "K = 2 per group that has a branch point: {m}");
    assert!(branched > 0, "{m}");
    assert_eq!(int("episodes"), 8, "the rollout figures are the flat groups': {m}");
    let flat_steps = (m["episode_len"].as_f64().unwrap() * 8.0).round() as u64;
    let branch_steps = int("iteration_env_steps") - flat_steps;
    assert!(int("branch_replayed_steps") >= branched, "each branch replays at least one step: {m}");
    assert!(branch_steps > int("branch_replayed_steps"), "replayed and own steps are env steps: {m}");
    assert_eq!(int("branch_failures"), 0, "every prefix reached its recorded state: {m}");
}
