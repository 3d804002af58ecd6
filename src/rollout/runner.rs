//! Running episodes: one env and a policy (`run_episode`), or many seeds over K browsers
//! at once (`run_episodes`).

use super::trajectory::{Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
use crate::env::{EnvConfig, EnvError, EpisodeStatus, GuiEnv};
use crate::policy::Policy;
use crate::tasks::Task;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A policy shared by several envs.
pub type SharedPolicy = Arc<Mutex<Box<dyn Policy>>>;

/// How `run_episodes` runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Browsers running at once.
    pub envs: usize,
    /// Keep every screenshot in memory (for recording).
    pub keep_frames: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { envs: 1, keep_frames: false }
    }
}

/// Run one episode of `env`'s task for `seed`.
///
/// Browser failures become an `env_error` outcome; only setup problems (no chromedriver,
/// no task pages) and a first page that never loads are returned as errors.
pub async fn run_episode(
    env: &mut GuiEnv,
    policy: &SharedPolicy,
    seed: u64,
    keep_frames: bool,
) -> Result<Recorded, EnvError> {
    let task_id = env.task().id().to_string();
    let policy_name = policy.lock().expect("policy lock").name();
    let (mut obs, _info) = match env.reset(seed).await {
        Ok(r) => r,
        Err(e @ EnvError::Setup(_)) => return Err(e),
        Err(e) => {
            let frame = Default::default();
            let trajectory = Trajectory {
                version: FORMAT_VERSION,
                task_id,
                seed,
                instruction: String::new(),
                frame,
                policy: policy_name,
                group: None,
                steps: vec![],
                final_frame: None,
                outcome: Outcome {
                    reward: 0.0,
                    status: EpisodeStatus::EnvError,
                    steps: 0,
                    error: Some(e.to_string()),
                },
            };
            return Ok(Recorded { trajectory, frames: vec![] });
        }
    };
    let mut traj = Trajectory {
        version: FORMAT_VERSION,
        task_id,
        seed,
        instruction: obs.instruction.clone(),
        frame: obs.frame,
        policy: policy_name,
        group: None,
        steps: vec![],
        final_frame: None,
        outcome: Outcome { reward: 0.0, status: EpisodeStatus::Running, steps: 0, error: None },
    };
    let mut frames = Vec::new();
    loop {
        let decision = {
            let mut p = policy.lock().expect("policy lock");
            p.act(std::slice::from_ref(&obs)).map_err(|e| EnvError::Task(format!("policy failed: {e:#}")))?
        };
        let d =
            decision.into_iter().next().ok_or_else(|| EnvError::Task("policy returned no action".into()))?;
        if keep_frames {
            frames.push(obs.screenshot.clone());
        }
        let out = env.step(&d.action).await?;
        traj.outcome.reward += out.reward;
        traj.steps.push(TrajStep {
            action: d.action.to_string(),
            reward: out.reward,
            status: out.info.status,
            timings: out.info.timings,
            frame: None,
            action_error: out.info.action_error.clone(),
            token_logprobs: d.token_logprobs,
        });
        obs = out.obs;
        if out.terminated || out.truncated {
            traj.outcome.status = out.info.status;
            traj.outcome.error = out.info.env_error;
            break;
        }
    }
    if keep_frames {
        frames.push(obs.screenshot.clone());
    }
    traj.outcome.steps = traj.steps.len() as u32;
    Ok(Recorded { trajectory: traj, frames })
}

/// Run one episode per seed over `opts.envs` browsers at once. `on_done(i, &rec)` is
/// called as each episode finishes (i indexes `seeds`); the result is in seed order.
pub async fn run_episodes(
    task: Arc<dyn Task>,
    env_cfg: &EnvConfig,
    policy: SharedPolicy,
    seeds: &[u64],
    opts: &RunOptions,
    mut on_done: impl FnMut(usize, &Recorded),
) -> anyhow::Result<Vec<Recorded>> {
    let next = Arc::new(AtomicUsize::new(0));
    let seeds: Arc<Vec<u64>> = Arc::new(seeds.to_vec());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Result<Recorded, EnvError>)>();
    let workers = opts.envs.max(1).min(seeds.len().max(1));
    let mut handles = Vec::new();
    for _ in 0..workers {
        let (task, cfg, policy, next, seeds, tx) =
            (task.clone(), env_cfg.clone(), policy.clone(), next.clone(), seeds.clone(), tx.clone());
        let keep = opts.keep_frames;
        handles.push(tokio::spawn(async move {
            let mut env = GuiEnv::new(task, cfg);
            let mut first = true;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= seeds.len() {
                    break;
                }
                let r = run_episode(&mut env, &policy, seeds[i], keep).await;
                // A page that never loads in a fresh env is a user error, not bad luck.
                let r = match r {
                    Ok(rec)
                        if first
                            && rec.trajectory.steps.is_empty()
                            && rec.trajectory.outcome.status == EpisodeStatus::EnvError =>
                    {
                        Err(EnvError::Setup(rec.trajectory.outcome.error.clone().unwrap_or_default()))
                    }
                    r => r,
                };
                first = false;
                let fatal = r.is_err();
                let _ = tx.send((i, r));
                if fatal {
                    next.store(usize::MAX / 2, Ordering::SeqCst);
                    break;
                }
            }
            env.close().await;
        }));
    }
    drop(tx);
    let mut results: Vec<Option<Recorded>> = vec![None; seeds.len()];
    let mut first_err = None;
    while let Some((i, r)) = rx.recv().await {
        match r {
            Ok(rec) => {
                on_done(i, &rec);
                results[i] = Some(rec);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    for h in handles {
        h.await?;
    }
    if let Some(e) = first_err {
        return Err(anyhow::anyhow!(e));
    }
    Ok(results.into_iter().flatten().collect())
}
