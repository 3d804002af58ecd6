//! Tests of the parent module (kept apart to keep the module short).
use super::*;
use crate::train::advantage::{AdvStd, StepCredit};
use crate::train::objective::{KlEstimator, LossAgg, PolicyLossKind};
use crate::train::optim::LrSchedule;

fn parse_ok(text: &str) -> TrainConfig {
    let mut c = TrainConfig::parse(text).unwrap();
    c.resolve();
    c.validate().unwrap();
    c
}

fn err(text: &str) -> String {
    match TrainConfig::parse(text) {
        Err(e) => format!("{e:#}"),
        Ok(mut c) => {
            c.resolve();
            format!("{:#}", c.validate().unwrap_err())
        }
    }
}

const MINIMAL: &str = "[run]\nname = \"r\"\niterations = 10\n[tasks]\nids = [\"miniwob/click-button\"]\n";

#[test]
fn the_example_parses_with_every_key() {
    let c = parse_ok(EXAMPLE_CONFIG);
    assert_eq!(c.run.name, "click-button");
    assert_eq!(c.run.iterations, 200);
    assert_eq!(c.tasks.eval_seeds, EvalSeeds { start: 1_000_000, count: 100 });
    assert_eq!(c.algo.kind(), AlgoKind::Grpo);
    assert_eq!((c.algo.clip_low(), c.algo.clip_high()), (0.2, 0.2));
    assert_eq!(c.model.small().map(|s| s.preset), Some(ModelPreset::Tiny));
    assert!(c.sft.is_none());
    assert_eq!(c.run_dir(), PathBuf::from("runs/click-button"));
    // the example shows the defaults: it equals the minimal file's resolved config
    let mut d = parse_ok(&EXAMPLE_CONFIG.replace("iterations = 200", "iterations = 10"));
    d.run.name = "r".into();
    d.tasks.ids = vec!["miniwob/click-button".into()];
    assert_eq!(d, parse_ok(MINIMAL));
}

/// The example hard-codes no per-algorithm value: switching `kind` alone gives that
/// algorithm's clip range and dynamic sampling.
#[test]
fn the_example_follows_the_algorithm_kind() {
    let with =
        |kind: &str| parse_ok(&EXAMPLE_CONFIG.replace("kind = \"grpo\"", &format!("kind = \"{kind}\"")));
    let gspo = with("gspo");
    assert_eq!((gspo.algo.clip_low(), gspo.algo.clip_high()), (3e-4, 4e-4));
    let dapo = with("dapo");
    assert_eq!((dapo.algo.clip_low(), dapo.algo.clip_high()), (0.2, 0.28));
    assert!(dapo.algo.drop_all_equal_groups() && !with("grpo").algo.drop_all_equal_groups());
    assert!(dapo.algo.overlong_penalty.is_some() && with("grpo").algo.overlong_penalty.is_none());
    // Dr. GRPO: no std division and the constant normalizer, N = the model's max action
    // tokens (tiny: 12); GSPO: a mean over actions; the others token-mean and the group std.
    let dr = with("dr_grpo");
    assert_eq!((dr.algo.adv_std(), dr.algo.loss_agg()), (AdvStd::None, LossAgg::SeqMeanTokenSumNorm));
    assert_eq!(dr.algo.loss_agg_norm, Some(12.0));
    assert_eq!(dr.algo.loss_config().agg_norm, 12.0);
    assert_eq!(gspo.algo.loss_agg(), LossAgg::SeqMeanTokenMean);
    for kind in ["grpo", "dapo", "rloo", "reinforce_pp", "gigpo"] {
        let c = with(kind);
        assert_eq!(c.algo.loss_agg(), LossAgg::TokenMean, "{kind}");
        assert_eq!(c.algo.loss_config().kind, PolicyLossKind::Token, "{kind}");
        assert_eq!(c.algo.loss_agg_norm, None, "{kind}");
    }
    assert_eq!(with("gigpo").algo.adv_std, Some(AdvStd::Group));
    assert_eq!(with("rloo").algo.adv_std, None, "rloo has no std to choose");
    let g = with("gigpo");
    assert_eq!(g.algo.variant, AlgoVariant::Gigpo(GigpoConfig { omega: 1.0, step_std: true }));
    assert_eq!(g.algo.kl_estimator, KlEstimator::K3);
}

