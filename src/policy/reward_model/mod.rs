//! The learned reward model: P(success | final screenshot, instruction, [action history]).
//!
//! A task without a success check (a website spec with `reward = "model:PATH"`) is scored
//! by it when an episode ends (`rollout/scoring.rs`, for the collector, `play`, `replay`
//! and `serve`); a task with both logs how often the two agree. It is trained on recorded
//! trajectory folders and their outcomes by `guirl train-reward` (`train/reward_model/`).
//!
//! A model is a folder:
//!
//! ```text
//! PATH/reward_model.safetensors   the weights
//! PATH/reward_model.json          architecture (image size, history on/off) and provenance
//! PATH/metrics.json               held-out accuracy, AUC, Brier score, ECE, reliability bins
//! PATH/reliability.png            the reliability plot
//! ```

pub mod network;

pub use network::{history_text, RewardConfig, RewardExample, RewardInputs, RewardNet};

use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The weights in a reward model folder.
pub const REWARD_WEIGHTS: &str = "reward_model.safetensors";
/// The architecture and provenance in a reward model folder.
pub const REWARD_CONFIG: &str = "reward_model.json";
/// Format version of [`REWARD_CONFIG`] this build writes and reads.
pub const REWARD_FORMAT: u32 = 1;
/// Examples per forward pass when predicting.
const PREDICT_CHUNK: usize = 64;

/// Where a reward model came from (kept in `reward_model.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The guirl version that trained it.
    #[serde(default)]
    pub guirl_version: String,
    /// The trajectory folders it was trained on.
    #[serde(default)]
    pub trajectory_dirs: Vec<String>,
    /// Tasks of the episodes it saw.
    #[serde(default)]
    pub tasks: Vec<String>,
    /// Episodes trained on, and of them successes.
    #[serde(default)]
    pub train_episodes: usize,
    /// Successes among the training episodes.
    #[serde(default)]
    pub train_successes: usize,
    /// Episodes held out for the metrics.
    #[serde(default)]
    pub heldout_episodes: usize,
    /// Epochs, learning rate, minibatch size, seed and held-out fraction of the training.
    #[serde(default)]
    pub epochs: usize,
    /// AdamW learning rate.
    #[serde(default)]
    pub lr: f64,
    /// Minibatch size.
    #[serde(default)]
    pub batch_size: usize,
    /// Seed of the split, the init and the shuffles.
    #[serde(default)]
    pub seed: u64,
    /// Fraction of each class held out.
    #[serde(default)]
    pub holdout: f64,
    /// Unix time when it was written.
    #[serde(default)]
    pub created_unix: u64,
}

/// The contents of `reward_model.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardModelFile {
    /// [`REWARD_FORMAT`].
    pub format: u32,
    /// The architecture.
    pub config: RewardConfig,
    /// Where it came from.
    pub provenance: Provenance,
}

/// A reward model: the network, its weights and its config.
pub struct RewardModel {
    cfg: RewardConfig,
    varmap: VarMap,
    net: RewardNet,
    device: Device,
}

impl std::fmt::Debug for RewardModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RewardModel").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

impl RewardModel {
    /// A fresh model (weights drawn from `seed`).
    pub fn new(cfg: RewardConfig, device: &Device, seed: u64) -> Result<RewardModel> {
        let varmap = VarMap::new();
        let vb = crate::policy::vlm::init::seeded_var_builder(&varmap, seed, device);
        let net = RewardNet::new(&cfg, vb).context("building the reward model")?;
        Ok(RewardModel { cfg, varmap, net, device: device.clone() })
    }

