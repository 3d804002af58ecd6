//! Rollouts that overlap updates (`[rollout] max_staleness = 1`) with a Qwen-VL policy:
//! the tiny random Qwen3-VL on a fixture task in real browsers. The frozen copy that
//! collects during an update is a snapshot of the adapters (the KL reference keeps its
//! own), and which adapters a forward uses is its thread's choice, so the update's
//! training pass and the background collection do not see each other
//! (tests/qwen_vl_policy.rs checks that part on two threads, bit for bit).

use crate::common::trainer::train;
use crate::determinism::metrics;
use crate::overlap::ckpt;
use guirl::train::TrainConfig;
use std::collections::BTreeMap;
use std::path::Path;

fn config(iterations: u64) -> TrainConfig {
    let root = env!("CARGO_MANIFEST_DIR");
    let task = crate::common::repo("fixtures/tasks/two-buttons.toml");
    TrainConfig::parse(&format!(
        r#"
[run]
name = "qwen-overlap"
seed = 3
iterations = {iterations}
[tasks]
ids = ["{}"]
[model]
kind = "qwen3_vl"
path = "{root}/fixtures/qwen_vl/qwen3_vl"
prompt = "{root}/configs/prompts/short.md"
lora_rank = 4
lora_alpha = 8
lora_dropout = 0.2
max_new_tokens = 8
[algo]
group_size = 2
batch_seeds = 2
epochs = 1
minibatch = 4
lr = 1e-2
lr_schedule = "constant"
temperature = 1.5
beta = 0.05
# the tiny random model's answers rarely act, so rewards are mostly equal and GRPO's
# advantages zero: the entropy term moves the adapters every update all the same
entropy_coef = 0.05
[rollout]
envs = 2
max_steps = 2
max_staleness = 1
[eval]
interval = 0
[checkpoint]
interval = 1
"#,
        task.display()
    ))
    .unwrap()
}

/// A PEFT folder's tensors, as bits.
fn adapter(dir: &Path) -> BTreeMap<String, Vec<u32>> {
    let map =
        candle_core::safetensors::load(dir.join("adapter_model.safetensors"), &candle_core::Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    map.into_iter()
        .map(|(k, t)| {
            (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect())
        })
        .collect()
}

/// Each iteration after the first collects with the adapters the last update started from
/// (a checkpoint's `behaviour/` holds them, in PEFT's layout), with LoRA dropout and a KL
/// reference beside them, and the same seed gives the same run, resumed or not.
#[tokio::test]
async fn a_qwen_vl_policy_overlaps_collection_with_the_update_deterministically() {
    let root = tempfile::tempdir().unwrap();
    let (a, b, c) = (root.path().join("a"), root.path().join("b"), root.path().join("c"));
    train(config(3), &a, false).await;
    let m = metrics(&a);
    assert_eq!(m.len(), 3, "{m:?}");
    let stale: Vec<Option<u64>> = m.iter().map(|l| l["staleness"].as_u64()).collect();
    assert_eq!(stale, [Some(0), Some(1), Some(1)]);
    let w: Vec<f64> = m[1..].iter().map(|l| l["behaviour_weight_mean"].as_f64().unwrap()).collect();
    assert!(w.iter().all(|x| x.is_finite()) && w.iter().any(|x| (x - 1.0).abs() > 1e-6), "{w:?}");
    assert_eq!(adapter(&ckpt(&a, 2).join("behaviour")), adapter(&ckpt(&a, 1)), "w_1 collects iteration 3");
    assert_eq!(
        adapter(&ckpt(&a, 3).join("behaviour")),
        adapter(&ckpt(&a, 2)),
        "the last checkpoint keeps w_2"
    );
    assert_ne!(adapter(&ckpt(&a, 2)), adapter(&ckpt(&a, 1)), "the second update moved the adapters");
    train(config(3), &b, false).await;
    assert_eq!(metrics(&b), m, "a second run");
    assert_eq!(adapter(&ckpt(&b, 3)), adapter(&ckpt(&a, 3)), "a second run's adapters");
    train(config(2), &c, false).await;
    train(config(3), &c, true).await;
    assert_eq!(metrics(&c), m, "2 iterations, a resume and 1 more");
    assert_eq!(adapter(&ckpt(&c, 3)), adapter(&ckpt(&a, 3)), "the resumed run's adapters");
}

/// On a multi-threaded runtime the collection runs on another thread during the update.
/// Runs there are not bit-exact (browser timing), so this checks the schedule and that
/// nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qwen_vl_policy_collects_on_another_thread_during_the_update() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    train(config(3), &dir, false).await;
    let m = metrics(&dir);
    let stale: Vec<Option<u64>> = m.iter().map(|l| l["staleness"].as_u64()).collect();
    assert_eq!(stale, [Some(0), Some(1), Some(1)]);
    assert_eq!(adapter(&ckpt(&dir, 3).join("behaviour")), adapter(&ckpt(&dir, 2)));
}
