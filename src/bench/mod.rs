//! Benchmarks that print figures (never asserted in tests).

pub mod env_bench;
pub mod harness;
pub mod learning;
pub mod markdown;
pub mod set_stats;

/// Median and 90th percentile of a sample (ms).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
}

impl Latency {
    /// Summarise a sample; zero for an empty one.
    pub fn of(xs: &[f64]) -> Latency {
        if xs.is_empty() {
            return Latency::default();
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Latency { median: q(0.5), p90: q(0.9) }
    }
}
