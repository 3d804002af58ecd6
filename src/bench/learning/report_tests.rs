//! The report's figures by hand: spreads over clone × RL cells, gains paired with each
//! cell's own clone, the pooled test success with its Wilson interval, episodes compared
//! one by one with their sign test.

use super::*;
use crate::bench::learning::{SftFigures, TestResult};

fn plan() -> Plan {
    toml::from_str(
        r#"
env_steps = 1000
seeds = [0]
clone_seeds = [0, 1]
algos = ["grpo", "ppo"]
[[tasks]]
name = "t"
config = "x.toml"
"#,
    )
    .unwrap()
}

/// A test result of 10 episodes on task `t`: the seeds `won` (offsets from the first).
fn test(won: &[u64]) -> TestResult {
    TestResult {
        successes: won.len(),
        episodes: 10,
        first_seed: 2_000_000,
        per_task: 10,
        won: Some(BTreeMap::from([("t".to_string(), won.iter().map(|s| 2_000_000 + s).collect())])),
    }
}

/// A cell from clone `k` with `wins` of 10 test episodes (the first `wins` seeds).
fn cell(algo: &str, k: u64, seed: u64, curve: &[(u64, f64)], wins: usize) -> Cell {
    Cell {
        task: "t".into(),
        algo: algo.into(),
        seed,
        clone_seed: Some(k),
        curve: curve.to_vec(),
        final_success: curve.last().unwrap().1,
        env_steps: curve.last().unwrap().0,
        wall_secs: 10.0 * (k + 1) as f64,
        test: Some(test(&(0..wins as u64).collect::<Vec<_>>())),
        sft: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Clones c0 and c1 test at 0.2 and 0.6; ppo from c0 at 0.5, from c1 at 0.9: gains +0.3
/// and +0.3, each against its own clone (against the clones' mean 0.4 they would be +0.1
/// and +0.5). Test rates 0.5, 0.9: mean 0.7, sd sqrt((0.2² + 0.2²)/1) = 0.2828. Pooled
/// 14/20 = 0.7, Wilson 95 %: centre (0.7 + 1.96²/40)/(1 + 1.96²/20) = 0.6678, half-width
/// 1.96·sqrt(0.21/20 + 1.96²/1600)/(1 + 1.96²/20) = 0.1868 → [0.4810, 0.8545].
/// Validation: ppo finals 0.9 and 0.7; only the c0 cell reaches 0.8 (at 600 steps).
#[test]
fn rows_by_hand() {
    let mut more = cell(MORE_SFT, 0, 0, &[(0, 0.3)], 3);
    more.sft = Some(SftFigures {
        epochs: 7,
        start_epoch: 2,
        secs_per_epoch: Some(1.0),
        demo_episodes: 4,
        demo_env_steps: 9,
        basis: None,
    });
    let cells = vec![
        cell(CLONE, 0, 0, &[(0, 0.2)], 2),
        cell(CLONE, 1, 1, &[(0, 0.4)], 6),
        cell("ppo", 0, 0, &[(0, 0.2), (600, 0.85), (1000, 0.9)], 5),
        cell("ppo", 1, 0, &[(0, 0.4), (500, 0.5), (1000, 0.7)], 9),
        more,
    ];
    let rows = rows(&plan(), &cells);
    let names: Vec<&str> = rows.iter().map(|r| r.algo.as_str()).collect();
    assert_eq!(names, ["clone", "ppo", "more-sft"], "grpo has no cell");
    let r = &rows[1];
    assert_eq!((r.cells, r.reached, r.steps_to_target), (2, 1, Some(600)));
    let t = r.test.unwrap();
    assert!(
        close(t.mean, 0.7) && close(t.sd, 0.08f64.sqrt()) && close(t.min, 0.5) && close(t.max, 0.9),
        "{t:?}"
    );
    let g = r.gain.unwrap();
    assert_eq!(g.n, 2);
    assert!(close(g.mean, 0.3) && close(g.min, 0.3) && close(g.max, 0.3), "{g:?}");
    let p = r.test_pooled.unwrap();
    assert_eq!((p.successes, p.episodes), (14, 20));
    assert!((p.ci95.0 - 0.4810).abs() < 1e-4 && (p.ci95.1 - 0.8545).abs() < 1e-4, "{p:?}");
    assert!(close(r.validation.mean, 0.8) && close(r.wall_secs, 15.0));
    // The baseline pairs with clone c0 only: 0.3 − 0.2.
    let m = &rows[2];
    assert!(close(m.gain.unwrap().mean, 0.1) && m.gain.unwrap().n == 1);
    assert_eq!((m.extra_epochs, m.env_steps, m.demo_steps), (Some((7, 7)), 9.0, true));
    assert!(rows[0].gain.is_none(), "the clone is not compared with itself");
    // Episode by episode (each cell won its first seeds): ppo c0 won 3 more than its clone
    // and c1 3 more, none fewer: 6/0, p = 2 · ½⁶; against c0's baseline 5 vs 3 wins: 2/0,
    // p = 2 · ¼.
    let pc = r.paired_clone.unwrap();
    assert_eq!((pc.won, pc.lost), (6, 0));
    assert!(close(pc.p, 0.03125), "{pc:?}");
    let pm = r.paired_more_sft.unwrap();
    assert_eq!((pm.won, pm.lost), (2, 0));
    assert!(close(pm.p, 0.5), "{pm:?}");
    assert_eq!(m.paired_clone.map(|p| (p.won, p.lost)), Some((1, 0)));
    assert!(m.paired_more_sft.is_none() && rows[0].paired_clone.is_none(), "nothing against itself");

    let obs = BTreeMap::from([("t".to_string(), "pixels+dom".to_string())]);
    let md = markdown(&plan(), &rows, &cells, &obs);
    assert!(md.contains("**t** — observation: pixels+dom"), "{md}");
    assert!(
        md.contains("| ppo | 2 | 0.70 ± 0.28 [0.50–0.90] | 0.70 [0.48, 0.85] (14/20) | 0.80 | +30 pts [+30, +30]; +6/−0 episodes, p 0.031 | +2/−0 episodes, p 0.500 | 600 (1/2) | 1000 | 15 s |"),
        "{md}"
    );
    assert!(md.contains("| clone | 2 | 0.40 ± 0.28 [0.20–0.60] |"), "{md}");
    assert!(md.contains("| more-sft (+7 epochs) | 1 | 0.30 |"), "{md}");
    assert!(md.contains("| n/a | 9 (demos) |"), "no RL, no env steps to the target: {md}");
    assert!(md.contains("seeds 2000000..2000009 of every task") && md.contains("final policy"), "{md}");
    assert!(md.contains("the clone trained N more epochs on its demonstrations"), "{md}");

    let dir = tempfile::tempdir().unwrap();
    let plots = write(&plan(), &cells, dir.path()).unwrap();
    assert_eq!(plots.len(), 1);
    assert!(std::fs::metadata(&plots[0]).unwrap().len() > 1000);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(json["rows"][1]["test_pooled"]["successes"], 14);
    assert_eq!(json["test_policy"], "final");
}

/// Cells of benchmarks made before the test split (no `test`, no clone seed) still
/// report: validation as before, the test columns empty.
#[test]
fn cells_without_a_test_result_still_report() {
    let old = r#"{"task": "t", "algo": "ppo", "seed": 0, "curve": [[0, 0.2], [100, 0.5]],
                  "final_success": 0.5, "env_steps": 100, "wall_secs": 3.0}"#;
    let c: Cell = serde_json::from_str(old).unwrap();
    assert_eq!((c.clone_seed, &c.test), (None, &None));
    let rows = rows(&plan(), &[c]);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].test.is_none() && rows[0].gain.is_none() && close(rows[0].validation.mean, 0.5));
    let md = markdown(&plan(), &rows, &[], &BTreeMap::new());
    assert!(md.contains("| ppo | 1 | — | — | 0.50 | — | — |"), "{md}");
}

/// The sign test against exact binomial tails (Python's fractions), and episodes compared
/// only where both cells ran the same seeds and recorded them.
#[test]
fn episodes_compare_one_by_one() {
    for (a, b, p) in
        [(0, 0, 1.0), (6, 0, 0.03125), (5, 1, 0.21875), (3, 3, 1.0), (1500, 1400, 0.06598734966518381)]
    {
        assert!((sign_test(a, b) - p).abs() < 1e-9, "{a} {b}: {} against {p}", sign_test(a, b));
    }
    let (x, y) = (sign_test(600, 400), 2.7284641560660184e-10);
    assert!(((x - y) / y).abs() < 1e-6, "{x} against {y}");
    assert_eq!(test(&[1, 2, 3]).discordant(&test(&[2, 5])), Some((2, 1)));
    let mut other_seeds = test(&[2, 5]);
    other_seeds.first_seed = 3_000_000;
    assert_eq!(test(&[1]).discordant(&other_seeds), None);
    let older = TestResult { won: None, ..test(&[1]) };
    assert_eq!(test(&[1]).discordant(&older), None, "a cell made before episodes were kept");
}
