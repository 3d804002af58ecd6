//! A `VarBuilder` backend that creates missing Vars from a seeded generator, so the same
//! seed gives the same initial weights (candle's own `Init` draws from an unseeded RNG).

use candle_core::{DType, Device, Result, Shape, Tensor, Var};
use candle_nn::{Init, VarBuilder, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Mutex;

/// Creates Vars in `map` on first request, drawing `Randn`/`Uniform` values from a
/// seeded ChaCha generator; a name already in the map is returned as is (shape checked).
struct SeededVarMap {
    map: VarMap,
    rng: Mutex<ChaCha8Rng>,
}

/// A `VarBuilder` over `map` whose new Vars are initialised from `seed`.
pub fn seeded_var_builder(map: &VarMap, seed: u64, device: &Device) -> VarBuilder<'static> {
    let backend = SeededVarMap { map: map.clone(), rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)) };
    VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone())
}

impl candle_nn::var_builder::SimpleBackend for SeededVarMap {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let mut data = self.map.data().lock().expect("VarMap lock poisoned");
        if let Some(v) = data.get(name) {
            if v.shape() != &s {
                candle_core::bail!("shape mismatch on {name}: asked {s:?}, stored {:?}", v.shape());
            }
            return Ok(v.as_tensor().clone());
        }
        let n = s.elem_count();
        let mut rng = self.rng.lock().expect("init RNG lock poisoned");
        let values: Vec<f32> = match h {
            Init::Const(c) => vec![c as f32; n],
            Init::Randn { mean, stdev } => (0..n).map(|_| (mean + stdev * normal(&mut rng)) as f32).collect(),
            Init::Uniform { lo, up } => (0..n).map(|_| rng.gen_range(lo..up) as f32).collect(),
            Init::Kaiming { .. } => candle_core::bail!("{name}: Kaiming init is not used by the VLM"),
        };
        let t = Tensor::from_vec(values, s, dev)?.to_dtype(dtype)?;
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        data.insert(name.to_string(), var);
        Ok(out)
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        let data = self.map.data().lock().expect("VarMap lock poisoned");
        match data.get(name) {
            Some(v) => Ok(v.as_tensor().clone()),
            None => candle_core::bail!("no Var named {name}"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.map.data().lock().expect("VarMap lock poisoned").contains_key(name)
    }
}

/// One standard normal draw (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}