    /// Read a model folder written by [`RewardModel::save`] (on the CPU).
    pub fn load(dir: &Path) -> Result<RewardModel> {
        let cfg_path = dir.join(REWARD_CONFIG);
        if !cfg_path.is_file() {
            bail!(
                "{} is not a reward model: it has no {REWARD_CONFIG} (train one with `guirl train-reward DIRS... --out {}`)",
                dir.display(),
                dir.display()
            );
        }
        let text =
            std::fs::read_to_string(&cfg_path).with_context(|| format!("reading {}", cfg_path.display()))?;
        let file: RewardModelFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a reward model config", cfg_path.display()))?;
        ensure!(
            file.format <= REWARD_FORMAT,
            "{} was written in reward model format v{} by a newer guirl; this build reads up to v{REWARD_FORMAT}: upgrade guirl",
            cfg_path.display(),
            file.format
        );
        let mut model = RewardModel::new(file.config, &Device::Cpu, 0)?;
        let weights = dir.join(REWARD_WEIGHTS);
        model
            .varmap
            .load(&weights)
            .with_context(|| format!("cannot read the weights {}", weights.display()))?;
        Ok(model)
    }

    /// The model of folder `dir`, loaded once per process and shared (the collector's
    /// envs all score with one copy).
    pub fn shared(dir: &Path) -> Result<Arc<RewardModel>> {
        static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<RewardModel>>>> = OnceLock::new();
        let key = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let mut cache = CACHE.get_or_init(Default::default).lock().expect("reward model cache");
        if let Some(m) = cache.get(&key) {
            return Ok(m.clone());
        }
        let m = Arc::new(RewardModel::load(dir)?);
        cache.insert(key, m.clone());
        Ok(m)
    }