#[test]
fn the_new_algo_keys_parse_and_resolve() {
    let c = parse_ok(&format!(
        "{MINIMAL}[algo]\nkind = \"gspo\"\ndual_clip = 3.0\n\
         loss_agg = \"seq-mean-token-sum-norm\"\nloss_agg_norm = 20\nbeta = 0.1\nkl_estimator = \"k2\"\n\
         kl_mode = \"reward\"\nkl_target = 0.05\nkl_horizon = 500\nadv_std = \"batch\"\n\
         step_credit = \"discounted\"\ngamma = 0.9\n[algo.gspo]\nlevel = \"trajectory\"\n"
    ));
    let a = &c.algo;
    let level = AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory });
    assert_eq!((&a.variant, a.dual_clip, a.loss_agg_norm), (&level, Some(3.0), Some(20.0)));
    assert_eq!((a.kl_estimator, a.kl_mode, a.kl_target), (KlEstimator::K2, KlMode::Reward, Some(0.05)));
    assert_eq!((a.adv_std(), a.step_credit, a.kl_horizon), (AdvStd::Batch, StepCredit::Discounted, 500.0));
    let l = a.loss_config();
    assert_eq!(
        (l.kind, l.agg, l.agg_norm, l.dual_clip),
        (PolicyLossKind::Sequence, LossAgg::SeqMeanTokenSumNorm, 20.0, Some(3.0))
    );
    // in reward mode the loss has no KL term
    assert_eq!((l.beta, l.kl), (0.0, KlEstimator::K2));
    assert_eq!(parse_ok(&c.to_toml().unwrap()), c);
}

#[test]
fn full_config_with_sft_and_overrides_round_trips() {
    let text = r#"
device = "cuda:1"
[run]
name = "x"
seed = 7
iterations = 50
[tasks]
ids = ["a", "b"]
train_seeds = { start = 100, end = 200 }
eval_seeds = { start = 0, count = 100 }
[model]
preset = "small"
d_model = 128
heads = 4
init = "w.safetensors"
[algo]
kind = "dapo"
lr_schedule = "cosine"
warmup = 5
beta = 0.01
adv_std = "none"
[sft]
dir = "demos"
"#;
    let c = parse_ok(text);
    assert_eq!(c.device, "cuda:1");
    assert_eq!((c.algo.clip_low, c.algo.clip_high), (Some(0.2), Some(0.28)));
    assert!(c.algo.drop_all_equal_groups());
    assert_eq!(c.model.small().unwrap().d_model, Some(128));
    assert_eq!(c.sft.as_ref().unwrap().epochs, 3);
    assert_eq!(c.algo.adv_std(), AdvStd::None);
    let lc = c.algo.loss_config();
    assert_eq!((lc.kind, lc.beta), (PolicyLossKind::Token, 0.01));
    let s = c.algo.lr_scheduler(c.run.iterations);
    assert_eq!((s.schedule, s.warmup, s.total), (LrSchedule::Cosine, 5, 50));
    // the resolved config written out reads back the same
    let again = parse_ok(&c.to_toml().unwrap());
    assert_eq!(again, c);
    let g = parse_ok(&text.replace("\"dapo\"", "\"gspo\""));
    assert_eq!(g.algo.loss_config().kind, PolicyLossKind::Sequence);
    assert_eq!((g.algo.clip_low(), g.algo.clip_high()), (3e-4, 4e-4));
}

