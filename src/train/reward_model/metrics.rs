//! How well a reward model's probabilities separate and match the outcomes: accuracy at
//! ½, ROC AUC (a rank statistic), Brier score, expected calibration error, and the
//! reliability bins behind the plot.

use serde::{Deserialize, Serialize};

/// Bins of the reliability plot and the ECE.
pub const BINS: usize = 10;

/// One bin of predicted probability, `[lo, hi)` (the last one includes 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// Lower edge.
    pub lo: f64,
    /// Upper edge.
    pub hi: f64,
    /// Episodes whose prediction falls in the bin.
    pub count: usize,
    /// Their mean predicted probability (NaN-free: 0 for an empty bin).
    pub mean_predicted: f64,
    /// The fraction of them that succeeded (0 for an empty bin).
    pub observed: f64,
}

/// Held-out metrics of a reward model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardMetrics {
    /// Episodes scored.
    pub episodes: usize,
    /// Of them successes.
    pub successes: usize,
    /// Fraction classified right at threshold ½.
    pub accuracy: f64,
    /// Area under the ROC curve: P(a random success scores above a random failure),
    /// ties counting ½. `None` with only one class.
    pub auc: Option<f64>,
    /// Mean (p − y)².
    pub brier: f64,
    /// Expected calibration error over [`BINS`] equal-width bins: Σ_b (n_b / n)·|p̄_b − ȳ_b|.
    pub ece: f64,
    /// The bins.
    pub bins: Vec<ReliabilityBin>,
}

/// ROC AUC by the Mann–Whitney rank statistic:
///
/// ```text
/// AUC = (Σ_{i: y_i = 1} rank_i − n₊(n₊ + 1)/2) / (n₊ · n₋)      (ties get their mean rank)
/// ```
///
/// `None` when one class is missing.
pub fn auc(p: &[f64], y: &[bool]) -> Option<f64> {
    let pos = y.iter().filter(|&&b| b).count();
    let neg = y.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && p[order[j + 1]] == p[order[i]] {
            j += 1;
        }
        // ranks i+1 ..= j+1 share their mean
        let mean_rank = (i + j + 2) as f64 / 2.0;
        rank_sum += mean_rank * order[i..=j].iter().filter(|&&k| y[k]).count() as f64;
        i = j + 1;
    }
    let (pos, neg) = (pos as f64, neg as f64);
    Some((rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

/// Every metric of predictions `p` against outcomes `y`.
pub fn reward_metrics(p: &[f64], y: &[bool]) -> RewardMetrics {
    let n = p.len().max(1) as f64;
    let t = |b: bool| if b { 1.0 } else { 0.0 };
    let accuracy = p.iter().zip(y).filter(|(&p, &y)| (p >= 0.5) == y).count() as f64 / n;
    let brier = p.iter().zip(y).map(|(&p, &y)| (p - t(y)).powi(2)).sum::<f64>() / n;
    let mut bins: Vec<ReliabilityBin> = (0..BINS)
        .map(|b| ReliabilityBin {
            lo: b as f64 / BINS as f64,
            hi: (b + 1) as f64 / BINS as f64,
            count: 0,
            mean_predicted: 0.0,
            observed: 0.0,
        })
        .collect();
    for (&p, &y) in p.iter().zip(y) {
        let b = ((p * BINS as f64).floor().max(0.0) as usize).min(BINS - 1);
        bins[b].count += 1;
        bins[b].mean_predicted += p;
        bins[b].observed += t(y);
    }
    let mut ece = 0.0;
    for b in bins.iter_mut().filter(|b| b.count > 0) {
        b.mean_predicted /= b.count as f64;
        b.observed /= b.count as f64;
        ece += b.count as f64 / n * (b.mean_predicted - b.observed).abs();
    }
    RewardMetrics {
        episodes: p.len(),
        successes: y.iter().filter(|&&b| b).count(),
        accuracy,
        auc: auc(p, y),
        brier,
        ece,
        bins,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_counts_ordered_pairs_and_half_ties() {
        // successes score 0.9, 0.4, 0.6; failures 0.1, 0.4, 0.7.
        // Pairs (s, f) with s > f: 0.9>{0.1,0.4,0.7}=3, 0.4>{0.1}=1 (tie with 0.4: ½),
        // 0.6>{0.1,0.4}=2 → (3 + 1.5 + 2) / 9 = 6.5 / 9
        let p = [0.9, 0.4, 0.6, 0.1, 0.4, 0.7];
        let y = [true, true, true, false, false, false];
        assert!((auc(&p, &y).unwrap() - 6.5 / 9.0).abs() < 1e-12);
        assert_eq!(auc(&[0.2, 0.8], &[false, true]), Some(1.0));
        assert_eq!(auc(&[0.2, 0.8], &[true, false]), Some(0.0));
        assert_eq!(auc(&[0.5, 0.5], &[true, false]), Some(0.5));
        assert_eq!(auc(&[0.2, 0.8], &[true, true]), None);
    }

    #[test]
    fn brier_ece_and_bins_by_hand() {
        // p = [0.05, 0.15, 0.95, 0.95], y = [0, 1, 1, 0]
        // Brier = (0.0025 + 0.7225 + 0.0025 + 0.9025) / 4 = 0.4075
        // bins: [0,.1): p̄ .05 ȳ 0; [.1,.2): p̄ .15 ȳ 1; [.9,1]: p̄ .95 ȳ .5
        // ECE = ¼·.05 + ¼·.85 + ½·.45 = 0.45; accuracy: 0.05→0 ✓, 0.15→0 ✗, .95→1 ✓, .95→1 ✗ = ½
        let m = reward_metrics(&[0.05, 0.15, 0.95, 0.95], &[false, true, true, false]);
        assert!((m.brier - 0.4075).abs() < 1e-12, "{}", m.brier);
        assert!((m.ece - 0.45).abs() < 1e-12, "{}", m.ece);
        assert_eq!(m.accuracy, 0.5);
        assert_eq!(m.bins.iter().map(|b| b.count).collect::<Vec<_>>(), vec![1, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert!((m.bins[9].observed - 0.5).abs() < 1e-12);
        assert_eq!(reward_metrics(&[1.0], &[true]).bins[9].count, 1);
    }
}
