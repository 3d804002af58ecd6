//! Tests of `metrics.rs`: the file's lines, torn tails, resume, and the scalars.

use super::*;

fn m(i: u64) -> IterationMetrics {
    IterationMetrics {
        iteration: i,
        env_steps: 100 * (i + 1),
        reward_mean: i as f64 / 10.0,
        eval_success: i.is_multiple_of(2).then_some(0.5),
        ..Default::default()
    }
}

#[test]
fn write_read_resume() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("run/metrics.jsonl");
    let mut w = MetricsWriter::open(&p).unwrap();
    for i in 0..5 {
        w.append(&m(i)).unwrap();
    }
    // every line is complete on disk without closing the writer
    assert_eq!(read_metrics(&p).unwrap(), (0..5).map(m).collect::<Vec<_>>());
    drop(w);
    // a torn last line is skipped
    let mut f = OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"{\"iteration\": 5, \"env_st").unwrap();
    assert_eq!(read_metrics(&p).unwrap().len(), 5);
    // resume after iteration 2: iterations 3, 4 and the torn line go
    let mut w = MetricsWriter::resume(&p, 2).unwrap();
    w.append(&m(3)).unwrap();
    let it: Vec<u64> = read_metrics(&p).unwrap().iter().map(|x| x.iteration).collect();
    assert_eq!(it, vec![0, 1, 2, 3]);
    // a missing field reads as its default; a bad middle line is named
    std::fs::write(&p, "{\"iteration\": 1}\nnot json\n{\"iteration\": 2}\n").unwrap();
    let e = read_metrics(&p).unwrap_err().to_string();
    assert!(e.contains("metrics.jsonl:2"), "{e}");
}

/// Append the first 20 bytes of `m`'s line to `p`: what a writer killed mid-line leaves.
fn tear(p: &Path, m: &IterationMetrics) {
    let line = serde_json::to_string(m).unwrap();
    OpenOptions::new().append(true).open(p).unwrap().write_all(&line.as_bytes()[..20]).unwrap();
}

#[test]
fn open_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("metrics.jsonl");
    let mut w = MetricsWriter::open(&p).unwrap();
    w.append(&m(0)).unwrap();
    drop(w);
    tear(&p, &m(1));
    // Without the cut, iteration 2 would be glued onto the torn line and lost with it.
    let mut w = MetricsWriter::open(&p).unwrap();
    w.append(&m(2)).unwrap();
    assert_eq!(read_metrics(&p).unwrap(), vec![m(0), m(2)]);
    assert!(std::fs::read_to_string(&p).unwrap().ends_with("}\n"));
}

#[test]
fn the_iteration_0_line_holds_only_the_starting_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("metrics.jsonl");
    let mut w = MetricsWriter::open(&p).unwrap();
    let base = IterationMetrics { eval_success: Some(0.25), eval_reward: Some(-0.5), wall_secs: 3.0, ..m(0) };
    w.append(&base).unwrap();
    w.append(&m(1)).unwrap();
    drop(w);
    let text = std::fs::read_to_string(&p).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let mut keys: Vec<&str> = first.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["env_steps", "episodes", "eval_reward", "eval_success", "iteration", "wall_secs"]);
    // It reads back (the training fields as their defaults), and so do later lines in full.
    let back = read_metrics(&p).unwrap();
    assert_eq!(back[0], base);
    assert_eq!(back[1], m(1));
    // A resume rewrites it the same way.
    MetricsWriter::resume(&p, 1).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
}

/// Everything logged at WARN while `f` runs.
fn warnings_of(f: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    tracing::subscriber::with_default(sub, f);
    let text = buf.lock().unwrap().clone();
    String::from_utf8(text).unwrap()
}

#[test]
fn resume_warns_of_the_torn_line_it_drops() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("metrics.jsonl");
    let mut w = MetricsWriter::open(&p).unwrap();
    w.append(&m(1)).unwrap();
    w.append(&m(2)).unwrap();
    drop(w);
    tear(&p, &m(3));
    let logged = warnings_of(|| drop(MetricsWriter::resume(&p, 5).unwrap()));
    assert!(logged.contains("dropped a torn last line"), "{logged}");
    assert_eq!(read_metrics(&p).unwrap(), vec![m(1), m(2)]);
    // Nothing torn, nothing said.
    assert_eq!(warnings_of(|| drop(MetricsWriter::resume(&p, 5).unwrap())), "");
    // Iterations past the checkpoint resumed from are said to be lost, then dropped.
    let logged = warnings_of(|| drop(MetricsWriter::resume(&p, 1).unwrap()));
    assert!(logged.contains("iteration 2 ran after the last checkpoint (iteration 1)"), "{logged}");
    assert_eq!(read_metrics(&p).unwrap(), vec![m(1)]);
}

#[test]
fn a_non_finite_value_written_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("metrics.jsonl");
    let mut w = MetricsWriter::open(&p).unwrap();
    w.append(&IterationMetrics { iteration: 1, grad_norm: f64::NAN, kl: f64::INFINITY, ..m(1) }).unwrap();
    w.append(&m(2)).unwrap();
    assert!(std::fs::read_to_string(&p).unwrap().contains("null"), "serde_json writes NaN as null");
    let back = read_metrics(&p).unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!((back[0].grad_norm, back[0].kl, back[0].reward_mean), (0.0, 0.0, 0.1));
    MetricsWriter::resume(&p, 2).unwrap();
}

#[test]
fn loss_stats_are_token_weighted() {
    let a = LossStats { kl: 1.0, tokens: 1, ..Default::default() };
    let b = LossStats { kl: 4.0, tokens: 3, ..Default::default() };
    let s = mean_loss_stats(&[a, b]);
    assert_eq!((s.kl, s.tokens), (13.0 / 4.0, 4));
    assert_eq!(mean_loss_stats(&[]), LossStats::default());
}

#[test]
fn the_time_split_says_what_a_background_collection_waited() {
    let mut x = m(3);
    (x.rollout_secs, x.policy_secs, x.env_wait_secs, x.update_secs) = (0.2, 0.8, 0.3, 1.0);
    assert_eq!(x.time_split(), "collect 0.2s (policy 0.8s, env wait 0.3s) update 1.0s");
    // at bound 1 the parts (the whole background collection) may exceed the wait: the
    // collection's own time is said beside them
    x.staleness = Some(1);
    assert_eq!(
        x.time_split(),
        "waited 0.2s for the background collection (1.1s: policy 0.8s, env wait 0.3s) update 1.0s"
    );
    // the first iteration at bound 1 is collected in the foreground, with the current weights
    x.staleness = Some(0);
    assert_eq!(x.time_split(), "collect 0.2s (policy 0.8s, env wait 0.3s) update 1.0s");
}