/// DAPO in full by default: clip-higher, token-mean, dynamic sampling (3 extra collections
/// at most), the overlong penalty with a window of ceil(max_steps / 5) steps, no KL. Either
/// technique is turned on for another kind by writing its table.
#[test]
fn dapo_defaults_and_techniques() {
    let dapo = parse_ok(&format!("{MINIMAL}[algo]\nkind = \"dapo\"\n"));
    let a = &dapo.algo;
    assert_eq!((a.clip_low(), a.clip_high(), a.loss_agg()), (0.2, 0.28, LossAgg::TokenMean));
    assert_eq!(a.dynamic_sampling, Some(DynamicSampling { max_extra: 3 }));
    assert_eq!(a.overlong_penalty, Some(OverlongPenalty { window: Some(2), weight: 1.0 }));
    assert_eq!((a.beta, a.loss_config().beta, a.kl_target), (0.0, 0.0, None), "no KL by default");
    assert_eq!(parse_ok(&dapo.to_toml().unwrap()), dapo);
    assert_eq!(dapo, parse_ok(&format!("{MINIMAL}[algo]\n{}", "kind = \"dapo\"\n[algo.dynamic_sampling]\n")));
    let grpo = parse_ok(MINIMAL);
    let g = &grpo.algo;
    assert!(!g.drop_all_equal_groups() && g.dynamic_sampling.is_none() && g.overlong_penalty.is_none());
    assert_eq!(g.max_extra_collections(), 0);
    // dynamic sampling on another kind: its table turns it on
    let c = parse_ok(&format!("{MINIMAL}[algo.dynamic_sampling]\nmax_extra = 5\n"));
    assert!(c.algo.drop_all_equal_groups() && c.algo.max_extra_collections() == 5);
    // max_extra = 0: all-equal groups left out, nothing collected in their place
    let c = parse_ok(&format!("{MINIMAL}[algo]\nkind = \"dapo\"\n[algo.dynamic_sampling]\nmax_extra = 0\n"));
    assert!(c.algo.drop_all_equal_groups() && c.algo.max_extra_collections() == 0);
    // the window follows rollout.max_steps: ceil(12 / 5) = 3, ceil(3 / 5) = 1
    let w = |steps: u32| {
        parse_ok(&format!("{MINIMAL}[algo]\nkind = \"dapo\"\n[rollout]\nmax_steps = {steps}\n"))
            .algo
            .overlong_penalty
            .and_then(|p| p.window)
    };
    assert_eq!((w(12), w(3), w(1)), (Some(3), Some(1), Some(1)));
    let set = parse_ok(&format!("{MINIMAL}[algo.overlong_penalty]\nwindow = 4\n"));
    assert_eq!(set.algo.overlong_penalty, Some(OverlongPenalty { window: Some(4), weight: 1.0 }));
    // a technique's key outside its table is the old form, refused with the new form
    let e = err(&format!("{MINIMAL}[algo]\noverlong_penalty = true\noverlong_window = 4\n"));
    assert!(
        e.contains("[algo] is in the old form")
            && e.contains("[algo.overlong_penalty]\nweight = 1.0\nwindow = 4"),
        "{e}"
    );
}

#[test]
fn a_misspelt_key_or_value_names_the_close_one_after_the_list() {
    let e = err(&format!("{MINIMAL}[algo]\ngroup_sise = 4\n"));
    let (list, hint) = e.rsplit_once('\n').unwrap();
    assert!(list.contains("unknown field `group_sise`, expected one of `kind`, `group_size`"), "{e}");
    assert_eq!(hint, "did you mean `group_size`?", "{e}");
    let e = err(&format!("{MINIMAL}[rollout]\nenv = 2\n"));
    assert!(e.ends_with("did you mean `envs`?") && e.contains("in table [rollout]"), "{e}");
    let e = err(&format!("{MINIMAL}[algo]\nkind = \"grop\"\n"));
    assert!(e.ends_with("did you mean `grpo`?"), "{e}");
    // a name like none of them gets no guess
    let e = err(&format!("{MINIMAL}[algo]\nzzz = 1\n"));
    assert!(e.contains("unknown field `zzz`") && !e.contains("did you mean"), "{e}");
}

