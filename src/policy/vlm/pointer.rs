//! The pointer head: coordinate tokens scored by looking at the screenshot.
//!
//! With only the linear output head, the logit of "x bin 7" is a function of the decoder's
//! hidden state, so the model must learn, for every bin separately, that "the thing to
//! click is there". Trained from rewards alone that is slow: the policy first learns where
//! targets usually are (a position prior) and only later where this one is. The pointer
//! head adds to each coordinate token's logit a score computed *at that place*: a query
//! from the decoder state dotted with a key grid over the screenshot, one key per
//! (x bin, y bin) cell. The key weights are shared by every cell, so what is learned about
//! a target in one place holds everywhere (translation-equivariant, like a conv).
//!
//! Keys come from two levels, each bilinearly resampled to the bin grid: the encoder's
//! image tokens (context: instruction and surroundings) and the stem's first-layer cells
//! (finer, local appearance). An x token gets the y-marginal of the cell scores
//! (log-sum-exp over its column); the following y token gets the scores of the column the
//! x token chose, so together they read like one softmax over cells.
//!
//! Only matmul, broadcast arithmetic, exp/log and sums are used: all have a backward pass.

use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::VarBuilder;

use super::config::VlmConfig;
use super::layers::{linear, Linear, INIT_STD};
use super::tokens::X0;

/// `[to, from]`: linear interpolation from `from` cells to `to` cells over the same span
/// (cell centres at `(i + ½) / n`; outside the first/last centre the edge cell is used).
fn resample_matrix(from: usize, to: usize) -> Vec<f32> {
    let mut m = vec![0f32; to * from];
    for j in 0..to {
        let pos = ((j as f32 + 0.5) * from as f32 / to as f32 - 0.5).clamp(0.0, (from - 1) as f32);
        let i0 = pos.floor() as usize;
        let i1 = (i0 + 1).min(from - 1);
        let w1 = pos - i0 as f32;
        m[j * from + i0] += 1.0 - w1;
        m[j * from + i1] += w1;
    }
    m
}

/// Resamples a `[.., gh, gw]` grid to the bin grid `[.., y_bins, x_bins]`.
#[derive(Debug, Clone)]
struct Resample {
    /// [y_bins, gh]
    rows: Tensor,
    /// [gw, x_bins]
    cols_t: Tensor,
}

impl Resample {
    fn new(gh: usize, gw: usize, cfg: &VlmConfig, vb: &VarBuilder) -> Result<Self> {
        let (xb, yb) = (cfg.actions.x_bins, cfg.actions.y_bins);
        Ok(Resample {
            rows: Tensor::from_vec(resample_matrix(gh, yb), (yb, gh), vb.device())?,
            cols_t: Tensor::from_vec(resample_matrix(gw, xb), (xb, gw), vb.device())?.t()?.contiguous()?,
        })
    }

    /// `x` [B, gh·gw, k] (row-major cells) → [B, k, y_bins·x_bins].
    fn apply(&self, x: &Tensor, gh: usize, gw: usize) -> Result<Tensor> {
        let (b, _, k) = x.dims3()?;
        let grid = x.transpose(1, 2)?.contiguous()?.reshape((b * k, gh, gw))?;
        let out = self.rows.broadcast_matmul(&grid)?.broadcast_matmul(&self.cols_t)?;
        let (yb, xb) = (self.rows.dim(0)?, self.cols_t.dim(1)?);
        out.reshape((b, k, yb * xb))
    }
}

/// The pointer head (see the module docs).
#[derive(Debug, Clone)]
pub struct PointerHead {
    query: Linear,
    key_tokens: Linear,
    key_cells: Linear,
    tokens_grid: Resample,
    cells_grid: Resample,
    /// (gh, gw) of the image tokens and of the stem's first-layer cells.
    token_shape: (usize, usize),
    cell_shape: (usize, usize),
    x_bins: usize,
    y_bins: usize,
    vocab: usize,
}

