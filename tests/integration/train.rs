//! The trainer on real browsers and the real (tiny) policy: exact resume, config errors.

use crate::common;

use common::repo;
use common::trainer::{metrics_lines, train};
use guirl::policy::TrainablePolicy;
use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The tiny policy on two-buttons, 2 groups of 2, checkpoints every 2 iterations.
pub(crate) fn config(iterations: u64) -> TrainConfig {
    let task = repo("fixtures/tasks/two-buttons.toml");
    TrainConfig::parse(&format!(
        r#"
[run]
name = "resume"
seed = 3
iterations = {iterations}
[tasks]
ids = ["{}"]
[model]
preset = "tiny"
[algo]
group_size = 2
batch_seeds = 2
epochs = 2
minibatch = 4
lr = 1e-2
lr_schedule = "constant"
[rollout]
envs = 2
max_steps = 1
[eval]
interval = 0
[checkpoint]
interval = 2
"#,
        task.display()
    ))
    .unwrap()
}

fn weights(ckpt: &Path) -> Vec<(String, Vec<f32>)> {
    let map =
        candle_core::safetensors::load(ckpt.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<f32>)> =
        map.into_iter().map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[tokio::test]
async fn four_iterations_equal_two_plus_resume_plus_two() {
    // Plain GRPO, and with the adaptive KL coefficient (β moves every iteration and must
    // come back from the checkpoint, with the KL reference).
    // And with two tasks drawn by learning progress (the faded success counts must come
    // back from the checkpoint too).
    type Variant = (&'static str, fn(&mut TrainConfig));
    let variants: [Variant; 3] = [
        ("plain", |_| {}),
        ("adaptive-beta", |c| (c.algo.beta, c.algo.kl_target) = (0.05, Some(1e-3))),
        ("progress", |c| {
            c.tasks.ids.push("miniwob/click-test".into());
            c.tasks.sampling = guirl::train::curriculum::TaskSampling::Progress;
            c.algo.batch_seeds = 4;
        }),
    ];
    for (name, set) in variants {
        // Two browsers (the config's): the trainer calls the policy on one state at a
        // time, so which rollouts wait together does not change a log-prob's last bit.
        let cfg = |n| {
            let mut c = config(n);
            set(&mut c);
            c
        };
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        train(cfg(4), &a, false).await;
        train(cfg(2), &b, false).await;
        let refused =
            Trainer::new(cfg(4), b.clone(), false, false).err().expect("an existing run is not overwritten");
        assert!(refused.to_string().contains("--resume"), "{refused}");
        train(cfg(4), &b, true).await;
        let (wa, wb) =
            (weights(&a.join("checkpoints/iter-000004")), weights(&b.join("checkpoints/iter-000004")));
        assert_eq!(wa.len(), wb.len());
        assert!(
            wa.iter().zip(&wb).all(|(x, y)| x == y),
            "{name}: resumed weights differ from the uninterrupted run"
        );
        let init = weights(&b.join("checkpoints/iter-000002"));
        assert!(init.iter().zip(&wb).any(|(x, y)| x != y), "{name}: training changed the weights");
        // The metrics file has one line per iteration, also across the resume, and the
        // resumed iterations used the same β as the uninterrupted ones.
        let (ma, mb) = (metrics_lines(&a), metrics_lines(&b));
        assert_eq!(mb.len(), 4, "{name}");
        let betas = |m: &[serde_json::Value]| m.iter().map(|l| l["kl_coef"].as_f64()).collect::<Vec<_>>();
        assert_eq!(betas(&ma), betas(&mb), "{name}: β per iteration");
        if name == "adaptive-beta" {
            assert!(betas(&mb).windows(2).any(|w| w[0] != w[1]), "{name}: β adapted: {:?}", betas(&mb));
        }
        if name == "progress" {
            let w = |m: &serde_json::Value| -> Vec<f64> {
                m["task_weights"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect()
            };
            assert_eq!(ma.iter().map(w).collect::<Vec<_>>(), mb.iter().map(w).collect::<Vec<_>>(), "{name}");
            assert_eq!(w(&mb[0]), vec![0.5, 0.5], "unseen tasks are drawn evenly");
            // Each iteration's drawn tasks (a task not drawn has no entry).
            assert!(mb.iter().all(|m| !m["task_success"].as_object().unwrap().is_empty()), "{name}: {mb:?}");
            // Iteration 3 drew with the weights of the counts iteration 2's checkpoint holds.
            let state: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(b.join("checkpoints/iter-000002/trainer.json")).unwrap(),
            )
            .unwrap();
            let tallies: std::collections::BTreeMap<String, guirl::train::curriculum::TaskTally> =
                serde_json::from_value(state["task_tallies"].clone()).unwrap();
            let ids: Vec<String> = mb[2]["task_weights"].as_object().unwrap().keys().cloned().collect();
            let expect = guirl::train::curriculum::progress_weights(&ids, &tallies, 0.2);
            for (got, want) in w(&mb[2]).iter().zip(&expect) {
                assert!(
                    (got - want).abs() < 1e-12,
                    "{name}: iteration 3 weights {:?} vs {expect:?}",
                    w(&mb[2])
                );
            }
            assert!(b.join("plots/tasks.png").is_file());
        }
        assert!(b.join("plots/success.png").is_file());
    }
}

#[test]
fn bad_train_configs_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n[algo]\nclip_lo = 0.2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl")).arg("train").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("clip_lo"), "{err}");
    std::fs::write(&p, "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n[algo]\nclip_low = 1.5\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guirl")).arg("train").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("algo.clip_low"), "{err}");
    // The task curriculum's keys.
    for (line, says) in [
        ("sampling = \"progres\"", "expected `uniform` or `progress`"),
        ("progress_mix = 2.0", "tasks.progress_mix must be in [0, 1]"),
    ] {
        std::fs::write(
            &p,
            format!("[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n{line}\n"),
        )
        .unwrap();
        let out =
            std::process::Command::new(env!("CARGO_BIN_EXE_guirl")).arg("train").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{line}: {err}");
    }
}

