//! What a bench measured: per-task statistics from the settled journal rows, the
//! all-tasks row, and the reproducibility block; written as `report.json`, `report.md`
//! and `errors.md`.

use super::journal::ResultRow;
use crate::env::EpisodeStatus;
use crate::train::seeds::TEST_SEEDS;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which split seeds `seed..seed+n` belong to: figures are published on the test split
/// (from [`TEST_SEEDS`]), which no training config may name.
pub fn split_name(seed: u64, n: u64) -> &'static str {
    if seed >= TEST_SEEDS {
        "test split"
    } else if seed + n <= TEST_SEEDS {
        "not the test split: training configs may use these seeds"
    } else {
        "partly the test split"
    }
}

/// The Wilson score interval for `k` successes in `n` trials at z (1.96 for 95 %):
/// `(p̂ + z²/2n ± z·sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)`. Unlike the Wald interval
/// `p̂ ± z·sqrt(p̂(1−p̂)/n)`, it is not zero-width at 0 % or 100 %. `(0, 1)` for n = 0.
pub fn wilson(k: usize, n: usize, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    let d = 1.0 + z2 / n;
    (((centre - half) / d).max(0.0), ((centre + half) / d).min(1.0))
}

/// z for a two-sided 95 % interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// One task's (or all tasks') figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    /// Task id, or `[ALL TASKS]`.
    pub task: String,
    /// Seeds run (settled episodes).
    pub episodes: usize,
    /// Episodes the agent completed: `episodes` minus those still `env_error` after the
    /// re-runs and those with a `policy_error`. Rates and means are over these.
    pub completed: usize,
    /// Every `env_error` attempt, re-run ones included (none is counted as the agent's).
    pub env_errors: usize,
    /// Seeds still `env_error` after the re-runs (left out).
    pub env_errors_final: usize,
    /// Episodes that ended with the policy's error (left out).
    pub policy_errors: usize,
    /// Episodes whose judge reward could not be had (`judge_error`, left out).
    #[serde(default)]
    pub judge_errors: usize,
    /// Successful episodes.
    pub successes: usize,
    /// successes / completed; `None` (`null`) when nothing was completed.
    pub success_rate: Option<f64>,
    /// Wilson 95 % interval of the success rate.
    pub success_ci95: (f64, f64),
    /// Mean reward over completed episodes; `None` when nothing was completed.
    pub mean_reward: Option<f64>,
    /// Its standard error (sample sd / √n).
    pub reward_se: f64,
    /// Mean steps over completed episodes.
    pub mean_steps: f64,
    /// Median step latency (policy + environment), ms.
    pub step_ms_p50: f64,
    /// 95th percentile step latency, ms.
    pub step_ms_p95: f64,
    /// Steps whose action could not be executed (or answer not parsed).
    pub invalid_steps: usize,
}