    /// Write the weights and `reward_model.json` into the folder `dir` (which must exist).
    pub fn save(&self, dir: &Path, provenance: Provenance) -> Result<()> {
        let weights = dir.join(REWARD_WEIGHTS);
        self.varmap.save(&weights).with_context(|| format!("cannot write {}", weights.display()))?;
        let file = RewardModelFile { format: REWARD_FORMAT, config: self.cfg.clone(), provenance };
        let path = dir.join(REWARD_CONFIG);
        std::fs::write(&path, serde_json::to_string_pretty(&file)?)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The architecture.
    pub fn config(&self) -> &RewardConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The network (for training: its forward pass is differentiable).
    pub fn net(&self) -> &RewardNet {
        &self.net
    }

    /// The trainable variables, by name (sorted, so an optimizer sees a stable order).
    pub fn named_vars(&self) -> Vec<(String, candle_core::Var)> {
        let mut vars: Vec<_> = self
            .varmap
            .data()
            .lock()
            .expect("VarMap lock")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars
    }

    /// The network's inputs for `examples`.
    pub fn inputs(&self, examples: &[RewardExample]) -> Result<RewardInputs> {
        RewardInputs::new(examples, &self.cfg, &self.device)
    }

    /// P(success) of each row of already built inputs.
    pub fn predict_inputs(&self, x: &RewardInputs) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(x.len());
        let rows: Vec<usize> = (0..x.len()).collect();
        for chunk in rows.chunks(PREDICT_CHUNK) {
            let logits = self.net.forward(&x.select(chunk)?)?;
            out.extend(candle_nn::ops::sigmoid(&logits)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// P(success) of each example.
    pub fn predict_batch(&self, examples: &[RewardExample]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(examples.len());
        for chunk in examples.chunks(PREDICT_CHUNK) {
            let logits = self.net.forward(&self.inputs(chunk)?)?;
            out.extend(candle_nn::ops::sigmoid(&logits)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// P(success) of one episode: its final screenshot, its instruction and its actions'
    /// text forms (ignored unless the model was trained with the history).
    pub fn predict(&self, image: &image::RgbImage, instruction: &str, history: &[String]) -> Result<f64> {
        let ex = RewardExample {
            image: image.clone(),
            instruction: instruction.to_string(),
            history: history.to_vec(),
        };
        Ok(f64::from(self.predict_batch(std::slice::from_ref(&ex))?[0]))
    }
}

/// Binary cross-entropy on logits, mean over the batch, in a numerically stable form that
/// uses only ops with a backward pass (docs/contributing/candle.md):
///
/// ```text
/// ℓ(z, y) = −y·log σ(z) − (1 − y)·log(1 − σ(z)) = max(z, 0) − z·y + log(1 + e^{−|z|})
/// ```
///
/// `logits` and `labels` are `[B]` f32, labels 0 or 1.
pub fn bce_with_logits(logits: &Tensor, labels: &Tensor) -> candle_core::Result<Tensor> {
    let softplus = logits.abs()?.neg()?.exp()?.affine(1.0, 1.0)?.log()?;
    (logits.relu()? - (logits * labels)? + softplus)?.mean_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bce_matches_hand_values_and_has_gradients() {
        // z = [2, −1, 0, 30], y = [1, 0, 1, 0]:
        //   ln(1 + e^−2) = 0.126928011, ln(1 + e^−1) = 0.313261687, ln 2 = 0.693147181,
        //   30 + ln(1 + e^−30) ≈ 30.000000000000094
        let (z, y) = ([2.0f64, -1.0, 0.0, 30.0], [1.0f64, 0.0, 1.0, 0.0]);
        let want = (0.126928011 + 0.313261687 + std::f64::consts::LN_2 + 30.0) / 4.0;
        let zv = candle_core::Var::new(&[2.0f32, -1.0, 0.0, 30.0], &Device::Cpu).unwrap();
        let yt = Tensor::new(&[1.0f32, 0.0, 1.0, 0.0], &Device::Cpu).unwrap();
        let loss = bce_with_logits(zv.as_tensor(), &yt).unwrap();
        let got = f64::from(loss.to_scalar::<f32>().unwrap());
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // dℓ/dz = (σ(z) − y) / B
        let g = loss.backward().unwrap().get(zv.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        for (i, (&z, y)) in z.iter().zip(y).enumerate() {
            let want = (1.0 / (1.0 + (-z).exp()) - y) / 4.0;
            assert!((f64::from(g[i]) - want).abs() < 1e-6, "grad {i}: {} vs {want}", g[i]);
        }
    }

    #[test]
    fn every_weight_gets_a_gradient_and_a_save_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        for history in [false, true] {
            let m = RewardModel::new(RewardConfig::new(32, 24, history), &Device::Cpu, 3).unwrap();
            let img = image::RgbImage::from_fn(50, 40, |x, y| image::Rgb([(x * 5) as u8, (y * 6) as u8, 90]));
            let ex = vec![
                RewardExample {
                    image: img.clone(),
                    instruction: "Click OK".into(),
                    history: vec!["click(1, 2)".into()],
                },
                RewardExample { image: img, instruction: "Turn on Sync".into(), history: vec![] },
            ];
            let x = m.inputs(&ex).unwrap();
            let y = Tensor::new(&[1.0f32, 0.0], &Device::Cpu).unwrap();
            let grads = bce_with_logits(&m.net().forward(&x).unwrap(), &y).unwrap().backward().unwrap();
            for (name, v) in m.named_vars() {
                let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("{name} has no gradient"));
                let n = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(n > 0.0, "{name}: zero gradient");
            }
            let p = m.predict_batch(&ex).unwrap();
            m.save(dir.path(), Provenance::default()).unwrap();
            let back = RewardModel::load(dir.path()).unwrap();
            assert_eq!(back.predict_batch(&ex).unwrap(), p);
            assert!(
                (back.predict(&ex[0].image, "Click OK", &ex[0].history).unwrap() - f64::from(p[0])).abs()
                    < 1e-6
            );
        }
        let e = RewardModel::load(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("is not a reward model"), "{e}");
    }

    /// (name, shape, first value, last value) of every weight of a fresh 32×24 model
    /// (seed 3) with the history, as the model wrote them before it shared its encoder
    /// with the critic: the same names keep saved models loadable, the same values show
    /// the init order is unchanged. Without the history, `history_emb` is absent and
    /// `hidden` (and so `out`) differ.
    const SEED_3_WITH_HISTORY: [(&str, &[usize], f32, f32); 12] = [
        ("conv1.bias", &[16], 0.0, 0.0),
        ("conv1.weight", &[16, 48], 0.12249804, -0.16786161),
        ("conv2.bias", &[32], 0.0, 0.0),
        ("conv2.weight", &[32, 64], 0.056903996, 0.050325453),
        ("hidden.bias", &[64], 0.0, 0.0),
        ("hidden.weight", &[64, 257], 0.08527774, -0.019005055),
        ("history_emb", &[512, 64], 0.06715807, -0.034004107),
        ("img.bias", &[64], 0.0, 0.0),
        ("img.weight", &[64, 384], -0.0093456255, -0.01847084),
        ("out.bias", &[1], 0.0, 0.0),
        ("out.weight", &[1, 64], 0.0074827904, -0.014435671),
        ("word_emb", &[512, 64], 1.2533568, 0.94014764),
    ];

    fn layout(m: &RewardModel) -> Vec<(String, Vec<usize>, f32, f32)> {
        m.named_vars()
            .into_iter()
            .map(|(name, v)| {
                let f: Vec<f32> = v.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
                (name, v.dims().to_vec(), f[0], f[f.len() - 1])
            })
            .collect()
    }

    #[test]
    fn weight_names_init_and_predictions_are_as_before_the_shared_encoder() {
        let img = image::RgbImage::from_fn(50, 40, |x, y| image::Rgb([(x * 5) as u8, (y * 6) as u8, 90]));
        let ex = [RewardExample {
            image: img,
            instruction: "Click OK".into(),
            history: vec!["click(1, 2)".into(), "type(\"hi\")".into()],
        }];
        let with = RewardModel::new(RewardConfig::new(32, 24, true), &Device::Cpu, 3).unwrap();
        let want: Vec<_> =
            SEED_3_WITH_HISTORY.iter().map(|&(n, s, a, b)| (n.to_string(), s.to_vec(), a, b)).collect();
        assert_eq!(layout(&with), want);
        assert_eq!(with.predict_batch(&ex).unwrap(), [0.49194863]);
        let without = RewardModel::new(RewardConfig::new(32, 24, false), &Device::Cpu, 3).unwrap();
        let want: Vec<_> = want
            .into_iter()
            .filter(|w| w.0 != "history_emb")
            .map(|w| match w.0.as_str() {
                "hidden.weight" => (w.0, vec![64, 192], 0.0048467163, 0.025744412),
                "out.weight" => (w.0, w.1, -0.0018006868, -0.006538771),
                _ => w,
            })
            .collect();
        assert_eq!(layout(&without), want);
        assert_eq!(without.predict_batch(&ex).unwrap(), [0.49140617]);
    }

    #[test]
    fn a_model_saved_before_the_shared_encoder_loads_and_predicts_the_same() {
        // fixtures/pre_shared_encoder/reward_model: written by `RewardModel::save` of commit
        // 6b8deb1 (before the reward model and the critic shared `policy/screen_encoder.rs`);
        // the probabilities are what that code computed for these two examples.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pre_shared_encoder/reward_model");
        let m = RewardModel::load(&dir).unwrap();
        let c = m.config();
        assert_eq!(
            (c.encoder.image_width, c.encoder.word_buckets, c.history, c.max_history_words),
            (16, 8, true, 6)
        );
        let img = image::RgbImage::from_fn(20, 10, |x, y| image::Rgb([(x * 12) as u8, (y * 25) as u8, 90]));
        let ex = [
            RewardExample {
                image: img.clone(),
                instruction: "Click OK".into(),
                history: vec!["click(1, 2)".into(), "type(\"hi\")".into()],
            },
            RewardExample { image: img, instruction: "Turn on Sync".into(), history: vec![] },
        ];
        assert_eq!(m.predict_batch(&ex).unwrap(), [0.4993188, 0.50021]);
        // reward_model.json is written with the same keys, and an unknown one is still an error.
        let text = std::fs::read_to_string(dir.join(REWARD_CONFIG)).unwrap();
        let file: RewardModelFile = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string_pretty(&file).unwrap(), text);
        let e = serde_json::from_str::<RewardConfig>(
            r#"{"image_width":16,"image_height":8,"patch":4,"merge":2,"channels":2,"width":4,
                "word_buckets":8,"max_words":4,"history":true,"max_history_words":6,"depth":2}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `depth`"), "{e}");
    }
}