#[test]
fn unknown_keys_are_named_with_their_table() {
    let e = err(&format!("devices = \"cpu\"\n{MINIMAL}"));
    assert!(e.contains("unknown field `devices`"), "{e}");
    assert!(!e.contains("in table"), "{e}");
    let e = err(&format!("{MINIMAL}[algo]\ngroup_size = 4\nclip_lo = 0.1\n"));
    assert!(e.contains("unknown field `clip_lo`") && e.contains("in table [algo]"), "{e}");
    let e = err(&format!("{MINIMAL}[sft]\ndir = \"d\"\nepoch = 3\n"));
    assert!(e.contains("unknown field `epoch`") && e.contains("[sft]"), "{e}");
    let e = err(&format!("{MINIMAL}[optimizer]\nlr = 1\n"));
    assert!(e.contains("unknown field `optimizer`") && !e.contains("in table"), "{e}");
    let e = err(&format!("{MINIMAL}[algo.extra]\nlr = 1\n"));
    assert!(e.contains("unknown field `extra`") && e.contains("in table [algo]"), "{e}");
    let e = err(&MINIMAL.replace("ids =", "train_seeds = { start = 0, stop = 5 }\nids ="));
    assert!(e.contains("unknown field `stop`") && e.contains("[tasks]"), "{e}");
    let e = err(&format!("{MINIMAL}[algo]\nkind = \"a2c\"\n"));
    assert!(e.contains("unknown variant `a2c`"), "{e}");
    // an unknown kind lists the valid ones
    assert!(
        e.contains("`grpo`, `dr_grpo`, `dapo`, `gspo`, `rloo`, `reinforce_pp`, `gigpo`, `ppo`")
            && e.contains("[algo]"),
        "{e}"
    );
    let e = err(&MINIMAL.replace("\"]", "\", \"miniwob/click-test\", \"miniwob/click-button\"]"));
    assert!(e.contains("tasks.ids lists \"miniwob/click-button\" twice"), "{e}");
    let e = err("[run]\nname = \"r\"\n[tasks]\nids = []\n");
    assert!(e.contains("missing field `iterations`"), "{e}");
}

#[test]
fn training_rewards_are_the_pages_unless_success_is_asked_for() {
    use crate::train::rewards::TrainReward;
    assert_eq!(parse_ok(MINIMAL).algo.reward, TrainReward::Page);
    let c = parse_ok(&format!("{MINIMAL}[algo]\nreward = \"success\"\n"));
    assert_eq!(
        (c.algo.reward, c.algo.reward_overrides().reward),
        (TrainReward::Success, TrainReward::Success)
    );
}

