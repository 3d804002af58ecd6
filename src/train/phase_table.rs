//! Where an iteration's time goes: the table `guirl train` prints at the end of a run and
//! writes to `phases.md` in the run folder, from the iterations' metrics.
//!
//! Two clocks run side by side. The trainer's iteration: waiting for its rollouts, scoring,
//! the weight switch, the update, and the rest (the metrics line, an evaluation, a
//! checkpoint). The collection's: the policy's prompts (prefill) and decode steps, and the
//! time it waited for the envs. In lock-step training the collection is the trainer's wait;
//! with `max_staleness = 1` it runs during the last update, and only what the update did
//! not hide is waited for.

use super::metrics::IterationMetrics;
use std::fmt::Write;

/// Mean seconds per iteration of each phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTable {
    /// Iterations averaged (the run's first is left out when there are others: it pays
    /// for starting the browsers and loading kernels).
    pub iterations: usize,
    /// Whether the run's first iteration was left out.
    pub first_left_out: bool,
    /// The trainer's iteration, wall-clock.
    pub wall: f64,
    /// Waiting for the rollouts.
    pub rollout_wait: f64,
    /// Scoring before the update.
    pub score: f64,
    /// The weight switch.
    pub switch: f64,
    /// The update's optimizer steps.
    pub update: f64,
    /// The collection: the policy's prompts, its decode steps, its whole calls (a policy
    /// that is not decoded token by token), its wait for the envs.
    pub prefill: f64,
    /// See `prefill`.
    pub decode: f64,
    /// See `prefill`.
    pub whole_calls: f64,
    /// See `prefill`.
    pub env_wait: f64,
    /// Whether some iteration's rollouts were collected during an update
    /// (`max_staleness = 1`): only then can the compute pass the wall-clock.
    pub overlapped: bool,
    /// Env steps per iteration.
    pub env_steps: f64,
    /// One env step's own time (action, settling, screenshot), ms, mean over steps.
    pub env_step_ms: f64,
}

impl PhaseTable {
    /// The means over `metrics` (one run's lines, in order), the baseline evaluation's line
    /// left out; `None` without an iteration.
    pub fn of(metrics: &[IterationMetrics]) -> Option<PhaseTable> {
        let first = metrics.first()?;
        // an iteration's wall-clock and env steps are the differences of running totals
        let mut rows: Vec<(f64, f64, &IterationMetrics)> =
            vec![(first.wall_secs, first.env_steps as f64, first)];
        for w in metrics.windows(2) {
            let steps = w[1].env_steps.saturating_sub(w[0].env_steps) as f64;
            rows.push((w[1].wall_secs - w[0].wall_secs, steps, &w[1]));
        }
        // the baseline evaluation's line (iteration 0, before any rollout) is no iteration
        rows.retain(|r| r.2.iteration > 0);
        if rows.is_empty() {
            return None;
        }
        let first_left_out = rows.len() > 1;
        if first_left_out {
            rows.remove(0);
        }
        let n = rows.len() as f64;
        let mean = |f: &dyn Fn(&(f64, f64, &IterationMetrics)) -> f64| rows.iter().map(f).sum::<f64>() / n;
        let env_secs = mean(&|r| r.2.env_action_secs + r.2.env_settle_secs + r.2.env_screenshot_secs);
        let env_steps = mean(&|r| r.1);
        Some(PhaseTable {
            iterations: rows.len(),
            first_left_out,
            wall: mean(&|r| r.0),
            rollout_wait: mean(&|r| r.2.rollout_secs),
            score: mean(&|r| r.2.score_secs),
            switch: mean(&|r| r.2.switch_secs),
            update: mean(&|r| r.2.update_secs),
            prefill: mean(&|r| r.2.prefill_secs),
            decode: mean(&|r| r.2.decode_secs),
            // a policy answers by whole calls or token by token, never both
            whole_calls: mean(&|r| match r.2.prefill_secs + r.2.decode_secs {
                0.0 => r.2.policy_secs,
                _ => 0.0,
            }),
            env_wait: mean(&|r| r.2.env_wait_secs),
            overlapped: rows.iter().any(|r| r.2.staleness.is_some_and(|s| s > 0)),
            env_steps,
            env_step_ms: 1e3 * env_secs / env_steps.max(1e-9),
        })
    }