#[tokio::test]
async fn sft_records_oracle_demos_and_checkpoints_the_cloned_policy() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let mut cfg = config(1);
    cfg.tasks.ids = vec!["miniwob/click-test".into()];
    cfg.checkpoint.interval = 1;
    cfg.sft = Some(toml::from_str("oracle_episodes = 4\nepochs = 2\nlr = 1e-3").unwrap());
    // Stopped (Ctrl-C) before anything was recorded: the cloning is saved at epoch 0, no
    // checkpoint is, and `--resume` records the demonstrations and clones.
    let mut stopped = Trainer::new(cfg.clone(), dir.clone(), false, false).unwrap();
    let state = stopped.run(Arc::new(AtomicBool::new(true))).await.unwrap();
    assert!(!state.sft_done && state.iteration == 0 && state.sft_epochs == 0);
    assert!(guirl::train::checkpoint::latest(&dir).unwrap().is_none());
    assert!(guirl::train::checkpoint::cloning_dir(&dir).join("trainer.json").is_file());
    train(cfg.clone(), &dir, true).await;
    let demos = guirl::rollout::TrajectorySet::read(&dir.join("demos")).unwrap();
    assert_eq!(demos.trajectories.len(), 4);
    assert!(demos.trajectories.iter().all(|t| t.trajectory.policy == "oracle"));
    let sft_log = std::fs::read_to_string(dir.join("sft.jsonl")).unwrap();
    assert_eq!(sft_log.lines().count(), 2, "one line per SFT epoch");
    let cloned = dir.join("checkpoints/iter-000000");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cloned.join("trainer.json")).unwrap()).unwrap();
    assert_eq!(state["sft_done"], true);
    assert!(
        state["wall_secs"].as_f64().unwrap() > 0.0,
        "the SFT stage's time counts in the run's wall-clock"
    );
    assert_ne!(
        weights(&cloned),
        weights(&dir.join("checkpoints/iter-000001")),
        "GRPO moved on from the clone"
    );
}