#[test]
fn bad_values_are_named() {
    let with = |table: &str, kv: &str| err(&format!("{MINIMAL}[{table}]\n{kv}\n"));
    for (table, kv, want) in [
        ("algo", "clip_low = 1.5", "algo.clip_low must be in (0, 1), got 1.5"),
        ("algo", "clip_low = 0.0", "algo.clip_low must be in (0, 1)"),
        ("algo", "clip_high = -0.1", "algo.clip_high must be > 0"),
        ("algo", "group_size = 1", "algo.group_size must be at least 2"),
        ("algo", "lr = 0.0", "algo.lr must be in (0, 1]"),
        ("algo", "lr = nan", "algo.lr must be in (0, 1]"),
        ("algo", "beta = -1.0", "algo.beta must be >= 0"),
        ("algo", "epochs = 0", "algo.epochs must be at least 1"),
        ("algo", "temperature = 0.0", "algo.temperature must be > 0"),
        ("algo", "max_grad_norm = 0.0", "algo.max_grad_norm must be > 0"),
        ("algo", "warmup = 11", "algo.warmup (11) must not exceed run.iterations (10)"),
        ("algo", "min_lr = 1.0", "algo.min_lr must be in [0, algo.lr]"),
        ("algo", "truncation_reward = nan", "algo.truncation_reward must be a finite number"),
        ("algo", "gamma = 1.5", "algo.gamma must be in [0, 1]"),
        ("algo", "give_up_reward = inf", "algo.give_up_reward must be a finite number"),
        ("algo", "fail_reward = nan", "algo.fail_reward must be a finite number"),
        ("algo", "kind = \"ppo2\"", "ppo2"),
        ("algo", "dual_clip = 1.0", "algo.dual_clip must be > 1"),
        ("algo", "dual_clip = 0.5", "algo.dual_clip must be > 1"),
        (
            "algo.gspo",
            "level = \"trajectory\"",
            "[algo.gspo] holds GSPO's own keys, but algo.kind = \"grpo\": to train GSPO set kind = \"gspo\"",
        ),
        ("algo.gspo", "level = \"episode\"", "unknown variant `episode`, expected `action` or `trajectory`"),
        (
            "algo",
            "loss_agg = \"mean\"",
            "unknown variant `mean`, expected one of `token-mean`, `seq-mean-token-mean`",
        ),
        ("algo", "loss_agg_norm = 0.0", "algo.loss_agg_norm must be > 0"),
        ("algo", "kl_estimator = \"k4\"", "unknown variant `k4`, expected one of `k1`, `k2`, `k3`"),
        ("algo", "kl_mode = \"both\"", "unknown variant `both`, expected `loss` or `reward`"),
        ("algo", "reward = \"binary\"", "unknown variant `binary`, expected `page` or `success`"),
        ("algo", "kl_target = 0.01", "algo.kl_target needs algo.beta > 0"),
        ("algo", "beta = 0.1\nkl_target = -1.0", "algo.kl_target must be > 0"),
        ("algo", "kl_horizon = 0.0", "algo.kl_horizon must be > 0"),
        (
            "algo",
            "kind = \"gspo\"\nminibatch_order = \"group_steps\"\n[algo.gspo]\nlevel = \"trajectory\"",
            "algo.minibatch_order = \"group_steps\" cannot be used with [algo.gspo] level = \"trajectory\"",
        ),
        (
            "algo",
            "minibatch_order = \"grouped\"",
            "unknown variant `grouped`, expected `shuffled` or `group_steps`",
        ),
        ("algo", "target_kl = 0.0", "algo.target_kl must be > 0"),
        ("algo", "target_kl = -0.01", "algo.target_kl must be > 0"),
        ("algo", "target_kl = nan", "algo.target_kl must be > 0"),
        ("algo", "target_kl = \"0.01\"", "invalid type: string \"0.01\", expected a number"),
        ("rollout", "max_staleness = \"1\"", "invalid type: string \"1\", expected a whole number"),
        ("rollout", "max_staleness = 2", "must be 0 (collect, then update) or 1"),
        (
            "algo",
            "adv_std = \"bessel\"",
            "unknown variant `bessel`, expected one of `group`, `batch`, `none`",
        ),
        ("algo", "kind = \"rloo\"\nadv_std = \"group\"", "algo.adv_std applies to grpo"),
        (
            "algo",
            "kind = \"gigpo\"\nstep_credit = \"discounted\"",
            "algo.step_credit = \"discounted\" applies to grpo",
        ),
        ("algo", "step_credit = \"steps\"", "unknown variant `steps`, expected `episode` or `discounted`"),
        ("algo", "kind = \"gigpo\"\n[algo.gigpo]\nomega = -1.0", "algo.gigpo.omega must be >= 0"),
        ("algo.gigpo", "omega = 1.0", "[algo.gigpo] holds GiGPO's own keys, but algo.kind = \"grpo\""),
        ("algo.ppo", "gae_lambda = 0.9", "[algo.ppo] holds PPO's own keys, but algo.kind = \"grpo\""),
        ("algo.ppo", "lambda = 0.9", "unknown field `lambda`, expected one of `gae_lambda`"),
        ("algo.dynamic_sampling", "max_extra = 101", "algo.dynamic_sampling.max_extra must be at most 100"),
        ("algo.dynamic_sampling", "extra = 1", "unknown field `extra`, expected `max_extra`"),
        ("algo", "success_replay = 1001", "algo.success_replay must be at most 1000"),
        ("algo.overlong_penalty", "weight = -0.5", "algo.overlong_penalty.weight must be >= 0"),
        (
            "algo.overlong_penalty",
            "window = 0",
            "algo.overlong_penalty.window must be in [1, rollout.max_steps = 10], got 0",
        ),
        (
            "algo.overlong_penalty",
            "window = 11",
            "algo.overlong_penalty.window must be in [1, rollout.max_steps = 10], got 11",
        ),
        ("rollout", "envs = 0", "rollout.envs must be at least 1"),
        ("model", "d_model = 100\nheads = 3", "model.heads (3) must divide model.d_model (100)"),
        ("model", "layers = 0", "model.layers must be at least 1"),
        ("model", "kinds = [\"clik\"]", "model.kinds: unknown action kind \"clik\""),
        ("model", "x_bins = 0", "model.x_bins must be at least 1"),
        ("sft", "dir = \"d\"\nlr = 2.0", "sft.lr must be in (0, 1]"),
        ("sft", "epochs = 2", "[sft] needs exactly one of sft.dir"),
        ("sft", "dir = \"d\"\noracle_episodes = 5", "[sft] needs exactly one of sft.dir"),
        (
            "sft",
            "dir = \"d\"\noracle_episodes_for = { \"miniwob/click-test\" = 5 }",
            "sft.oracle_episodes_for needs sft.oracle_episodes",
        ),
        (
            "sft",
            "oracle_episodes = 5\noracle_episodes_for = { \"miniwob/nope\" = 50 }",
            "sft.oracle_episodes_for names \"miniwob/nope\", which is not in [tasks] ids",
        ),
    ] {
        let e = with(table, kv);
        assert!(e.contains(want), "[{table}] {kv}: {e}");
    }
    let e = err(&format!("device = \"gpu\"\n{MINIMAL}"));
    assert!(e.contains("device must be \"cpu\", \"cuda\" or \"cuda:N\""), "{e}");
    assert!(err(&format!("device = \"cuda:x\"\n{MINIMAL}")).contains("got \"cuda:x\""));
    let e = err(&MINIMAL.replace("iterations = 10", "iterations = 0"));
    assert!(e.contains("run.iterations must be at least 1 (0 only with [sft]"), "{e}");
    // Behaviour cloning alone: iterations = 0 with [sft].
    parse_ok(&format!(
        "{}[sft]\noracle_episodes = 4\n",
        MINIMAL.replace("iterations = 10", "iterations = 0")
    ));
    let c = parse_ok(&format!(
        "{MINIMAL}[sft]\noracle_episodes = 4\noracle_episodes_for = {{ \"miniwob/click-button\" = 9 }}\n"
    ));
    assert_eq!(c.sft.unwrap().oracle_episodes_for.get("miniwob/click-button"), Some(&9));
    // A task no oracle knows is refused at load, before any browser runs.
    let spec = "environments/websites/newsletter.toml";
    let e = err(&format!(
        "{}[sft]\noracle_episodes = 4\n",
        MINIMAL.replace("\"miniwob/click-button\"", &format!("\"miniwob/click-button\", \"{spec}\""))
    ));
    assert!(e.contains(&format!("no oracle for task {spec}")) && e.contains("set sft.dir"), "{e}");
    assert!(!e.contains("click-button"), "{e}");
    // A mistyped id is said to be unknown, with the closest ids, not to lack an oracle.
    let e = err(&format!("{}[sft]\noracle_episodes = 4\n", MINIMAL.replace("click-button", "click-buton")));
    assert!(e.contains("unknown task \"miniwob/click-buton\"") && e.contains("miniwob/click-button"), "{e}");
    assert!(!e.contains("no oracle"), "{e}");
    let e = err(&MINIMAL.replace("iterations = 10", "iterations = 10\nmax_env_steps = 0"));
    assert!(e.contains("run.max_env_steps must be at least 1"), "{e}");
    let e = err(&MINIMAL.replace("\"r\"", "\"a/b\""));
    assert!(e.contains("run.name must be a folder name"), "{e}");
    // several bad keys: all named
    let e = with("algo", "clip_low = 2.0\nepochs = 0");
    assert!(e.contains("algo.clip_low") && e.contains("algo.epochs"), "{e}");
    // a bad lr is that lr's error alone, not also the default min_lr's
    let e = with("algo", "lr = -1.0");
    assert!(e.contains("algo.lr must be in (0, 1], got -1") && !e.contains("min_lr"), "{e}");
}

