//! The optimizer side of a training step: AdamW whose state can be saved (candle-nn's
//! keeps its moments private), global gradient-norm clipping, learning-rate schedules.
//!
//! A step, as the trainer does it (the learning rate set once an iteration):
//! ```text
//! opt.set_lr(schedule.lr(iteration));
//! let mut grads = policy.gradients(&loss)?;  // not loss.backward(): checkpointed layers
//! if let Some(g) = pg { all_reduce_grads(g, &mut grads, opt.vars())?; }  // data parallel
//! let grad_norm = clip_grad_norm(&mut grads, opt.vars(), cfg.max_grad_norm)?;
//! if grad_norm.is_finite() && grad_norm > 0.0 { opt.step(&grads)?; }
//! ```

use anyhow::{bail, Context};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// AdamW hyper-parameters (PyTorch's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    /// Learning rate (changed per step with [`AdamW::set_lr`]).
    pub lr: f64,
    /// β1: decay of the first moment.
    pub beta1: f64,
    /// β2: decay of the second moment.
    pub beta2: f64,
    /// ε added to `sqrt(v̂)`.
    pub eps: f64,
    /// λ: decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

/// AdamW (Loshchilov & Hutter) over named variables; its moments and step count can be
/// written to safetensors and read back, so a resumed run takes exactly the same steps.
///
/// A variable with no gradient in a step is left alone (moments too); the step count
/// (bias correction) is shared by all variables.
///
/// On a GPU the moments of all variables are one flat tensor each ([`AdamW::set_flat`]):
/// a step is then a copy per variable in and out and a dozen kernels over all of them,
/// where per variable it is about sixteen kernels each. A LoRA model has hundreds of small
/// adapters, and on a GPU each kernel's launch, not its work, is the cost (docs/gpu.md).
/// The results are the same, bit for bit.
pub struct AdamW {
    cfg: AdamWConfig,
    names: Vec<String>,
    vars: Vec<Var>,
    /// Per variable, or (flat) one entry holding every variable's moments end to end.
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    flat: bool,
    step: u64,
}

const STEP_KEY: &str = "adamw.step";

impl AdamW {
    /// An optimizer over `vars` (name, variable), moments zero.
    pub fn new(vars: Vec<(String, Var)>, cfg: AdamWConfig) -> Result<AdamW> {
        let (names, vars): (Vec<String>, Vec<Var>) = vars.into_iter().unzip();
        let m = vars.iter().map(|v| v.as_tensor().zeros_like()).collect::<Result<Vec<_>>>()?;
        let v = m.clone();
        let cuda = vars.first().is_some_and(|v| v.device().is_cuda());
        let mut opt = AdamW { cfg, names, vars, m, v, flat: false, step: 0 };
        opt.set_flat(cuda)?;
        Ok(opt)
    }

    /// Keep the moments as one flat tensor (the default on a GPU) or per variable (the
    /// default on the CPU, where a step's extra copies would cost more than its kernel
    /// launches save). Flat needs every variable on one device in one dtype; otherwise
    /// the moments stay per variable.
    pub fn set_flat(&mut self, flat: bool) -> Result<()> {
        let uniform = self.vars.first().is_some_and(|first| {
            self.vars.iter().all(|v| v.dtype() == first.dtype() && v.device().same_device(first.device()))
        });
        let flat = flat && uniform;
        if flat == self.flat {
            return Ok(());
        }
        (self.m, self.v) = if flat {
            (vec![flatten(&self.m)?], vec![flatten(&self.v)?])
        } else {
            (self.split(&self.m[0])?, self.split(&self.v[0])?)
        };
        self.flat = flat;
        Ok(())
    }

    /// Whether the moments are one flat tensor.
    pub fn is_flat(&self) -> bool {
        self.flat
    }

    /// A flat tensor cut back into one tensor per variable, shaped as it.
    fn split(&self, flat: &Tensor) -> Result<Vec<Tensor>> {
        let mut at = 0;
        let mut out = Vec::with_capacity(self.vars.len());
        for var in &self.vars {
            let n = var.elem_count();
            out.push(flat.narrow(0, at, n)?.reshape(var.shape())?);
            at += n;
        }
        Ok(out)
    }

