use super::*;
use crate::policy::vlm::speed::square_state;
use crate::policy::vlm::VlmConfig;
use crate::train::config::{AlgoKind, AlgoVariant};

fn critic(seed: u64, lr: f64) -> Critic {
    let cfg = CriticConfig::for_policy(&VlmConfig::tiny());
    Critic::new(cfg, &Device::Cpu, seed, AdamWConfig { lr, weight_decay: 0.0, ..Default::default() }).unwrap()
}

/// Eight states: a red square on the left or the right, and an instruction naming a side;
/// the target is +1 when they agree and −1 when not (so the critic must combine the
/// screenshot with the instruction).
fn fixed_batch(c: &Critic) -> PpoBatch {
    let mut states = Vec::new();
    let mut targets = Vec::new();
    for i in 0..8u32 {
        let left = i % 2 == 0;
        let says_left = (i / 2) % 2 == 0;
        let x = if left { 5 + 3 * i } else { 110 + 3 * i };
        let instruction = if says_left { "Square on the left" } else { "Square on the right" };
        states.push(square_state(160, 210, x, 40 + 10 * i, 30, [220, 30, 30], instruction));
        let ret = if left == says_left { 1.0 } else { -1.0 };
        targets.push(ValueTarget { row: i as usize, ret, old: 0.0 });
    }
    let gae = GaeBatch { adv: Vec::new(), returns: Vec::new(), stats: Default::default() };
    PpoBatch { gae, inputs: c.inputs(&states).unwrap(), targets }
}

fn weights(c: &Critic) -> Vec<Vec<f32>> {
    c.named_vars().iter().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()).collect()
}

#[test]
fn every_critic_weight_gets_a_gradient() {
    // The guard docs/contributing/candle.md asks for: an op without backward in the graph would
    // leave every weight before it without a gradient, silently.
    let c = critic(1, 1e-3);
    let p = fixed_batch(&c);
    let v = c.net().forward(&p.inputs).unwrap();
    let ret = Tensor::new(&[1f32, -1., 1., -1., -1., 1., -1., 1.], &Device::Cpu).unwrap();
    let (loss, _) = value_loss(&v, &v.zeros_like().unwrap(), &ret, None).unwrap();
    let grads = loss.backward().unwrap();
    for (name, var) in c.named_vars() {
        let g = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient"));
        let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(norm > 0.0, "{name}: zero gradient");
    }
}

#[test]
fn the_critic_fits_a_fixed_batch() {
    let mut c = critic(2, 3e-3);
    let p = fixed_batch(&c);
    let algo = AlgoConfig { minibatch: 8, ..AlgoConfig::of(AlgoKind::Ppo) };
    let ppo = PpoConfig { value_epochs: Some(1), ..Default::default() };
    let before = weights(&c);
    let first = c.train(&p, &algo, &ppo, 0, 0).unwrap();
    let mut last = first;
    for it in 1..80 {
        last = c.train(&p, &algo, &ppo, 0, it).unwrap();
    }
    // ½·mean((V − R)²) starts near ½ (V ≈ 0, R = ±1).
    assert!(first.loss > 0.3, "{first:?}");
    assert!(last.loss < 0.1 * first.loss, "value loss {} -> {}", first.loss, last.loss);
    assert_eq!((last.optimizer_steps, last.skipped_steps), (1, 0));
    let after = weights(&c);
    assert!(before.iter().zip(&after).all(|(a, b)| a != b), "every weight tensor moved");
    // The values now explain the returns.
    let v = c.predict(&p.inputs).unwrap();
    let r: Vec<f64> = p.targets.iter().map(|t| t.ret).collect();
    assert!(explained_variance(&v, &r).unwrap() > 0.8, "{v:?}");
}