#[test]
fn eval_seeds_must_be_held_out() {
    let t = |tr: &str, ev: &str| {
        MINIMAL.replace("ids =", &format!("train_seeds = {tr}\neval_seeds = {ev}\nids ="))
    };
    let e = err(&t("{ start = 0, end = 100 }", "{ start = 50, count = 10 }"));
    assert!(e.contains("tasks.eval_seeds (50..60) overlaps tasks.train_seeds (0..100)"), "{e}");
    let e = err(&t("{ start = 10, end = 100 }", "{ start = 0, count = 11 }"));
    assert!(e.contains("overlaps"), "{e}");
    parse_ok(&t("{ start = 10, end = 100 }", "{ start = 0, count = 10 }"));
    parse_ok(&t("{ start = 0, end = 100 }", "{ start = 100, count = 10 }"));
    let e = err(&t("{ start = 5, end = 5 }", "{ start = 100, count = 10 }"));
    assert!(e.contains("tasks.train_seeds must have start < end"), "{e}");
    // the test split (from 2 000 000) is for figures only: no training or validation there
    let e = err(&t("{ start = 0, end = 2000001 }", "{ start = 2000001, count = 10 }"));
    assert!(e.contains("tasks.train_seeds reaches the test split (seeds from 2000000)"), "{e}");
    let e = err(&t("{ start = 0, end = 100 }", "{ start = 1999990, count = 11 }"));
    assert!(e.contains("tasks.eval_seeds reaches the test split"), "{e}");
    parse_ok(&t("{ start = 0, end = 100 }", "{ start = 1999990, count = 10 }"));
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.toml");
    std::fs::write(&p, format!("{MINIMAL}[algo]\nclip_low = 3.0\n")).unwrap();
    let e = format!("{:#}", TrainConfig::load(&p).unwrap_err());
    assert!(e.contains("train.toml") && e.contains("algo.clip_low"), "{e}");
    let e = format!("{:#}", TrainConfig::load(&dir.path().join("nope.toml")).unwrap_err());
    assert!(e.contains("cannot read train config") && e.contains("nope.toml"), "{e}");
}