    /// The rest of the trainer's iteration: the metrics line, evaluations, checkpoints.
    pub fn other(&self) -> f64 {
        (self.wall - self.rollout_wait - self.score - self.switch - self.update).max(0.0)
    }

    /// The collection's own wall-clock.
    pub fn collection(&self) -> f64 {
        self.prefill + self.decode + self.whole_calls + self.env_wait
    }

    /// The policy's compute (prompts, decode steps, whole calls, scoring, update) over the
    /// iteration's wall-clock: with overlap it can pass 1, two phases computing at once.
    pub fn compute_share(&self) -> f64 {
        (self.prefill + self.decode + self.whole_calls + self.score + self.update) / self.wall.max(1e-9)
    }

    /// The table in Markdown, shares of the iteration's wall-clock beside the seconds.
    pub fn markdown(&self) -> String {
        let share = |s: f64| format!("{:.0} %", 100.0 * s / self.wall.max(1e-9));
        let mut out = format!(
            "Where an iteration's time went: mean of {} iteration(s){}.\n\n\
             | phase | s / iteration | share |\n|---|---:|---:|\n",
            self.iterations,
            if self.first_left_out { ", the run's first left out" } else { "" }
        );
        let mut row = |name: &str, s: f64| {
            let _ = writeln!(out, "| {name} | {s:.3} | {} |", share(s));
        };
        row("**iteration** (the trainer)", self.wall);
        row("waiting for rollouts", self.rollout_wait);
        row("scoring", self.score);
        row("weight switch", self.switch);
        row("update", self.update);
        row("other (metrics, evaluation, checkpoint)", self.other());
        row("**collection** (its own clock)", self.collection());
        // a policy answers by whole calls or token by token: the other rows are not its
        if self.whole_calls > 0.0 {
            row("policy: whole calls", self.whole_calls);
        } else {
            row("policy: prefill", self.prefill);
            row("policy: decode", self.decode);
        }
        row("envs (the policy waiting)", self.env_wait);
        let share = self.compute_share();
        let calls = if self.whole_calls > 0.0 { "its calls" } else { "prefill, decode" };
        let _ = write!(
            out,
            "\n{:.1} env steps an iteration, {:.1} ms each (action, settling, screenshot). The policy's \
             compute ({calls}, scoring, update) is {:.0} % of the iteration's wall-clock{}.\n",
            self.env_steps,
            self.env_step_ms,
            100.0 * share,
            match (share > 1.0, self.overlapped) {
                (true, true) => " (over 100 %: the collection computed while the update did)",
                _ => "",
            }
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(wall: f64, steps: u64, rollout: f64, update: f64, prefill: f64, decode: f64) -> IterationMetrics {
        IterationMetrics {
            iteration: 1,
            wall_secs: wall,
            env_steps: steps,
            rollout_secs: rollout,
            score_secs: 0.5,
            switch_secs: 0.1,
            update_secs: update,
            policy_secs: prefill + decode,
            prefill_secs: prefill,
            decode_secs: decode,
            env_wait_secs: rollout - prefill - decode,
            // 20 steps an iteration at 200 ms
            env_action_secs: 4.0,
            ..Default::default()
        }
    }

    /// The first iteration is left out; iteration wall-clocks and env steps come from the
    /// running totals; the rest of the iteration is what no phase took.
    #[test]
    fn the_means_leave_the_first_iteration_out() {
        let m = [
            line(30.0, 10, 20.0, 5.0, 1.0, 2.0),
            line(40.0, 30, 4.0, 4.0, 1.0, 1.0),
            line(52.0, 50, 6.0, 4.0, 1.0, 3.0),
        ];
        let t = PhaseTable::of(&m).unwrap();
        assert_eq!(t.iterations, 2);
        assert!((t.wall - 11.0).abs() < 1e-9, "{t:?}");
        assert!((t.env_steps - 20.0).abs() < 1e-9);
        assert!((t.rollout_wait - 5.0).abs() < 1e-9);
        assert!((t.other() - (11.0 - 5.0 - 0.5 - 0.1 - 4.0)).abs() < 1e-9);
        assert!((t.decode - 2.0).abs() < 1e-9);
        assert!((t.env_step_ms - 200.0).abs() < 1e-6, "{t:?}");
        let md = t.markdown();
        assert!(md.contains("| policy: decode | 2.000 | 18 % |"), "{md}");
        assert!(!md.contains("whole calls"), "{md}");
        // a policy of whole calls has no prefill or decode rows
        let whole = |l: IterationMetrics| IterationMetrics { prefill_secs: 0.0, decode_secs: 0.0, ..l };
        let mdw = PhaseTable::of(&[whole(m[0].clone()), whole(m[1].clone())]).unwrap().markdown();
        assert!(mdw.contains("| policy: whole calls | 2.000 |") && !mdw.contains("prefill"), "{mdw}");
        assert!(md.contains("is 68 % of the iteration's wall-clock.") && !md.contains("over 100"), "{md}");
        // an overlapped iteration: the collection's 6 s of decoding ran during the update
        let over = IterationMetrics { staleness: Some(1), ..line(40.0, 30, 0.5, 8.0, 0.5, 6.0) };
        let overlapped = PhaseTable::of(&[m[0].clone(), over.clone()]).unwrap();
        let md2 = overlapped.markdown();
        assert!(md2.contains("(over 100 %: the collection computed while the update did)"), "{md2}");
        // lock-step: no overlap to explain it
        let lock_step = IterationMetrics { staleness: None, ..over };
        let md3 = PhaseTable::of(&[m[0].clone(), lock_step]).unwrap().markdown();
        assert!(!md3.contains("over 100"), "{md3}");
        assert!(PhaseTable::of(&[]).is_none());
        assert!(md.contains("mean of 2 iteration(s), the run's first left out"), "{md}");
        let one = PhaseTable::of(&m[..1]).unwrap();
        assert_eq!((one.iterations, one.first_left_out), (1, false));
        assert!(PhaseTable::of(&m[..2])
            .unwrap()
            .markdown()
            .contains("mean of 1 iteration(s), the run's first"));
    }

    /// The baseline evaluation's line (iteration 0, before any rollout) is not an
    /// iteration: the first iteration after it is the one left out, and its wall-clock
    /// counts from the evaluation's end.
    #[test]
    fn the_baseline_evaluation_is_no_iteration() {
        let baseline = IterationMetrics { iteration: 0, wall_secs: 8.0, ..Default::default() };
        let mut m = vec![baseline];
        for (i, l) in
            [line(38.0, 10, 20.0, 5.0, 1.0, 2.0), line(48.0, 30, 4.0, 4.0, 1.0, 1.0)].into_iter().enumerate()
        {
            m.push(IterationMetrics { iteration: i as u64 + 1, ..l });
        }
        let t = PhaseTable::of(&m).unwrap();
        assert_eq!((t.iterations, t.first_left_out), (1, true), "{t:?}");
        assert!((t.wall - 10.0).abs() < 1e-9 && (t.rollout_wait - 4.0).abs() < 1e-9, "{t:?}");
        let first = PhaseTable::of(&m[..2]).unwrap();
        assert_eq!((first.iterations, first.first_left_out), (1, false));
        assert!((first.wall - 30.0).abs() < 1e-9, "{first:?}");
        assert!(PhaseTable::of(&m[..1]).is_none());
    }
}