impl PointerHead {
    /// The head for `cfg`, writing into a `vocab`-token output.
    pub fn new(cfg: &VlmConfig, vocab: usize, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d_model;
        let c = cfg.stem_channels;
        let token_shape = (cfg.grid_h(), cfg.grid_w());
        let cell_shape = (cfg.image_height / cfg.stem_patch, cfg.image_width / cfg.stem_patch);
        Ok(PointerHead {
            // Keys start at unit scale and queries small: the scores start near 0 (a uniform
            // pointer) while the query's gradient, proportional to the keys, is not tiny.
            query: linear(vb.pp("query"), d, d, false, INIT_STD)?,
            key_tokens: linear(vb.pp("key_tokens"), d, d, false, 1.0 / (d as f64).sqrt())?,
            key_cells: linear(vb.pp("key_cells"), c, d, false, 1.0 / (c as f64).sqrt())?,
            tokens_grid: Resample::new(token_shape.0, token_shape.1, cfg, &vb)?,
            cells_grid: Resample::new(cell_shape.0, cell_shape.1, cfg, &vb)?,
            token_shape,
            cell_shape,
            x_bins: cfg.actions.x_bins,
            y_bins: cfg.actions.y_bins,
            vocab,
        })
    }

    /// The key grid [B, d, y_bins·x_bins] from the encoder's image tokens [B, gh·gw, d]
    /// and the stem's first-layer cells [B, ch·cw, c]. Computed once per screenshot.
    pub fn keys(&self, image_tokens: &Tensor, cells: &Tensor) -> Result<Tensor> {
        let (th, tw) = self.token_shape;
        let (ch, cw) = self.cell_shape;
        let from_tokens = self.tokens_grid.apply(&self.key_tokens.forward(image_tokens)?, th, tw)?;
        let from_cells = self.cells_grid.apply(&self.key_cells.forward(cells)?, ch, cw)?;
        from_tokens + from_cells
    }