#[test]
fn every_shipped_recipe_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let mut c =
                TrainConfig::parse(&text).unwrap_or_else(|err| panic!("{}: {err:#}", e.path().display()));
            c.resolve();
            c.validate().unwrap_or_else(|err| panic!("{}: {err:#}", e.path().display()));
            if let Some(s) = c.model.small() {
                s.vlm_config().unwrap_or_else(|err| panic!("{}: {err:#}", e.path().display()));
            }
            n += 1;
        }
    }
    assert!(n >= 3, "found {n} recipes in {}", dir.display());
}

#[test]
fn discounted_step_credit_over_a_negative_failure_reward_is_warned_about() {
    let algo = |text: &str| parse_ok(&format!("{MINIMAL}[algo]\n{text}")).algo;
    // γ < 1 with the tasks' −1: a failure put off by stalling scores −γ^k > −1.
    let w = algo("kind = \"gigpo\"\ngamma = 0.95").stalling_warning(-1.0).unwrap();
    assert!(w.contains("algo.fail_reward = 0.0"), "{w}");
    assert!(algo("kind = \"ppo\"\ngamma = 0.9\nfail_reward = 0.0\ntruncation_reward = -1.0")
        .stalling_warning(-1.0)
        .is_some());
    assert!(algo("kind = \"grpo\"\nstep_credit = \"discounted\"\ngamma = 0.9")
        .stalling_warning(-1.0)
        .is_some());
    // Failures and truncations at 0, γ = 1, a trajectory-level estimator, or tasks whose
    // failures score 0: nothing to warn about.
    assert_eq!(
        algo("kind = \"gigpo\"\ngamma = 0.95\nfail_reward = 0.0\ntruncation_reward = 0.0")
            .stalling_warning(-1.0),
        None
    );
    assert_eq!(algo("kind = \"reinforce_pp\"\ngamma = 1.0").stalling_warning(-1.0), None);
    assert_eq!(algo("kind = \"grpo\"\ngamma = 0.9").stalling_warning(-1.0), None);
    assert_eq!(algo("kind = \"reinforce_pp\"\ngamma = 0.9").stalling_warning(0.0), None);
}