    /// An optimizer over every variable of a `VarMap`, in name order.
    pub fn from_varmap(map: &candle_nn::VarMap, cfg: AdamWConfig) -> Result<AdamW> {
        let mut vars: Vec<(String, Var)> =
            map.data().lock().expect("VarMap lock").iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        AdamW::new(vars, cfg)
    }

    /// The variables, in the optimizer's order.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// The current learning rate.
    pub fn lr(&self) -> f64 {
        self.cfg.lr
    }

    /// Set the learning rate for the next steps (schedules).
    pub fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// One update from `grads`.
    ///
    /// ```text
    /// t ← t + 1
    /// m ← β1 m + (1 − β1) g          m̂ = m / (1 − β1^t)
    /// v ← β2 v + (1 − β2) g²         v̂ = v / (1 − β2^t)
    /// θ ← θ (1 − lr λ) − lr m̂ / (sqrt(v̂) + ε)
    /// ```
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step += 1;
        if self.flat {
            let gs: Option<Vec<Tensor>> =
                self.vars.iter().map(|v| grads.get(v.as_tensor()).cloned()).collect();
            let Some(gs) = gs else {
                // a variable without a gradient is left alone: that needs its own moments
                self.set_flat(false)?;
                return self.step_per_var(grads);
            };
            let dt = self.vars[0].dtype();
            let g = flatten(&gs.iter().map(|g| g.detach().to_dtype(dt)).collect::<Result<Vec<_>>>()?)?;
            let theta = flatten(&self.vars.iter().map(|v| v.as_detached_tensor()).collect::<Vec<_>>())?;
            let (theta, m, v) = self.update(&theta, &g, &self.m[0], &self.v[0])?;
            for (var, new) in self.vars.iter().zip(self.split(&theta)?) {
                var.set(&new)?;
            }
            (self.m[0], self.v[0]) = (m, v);
            return Ok(());
        }
        self.step_per_var(grads)
    }

    /// [`AdamW::step`] one variable at a time (the step count already advanced).
    fn step_per_var(&mut self, grads: &GradStore) -> Result<()> {
        for (i, var) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else { continue };
            let g = g.detach().to_dtype(var.dtype())?;
            let (theta, m, v) = self.update(&var.as_detached_tensor(), &g, &self.m[i], &self.v[i])?;
            var.set(&theta)?;
            (self.m[i], self.v[i]) = (m, v);
        }
        Ok(())
    }

    /// New `(θ, m, v)` from `θ`, the gradient and the moments, at the current step count.
    fn update(&self, theta: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let AdamWConfig { lr, beta1: b1, beta2: b2, eps, weight_decay: wd } = self.cfg;
        let t = self.step as i32;
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        let m = ((m * b1)? + (g * (1.0 - b1))?)?;
        let v = ((v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
        let update = ((&m / c1)? / ((&v / c2)?.sqrt()? + eps)?)?;
        Ok((((theta * (1.0 - lr * wd))? - (update * lr)?)?, m, v))
    }

    /// The state to save: `m.<name>`, `v.<name>` for every variable and `adamw.step`
    /// (an i64 of shape `[1]`).
    pub fn state_tensors(&self) -> Result<HashMap<String, Tensor>> {
        let mut s = HashMap::new();
        let (m, v) = if self.flat {
            (self.split(&self.m[0])?, self.split(&self.v[0])?)
        } else {
            (self.m.clone(), self.v.clone())
        };
        for (i, n) in self.names.iter().enumerate() {
            s.insert(format!("m.{n}"), m[i].clone());
            s.insert(format!("v.{n}"), v[i].clone());
        }
        let dev = self.vars.first().map(|v| v.device().clone()).unwrap_or(Device::Cpu);
        s.insert(STEP_KEY.to_string(), Tensor::new(&[self.step as i64], &dev)?);
        Ok(s)
    }

    /// Restore a state from [`AdamW::state_tensors`]: every variable's moments must be
    /// there with its shape, and nothing else.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>) -> anyhow::Result<()> {
        let step = state.get(STEP_KEY).with_context(|| format!("optimizer state has no `{STEP_KEY}`"))?;
        let step = step.to_dtype(DType::I64)?.flatten_all()?.to_vec1::<i64>()?;
        let (mut m, mut v) = (Vec::new(), Vec::new());
        for (i, n) in self.names.iter().enumerate() {
            let want = self.vars[i].as_tensor();
            for (prefix, out) in [("m", &mut m), ("v", &mut v)] {
                let key = format!("{prefix}.{n}");
                let t = state.get(&key).with_context(|| {
                    format!("optimizer state has no `{key}`: was it saved for another model?")
                })?;
                if t.dims() != want.dims() {
                    bail!("optimizer state `{key}` has shape {:?}, the variable {:?}", t.dims(), want.dims());
                }
                out.push(t.to_device(want.device())?.to_dtype(want.dtype())?);
            }
        }
        if state.len() != 2 * self.names.len() + 1 {
            let mut extra: Vec<&String> = state
                .keys()
                .filter(|k| {
                    k.as_str() != STEP_KEY
                        && !self.names.iter().any(|n| **k == format!("m.{n}") || **k == format!("v.{n}"))
                })
                .collect();
            extra.sort();
            bail!("optimizer state has moments for variables this model lacks: {extra:?}");
        }
        (self.m, self.v) = if self.flat { (vec![flatten(&m)?], vec![flatten(&v)?]) } else { (m, v) };
        self.step = step.first().copied().unwrap_or(0).max(0) as u64;
        Ok(())
    }

    /// Write the state to a safetensors file.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        candle_core::safetensors::save(&self.state_tensors()?, path)
            .with_context(|| format!("writing optimizer state {}", path.display()))
    }

    /// Read the state from a safetensors file written by [`AdamW::save`].
    pub fn load(&mut self, path: &Path) -> anyhow::Result<()> {
        let dev = self.vars.first().map(|v| v.device().clone()).unwrap_or(Device::Cpu);
        let state = candle_core::safetensors::load(path, &dev)
            .with_context(|| format!("reading optimizer state {}", path.display()))?;
        self.load_state(&state).with_context(|| format!("optimizer state {}", path.display()))
    }
}

