//! The checks of `[algo]`'s values (called from [`super::config::TrainConfig::validate`],
//! errors naming the key) and its warnings. What the types rule out is not checked here:
//! a sub-table of another kind, a PPO key under GRPO, a technique's settings without the
//! technique (see [`super::algo_table`]). What is left are ranges, and a few rules between
//! keys every kind shares, each with its reason beside it.

use super::advantage::options::StepCredit;
use super::algo_config::{AlgoConfig, AlgoKind, AlgoVariant, GspoConfig, GspoLevel, KlMode, MinibatchOrder};
use super::objective::KlEstimator;

impl AlgoConfig {
    /// A warning for discounted step returns over a negative failure reward
    /// (`task_failure`: the lowest failure reward of the run's tasks), which pays a later
    /// failure better than an earlier one (see `fail_reward`); `None` when that cannot happen.
    pub fn stalling_warning(&self, task_failure: f64) -> Option<String> {
        let negative =
            self.fail_reward.unwrap_or(task_failure) < 0.0 || self.truncation_reward.is_some_and(|r| r < 0.0);
        (self.discounts_steps() && negative).then(|| {
            format!(
                "algo.gamma = {} discounts a negative failure reward: a failure put off by stalling \
                 then scores better than an early one, and step credit teaches stalling; set \
                 algo.fail_reward = 0.0 and algo.truncation_reward = 0.0 (or gamma = 1.0)",
                self.gamma
            )
        })
    }
    /// Warnings about settings that are valid but probably not what the user means (the
    /// trainer logs each once when it starts); empty when there is nothing to say.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.kl_estimator == KlEstimator::K1 && self.beta > 0.0 && self.kl_mode == KlMode::Loss {
            // ∇k1 = ∇log π, and E_π[∇log π] = Σ ∇π = 0: the term's expected gradient is zero.
            out.push(
                "algo.kl_estimator = \"k1\" as a loss term (algo.beta > 0, kl_mode = \"loss\"): \
                 k1 = log(π/π_ref) has an expected gradient of zero (E_π[∇log π] = 0), so it adds \
                 noise but does not hold the policy near the reference; use kl_estimator = \"k3\" \
                 (GRPO's) or \"k2\" (its gradient is that of KL(π‖π_ref)), or put k1 in the reward \
                 with kl_mode = \"reward\""
                    .to_string(),
            );
        }
        if self.kind() == AlgoKind::Dapo && self.beta > 0.0 {
            out.push(format!(
                "algo.kind = \"dapo\" with algo.beta = {}: DAPO drops the KL term (no reference \
                 policy), so this run is not DAPO as published; set algo.beta = 0.0, or to keep a KL \
                 term use kind = \"grpo\" with clip_high = 0.28 and the tables [algo.dynamic_sampling] \
                 and [algo.overlong_penalty]",
                self.beta
            ));
        }
        out
    }

    /// Check every `[algo]` value (`iterations`: `run.iterations`); each bad one is passed
    /// to `check` as `(false, message naming the key)`.
    pub(crate) fn check(&self, iterations: u64, check: &mut dyn FnMut(bool, String)) {
        let a = self;
        let (lo, hi) = (a.clip_low(), a.clip_high());
        // PPO's critic is the baseline: its rollouts need no group. (A rule between `kind`
        // and a shared key: a per-kind group_size would be the same key in eight tables.)
        let min_group = a.kind().min_group_size();
        check(
            a.group_size >= min_group,
            format!("algo.group_size must be at least {min_group}, got {}", a.group_size),
        );
        check(a.batch_seeds >= 1, "algo.batch_seeds must be at least 1".into());
        check(lo > 0.0 && lo < 1.0, format!("algo.clip_low must be in (0, 1), got {lo}"));
        check(hi > 0.0 && hi.is_finite(), format!("algo.clip_high must be > 0, got {hi}"));
        check(a.beta >= 0.0 && a.beta.is_finite(), format!("algo.beta must be >= 0, got {}", a.beta));
        check(
            a.entropy_coef >= 0.0 && a.entropy_coef.is_finite(),
            format!("algo.entropy_coef must be >= 0, got {}", a.entropy_coef),
        );
        check(a.epochs >= 1, "algo.epochs must be at least 1".into());
        check(a.minibatch >= 1, "algo.minibatch must be at least 1".into());
        let lr_ok = a.lr > 0.0 && a.lr <= 1.0;
        check(lr_ok, format!("algo.lr must be in (0, 1], got {}", a.lr));
        // against a bad lr only that lr's error: the default min_lr is not the user's mistake
        check(
            a.min_lr >= 0.0 && (a.min_lr <= a.lr || !lr_ok),
            format!("algo.min_lr must be in [0, algo.lr], got {}", a.min_lr),
        );
        check(
            a.warmup <= iterations,
            format!("algo.warmup ({}) must not exceed run.iterations ({})", a.warmup, iterations),
        );
        check(
            a.weight_decay >= 0.0 && a.weight_decay < 1.0,
            format!("algo.weight_decay must be in [0, 1), got {}", a.weight_decay),
        );
        check(
            a.max_grad_norm > 0.0 && !a.max_grad_norm.is_nan(),
            format!("algo.max_grad_norm must be > 0, got {}", a.max_grad_norm),
        );
        check(
            a.temperature > 0.0 && a.temperature.is_finite(),
            format!("algo.temperature must be > 0, got {}", a.temperature),
        );
        check(a.eps > 0.0 && a.eps < 1.0, format!("algo.eps must be in (0, 1), got {}", a.eps));
        check((0.0..=1.0).contains(&a.gamma), format!("algo.gamma must be in [0, 1], got {}", a.gamma));
        if let Some(c) = a.dual_clip {
            check(
                c > 1.0 && c.is_finite(),
                format!("algo.dual_clip must be > 1 (negative advantages are bounded below by c·A), got {c}"),
            );
        }
        if let Some(n) = a.loss_agg_norm {
            check(n > 0.0 && n.is_finite(), format!("algo.loss_agg_norm must be > 0, got {n}"));
        }
        if let Some(k) = a.kl_target {
            check(k > 0.0 && k.is_finite(), format!("algo.kl_target must be > 0, got {k}"));
            // The adaptive β scales β: from 0 it stays 0.
            check(a.beta > 0.0, "algo.kl_target needs algo.beta > 0 (the coefficient it starts from)".into());
        }
        if a.minibatch_order == MinibatchOrder::GroupSteps {
            check(
                !matches!(a.variant, AlgoVariant::Gspo(GspoConfig { level: GspoLevel::Trajectory })),
                "algo.minibatch_order = \"group_steps\" cannot be used with [algo.gspo] level = \"trajectory\", \
                 whose minibatches hold whole trajectories; leave minibatch_order out"
                    .into(),
            );
        }
        if let Some(k) = a.target_kl {
            check(
                k > 0.0 && k.is_finite(),
                format!(
                    "algo.target_kl must be > 0 (the approximate KL(π_old ‖ π) at which an \
                     iteration's update stops early; leave it out for no early stop), got {k}"
                ),
            );
        }
        if let Some(c) = a.behaviour_weight_cap {
            check(
                c >= 1.0 && c.is_finite(),
                format!(
                    "algo.behaviour_weight_cap must be at least 1 (a cap below 1 would down-weight \
                     tokens whose behaviour and proximal policies agree), got {c}"
                ),
            );
        }
        check(
            a.kl_horizon > 0.0 && a.kl_horizon.is_finite(),
            format!("algo.kl_horizon must be > 0, got {}", a.kl_horizon),
        );
        // adv_std and step_credit are shared by several kinds (five and four): a key in
        // each of their tables would say the same thing five times, so they stay in [algo]
        // and the kinds they do not apply to refuse them here.
        let kinds = |has: fn(AlgoKind) -> bool| {
            let names: Vec<&str> =
                AlgoKind::all().iter().copied().filter(|k| has(*k)).map(AlgoKind::name).collect();
            match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => names.join(""),
            }
        };
        check(
            a.kind().group_normalized() || a.adv_std.is_none(),
            format!("algo.adv_std applies to {} only", kinds(AlgoKind::group_normalized)),
        );
        check(
            a.step_credit == StepCredit::Episode || a.kind().takes_step_credit(),
            format!(
                "algo.step_credit = \"discounted\" applies to {} ({} credit steps already; the \
                 others are episode-level)",
                kinds(AlgoKind::takes_step_credit),
                kinds(AlgoKind::credits_steps)
            ),
        );
        if let Some(r) = a.give_up_reward {
            check(r.is_finite(), format!("algo.give_up_reward must be a finite number, got {r}"));
        }
        check(
            a.success_replay <= 1000,
            format!(
                "algo.success_replay must be at most 1000 trajectories per task (each is held in \
                 memory with its screenshots), got {}",
                a.success_replay
            ),
        );
        check(
            a.success_replay_demos.is_none() || a.success_replay > 0,
            "algo.success_replay_demos seeds the success replay buffer, which is off: set \
             algo.success_replay = N (successes kept per task) too"
                .into(),
        );
        if let Some(b) = &a.branch {
            b.check(check);
        }
        // A config read from TOML always has both for DAPO; one built in code may not.
        check(
            !a.kind().has_dapo_techniques() || (a.dynamic_sampling.is_some() && a.overlong_penalty.is_some()),
            "algo.kind = \"dapo\" runs dynamic sampling and the overlong penalty (build the config \
             with AlgoConfig::of(AlgoKind::Dapo)); without them it is kind = \"grpo\" with clip_high = 0.28"
                .into(),
        );
        if let Some(d) = a.dynamic_sampling {
            check(
                d.max_extra <= 100,
                format!(
                    "algo.dynamic_sampling.max_extra must be at most 100 (each is a full collection of \
                     batch_seeds groups), got {}",
                    d.max_extra
                ),
            );
        }
        if let Some(p) = a.overlong_penalty {
            check(
                p.weight >= 0.0 && p.weight.is_finite(),
                format!("algo.overlong_penalty.weight must be >= 0, got {}", p.weight),
            );
        }
        if let Some(r) = a.truncation_reward {
            check(r.is_finite(), format!("algo.truncation_reward must be a finite number, got {r}"));
        }
        if let Some(r) = a.fail_reward {
            check(r.is_finite(), format!("algo.fail_reward must be a finite number, got {r}"));
        }
        match &a.variant {
            super::algo_kind::AlgoVariant::Ppo(p) => super::value::check_options(p, iterations, check),
            super::algo_kind::AlgoVariant::Gigpo(g) => check(
                g.omega >= 0.0 && g.omega.is_finite(),
                format!("algo.gigpo.omega must be >= 0, got {}", g.omega),
            ),
            AlgoVariant::Grpo
            | AlgoVariant::DrGrpo
            | AlgoVariant::Dapo
            | AlgoVariant::Gspo(_)
            | AlgoVariant::Rloo
            | AlgoVariant::ReinforcePp => {}
        }
    }
}
