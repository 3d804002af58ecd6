//! Drawing the next token of many answers on the device that holds their logits.
//!
//! The host sends one uniform draw per answer and reads back each answer's token and its
//! log-prob: two numbers a row, where reading the logits would move the whole vocabulary
//! (151 936 floats for Qwen-VL) for every answer at every step and walk it on one core.
//!
//! Inverse-CDF sampling without a scan of the vocabulary: the probabilities are cut into
//! blocks of [`BLOCK`]; a prefix sum over the blocks' sums picks the block, a prefix sum
//! inside that block picks the token. Prefix sums are log-step scans (shift and add), so
//! every operation is elementwise or a reduction within a row: a row's draw never depends
//! on the other rows, and decoding stays batch-invariant.

use anyhow::Result;
use candle_core::{DType, Tensor, D};

/// Tokens per block of the two-level prefix sum.
pub const BLOCK: usize = 1024;

/// Inclusive prefix sums of `x` `[n, m]` along its rows.
fn scan(x: &Tensor) -> Result<Tensor> {
    let m = x.dim(1)?;
    let mut x = x.clone();
    let mut shift = 1;
    while shift < m {
        let shifted = x.narrow(1, 0, m - shift)?.pad_with_zeros(1, shift, 0)?;
        x = (x + shifted)?;
        shift *= 2;
    }
    Ok(x)
}

/// For each row of `p` `[n, m]` (non-negative), the index of its last positive entry.
fn last_positive(p: &Tensor) -> Result<Tensor> {
    let m = p.dim(1)?;
    let idx = Tensor::arange(0u32, m as u32, p.device())?.unsqueeze(0)?;
    Ok(p.gt(0f32)?.to_dtype(DType::U32)?.broadcast_mul(&idx)?.max(1)?)
}

/// How many entries of each row of `cum` `[n, m]` are at most that row's `target` `[n, 1]`:
/// the index of the first entry past it.
fn count_le(cum: &Tensor, target: &Tensor) -> Result<Tensor> {
    Ok(cum.broadcast_le(target)?.to_dtype(DType::U32)?.sum(1)?)
}

/// Draw one token per row of the log-probabilities `logp` `[n, V]` (f32, rows summing to
/// 1 in probability): the first token whose cumulative probability passes `u[i]` of the
/// row's total. A token of probability 0 (a banned one) is never drawn. Returns `[n]` u32.
pub fn sample_rows(logp: &Tensor, u: &[f32]) -> Result<Tensor> {
    let (n, v) = logp.dims2()?;
    anyhow::ensure!(u.len() == n, "{} draws for {n} rows", u.len());
    let dev = logp.device();
    let nb = v.div_ceil(BLOCK);
    let p = logp.exp()?.pad_with_zeros(1, 0, nb * BLOCK - v)?;
    let blocks = p.reshape((n, nb, BLOCK))?;
    let mass = blocks.sum(2)?;
    let cum = scan(&mass)?;
    let target = Tensor::from_slice(u, (n, 1), dev)?.broadcast_mul(&cum.narrow(1, nb - 1, 1)?)?;
    // the block the target falls in (rounding can carry it past the last block with mass)
    let b = count_le(&cum, &target)?.minimum(&last_positive(&mass)?)?;
    let before = (&cum - &mass)?.gather(&b.unsqueeze(1)?, 1)?;
    let rows = Tensor::arange(0u32, n as u32, dev)?;
    let flat = ((rows * nb as f64)? + &b)?;
    let inner = blocks.reshape((n * nb, BLOCK))?.index_select(&flat, 0)?;
    let j = count_le(&scan(&inner)?, &(target - before)?)?.minimum(&last_positive(&inner)?)?;
    Ok(((b * BLOCK as f64)? + j)?)
}