#[test]
fn a_saved_critic_loads_back_and_continues_identically() {
    let dir = tempfile::tempdir().unwrap();
    let algo = AlgoConfig { minibatch: 4, ..AlgoConfig::of(AlgoKind::Ppo) };
    let ppo = PpoConfig { value_clip: Some(0.2), ..Default::default() };
    let mut a = critic(3, 1e-2);
    let p = fixed_batch(&a);
    a.train(&p, &algo, &ppo, 5, 0).unwrap();
    a.save(dir.path()).unwrap();
    // Another seed: other weights until loaded.
    let mut b = critic(4, 1e-2);
    assert_ne!(weights(&a), weights(&b));
    b.load(dir.path()).unwrap();
    assert_eq!(weights(&a), weights(&b));
    assert_eq!(b.optimizer().step_count(), 2);
    assert_eq!(a.predict(&p.inputs).unwrap(), b.predict(&p.inputs).unwrap());
    a.train(&p, &algo, &ppo, 5, 1).unwrap();
    b.train(&p, &algo, &ppo, 5, 1).unwrap();
    assert_eq!(weights(&a), weights(&b), "the optimizer moments came back too");
    // Another architecture is refused, saying so.
    let mut cfg = CriticConfig::for_policy(&VlmConfig::tiny());
    cfg.width = 32;
    let mut other = Critic::new(cfg, &Device::Cpu, 0, AdamWConfig::default()).unwrap();
    let e = format!("{:#}", other.load(dir.path()).unwrap_err());
    assert!(e.contains("another architecture"), "{e}");
}

#[test]
fn ppo_options_are_checked_naming_the_key() {
    let errors = |a: AlgoConfig, iterations: u64| {
        let mut out = Vec::new();
        a.check(iterations, &mut |ok, msg| {
            if !ok {
                out.push(msg)
            }
        });
        out.join("\n")
    };
    let ppo = AlgoConfig { group_size: 1, ..AlgoConfig::of(AlgoKind::Ppo) };
    assert_eq!(errors(ppo.clone(), 10), "", "group_size 1 is fine for PPO");
    let with = |p: PpoConfig| AlgoConfig { variant: AlgoVariant::Ppo(p), ..ppo.clone() };
    let bad = PpoConfig { gae_lambda: 1.5, value_lr: 0.0, value_clip: Some(-1.0), ..Default::default() };
    let e = errors(with(bad), 10);
    assert!(
        e.contains("algo.ppo.gae_lambda")
            && e.contains("algo.ppo.value_lr")
            && e.contains("algo.ppo.value_clip"),
        "{e}"
    );
    let e = errors(with(PpoConfig { critic_warmup: 10, ..Default::default() }), 10);
    assert!(e.contains("algo.ppo.critic_warmup (10) must be less than run.iterations (10)"), "{e}");
    let e = errors(AlgoConfig { group_size: 1, ..Default::default() }, 10);
    assert!(e.contains("algo.group_size must be at least 2"), "{e}");
    // The warm-up iterations train only the critic (`algorithm::ppo::Ppo::trains_policy`).
    let warm = with(PpoConfig { critic_warmup: 2, ..Default::default() });
    assert_eq!((warm.critic_only_iterations(), AlgoConfig::default().critic_only_iterations()), (2, 0));
    // The lr warm-up starts with the policy's first update: warmup 3 after 2 critic-only
    // iterations gives lr · 1/3, 2/3, 1 at iterations 2, 3, 4 (0-based), as GRPO's at 0, 1, 2.
    let lr = AlgoConfig { lr: 3e-4, warmup: 3, ..warm };
    let ppo_lrs: Vec<f64> = (2..6).map(|it| lr.policy_lr(20, it)).collect();
    let grpo = lr.clone().with_kind(AlgoKind::Grpo);
    let grpo_lrs: Vec<f64> = (0..4).map(|it| grpo.policy_lr(20, it)).collect();
    for (got, want) in ppo_lrs.iter().zip([1e-4, 2e-4, 3e-4, 3e-4]) {
        assert!((got - want).abs() < 1e-12, "{ppo_lrs:?}");
    }
    assert_eq!(ppo_lrs, grpo_lrs);
}