/// The tensors end to end, as one 1-D tensor.
fn flatten(ts: &[Tensor]) -> Result<Tensor> {
    Tensor::cat(&ts.iter().map(|t| t.flatten_all()).collect::<Result<Vec<_>>>()?, 0)
}

/// Scale all gradients of `vars` together so that their global L2 norm is at most
/// `max_norm`; returns the norm before clipping (PyTorch's `clip_grad_norm_`).
///
/// ```text
/// ‖g‖ = sqrt(Σ_vars Σ g²);   if ‖g‖ > max_norm:  g ← g · max_norm / (‖g‖ + 1e-6)
/// ```
/// A non-finite norm leaves the gradients as they are: skip that step.
pub fn clip_grad_norm(grads: &mut GradStore, vars: &[Var], max_norm: f64) -> Result<f64> {
    let mut sq = Vec::new();
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq.push(g.to_dtype(DType::F32)?.sqr()?.sum_all()?);
        }
    }
    if sq.is_empty() {
        return Ok(0.0);
    }
    let total = Tensor::stack(&sq, 0)?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?.sqrt();
    if total.is_finite() && total > max_norm {
        let coef = max_norm / (total + 1e-6);
        for v in vars {
            if let Some(g) = grads.get(v.as_tensor()) {
                let scaled = (g * coef)?;
                grads.insert(v.as_tensor(), scaled);
            }
        }
    }
    Ok(total)
}

/// Shape of the learning-rate curve after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// `base_lr` throughout.
    #[default]
    Constant,
    /// Straight line from `base_lr` to `min_lr` at `total`.
    Linear,
    /// Half a cosine from `base_lr` to `min_lr` at `total`.
    Cosine,
}

