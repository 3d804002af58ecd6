//! Running the trainer in a test, and reading what the run wrote.

use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Runs `cfg` into `dir` to its end (`resume`: from the run's latest checkpoint), as
/// `guirl train` does; panics on an error.
pub async fn train(cfg: TrainConfig, dir: &Path, resume: bool) {
    let mut t = Trainer::new(cfg, dir.to_path_buf(), resume, false).unwrap();
    t.run(Arc::new(AtomicBool::new(false))).await.unwrap();
}

/// The run's `metrics.jsonl`, a value per iteration, as written.
pub fn metrics_lines(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