    /// Additive logits [B, T, vocab] (zero outside the coordinate tokens) for decoder states
    /// `hidden` [B, T, d] whose input tokens are `inputs` [B, T] (u32), given `keys` from
    /// [`PointerHead::keys`].
    pub fn logits(&self, hidden: &Tensor, keys: &Tensor, inputs: &Tensor) -> Result<Tensor> {
        let (b, t, d) = hidden.dims3()?;
        let (yb, xb) = (self.y_bins, self.x_bins);
        let q = (self.query.forward(hidden)? / (d as f64).sqrt())?;
        // [B, T, Y, X]: the score of every cell for every decoder position.
        let s = q.matmul(keys)?.reshape((b, t, yb, xb))?;
        // x tokens: log Σ_y exp s (the max is only for stability; its gradient cancels).
        let m = s.max_keepdim(2)?.detach();
        let x_logits = (s.broadcast_sub(&m)?.exp()?.sum_keepdim(2)?.log()? + m)?.squeeze(2)?;
        // y tokens: the scores of the column chosen by the x token this position reads.
        let xs = Tensor::arange(X0, X0 + xb as u32, hidden.device())?.reshape((1, 1, xb))?;
        let chosen = inputs.unsqueeze(2)?.broadcast_eq(&xs)?.to_dtype(DType::F32)?.unsqueeze(2)?;
        let y_logits = s.broadcast_mul(&chosen)?.sum(D::Minus1)?;
        let zeros = |n: usize| Tensor::zeros((b, t, n), DType::F32, hidden.device());
        let head = X0 as usize;
        let tail = self.vocab - head - xb - yb;
        Tensor::cat(&[&zeros(head)?, &x_logits, &y_logits, &zeros(tail)?], 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};
    use candle_nn::VarMap;

    /// Reads like one softmax over cells: p(x) · p(y | x) from the x and y logits equals
    /// `softmax(s)[y, x]` over all cells, with `s` the cell scores written out by hand
    /// (`s = (W_q h / √d) · keys`) in f64.
    #[test]
    fn x_then_y_is_a_softmax_over_cells() {
        let cfg = VlmConfig::tiny();
        let dev = Device::Cpu;
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &dev);
        let vocab = X0 as usize + cfg.actions.x_bins + cfg.actions.y_bins + 7;
        let (d, xb, yb) = (cfg.d_model, cfg.actions.x_bins, cfg.actions.y_bins);
        // Larger queries than at init, so the scores are far from uniform (the builder takes
        // a weight already in the map).
        let wq = Tensor::randn(0f32, 1.0, (d, d), &dev).unwrap();
        map.data().lock().unwrap().insert("query.weight".into(), Var::from_tensor(&wq).unwrap());
        let head = PointerHead::new(&cfg, vocab, vb).unwrap();
        let hidden = Tensor::randn(0f32, 1.0, (1, 2, d), &dev).unwrap();
        let keys = Tensor::randn(0f32, 1.0, (1, d, yb * xb), &dev).unwrap();
        let x_pick = 5u32;
        let inputs = Tensor::new(&[[2u32, X0 + x_pick]], &dev).unwrap();
        let out: Vec<Vec<Vec<f32>>> = head.logits(&hidden, &keys, &inputs).unwrap().to_vec3().unwrap();
        // By hand: s[t][cell] for both positions.
        let h: Vec<Vec<Vec<f32>>> = hidden.to_vec3().unwrap();
        let w: Vec<Vec<f32>> = wq.to_vec2().unwrap();
        let k: Vec<Vec<f32>> = keys.squeeze(0).unwrap().to_vec2().unwrap();
        let score = |t: usize, cell: usize| -> f64 {
            let q: Vec<f64> = (0..d).map(|o| (0..d).map(|i| f64::from(w[o][i] * h[0][t][i])).sum()).collect();
            (0..d).map(|o| q[o] * f64::from(k[o][cell])).sum::<f64>() / (d as f64).sqrt()
        };
        let softmax = |z: Vec<f64>| -> Vec<f64> {
            let m = z.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.into_iter().map(|v| v / sum).collect()
        };
        let x0 = X0 as usize;
        let px = softmax(out[0][0][x0..x0 + xb].iter().map(|&v| f64::from(v)).collect());
        let py = softmax(out[0][1][x0 + xb..x0 + xb + yb].iter().map(|&v| f64::from(v)).collect());
        let joint0 = softmax((0..yb * xb).map(|c| score(0, c)).collect());
        // p(x) from position 0 against the joint's column sums at position 0.
        for (x, &p) in px.iter().enumerate() {
            let col: f64 = (0..yb).map(|y| joint0[y * xb + x]).sum();
            assert!((p - col).abs() < 1e-4, "p(x={x}) {p} vs {col}");
        }
        // p(y | x_pick) from position 1 (which reads the x token) against the softmax of
        // that column's scores at position 1.
        let cond = softmax((0..yb).map(|y| score(1, y * xb + x_pick as usize)).collect());
        for (y, (&p, &c)) in py.iter().zip(&cond).enumerate() {
            assert!((p - c).abs() < 1e-4, "p(y={y}|x) {p} vs {c}");
        }
        // Nothing outside the coordinate tokens; no y logits where the input is not an x.
        assert!(out[0][0][..x0].iter().chain(&out[0][0][x0 + xb + yb..]).all(|&v| v == 0.0));
        assert!(out[0][0][x0 + xb..x0 + xb + yb].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn resampling_rows_sum_to_one_and_hit_centres() {
        for (from, to) in [(4, 16), (5, 20), (9, 32), (12, 42), (3, 3), (1, 7)] {
            let m = resample_matrix(from, to);
            for j in 0..to {
                let row: f32 = m[j * from..(j + 1) * from].iter().sum();
                assert!((row - 1.0).abs() < 1e-6, "{from}->{to} row {j} sums to {row}");
            }
        }
        // Same size: the identity.
        let m = resample_matrix(3, 3);
        assert_eq!(m, vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        // 2 → 4: bin centres at 0.125, 0.375, 0.625, 0.875 of the span; cells at 0.25, 0.75.
        let m = resample_matrix(2, 4);
        assert_eq!(m, vec![1.0, 0.0, 0.75, 0.25, 0.25, 0.75, 0.0, 1.0]);
    }
}