/// The figures of a set of settled rows (and of every attempt, for the env-error count).
pub fn task_stats(task: &str, settled: &[&ResultRow], attempts: &[&ResultRow]) -> TaskStats {
    let done: Vec<&&ResultRow> = settled.iter().filter(|r| !r.status.is_infrastructure_failure()).collect();
    let n = done.len();
    let successes = done.iter().filter(|r| r.status == EpisodeStatus::Success).count();
    let rewards: Vec<f64> = done.iter().map(|r| r.reward).collect();
    // (fold from +0.0: an empty f64 sum is −0.0, which prints as "-0.000")
    let sum = |xs: &mut dyn Iterator<Item = f64>| xs.fold(0.0, |a, b| a + b);
    let mean_reward = sum(&mut rewards.iter().copied()) / n.max(1) as f64;
    // Sample standard deviation (Bessel), as a standard error of a mean wants.
    let sd = (sum(&mut rewards.iter().map(|r| (r - mean_reward).powi(2)))
        / n.saturating_sub(1).max(1) as f64)
        .sqrt();
    let mut lat: Vec<f64> = done.iter().flat_map(|r| r.step_ms.iter().copied()).collect();
    lat.sort_by(f64::total_cmp);
    TaskStats {
        task: task.to_string(),
        episodes: settled.len(),
        completed: n,
        env_errors: attempts.iter().filter(|r| r.status == EpisodeStatus::EnvError).count(),
        env_errors_final: settled.iter().filter(|r| r.status == EpisodeStatus::EnvError).count(),
        policy_errors: settled.iter().filter(|r| r.status == EpisodeStatus::PolicyError).count(),
        judge_errors: settled.iter().filter(|r| r.status == EpisodeStatus::JudgeError).count(),
        successes,
        success_rate: (n > 0).then(|| successes as f64 / n as f64),
        success_ci95: wilson(successes, n, Z95),
        mean_reward: (n > 0).then_some(mean_reward),
        reward_se: if n < 2 { 0.0 } else { sd / (n as f64).sqrt() },
        mean_steps: sum(&mut done.iter().map(|r| r.steps as f64)) / n.max(1) as f64,
        step_ms_p50: percentile(&lat, 0.5),
        step_ms_p95: percentile(&lat, 0.95),
        invalid_steps: done.iter().map(|r| r.invalid_steps as usize).sum(),
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Everything needed to say what was run, so another machine can run it again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reproducibility {
    /// guirl's version.
    pub guirl_version: String,
    /// The commit guirl was built from (empty if unknown).
    pub git_hash: String,
    /// Browser name and version, from the WebDriver session.
    pub browser: String,
    /// chromedriver's version.
    pub chromedriver: String,
    /// Whether Chromium's sandbox was on (`on (as user guirlbrowser)`, or `off: <why>`);
    /// empty in reports written before it was recorded.
    #[serde(default)]
    pub sandbox: String,
    /// Operating system.
    pub os: String,
    /// The policy as given (`oracle`, a checkpoint path, `openai:MODEL@URL`).
    pub policy: String,
    /// The checkpoint folder a checkpoint policy was loaded from (a run folder names its
    /// best or latest, which move on); absent for other policies and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// What the policy reports about itself (model id, prompt hash, sampling, ...).
    pub policy_info: serde_json::Value,
    /// What reaches the policy (`pixels` or `pixels+dom`; `n/a`
    /// for a scripted policy); empty in reports written before it was recorded.
    #[serde(default)]
    pub observation: String,
    /// First seed; episode i of every task uses seed + i.
    pub seed: u64,
    /// Episodes per task.
    pub episodes_per_task: u64,
    /// The environment options (max steps, strict actions, wall clock).
    pub env: serde_json::Value,
    /// When the bench started and last wrote its report (UTC, RFC 3339).
    pub started: String,
    /// When this report was written.
    pub written: String,
}

/// `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// One row per task, in the bench's order.
    pub tasks: Vec<TaskStats>,
    /// All episodes of all tasks pooled.
    pub all: TaskStats,
    /// Mean of the per-task success rates (each task weighs the same); `None` (`null`)
    /// unless every task of the bench has a rate (see `unrated`).
    pub macro_success_rate: Option<f64>,
    /// The bench's tasks with no rate: no episode the agent completed (not run, or every
    /// episode an env, policy or judge error).
    #[serde(default)]
    pub unrated: Vec<String>,
    /// Tasks asked for but left out of the bench, with why (no oracle).
    #[serde(default)]
    pub skipped: Vec<(String, String)>,
    /// The bench's tasks whose first page did not load in the last session, with the
    /// error: what they had not run was not run (`--resume` tries them again).
    #[serde(default)]
    pub unreachable: Vec<(String, String)>,
    /// Wall-clock of the bench's runs (resumed parts added), seconds.
    pub seconds: f64,
    /// Episode attempts per second over that time.
    pub episodes_per_s: f64,
    /// What was run.
    pub reproducibility: Reproducibility,
}

impl Report {
    /// Build from every journal row (all attempts), in `order` of tasks.
    pub fn build(order: &[String], rows: &[ResultRow], repro: Reproducibility, seconds: f64) -> Report {
        let (settled, _) = super::journal::settle(rows);
        let mut tasks = Vec::new();
        for t in order {
            let s: Vec<&ResultRow> = settled.iter().filter(|r| &r.task == t).collect();
            let a: Vec<&ResultRow> = rows.iter().filter(|r| &r.task == t).collect();
            // (a task with no episode yet keeps its row: n/a, not left out)
            tasks.push(task_stats(t, &s, &a));
        }
        let all =
            task_stats("[ALL TASKS]", &settled.iter().collect::<Vec<_>>(), &rows.iter().collect::<Vec<_>>());
        let rate = |t: &String| tasks.iter().find(|s| &s.task == t).and_then(|s| s.success_rate);
        let unrated: Vec<String> = order.iter().filter(|t| rate(t).is_none()).cloned().collect();
        let rates: Vec<f64> = order.iter().filter_map(rate).collect();
        let macro_success_rate =
            (unrated.is_empty() && !rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
        Report {
            macro_success_rate,
            unrated,
            tasks,
            all,
            skipped: Vec::new(),
            unreachable: Vec::new(),
            seconds,
            episodes_per_s: rows.len() as f64 / seconds.max(1e-9),
            reproducibility: repro,
        }
    }

    /// The report as a Markdown page.
    pub fn markdown(&self) -> String {
        let mut s = String::from("# guirl bench\n\n");
        s.push_str(&format!(
            "Success is over episodes the agent completed; env errors (re-run up to {} times on the same seed) and policy errors are counted apart. Interval: Wilson 95 %.\n\n",
            super::journal::MAX_RERUNS
        ));
        use crate::bench::markdown::Align::{Left, Right};
        let header = [
            ("task", Left),
            ("episodes", Right),
            ("env errors", Right),
            ("policy errors", Right),
            ("success", Right),
            ("95 % CI", Left),
            ("reward ± s.e.", Left),
            ("steps", Right),
            ("p50 ms", Right),
            ("p95 ms", Right),
        ];
        let mut rows = Vec::new();
        for t in self.tasks.iter().chain(std::iter::once(&self.all)) {
            let mut row = vec![
                t.task.clone(),
                t.episodes.to_string(),
                t.env_errors.to_string(),
                t.policy_errors.to_string(),
            ];
            match (t.success_rate, t.mean_reward) {
                (Some(rate), Some(reward)) => row.extend([
                    format!("{rate:.3}"),
                    format!("[{:.3}, {:.3}]", t.success_ci95.0, t.success_ci95.1),
                    format!("{reward:.3} ± {:.3}", t.reward_se),
                    format!("{:.2}", t.mean_steps),
                    format!("{:.1}", t.step_ms_p50),
                    format!("{:.1}", t.step_ms_p95),
                ]),
                // nothing the agent finished: no rate to give
                _ => row.push("n/a".into()),
            }
            rows.push(row);
        }
        s.push_str(&crate::bench::markdown::table(&header, &rows));
        s.push_str(&format!(
            "\nMean of per-task success rates: {}. {} episode attempts in {:.1} s ({:.2} episodes/s).\n",
            self.macro_text(),
            self.all.env_errors + self.all.episodes,
            self.seconds,
            self.episodes_per_s
        ));
        if self.all.judge_errors > 0 {
            // Rare (judge rewards only), so a sentence rather than a column.
            s.push_str(&format!(
                "\n{} episodes had no judge verdict (`judge_error`: the judge was down, slow or gave no \
                 verdict) and are left out like policy errors; see errors.md.\n",
                self.all.judge_errors
            ));
        }
        for (t, why) in &self.skipped {
            s.push_str(&format!("\nSkipped {t}: {why}"));
        }
        for (t, why) in &self.unreachable {
            s.push_str(&format!("\nNot run: {t}: its first page did not load ({why})"));
        }
        let r = &self.reproducibility;
        s.push_str("\n\n## Reproducibility\n\n");
        s.push_str(&format!(
            "- guirl {} (commit {})\n- browser: {}\n- chromedriver: {}\n- sandbox: {}\n- OS: {}\n- policy: `{}`{} {}\n- observation: {}\n- seeds: {}..{} per task ({})\n- env: {}\n- started {}, written {}\n",
            r.guirl_version,
            if r.git_hash.is_empty() { "unknown" } else { &r.git_hash },
            r.browser,
            r.chromedriver,
            if r.sandbox.is_empty() { "not recorded" } else { &r.sandbox },
            r.os,
            r.policy,
            r.checkpoint.as_ref().map(|c| format!(" (checkpoint `{c}`)")).unwrap_or_default(),
            r.policy_info,
            if r.observation.is_empty() { "not recorded" } else { &r.observation },
            r.seed,
            r.seed + r.episodes_per_task.saturating_sub(1),
            split_name(r.seed, r.episodes_per_task),
            r.env,
            r.started,
            r.written
        ));
        s
    }
}

impl Report {
    /// The mean of per-task rates as said: `n/a` with the tasks that have no rate.
    pub fn macro_text(&self) -> String {
        match self.macro_success_rate {
            Some(m) => format!("{m:.3}"),
            None => format!(
                "n/a ({} of {} tasks have no completed episode: {})",
                self.unrated.len(),
                self.tasks.len(),
                self.unrated.join(", ")
            ),
        }
    }

    /// Why the bench does not measure every task it was asked to, if it does not: the
    /// tasks that did not load and those with no completed episode, and what to do.
    pub fn incomplete(&self) -> Option<String> {
        if self.unrated.is_empty() {
            return None;
        }
        let mut why: Vec<String> = Vec::new();
        for t in &self.unrated {
            match self.unreachable.iter().find(|(u, _)| u == t) {
                Some((_, e)) => why.push(format!("{t}: its first page did not load ({e})")),
                None => {
                    let s = self.tasks.iter().find(|s| &s.task == t);
                    let (env, policy, judge) =
                        s.map_or((0, 0, 0), |s| (s.env_errors_final, s.policy_errors, s.judge_errors));
                    why.push(format!(
                        "{t}: no episode the agent completed ({env} env errors after re-runs, {policy} policy errors, {judge} judge errors)"
                    ));
                }
            }
        }
        Some(format!(
            "the bench measured {} of its {} tasks; no rate for {}. Fix the cause (errors.md lists the \
             episodes' errors; `guirl doctor` checks the set-up), then run the same command with --resume: \
             it runs what was not run and the policy's and judge's failed episodes again",
            self.tasks.len() - self.unrated.len(),
            self.tasks.len(),
            why.join("; ")
        ))
    }
}

/// `errors.md`: the tasks whose first page did not load (`unreachable`), then errors
/// grouped by normalized message (numbers, quoted text and hex ids replaced), with the
/// tasks and seeds of each group.
pub fn errors_markdown(rows: &[ResultRow], unreachable: &[(String, String)]) -> String {
    let mut groups: BTreeMap<(String, String), Vec<&ResultRow>> = BTreeMap::new();
    for r in rows {
        let found = [
            ("env_error", r.env_error.as_ref()),
            ("policy_error", r.policy_error.as_ref()),
            ("judge_error", r.judge_error.as_ref()),
            ("invalid action", r.first_action_error.as_ref()),
        ];
        for (kind, msg) in found {
            if let Some(m) = msg {
                groups.entry((kind.to_string(), normalize(m))).or_default().push(r);
            }
        }
    }
    let mut s = String::from("# Errors\n\n");
    if !unreachable.is_empty() {
        s.push_str("## Tasks not run: their first page did not load\n\n");
        for (t, why) in unreachable {
            s.push_str(&format!("- {t}: {why}\n"));
        }
        s.push('\n');
    }
    if groups.is_empty() && unreachable.is_empty() {
        s.push_str("None.\n");
        return s;
    }
    let mut sorted: Vec<_> = groups.into_iter().collect();
    sorted.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
    for ((kind, msg), rs) in sorted {
        // Env errors are re-run: count the episodes, and the attempts when they differ.
        let episodes = rs.iter().map(|r| (&r.task, r.seed)).collect::<std::collections::BTreeSet<_>>().len();
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let count = match rs.len() {
            n if n == episodes => plural(n, "episode"),
            n => format!("{}, {}", plural(episodes, "episode"), plural(n, "attempt")),
        };
        s.push_str(&format!("## {kind} ({count})\n\n```\n{msg}\n```\n\n"));
        let mut by_task: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in &rs {
            let seed = if r.attempt > 0 {
                format!("{} (attempt {})", r.seed, r.attempt)
            } else {
                r.seed.to_string()
            };
            by_task.entry(&r.task).or_default().push(seed);
        }
        for (t, seeds) in by_task {
            s.push_str(&format!("- {t}: seeds {}\n", seeds.join(", ")));
        }
        let example = rs[0];
        let raw = example
            .env_error
            .as_ref()
            .or(example.policy_error.as_ref())
            .or(example.judge_error.as_ref())
            .or(example.first_action_error.as_ref());
        if let Some(raw) = raw {
            s.push_str(&format!("\nExample ({} seed {}): {}\n\n", example.task, example.seed, raw));
        }
    }
    s
}

/// A message with its variable parts replaced, so one failure mode is one group.
pub fn normalize(msg: &str) -> String {
    use std::sync::OnceLock;
    static RES: OnceLock<Vec<(regex::Regex, &'static str)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        [(r#""[^"]*"|'[^']*'"#, "\"…\""), (r"\b[0-9a-fA-F]{8,}\b", "<id>"), (r"\d+(\.\d+)?", "N")]
            .into_iter()
            .map(|(p, r)| (regex::Regex::new(p).expect("static regex"), r))
            .collect()
    });
    let first = msg.lines().next().unwrap_or("").trim();
    let mut s: String = first.chars().take(300).collect();
    for (re, rep) in res {
        s = re.replace_all(&s, *rep).into_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_hand_values() {
        // n = 10, k = 10, z = 1.96: p = 1, centre = 1 + 3.8415/20 = 1.19207,
        // half = 1.96·sqrt(0 + 3.8415/400) = 0.19207, d = 1.38415:
        // lo = (1.19207 − 0.19207)/1.38415 = 0.72247, hi = 1.
        let (lo, hi) = wilson(10, 10, Z95);
        assert!((lo - 0.722_467).abs() < 1e-5, "{lo}");
        assert!((hi - 1.0).abs() < 1e-12, "{hi}");
        // k = 0: the mirror image, (0, 0.27753): not zero-width like Wald.
        let (lo, hi) = wilson(0, 10, Z95);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.277_533).abs() < 1e-5, "{hi}");
        // n = 100, k = 50: centre = 0.5 + 0.019207 = 0.519207, half = 1.96·sqrt(0.0025 +
        // 0.00009604) = 0.099869, d = 1.038415: (0.403832, 0.596168).
        let (lo, hi) = wilson(50, 100, Z95);
        assert!((lo - 0.403_832).abs() < 1e-5, "{lo}");
        assert!((hi - 0.596_168).abs() < 1e-5, "{hi}");
        assert_eq!(wilson(0, 0, Z95), (0.0, 1.0));
    }

    #[test]
    fn messages_normalize_into_one_group() {
        assert_eq!(
            normalize("timed out after 10.5 s waiting for \"#abc\" (session 5f3a9c2e11)"),
            normalize("timed out after 3 s waiting for \"#x\" (session 0a9f3b7c22)")
        );
        assert_ne!(normalize("connection refused"), normalize("timed out after 3 s"));
    }

    #[test]
    fn judge_errors_are_left_out_counted_and_listed() {
        use crate::rollout::{Outcome, Trajectory};
        let failed = Outcome {
            reward: 0.0,
            status: EpisodeStatus::JudgeError,
            steps: 1,
            error: Some("judge m: connection refused".into()),
        };
        let mut t = Trajectory::new("builtin/x", 4, Vec::new(), failed);
        let judged = super::super::journal::ResultRow::of(&t, 0, "set", 0);
        assert_eq!(judged.judge_error.as_deref(), Some("judge m: connection refused"));
        t.seed = 5;
        t.outcome = Outcome { reward: 1.0, status: EpisodeStatus::Success, steps: 1, error: None };
        let ok = super::super::journal::ResultRow::of(&t, 0, "set", 1);
        let r = Report::build(&["builtin/x".to_string()], &[judged.clone(), ok], Default::default(), 1.0);
        assert_eq!((r.all.episodes, r.all.completed, r.all.judge_errors, r.all.successes), (2, 1, 1, 1));
        assert!(r.markdown().contains("1 episodes had no judge verdict"), "{}", r.markdown());
        let e = errors_markdown(&[judged], &[]);
        assert!(e.contains("## judge_error (1 episode)") && e.contains("builtin/x: seeds 4"), "{e}");
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
