//! How well a judge agrees with a task's own success check, over episodes where both gave
//! a verdict: the check is the truth, the judge's SUCCESS the positive prediction.

use serde::Serialize;

/// The 2×2 table of (judge, check) verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Agreement {
    /// Judge SUCCESS, check success.
    pub tp: usize,
    /// Judge SUCCESS, check failure.
    pub fp: usize,
    /// Judge FAILURE, check success.
    pub fn_: usize,
    /// Judge FAILURE, check failure.
    pub tn: usize,
}

impl Agreement {
    /// Count one episode.
    pub fn add(&mut self, judge: bool, check: bool) {
        match (judge, check) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, true) => self.fn_ += 1,
            (false, false) => self.tn += 1,
        }
    }

    /// Episodes counted.
    pub fn n(&self) -> usize {
        self.tp + self.fp + self.fn_ + self.tn
    }

    /// tp / (tp + fp): of the episodes the judge passed, the share the check passed.
    pub fn precision(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fp)
    }

    /// tp / (tp + fn): of the episodes the check passed, the share the judge passed.
    pub fn recall(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fn_)
    }

    /// Observed agreement p_o = (tp + tn) / n.
    pub fn observed(&self) -> Option<f64> {
        ratio(self.tp + self.tn, self.n())
    }

    /// Chance agreement p_e = P(judge yes)·P(check yes) + P(judge no)·P(check no), from
    /// the margins.
    fn chance(&self) -> Option<f64> {
        let n = self.n() as f64;
        (n > 0.0).then(|| {
            let (jy, cy) = ((self.tp + self.fp) as f64 / n, (self.tp + self.fn_) as f64 / n);
            jy * cy + (1.0 - jy) * (1.0 - cy)
        })
    }

    /// Cohen's κ = (p_o − p_e) / (1 − p_e); undefined (None) when p_e = 1 (both raters
    /// gave one answer only).
    pub fn kappa(&self) -> Option<f64> {
        let (po, pe) = (self.observed()?, self.chance()?);
        (pe < 1.0).then(|| (po - pe) / (1.0 - pe))
    }

    /// A 95 % interval for κ from its asymptotic standard error (Cohen 1960):
    /// SE = √(p_o (1 − p_o) / (n (1 − p_e)²)), κ ± 1.96·SE, clipped to [−1, 1].
    pub fn kappa_ci95(&self) -> Option<(f64, f64)> {
        let (k, po, pe) = (self.kappa()?, self.observed()?, self.chance()?);
        let se = (po * (1.0 - po) / (self.n() as f64 * (1.0 - pe).powi(2))).sqrt();
        Some(((k - 1.96 * se).max(-1.0), (k + 1.96 * se).min(1.0)))
    }
}

fn ratio(a: usize, b: usize) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_match_hand_values() {
        // tp 40, fp 10, fn 5, tn 45 (n 100): p_o = 0.85; judge yes 0.5, check yes 0.45:
        // p_e = 0.5·0.45 + 0.5·0.55 = 0.5; κ = 0.35 / 0.5 = 0.7;
        // SE = √(0.85·0.15 / (100·0.25)) = √0.0051 = 0.0714143; CI 0.7 ± 0.1399720.
        let a = Agreement { tp: 40, fp: 10, fn_: 5, tn: 45 };
        assert_eq!(a.precision(), Some(0.8));
        assert!((a.recall().unwrap() - 40.0 / 45.0).abs() < 1e-12);
        assert!((a.kappa().unwrap() - 0.7).abs() < 1e-12);
        let (lo, hi) = a.kappa_ci95().unwrap();
        assert!((lo - 0.560_028_0).abs() < 1e-6 && (hi - 0.839_972_0).abs() < 1e-6, "{lo} {hi}");
        // One answer only from both: κ undefined; nothing counted: nothing defined.
        assert_eq!(Agreement { tp: 3, ..Default::default() }.kappa(), None);
        assert_eq!(Agreement::default().precision(), None);
        // Perfect disagreement on a balanced table: κ = −1.
        assert_eq!(Agreement { fp: 2, fn_: 2, ..Default::default() }.kappa(), Some(-1.0));
    }
}
