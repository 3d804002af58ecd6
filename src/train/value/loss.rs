//! The critic's loss and how well it explains the returns.

use candle_core::{DType, Result, Tensor};

/// What one value-loss evaluation saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ValueLossStats {
    /// The loss.
    pub loss: f64,
    /// Fraction of samples where the clipped branch is the larger one (no gradient there).
    pub clip_frac: f64,
}

/// PPO2's value loss (clipped when `clip` is set), on `[B]` tensors; differentiable
/// through `v` (the critic's current values), `v_old` (values at collection) and `ret`
/// (the GAE returns) are data.
///
/// ```text
/// unclipped:  L = ½ mean_b (V − R)²
/// clipped:    V_c = V_old + clamp(V − V_old, −c, c)
///             L = ½ mean_b max((V − R)², (V_c − R)²)
/// ```
/// On a tie the gradient goes through the unclipped branch.
pub fn value_loss(
    v: &Tensor,
    v_old: &Tensor,
    ret: &Tensor,
    clip: Option<f64>,
) -> Result<(Tensor, ValueLossStats)> {
    let dt = v.dtype();
    let (v_old, ret) = (v_old.to_dtype(dt)?.detach(), ret.to_dtype(dt)?.detach());
    let unclipped = (v - &ret)?.sqr()?;
    let (per_sample, clip_frac) = match clip {
        None => (unclipped, 0.0),
        Some(c) => {
            let v_c = (&v_old + (v - &v_old)?.clamp(-c, c)?)?;
            let clipped = (v_c - &ret)?.sqr()?;
            let take = clipped.gt(&unclipped)?;
            let frac = take.to_dtype(DType::F64)?.mean_all()?.to_scalar::<f64>()?;
            (take.where_cond(&clipped, &unclipped)?, frac)
        }
    };
    let loss = (per_sample.mean_all()? * 0.5)?;
    let value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
    Ok((loss, ValueLossStats { loss: value, clip_frac }))
}

/// `1 − Var(R − V) / Var(R)`: 1 when the values predict the returns exactly, 0 when they
/// do no better than a constant, negative when worse; `None` when the returns do not vary
/// (or there are none).
pub fn explained_variance(values: &[f64], returns: &[f64]) -> Option<f64> {
    let var = |x: &[f64]| {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64
    };
    if returns.is_empty() || values.len() != returns.len() {
        return None;
    }
    let var_r = var(returns);
    if var_r <= 0.0 {
        return None;
    }
    let residual: Vec<f64> = returns.iter().zip(values).map(|(r, v)| r - v).collect();
    Some(1.0 - var(&residual) / var_r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(v: &[f64]) -> Tensor {
        Tensor::new(v, &Device::Cpu).unwrap()
    }

    #[test]
    fn clipped_value_loss_on_both_sides() {
        // V_old = 0.5 everywhere, c = 0.2 (V_c ∈ [0.3, 0.7]); float64.
        //  b  V    R     (V − R)²  V_c  (V_c − R)²  max       branch     ∂L/∂V = (V − R)/B
        //  0  1.0  1.2   0.04      0.7  0.25        0.25      clipped    0
        //  1  1.0  0.0   1.0       0.7  0.49        1.0       unclipped  1.0/5 = 0.2
        //  2  0.0 −0.5   0.25      0.3  0.64        0.64      clipped    0
        //  3  0.0  1.0   1.0       0.3  0.49        1.0       unclipped  −1.0/5 = −0.2
        //  4  0.6  0.0   0.36      0.6  0.36        0.36      tie        0.6/5 = 0.12
        // L = ½ · (0.25 + 1 + 0.64 + 1 + 0.36) / 5 = 0.325; clipped above (b 0) and
        // below (b 2): clip_frac 2/5.
        let v = Var::from_tensor(&t(&[1.0, 1.0, 0.0, 0.0, 0.6])).unwrap();
        let (old, ret) = (t(&[0.5; 5]), t(&[1.2, 0.0, -0.5, 1.0, 0.0]));
        let (loss, st) = value_loss(v.as_tensor(), &old, &ret, Some(0.2)).unwrap();
        assert!((st.loss - 0.325).abs() < 1e-12, "{st:?}");
        assert!((st.clip_frac - 0.4).abs() < 1e-12);
        let g = loss.backward().unwrap().get(v.as_tensor()).unwrap().to_vec1::<f64>().unwrap();
        for (a, b) in g.iter().zip([0.0, 0.2, 0.0, -0.2, 0.12]) {
            assert!((a - b).abs() < 1e-12, "{g:?}");
        }
        // Unclipped: ½ · (0.04 + 1 + 0.25 + 1 + 0.36) / 5 = 0.265, gradient (V − R)/5 everywhere.
        let (loss, st) = value_loss(v.as_tensor(), &old, &ret, None).unwrap();
        assert!((st.loss - 0.265).abs() < 1e-12 && st.clip_frac == 0.0, "{st:?}");
        let g = loss.backward().unwrap().get(v.as_tensor()).unwrap().to_vec1::<f64>().unwrap();
        for (a, b) in g.iter().zip([-0.04, 0.2, 0.1, -0.2, 0.12]) {
            assert!((a - b).abs() < 1e-12, "{g:?}");
        }
    }

    #[test]
    fn explained_variance_by_hand() {
        // V = [1, 2, 3], R = [1, 2, 4]: R − V = [0, 0, 1], Var = 2/9; Var(R) = 14/9
        // (mean 7/3, deviations −4/3, −1/3, 5/3): EV = 1 − (2/9)/(14/9) = 6/7.
        let ev = explained_variance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 4.0]).unwrap();
        assert!((ev - 6.0 / 7.0).abs() < 1e-12, "{ev}");
        // exact values: 1; a constant: 0; worse than a constant: < 0
        assert_eq!(explained_variance(&[1.0, 2.0], &[1.0, 2.0]), Some(1.0));
        assert!(explained_variance(&[5.0, 5.0], &[1.0, 2.0]).unwrap().abs() < 1e-12);
        // V = [2, 1], R = [1, 2]: Var(R − V) = Var([−1, 1]) = 1, Var(R) = 1/4: 1 − 4 = −3
        assert!((explained_variance(&[2.0, 1.0], &[1.0, 2.0]).unwrap() + 3.0).abs() < 1e-12);
        // returns that do not vary explain nothing: undefined
        assert_eq!(explained_variance(&[0.0, 1.0], &[1.0, 1.0]), None);
        assert_eq!(explained_variance(&[], &[]), None);
    }
}