#[test]
fn minibatch_order_is_shuffled_by_default_and_parses() {
    assert_eq!(parse_ok(MINIMAL).algo.minibatch_order, MinibatchOrder::Shuffled);
    let c = parse_ok(&format!("{MINIMAL}[algo]\nminibatch_order = \"group_steps\"\n"));
    assert_eq!(c.algo.minibatch_order, MinibatchOrder::GroupSteps);
}

#[test]
fn target_kl_is_off_by_default_and_parses() {
    assert_eq!(parse_ok(MINIMAL).algo.target_kl, None);
    let c = parse_ok(&format!("{MINIMAL}[algo]\ntarget_kl = 0.02\n"));
    assert_eq!(c.algo.target_kl, Some(0.02));
    assert_eq!(parse_ok(&c.to_toml().unwrap()), c);
}

#[test]
fn k1_as_a_loss_term_and_a_kl_term_under_dapo_are_warned_about() {
    let algo = |text: &str| parse_ok(&format!("{MINIMAL}[algo]\n{text}")).algo;
    // k1 in the loss with β > 0: E_π[∇ k1] = E_π[∇ log π] = 0.
    let w = algo("beta = 0.04\nkl_estimator = \"k1\"").warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("algo.kl_estimator = \"k1\"") && w[0].contains("expected gradient of zero"),
        "{w:?}"
    );
    assert!(w[0].contains("use kl_estimator = \"k3\"") && w[0].contains("\"k2\""), "{w:?}");
    // k1 in the reward, k1 with β = 0, or k2 / k3 in the loss: nothing to say.
    assert!(algo("beta = 0.04\nkl_estimator = \"k1\"\nkl_mode = \"reward\"").warnings().is_empty());
    assert!(algo("kl_estimator = \"k1\"").warnings().is_empty());
    assert!(algo("beta = 0.04\nkl_estimator = \"k2\"").warnings().is_empty());
    assert!(algo("beta = 0.04").warnings().is_empty());
    // DAPO has no KL term: β > 0 is warned about, with what to do.
    let w = algo("kind = \"dapo\"\nbeta = 0.01").warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("algo.kind = \"dapo\" with algo.beta = 0.01") && w[0].contains("drops the KL term"),
        "{w:?}"
    );
    assert!(
        w[0].contains("set algo.beta = 0.0") && w[0].contains("kind = \"grpo\" with clip_high = 0.28"),
        "{w:?}"
    );
    assert!(algo("kind = \"dapo\"").warnings().is_empty());
    // Both at once: both warnings.
    assert_eq!(algo("kind = \"dapo\"\nbeta = 0.01\nkl_estimator = \"k1\"").warnings().len(), 2);
    // The alternative the DAPO warning offers is a valid config.
    algo(
        "kind = \"grpo\"\nbeta = 0.01\nclip_high = 0.28\n[algo.dynamic_sampling]\n[algo.overlong_penalty]\n",
    );
}

#[test]
fn continuing_cloning_needs_the_clone_to_continue() {
    let text = EXAMPLE_CONFIG
        .replace("# [sft]\n# dir = \"data/demos\"", "[sft]\ndir = \"data/demos\"\nstart_epoch = 3");
    let mut c = TrainConfig::parse(&text).unwrap();
    c.resolve();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("sft.start_epoch") && e.contains("model.init") && e.contains("iter-000000"), "{e}");
    c.model.init = Some("runs/clone/checkpoints/iter-000000".into());
    c.validate().unwrap();
}

#[test]
fn seed_tables_default_each_field() {
    let t = |tr: &str, ev: &str| {
        MINIMAL.replace("ids =", &format!("train_seeds = {tr}\neval_seeds = {ev}\nids ="))
    };
    let c = parse_ok(&t("{ start = 5 }", "{ count = 20 }"));
    assert_eq!(c.tasks.train_seeds, SeedRange { start: 5, end: 1_000_000 });
    assert_eq!(c.tasks.eval_seeds, EvalSeeds { start: 1_000_000, count: 20 });
    let c = parse_ok(&t("{ end = 500 }", "{ start = 600 }"));
    assert_eq!(c.tasks.train_seeds, SeedRange { start: 0, end: 500 });
    assert_eq!(c.tasks.eval_seeds, EvalSeeds { start: 600, count: 100 });
}