/// The greedy token of each row of `logp` `[n, V]`, `[n]` u32.
pub fn greedy_rows(logp: &Tensor) -> Result<Tensor> {
    Ok(logp.argmax(D::Minus1)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use rand::{Rng, SeedableRng};

    /// Log-probs of `rows` random distributions over `v` tokens, some tokens banned (−∞).
    fn logp(rows: usize, v: usize, seed: u64) -> Tensor {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let logits: Vec<f32> = (0..rows * v)
            .map(|i| if i % 7 == 3 { f32::NEG_INFINITY } else { rng.gen_range(-4.0..4.0) })
            .collect();
        let t = Tensor::from_vec(logits, (rows, v), &Device::Cpu).unwrap();
        candle_nn::ops::log_softmax(&t, D::Minus1).unwrap()
    }

    /// The host's inverse CDF: the first token whose cumulative probability passes `u·total`.
    fn host(lp: &[f32], u: f32) -> usize {
        let total: f64 = lp.iter().map(|x| (*x as f64).exp()).sum();
        let mut acc = 0.0f64;
        for (i, x) in lp.iter().enumerate() {
            acc += (*x as f64).exp();
            if acc > u as f64 * total {
                return i;
            }
        }
        unreachable!("u < 1")
    }

    #[test]
    fn draws_are_the_inverse_cdf_and_never_a_banned_token() {
        // sizes below, at and past a block, and Qwen-VL's vocabulary
        for (v, seed) in [(5, 1), (1024, 2), (3000, 3), (151_936, 4)] {
            let lp = logp(3, v, seed);
            let rows = lp.to_vec2::<f32>().unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..40 {
                let u: Vec<f32> = (0..3).map(|_| rng.gen()).collect();
                let got = sample_rows(&lp, &u).unwrap().to_vec1::<u32>().unwrap();
                for r in 0..3 {
                    let t = got[r] as usize;
                    assert!(t < v && rows[r][t].is_finite(), "V={v}: drew {t}, banned or past the end");
                    // the device's sums run in another order: allow a neighbour at a boundary
                    let want = host(&rows[r], u[r]);
                    let cdf = |k: usize| rows[r][..k].iter().map(|x| (*x as f64).exp()).sum::<f64>();
                    let near = (cdf(t.min(want)) - cdf(t.max(want))).abs() < 1e-5;
                    assert!(t == want || near, "V={v} u={}: drew {t}, the inverse CDF is {want}", u[r]);
                }
            }
        }
    }

    #[test]
    fn extreme_draws_stay_on_tokens_with_mass() {
        let lp = logp(2, 2500, 9);
        let rows = lp.to_vec2::<f32>().unwrap();
        for u in [0.0f32, 1.0 - f32::EPSILON, 0.999_999_9] {
            let got = sample_rows(&lp, &[u, u]).unwrap().to_vec1::<u32>().unwrap();
            for r in 0..2 {
                assert!(rows[r][got[r] as usize].is_finite(), "u={u}: a banned token");
            }
        }
        // one token holds all the mass
        let mut one = vec![f32::NEG_INFINITY; 3000];
        one[2047] = 0.0;
        let lp = Tensor::from_vec(one, (1, 3000), &Device::Cpu).unwrap();
        for u in [0.0f32, 0.5, 1.0 - f32::EPSILON] {
            assert_eq!(sample_rows(&lp, &[u]).unwrap().to_vec1::<u32>().unwrap(), [2047]);
        }
    }

    #[test]
    fn a_rows_draw_does_not_depend_on_the_other_rows() {
        let lp = logp(6, 4000, 5);
        let u = [0.1f32, 0.5, 0.93, 0.0001, 0.77, 0.4];
        let together = sample_rows(&lp, &u).unwrap().to_vec1::<u32>().unwrap();
        for r in 0..6 {
            let alone =
                sample_rows(&lp.narrow(0, r, 1).unwrap(), &u[r..=r]).unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(alone[0], together[r], "row {r}");
        }
    }

    #[test]
    fn frequencies_follow_the_probabilities() {
        // three tokens with mass 0.2, 0.3, 0.5 far apart in a vocabulary of 3000
        let mut lp = vec![f32::NEG_INFINITY; 3000];
        for (t, p) in [(10, 0.2f32), (1500, 0.3), (2999, 0.5)] {
            lp[t] = p.ln();
        }
        let lp = Tensor::from_vec(lp, (1, 3000), &Device::Cpu).unwrap();
        let mut counts = std::collections::HashMap::new();
        for k in 0..1000 {
            let u = (k as f32 + 0.5) / 1000.0;
            *counts.entry(sample_rows(&lp, &[u]).unwrap().to_vec1::<u32>().unwrap()[0]).or_insert(0) += 1;
        }
        assert_eq!((counts[&10], counts[&1500], counts[&2999]), (200, 300, 500), "{counts:?}");
    }
}