/// GRPO from random init on MiniWoB++ click-test (the README's recipe, shortened): greedy
/// success on held-out seeds before training against after 10 iterations (≈ 30 s).
#[tokio::test]
async fn grpo_from_scratch_raises_held_out_success_on_click_test() {
    let cfg = TrainConfig::parse(
        r#"
[run]
name = "learns"
seed = 0
iterations = 10
[tasks]
ids = ["miniwob/click-test"]
train_seeds = { start = 0, end = 100000 }
eval_seeds = { start = 1000000, count = 40 }
[model]
preset = "tiny"
kinds = ["click"]
[algo]
group_size = 8
batch_seeds = 4
epochs = 2
minibatch = 32
lr = 3e-3
[rollout]
envs = 2
max_steps = 3
[eval]
interval = 10
episodes = 40
[checkpoint]
interval = 0
"#,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(cfg, dir.path().to_path_buf(), false, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // The trainer evaluates the starting policy first (iteration 0), then at iteration 10.
    assert_eq!(lines.len(), 11, "a baseline line and one line per iteration");
    assert_eq!(lines[0]["iteration"], 0);
    let before = lines[0]["eval_success"].as_f64().expect("an evaluation of the starting policy");
    let after = lines[10]["eval_success"].as_f64().expect("an evaluation at the last iteration");
    assert!(before < 0.5, "the untrained policy already succeeds {before}");
    assert!(after >= 0.8 && after > before + 0.3, "held-out success {before} -> {after}");
}

/// `[model] init` starts from a saved policy's weights; a missing path or another
/// architecture is an error that says what to give instead.
#[test]
fn model_init_starts_from_a_checkpoint_folder() {
    use guirl::policy::vlm::{VlmConfig, VlmPolicy};
    let dev = candle_core::Device::Cpu;
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("start");
    let start = VlmPolicy::new(VlmConfig::tiny(), &dev, 7).unwrap();
    start.save(&saved).unwrap();
    let weights = |vars: Vec<(String, candle_core::Var)>| -> Vec<f32> {
        let (_, v) = vars.into_iter().find(|(n, _)| n.contains("text_pos")).unwrap();
        v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()
    };
    let with_init = |init: &Path, extra: &str| {
        let mut text = config(1).to_toml().unwrap();
        text =
            text.replace("[model]\n", &format!("[model]\ninit = {:?}\n{extra}", init.display().to_string()));
        TrainConfig::parse(&text).unwrap()
    };
    let t = Trainer::new(with_init(&saved, ""), dir.path().join("run"), false, false).unwrap();
    assert_eq!(
        weights(t.policy().trainable_vars()),
        weights(start.named_vars()),
        "the run starts from the saved weights"
    );
    // A run folder as init: its latest (here only) checkpoint, like `--policy`.
    let prev = dir.path().join("prev");
    let opt = guirl::train::AdamW::new(start.named_vars(), Default::default()).unwrap();
    guirl::train::checkpoint::save(&prev, &start, &opt, &Default::default()).unwrap();
    let from_run = Trainer::new(with_init(&prev, ""), dir.path().join("from-run"), false, false).unwrap();
    assert_eq!(
        weights(from_run.policy().trainable_vars()),
        weights(start.named_vars()),
        "init = a run folder"
    );
    let fresh = Trainer::new(config(1), dir.path().join("fresh"), false, false).unwrap();
    assert_ne!(
        weights(fresh.policy().trainable_vars()),
        weights(start.named_vars()),
        "without init the weights differ"
    );

    let err = Trainer::new(with_init(&dir.path().join("nope"), ""), dir.path().join("r2"), false, false)
        .err()
        .expect("a missing init is an error");
    assert!(
        format!("{err:#}").contains("model.init") && format!("{err:#}").contains("does not exist"),
        "{err:#}"
    );
    let err = Trainer::new(with_init(&saved, "x_bins = 12\n"), dir.path().join("r3"), false, false)
        .err()
        .expect("another architecture is an error");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("another architecture") && msg.contains("x_bins: 16 in the checkpoint, 12 in [model]"),
        "{msg}"
    );
}

