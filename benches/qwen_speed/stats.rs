//! The process's memory and the medians of repeated timings.

/// `VmHWM` (peak resident set) and `VmRSS` in MiB.
pub fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / 1024.0
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Reset the peak-RSS counter to the current RSS (Linux `clear_refs` 5).
pub fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").ok();
}

/// The median (`NaN` of nothing).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}
