//! Scoring a finished episode with its task's learned reward (a reward model or a judge,
//! [`crate::tasks::LearnedReward`]): the collector, `play`, `replay` and `serve` sessions
//! all go through here.

use super::runtime::off_runtime;
use super::trajectory::Trajectory;
use crate::env::{EnvError, EpisodeStatus};

/// Score a finished episode with its task's reward model or judge (`frames`: the last
/// screenshots, ending with the observation after the last step). When the scorer decides
/// (the task has no success check), the episode's reward becomes its score p (a model's
/// probability, a judge's fraction of SUCCESS votes; on the last step, so step-level
/// estimators see it too) and it is a success at p ≥ threshold; otherwise the check's
/// verdict stands and the agreement is returned (and logged). A judge's verdict and
/// reasoning go into the trajectory.
///
/// Why p rather than 1 / 0 at the threshold: a group-relative advantage then still ranks a
/// near miss above a clear failure when no rollout of a group passes, and `train-reward`
/// reports the calibration that makes p mean a probability. Success rates and evaluation
/// count by status, so they use the threshold.
///
/// A judge that gives no verdict makes a deciding judge's episode `judge_error` (kept out
/// of training like `policy_error`), never a silent failure. Episodes that did not end by
/// the agent's doing (`env_error`, `policy_error`) are left alone. A model folder that
/// cannot be read stops the collection (a setup error).
pub(crate) fn apply_learned_reward<F: std::borrow::Borrow<image::RgbImage>>(
    traj: &mut Trajectory,
    frames: &[F],
    learned: &crate::tasks::LearnedReward,
) -> Result<Option<bool>, EnvError> {
    if traj.outcome.status.is_infrastructure_failure() || traj.outcome.status == EpisodeStatus::Running {
        return Ok(None);
    }
    let history: Vec<String> = traj.steps.iter().map(|s| s.action.clone()).collect();
    let scored = learned_verdict(learned, frames, &traj.instruction, &history)?;
    traj.judge = scored.judge;
    if let Some(e) = scored.failed {
        tracing::warn!(task = %traj.task_id, seed = traj.seed, "{e}");
        if learned.decides {
            traj.outcome.status = EpisodeStatus::JudgeError;
            traj.outcome.error = Some(e);
        }
        return Ok(None);
    }
    let (p, says_success) = (scored.p, scored.success);
    if learned.decides {
        if let Some(last) = traj.steps.last_mut() {
            last.reward = p;
            if says_success {
                last.status = EpisodeStatus::Success;
            }
        }
        traj.outcome.reward = traj.steps.iter().map(|s| s.reward).sum::<f64>();
        if traj.steps.is_empty() {
            traj.outcome.reward = p;
        }
        if says_success {
            traj.outcome.status = EpisodeStatus::Success;
        }
        tracing::debug!(task = %traj.task_id, seed = traj.seed, p, success = says_success, "reward model scored the episode");
        return Ok(None);
    }
    let check = traj.outcome.status == EpisodeStatus::Success;
    let agree = says_success == check;
    tracing::debug!(
        task = %traj.task_id, seed = traj.seed, p, model_success = says_success, check_success = check, agree,
        "reward model against the success check"
    );
    Ok(Some(agree))
}

/// What a reward model or judge said of an episode's end.
#[derive(Debug, Clone)]
pub(crate) struct Scored {
    /// P(success), or the fraction of SUCCESS votes (0 when the judge failed).
    pub p: f64,
    /// p ≥ the threshold.
    pub success: bool,
    /// The judge's record (judges only).
    pub judge: Option<super::trajectory::JudgeRecord>,
    /// Why the judge gave no verdict.
    pub failed: Option<String>,
}

/// The score of an episode that ended on the last of `frames` after the actions
/// `history`, and whether it passes the threshold. A model folder that cannot be read, or
/// a judge whose rubric cannot, is a setup error; a judge that gives no verdict is
/// [`Scored::failed`].
pub(crate) fn learned_verdict<F: std::borrow::Borrow<image::RgbImage>>(
    learned: &crate::tasks::LearnedReward,
    frames: &[F],
    instruction: &str,
    history: &[String],
) -> Result<Scored, EnvError> {
    use crate::policy::judge::Judge;
    use crate::policy::reward_model::RewardModel;
    let Some(final_screen) = frames.last() else {
        return Err(EnvError::Task("no final screenshot to score".into()));
    };
    match &learned.scorer {
        crate::tasks::Scorer::Model(dir) => {
            let model = RewardModel::shared(dir).map_err(|e| EnvError::Setup(format!("{e:#}")))?;
            let p = off_runtime(|| model.predict(final_screen.borrow(), instruction, history))
                .map_err(|e| EnvError::Task(format!("reward model {}: {e:#}", dir.display())))?;
            Ok(Scored { p, success: p >= learned.threshold, judge: None, failed: None })
        }
        crate::tasks::Scorer::Judge(spec) => {
            let judge = Judge::shared(spec).map_err(|e| EnvError::Setup(format!("{e:#}")))?;
            let mut record = super::trajectory::JudgeRecord {
                judge: spec.name(),
                success: false,
                success_votes: 0,
                votes: spec.votes,
                threshold: learned.threshold,
                decided: learned.decides,
                reasoning: vec![],
                cached: false,
                error: None,
            };
            match off_runtime(|| judge.judge(frames, instruction, history)) {
                Ok((v, cached)) => {
                    let (p, success) = (v.fraction(), v.success(learned.threshold));
                    record.success = success;
                    record.success_votes = v.success_votes;
                    record.reasoning = v.reasoning;
                    record.cached = cached;
                    Ok(Scored { p, success, judge: Some(record), failed: None })
                }
                Err(e) => {
                    record.error = Some(e.clone());
                    Ok(Scored { p: 0.0, success: false, judge: Some(record), failed: Some(e) })
                }
            }
        }
    }
}