/// What a critic costs next to the policy's own update, per state (printed, not asserted):
/// `cargo test --release --lib critic_cost -- --ignored --nocapture`.
#[test]
#[ignore]
fn critic_cost() {
    use crate::policy::vlm::{inputs::encoder_inputs, speed::synthetic_batch, VlmPolicy};
    use crate::policy::TrainablePolicy;
    use std::time::Instant;
    let n = 32;
    let reps = 5;
    let (states, actions) = synthetic_batch(n, 7);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (name, vcfg) in [("tiny", VlmConfig::tiny()), ("small", VlmConfig::small())] {
        let policy = VlmPolicy::new(vcfg.clone(), &Device::Cpu, 0).unwrap();
        let tokens: Vec<Vec<u32>> = states
            .iter()
            .zip(&actions)
            .map(|(s, a)| TrainablePolicy::encode(&policy, s, a).unwrap())
            .collect();
        let (mut step, mut enc) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let sc = policy.score_tokens(&states, &tokens).unwrap();
            let loss = (sc.logp.sum_all().unwrap() + sc.entropy.sum_all().unwrap()).unwrap();
            loss.backward().unwrap();
            step.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
            let t = Instant::now();
            let e = encoder_inputs(&states, &vcfg, &Device::Cpu).unwrap();
            policy.model().encode(&e).unwrap();
            enc.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
        }
        let c =
            Critic::new(CriticConfig::for_policy(&vcfg), &Device::Cpu, 0, AdamWConfig::default()).unwrap();
        let params: usize = c.named_vars().iter().map(|(_, v)| v.elem_count()).sum();
        let (mut prep, mut fwd, mut train) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let x = c.inputs(&states).unwrap();
            prep.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
            let t = Instant::now();
            c.predict(&x).unwrap();
            fwd.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
            let t = Instant::now();
            let v = c.net().forward(&x).unwrap();
            let (loss, _) = value_loss(&v, &v.zeros_like().unwrap(), &v.ones_like().unwrap(), None).unwrap();
            loss.backward().unwrap();
            train.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
        }
        println!(
            "{name}: policy {} params: score+backward {:.2} ms/state, encoder forward {:.2} ms/state | \
             critic {params} params: inputs {:.3} ms/state, forward {:.3} ms/state, forward+backward {:.3} ms/state",
            policy.num_params(),
            median(step),
            median(enc),
            median(prep),
            median(fwd),
            median(train)
        );
    }
}

#[test]
fn the_example_config_runs_ppo_by_switching_the_kind() {
    use crate::train::advantage::gae::GaeParams;
    use crate::train::config::EXAMPLE_CONFIG;
    let text = EXAMPLE_CONFIG.replace("kind = \"grpo\"", "kind = \"ppo\"");
    let mut c = TrainConfig::parse(&text).unwrap();
    c.resolve();
    c.validate().unwrap();
    assert_eq!(c.algo.kind(), AlgoKind::Ppo);
    let g = GaeParams::from_algo(&c.algo, c.algo.ppo().unwrap());
    assert_eq!((g.gamma, g.lambda, g.normalize, g.truncation_ends), (1.0, 0.95, true, false));
    assert_eq!((c.algo.clip_low(), c.algo.clip_high(), c.algo.ppo().unwrap().value_clip), (0.2, 0.2, None));
    // The example for PPO writes its table out, and it reaches the settings.
    let text =
        crate::train::config::example_config(AlgoKind::Ppo).replace("critic_warmup = 0", "critic_warmup = 3");
    let c = TrainConfig::parse(&text).unwrap();
    assert_eq!(c.algo.critic_only_iterations(), 3);
    // The table is refused under another kind, naming the kind it belongs to.
    let e =
        format!("{:#}", TrainConfig::parse(&text.replace("kind = \"ppo\"", "kind = \"grpo\"")).unwrap_err());
    assert!(e.contains("[algo.ppo] holds PPO's own keys, but algo.kind = \"grpo\""), "{e}");
}