/// The KL reference is the policy RL starts from: after behaviour cloning, the clone
/// (TRL's and veRL's convention), not the random initialisation.
#[tokio::test]
async fn the_kl_reference_after_behaviour_cloning_is_the_clone() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let mut cfg = config(1);
    cfg.tasks.ids = vec!["miniwob/click-test".into()];
    cfg.algo.beta = 0.1;
    cfg.sft = Some(toml::from_str("oracle_episodes = 4\nepochs = 3\nlr = 1e-2").unwrap());
    let mut t = Trainer::new(cfg.clone(), dir.clone(), false, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();
    let clone = weights(&dir.join("checkpoints/iter-000000"));
    assert_eq!(weights(&dir.join("reference")), clone, "reference/ holds the cloned weights");
    // The reference in memory scores like the clone: same log-probs on a real state.
    let dev = candle_core::Device::Cpu;
    let cloned = guirl::policy::vlm::VlmPolicy::load(&dir.join("checkpoints/iter-000000"), &dev).unwrap();
    let (states, actions) = guirl::policy::vlm::speed::synthetic_batch(3, 1);
    let tokens: Vec<Vec<u32>> =
        states.iter().zip(&actions).map(|(s, a)| TrainablePolicy::encode(&cloned, s, a).unwrap()).collect();
    let r = t.reference().expect("beta > 0 keeps a reference").score(&states, &tokens).unwrap().logp;
    let c = TrainablePolicy::score(&cloned, &states, &tokens).unwrap().logp;
    let diff = (r - c).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff < 1e-6, "reference vs clone log-probs differ by {diff}");
    // A resume reads the same reference back.
    let mut more = cfg.clone();
    more.run.iterations = 2;
    let resumed = Trainer::new(more, dir.clone(), true, false).unwrap();
    let r2 = resumed.reference().expect("reloaded").score(&states, &tokens).unwrap().logp;
    let c = TrainablePolicy::score(&cloned, &states, &tokens).unwrap().logp;
    let diff = (r2 - c).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff < 1e-6, "resumed reference differs by {diff}");
}

/// Scoring the recorded token ids of a real rollout: the first minibatch's importance
/// ratio is 1 (the policy has not moved yet).
#[tokio::test]
async fn a_real_iteration_starts_at_ratio_one() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(1);
    cfg.tasks.ids = vec!["miniwob/click-test".into()];
    cfg.rollout.max_steps = 2;
    cfg.algo.temperature = 1.3;
    train(cfg, root.path(), false).await;
    let m = metrics_lines(root.path());
    let r = m.last().unwrap()["first_ratio_mean"].as_f64().unwrap();
    assert!((r - 1.0).abs() < 1e-5, "first minibatch ratio_mean {r}");
    // Where the collection's time went: the policy's calls and the wait for
    // envs split the collection; the envs' phases are their steps' own timings.
    let it = m.last().unwrap();
    let secs = |k: &str| it[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {it}"));
    let (collect, policy, wait) = (secs("rollout_secs"), secs("policy_secs"), secs("env_wait_secs"));
    assert!(policy > 0.0 && wait > 0.0, "policy {policy} s, env wait {wait} s: {it}");
    assert!(policy + wait <= collect + 1e-6, "policy {policy} + wait {wait} > collection {collect}");
    for k in ["env_action_secs", "env_settle_secs", "env_screenshot_secs"] {
        assert!(secs(k) > 0.0, "{k}: {it}");
    }
}