/// A learning rate per step: linear warmup, then the schedule's decay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LrScheduler {
    /// The curve after warmup.
    pub schedule: LrSchedule,
    /// The peak learning rate.
    pub base_lr: f64,
    /// The learning rate at the end of the decay.
    pub min_lr: f64,
    /// Warmup steps.
    pub warmup: u64,
    /// Total steps (the decay ends here).
    pub total: u64,
}

impl LrScheduler {
    /// The learning rate at `step` (0-based).
    ///
    /// ```text
    /// step < warmup:  base · (step + 1) / warmup
    /// after:          p = clamp((step − warmup) / (total − warmup), 0, 1)
    ///   constant      base
    ///   linear        base − (base − min) · p
    ///   cosine        min + (base − min) · (1 + cos(π p)) / 2
    /// ```
    pub fn lr(&self, step: u64) -> f64 {
        let (base, min) = (self.base_lr, self.min_lr);
        if step < self.warmup {
            return base * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let p = ((step - self.warmup) as f64 / span).clamp(0.0, 1.0);
        match self.schedule {
            LrSchedule::Constant => base,
            LrSchedule::Linear => base - (base - min) * p,
            LrSchedule::Cosine => min + (base - min) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(v: &[f32]) -> Var {
        Var::from_tensor(&Tensor::new(v, &Device::Cpu).unwrap()).unwrap()
    }

    /// Gradients of `Σ θ ⊙ c` with respect to θ: exactly `c`.
    fn grads_of(pairs: &[(&Var, &[f32])]) -> GradStore {
        let mut loss = Tensor::new(0f32, &Device::Cpu).unwrap();
        for (v, c) in pairs {
            let c = Tensor::new(*c, &Device::Cpu).unwrap();
            loss = (loss + (v.as_tensor() * c).unwrap().sum_all().unwrap()).unwrap();
        }
        loss.backward().unwrap()
    }

    fn vals(v: &Var) -> Vec<f32> {
        v.as_tensor().to_vec1::<f32>().unwrap()
    }

    #[test]
    fn adamw_two_steps_match_hand_values() {
        let cfg = AdamWConfig { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
        let w = var(&[1.0, -2.0]);
        let mut opt = AdamW::new(vec![("w".into(), w.clone())], cfg).unwrap();
        let (g1, g2) = ([0.5f64, -0.1], [-0.3f64, 0.2]);
        opt.step(&grads_of(&[(&w, &[0.5, -0.1])])).unwrap();
        opt.set_lr(0.05);
        opt.step(&grads_of(&[(&w, &[-0.3, 0.2])])).unwrap();
        assert_eq!(opt.step_count(), 2);
        for (k, theta0) in [1.0f64, -2.0].into_iter().enumerate() {
            // step 1 (lr 0.1): m = 0.1 g1, v = 0.001 g1², m̂ = g1, v̂ = g1²
            let (m1, v1) = (0.1 * g1[k], 0.001 * g1[k] * g1[k]);
            let th1 = theta0 * (1.0 - 0.1 * 0.01) - 0.1 * (m1 / 0.1) / ((v1 / 0.001).sqrt() + 1e-8);
            // step 2 (lr 0.05): m = 0.9 m1 + 0.1 g2, v = 0.999 v1 + 0.001 g2²,
            //                   m̂ = m / (1 − 0.9²), v̂ = v / (1 − 0.999²)
            let m2 = 0.9 * m1 + 0.1 * g2[k];
            let v2 = 0.999 * v1 + 0.001 * g2[k] * g2[k];
            let (mh, vh) = (m2 / (1.0 - 0.81), v2 / (1.0 - 0.999f64 * 0.999));
            let th2 = th1 * (1.0 - 0.05 * 0.01) - 0.05 * mh / (vh.sqrt() + 1e-8);
            let got = vals(&w)[k] as f64;
            assert!((got - th2).abs() < 1e-6, "θ[{k}] = {got}, hand {th2}");
        }
    }

    #[test]
    fn vars_without_gradient_are_left_alone() {
        let (a, b) = (var(&[1.0]), var(&[2.0]));
        let mut opt =
            AdamW::new(vec![("a".into(), a.clone()), ("b".into(), b.clone())], Default::default()).unwrap();
        opt.step(&grads_of(&[(&a, &[1.0])])).unwrap();
        assert_eq!(vals(&b), vec![2.0]);
        assert!(vals(&a)[0] < 1.0);
    }

    #[test]
    fn state_round_trip_gives_identical_next_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optimizer.safetensors");
        let cfg = AdamWConfig { lr: 0.01, ..Default::default() };
        let (a, b) = (var(&[0.3, -0.7, 1.1]), var(&[2.0]));
        let mut opt = AdamW::new(vec![("a".into(), a.clone()), ("b.w".into(), b.clone())], cfg).unwrap();
        for s in 0..3 {
            let s = s as f32;
            opt.step(&grads_of(&[(&a, &[0.1 + s, -0.2, 0.05 * s]), (&b, &[1.0 - s])])).unwrap();
        }
        opt.save(&path).unwrap();
        // A fresh optimizer over copies of the weights, state loaded from disk.
        let (a2, b2) = (var(&vals(&a)), var(&vals(&b)));
        let mut resumed =
            AdamW::new(vec![("a".into(), a2.clone()), ("b.w".into(), b2.clone())], cfg).unwrap();
        resumed.load(&path).unwrap();
        assert_eq!(resumed.step_count(), 3);
        for s in 0..2 {
            let s = s as f32;
            let (ga, gb): (&[f32], &[f32]) = (&[0.4, s, -1.0], &[0.5 * s]);
            opt.step(&grads_of(&[(&a, ga), (&b, gb)])).unwrap();
            resumed.step(&grads_of(&[(&a2, ga), (&b2, gb)])).unwrap();
            assert_eq!(vals(&a), vals(&a2));
            assert_eq!(vals(&b), vals(&b2));
        }
        // a model with other variables is refused, naming the key
        let mut other = AdamW::new(vec![("c".into(), var(&[0.0]))], cfg).unwrap();
        let err = format!("{:#}", other.load(&path).unwrap_err());
        assert!(err.contains("no `m.c`"), "{err}");
        let mut fewer = AdamW::new(vec![("a".into(), var(&[0.0, 0.0, 0.0]))], cfg).unwrap();
        let err = format!("{:#}", fewer.load(&path).unwrap_err());
        assert!(err.contains("b.w"), "{err}");
    }

    /// Flat moments (a GPU's default) give the same weights and state as per-variable ones,
    /// bit for bit, through steps, a variable without a gradient, and a save and load.
    #[test]
    fn flat_moments_step_as_per_variable_ones() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = AdamWConfig { lr: 0.02, ..Default::default() };
        let make = |flat: bool| {
            let (a, b) = (var(&[0.3, -0.7, 1.1]), var(&[2.0, 0.5]));
            let mut opt = AdamW::new(vec![("a".into(), a.clone()), ("b".into(), b.clone())], cfg).unwrap();
            opt.set_flat(flat).unwrap();
            assert_eq!(opt.is_flat(), flat);
            (opt, a, b)
        };
        let ((mut flat, fa, fb), (mut per, pa, pb)) = (make(true), make(false));
        for s in 0..3 {
            let s = s as f32;
            let (ga, gb): (&[f32], &[f32]) = (&[0.1 + s, -0.2, 0.05 * s], &[1.0 - s, s]);
            flat.step(&grads_of(&[(&fa, ga), (&fb, gb)])).unwrap();
            per.step(&grads_of(&[(&pa, ga), (&pb, gb)])).unwrap();
            assert_eq!((vals(&fa), vals(&fb)), (vals(&pa), vals(&pb)), "step {s}");
        }
        assert!(flat.is_flat());
        let path = dir.path().join("flat.safetensors");
        flat.save(&path).unwrap();
        let (mut loaded, la, lb) = make(false);
        for (x, y) in [(&la, &fa), (&lb, &fb)] {
            x.set(y.as_tensor()).unwrap();
        }
        loaded.load(&path).unwrap();
        // b has no gradient: flat falls back to per-variable moments, b stays as it was
        let before_b = vals(&fb);
        flat.step(&grads_of(&[(&fa, &[0.3, 0.3, -0.3])])).unwrap();
        per.step(&grads_of(&[(&pa, &[0.3, 0.3, -0.3])])).unwrap();
        loaded.step(&grads_of(&[(&la, &[0.3, 0.3, -0.3])])).unwrap();
        assert!(!flat.is_flat());
        assert_eq!(vals(&fb), before_b);
        assert_eq!(vals(&fa), vals(&pa));
        assert_eq!(vals(&la), vals(&pa), "flat state saved, loaded per variable");
        let (fs, ps) = (flat.state_tensors().unwrap(), per.state_tensors().unwrap());
        for (k, t) in &ps {
            let d = (t.to_dtype(DType::F64).unwrap() - fs[k].to_dtype(DType::F64).unwrap()).unwrap();
            assert_eq!(d.abs().unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap(), 0.0, "{k}");
        }
    }

    #[test]
    fn grad_norm_clipping() {
        // ‖g‖ = sqrt(3² + 4² + 12²) = 13
        let (a, b) = (var(&[0.0, 0.0]), var(&[0.0]));
        let vars = [a.clone(), b.clone()];
        let mut g = grads_of(&[(&a, &[3.0, 4.0]), (&b, &[12.0])]);
        let n = clip_grad_norm(&mut g, &vars, 100.0).unwrap();
        assert!((n - 13.0).abs() < 1e-6);
        assert_eq!(g.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap(), vec![12.0]);
        // max_norm 6.5: every gradient × 6.5 / (13 + 1e-6) ≈ 0.5
        let n = clip_grad_norm(&mut g, &vars, 6.5).unwrap();
        assert!((n - 13.0).abs() < 1e-6);
        let ga = g.get(a.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        let gb = g.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        let c = 6.5 / (13.0 + 1e-6);
        assert!((ga[0] as f64 - 3.0 * c).abs() < 1e-6 && (ga[1] as f64 - 4.0 * c).abs() < 1e-6);
        assert!((gb[0] as f64 - 12.0 * c).abs() < 1e-6);
        assert!((clip_grad_norm(&mut g, &vars, 100.0).unwrap() - 6.5).abs() < 1e-5);
    }

    #[test]
    fn lr_schedules() {
        let s = |schedule| LrScheduler { schedule, base_lr: 1.0, min_lr: 0.0, warmup: 2, total: 12 };
        let c = s(LrSchedule::Constant);
        // warmup: (step + 1) / 2
        assert_eq!((c.lr(0), c.lr(1), c.lr(2), c.lr(100)), (0.5, 1.0, 1.0, 1.0));
        // p = (step − 2) / 10
        let cos = s(LrSchedule::Cosine);
        assert_eq!(cos.lr(0), 0.5);
        assert!((cos.lr(2) - 1.0).abs() < 1e-12);
        assert!((cos.lr(7) - 0.5).abs() < 1e-12); // (1 + cos(π/2)) / 2
        assert!((cos.lr(4) - 0.5 * (1.0 + (0.2 * std::f64::consts::PI).cos())).abs() < 1e-12);
        assert!(cos.lr(12).abs() < 1e-12 && cos.lr(50).abs() < 1e-12);
        let lin = LrScheduler { min_lr: 0.1, ..s(LrSchedule::Linear) };
        assert!((lin.lr(7) - 0.55).abs() < 1e-12 && (lin.lr(12) - 0.1).abs() < 1e-12);
        let no_warmup = LrScheduler { warmup: 0, ..lin };
        assert_eq!(no_warmup.lr(0), 1.0);
    }
}