/// (name, shape, first value, last value) of every weight of a fresh tiny critic (seed 7),
/// as the critic wrote them before it shared its encoder with the reward model: the same
/// names keep old checkpoints loadable, the same values show the init order is unchanged.
const TINY_CRITIC_SEED_7: [(&str, &[usize], f32, f32); 11] = [
    ("conv1.bias", &[16], 0.0, 0.0),
    ("conv1.weight", &[16, 48], 0.13668513, 0.02714264),
    ("conv2.bias", &[32], 0.0, 0.0),
    ("conv2.weight", &[32, 64], -0.094880186, 0.1543447),
    ("hidden.bias", &[64], 0.0, 0.0),
    ("hidden.weight", &[64, 192], -0.029782379, -0.04741236),
    ("img.bias", &[64], 0.0, 0.0),
    ("img.weight", &[64, 640], -0.0041087777, -0.04368246),
    ("out.bias", &[1], 0.0, 0.0),
    ("out.weight", &[1, 64], -0.009813787, -0.0056765922),
    ("word_emb", &[512, 64], 1.3070476, 0.8459007),
];

#[test]
fn the_critic_keeps_its_weight_names_init_and_config_keys() {
    let cfg = CriticConfig::for_policy(&VlmConfig::tiny());
    let c = Critic::new(cfg.clone(), &Device::Cpu, 7, AdamWConfig::default()).unwrap();
    let mut got: Vec<(String, Vec<usize>, f32, f32)> = Vec::new();
    for (name, v) in c.named_vars() {
        let f: Vec<f32> = v.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        got.push((name, v.dims().to_vec(), f[0], f[f.len() - 1]));
    }
    let want: Vec<(String, Vec<usize>, f32, f32)> =
        TINY_CRITIC_SEED_7.iter().map(|&(n, s, a, b)| (n.to_string(), s.to_vec(), a, b)).collect();
    assert_eq!(got, want);
    let s = square_state(160, 210, 20, 40, 30, [220, 30, 30], "Square on the left");
    // recorded values, to float rounding: the matmul kernels differ by CPU (AVX-512 or not)
    close(&c.predict(&c.inputs(&[s]).unwrap()).unwrap(), &[-0.01731261983513832]);
    // critic.json keeps its keys, and an unknown one is still an error.
    let json = serde_json::to_string(&cfg).unwrap();
    assert_eq!(
        json,
        r#"{"image_width":32,"image_height":40,"patch":4,"merge":2,"channels":16,"width":64,"word_buckets":512,"max_words":32}"#
    );
    let e = serde_json::from_str::<CriticConfig>(&json.replace("}", r#","depth":2}"#)).unwrap_err();
    assert!(e.to_string().contains("unknown field `depth`"), "{e}");
}

#[test]
fn a_critic_saved_before_the_shared_encoder_loads_and_values_the_same() {
    // fixtures/pre_shared_encoder/critic: written by the critic of commit 6b8deb1 (before
    // the reward model and the critic shared `policy/screen_encoder.rs`), after one update
    // on these four states; the values are what that code computed for them.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pre_shared_encoder/critic");
    let cfg = CriticConfig {
        image_width: 16,
        image_height: 8,
        patch: 4,
        merge: 2,
        channels: 2,
        width: 4,
        word_buckets: 8,
        max_words: 4,
    };
    let mut c = Critic::new(cfg, &Device::Cpu, 0, AdamWConfig::default()).unwrap();
    c.load(&dir).unwrap();
    assert_eq!(c.optimizer().step_count(), 1);
    let states: Vec<ScreenState> = (0..4u32)
        .map(|i| {
            square_state(16, 8, 2 + 2 * i, 1, 4, [220, 30, 30], if i % 2 == 0 { "left" } else { "right" })
        })
        .collect();
    let v = c.predict(&c.inputs(&states).unwrap()).unwrap();
    close(&v, &[0.009275131858885288, 0.0037593375891447067, 0.009659110568463802, 0.004880494438111782]);
}

/// Values equal to recorded ones within float rounding (relative 1e-5): the CPU matmul
/// kernels (AVX-512 where the CPU has it, else FMA) round differently.
fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1e-3), "{got:?} vs {want:?}");
    }
}