/// The same with `previous_frame` on a 3-step task whose page changes at every click (the
/// background flips colour): the state rebuilt for scoring has the frame the env gave as
/// previous, so the ratio is 1.
#[tokio::test]
async fn a_previous_frame_policy_starts_at_ratio_one() {
    let root = tempfile::tempdir().unwrap();
    let spec = root.path().join("flip.toml");
    std::fs::write(
        &spec,
        r#"start_url = "/fixtures/pages/two-buttons.html"
instruction = "Click {b}"
max_steps = 3
setup_js = "document.addEventListener('click', function () { var s = document.body.style; s.background = s.background ? '' : '#08f'; });"
[viewport]
width = 160
height = 110
[variables]
b = ["A", "B"]
[success]
js = "false"
"#,
    )
    .unwrap();
    let mut cfg = config(1);
    cfg.tasks.ids = vec![spec.display().to_string()];
    let small = cfg.model.small_mut().unwrap();
    small.inputs = Some(vec![guirl::policy::vlm::Input::Pixels, guirl::policy::vlm::Input::PreviousFrame]);
    small.kinds = Some(vec!["click".into()]);
    cfg.rollout.max_steps = 3;
    cfg.algo.temperature = 1.3;
    // The policy does not move, so every minibatch's ratio is 1, not only the first's.
    cfg.algo.lr = 0.0;
    train(cfg, root.path(), false).await;
    let m = metrics_lines(root.path());
    let last = m.last().unwrap();
    assert_eq!(last["episode_len"].as_f64().unwrap(), 3.0, "{last}");
    for key in ["first_ratio_mean", "ratio_mean"] {
        let r = last[key].as_f64().unwrap();
        assert!((r - 1.0).abs() < 1e-5, "{key} {r}");
    }
}

/// Every evaluation is a candidate for `best`, the starting policy's included: with a
/// learning rate of 0 the policy never changes, so the first evaluation (iteration 0)
/// stays the best, and `best` points at a checkpoint that exists although evaluations
/// (every 3 iterations) and checkpoints (every 2) do not coincide.
#[tokio::test]
async fn every_evaluation_is_a_best_candidate() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(3);
    cfg.algo.lr = 0.0;
    cfg.eval.interval = 3;
    cfg.eval.episodes = 4;
    train(cfg, root.path(), false).await;
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.path().join("checkpoints/iter-000003/trainer.json")).unwrap(),
    )
    .unwrap();
    let best = state["best_eval"][1].as_str().unwrap();
    assert!(best.ends_with("iter-000000"), "best is the starting policy on a tie: {state}");
    assert!(Path::new(best).join("model.safetensors").is_file(), "{best} was saved");
    let m = metrics_lines(root.path());
    assert!(m[0]["eval_success"].is_number() && m[3]["eval_success"].is_number());
}

/// A run that must stop on an error writes a checkpoint first and says how to go on.
/// (Coordinate bins finer than the 160×110 screenshot make the first rollout fail.)
#[tokio::test]
async fn a_run_that_must_stop_checkpoints_first() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(2);
    cfg.model.small_mut().unwrap().y_bins = Some(200);
    let mut t = Trainer::new(cfg, root.path().to_path_buf(), false, false).unwrap();
    let e = t.run(Arc::new(AtomicBool::new(false))).await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("y_bins <= 110") && msg.contains("--resume"), "{msg}");
    let saved = guirl::train::checkpoint::latest(root.path()).unwrap().expect("a checkpoint before stopping");
    assert!(saved.join("model.safetensors").is_file(), "{}", saved.display());
}

/// `[rollout] record_every` keeps an iteration's rollouts as a trajectory set: their
/// groups, tokens and frames, which `guirl export` reads with each step's advantage.
#[tokio::test]
async fn kept_rollouts_are_a_set_with_groups() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let mut cfg = config(2);
    cfg.rollout.record_every = 2;
    train(cfg, &run, false).await;
    assert!(!run.join("rollouts/iter-000001").exists(), "only every 2nd iteration is kept");
    let set = guirl::rollout::TrajectorySet::read(&run.join("rollouts/iter-000002")).unwrap();
    assert_eq!(set.trajectories.len(), 4, "2 groups of 2");
    let groups: std::collections::BTreeSet<u64> = set
        .trajectories
        .iter()
        .map(|st| st.trajectory.group.expect("a training rollout has a group"))
        .collect();
    assert_eq!(groups.len(), 2);
    assert!(set.trajectories.iter().all(|st| !st.trajectory.steps[0].tokens.is_empty()));
    let out = root.path().join("steps.jsonl");
    let opts = guirl::export::ExportOptions {
        format: guirl::export::Format::Jsonl,
        layout: guirl::export::Layout::Steps,
        out: Some(out.clone()),
        ..Default::default()
    };
    guirl::export::export(&set, &opts).unwrap();
    let rows = std::fs::read_to_string(&out).unwrap();
    assert!(rows
        .lines()
        .all(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["advantage"].is_f64()));
}
