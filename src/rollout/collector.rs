//! The parallel collector: K browsers at once (one `GuiEnv` each), G rollouts of every
//! sampled task seed forming a GRPO group, and the policy called once per round with the
//! observations of all envs waiting for an action (batched across envs). A policy that
//! decodes token by token instead takes each env's state as soon as it is ready and
//! answers it between its decode steps (continuous batching).
//!
//! A failing env (crashed browser, hung page) does not stop the collection: that rollout
//! ends as `env_error`, the env starts a fresh browser at its next reset, and the
//! trajectory carries the status so a trainer can leave it out of its group's statistics.

use super::job::{Job, UnreachableTask};
use super::prefix::{PrefixError, Reached};
use super::runtime::off_runtime;
use super::stats::CollectStats;
use super::trajectory::{Outcome, Recorded, TrajStep, Trajectory, FORMAT_VERSION};
use crate::env::{EnvConfig, EnvError, EpisodeStatus, GuiEnv, ScreenState};
use crate::policy::{stream_key, Decision, Policy, PolicyFailure};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Runs episodes over K envs, keeping the browsers alive between calls.
pub struct Collector {
    envs: Vec<Option<GuiEnv>>,
    cfg: EnvConfig,
    /// Keep every screenshot (for recording).
    pub keep_frames: bool,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// How long the first waiting env waits for the others before the policy is called
    /// with a partial batch (envs step at different speeds; for a neural policy a batched
    /// forward pass is far cheaper per state). Zero: batch only what is already waiting.
    pub batch_wait: std::time::Duration,
    /// Call the policy on one state at a time (`batch_wait` then does not apply), so that
    /// no forward pass depends on which other envs happened to be waiting: in a batch,
    /// padding to the longest instruction and the batch's shape change the matmuls'
    /// rounding, which changes a log-prob's last bits and, later, a sampled action. With
    /// it, and each state's own sampling stream, a run is bit-exact whatever the timing
    /// and the number of envs. A policy whose decisions do not depend on the batch
    /// ([`crate::policy::Policy::batch_invariant`]) still gets every waiting state in one
    /// call. Off: batch whatever is waiting (faster per state).
    pub one_state_per_call: bool,
    /// What a task whose first page does not load does to the collection.
    pub unreachable: UnreachableTask,
    /// The tasks an episode of which has started in this collector. Once any has, a
    /// browser that cannot be (re)started is bad luck (an `env_error` rollout), not a setup
    /// error; once a task has, its page not loading is too ([`UnreachableTask`]).
    started: Started,
    /// The ranks of a data-parallel run ([`crate::dist`]): each runs its share of every
    /// collection. `None`: this process runs every job.
    pub group: Option<Arc<crate::dist::ProcessGroup>>,
}

enum Msg {
    /// An observation to act on, with its sampling stream key ([`stream_key`]).
    Act(ScreenState, u64, oneshot::Sender<Decision>),
    /// A finished episode, and whether the task's reward model agreed with its check
    /// (boxed: an episode is much larger than the other messages).
    Done(usize, Result<Box<Recorded>, EnvError>, Option<bool>),
    /// A task's first episode could not start: its page did not load (with the error).
    Unreachable(String, String),
    /// A worker ran out of jobs.
    Exit,
    /// The batch window closed (internal).
    Flush,
}

impl Collector {
    /// A collector with `k` envs (browsers start at their first episode).
    pub fn new(k: usize, cfg: EnvConfig) -> Collector {
        Collector {
            envs: (0..k.max(1)).map(|_| None).collect(),
            cfg,
            keep_frames: false,
            progress: false,
            batch_wait: std::time::Duration::ZERO,
            one_state_per_call: false,
            unreachable: UnreachableTask::Abort,
            started: Arc::default(),
            group: None,
        }
    }

    /// Number of envs.
    pub fn envs(&self) -> usize {
        self.envs.len()
    }

    /// Run every job; `on_done(i, &rec)` sees each episode as it finishes (i indexes `jobs`).
    /// Returns the episodes in job order. Only setup errors before any episode has started
    /// (no chromedriver, a browser that cannot start, a first page that never loads) abort;
    /// afterwards browser failures, failed relaunches included, become `env_error` episodes.
    ///
    /// With a process group ([`Collector::group`]), this rank runs its share of the jobs
    /// (`r, r + W, …`) and the ranks then exchange their episodes: every rank returns all
    /// of them, in job order, and `on_done` sees them all after the exchange.
    pub async fn collect(
        &mut self,
        policy: &mut dyn Policy,
        jobs: Vec<Job>,
        mut on_done: impl FnMut(usize, &Recorded),
    ) -> anyhow::Result<(Vec<Recorded>, CollectStats)> {
        let mut results: Vec<Option<Recorded>> = vec![None; jobs.len()];
        let stats = self
            .collect_each(policy, jobs, |i, rec| {
                on_done(i, &rec);
                results[i] = Some(rec);
            })
            .await?;
        Ok((results.into_iter().flatten().collect(), stats))
    }

    /// [`Collector::collect`] that hands each episode to `on_done` as it finishes and keeps
    /// none: for a long collection whose episodes go to disk (a bench of every task held
    /// 8 GB of screenshots by its end).
    pub async fn collect_each(
        &mut self,
        policy: &mut dyn Policy,
        jobs: Vec<Job>,
        mut on_done: impl FnMut(usize, Recorded),
    ) -> anyhow::Result<CollectStats> {
        if let Some(pg) = self.group.clone().filter(|g| g.world() > 1) {
            // This rank's share, then every rank's episodes in job order (shard.rs).
            let (n, w, r) = (jobs.len(), pg.world(), pg.rank());
            let mine: Vec<(usize, Job)> = jobs.into_iter().enumerate().filter(|(i, _)| i % w == r).collect();
            let mut ran = Vec::new();
            let stats = self.collect_jobs(policy, mine, &mut |i, rec| ran.push((i, rec))).await;
            let (all, stats) = super::shard::exchange(&pg, n, stats.map(|s| (ran, s)))?;
            for (i, rec) in all {
                on_done(i, rec);
            }
            return Ok(stats);
        }
        self.collect_jobs(policy, jobs.into_iter().enumerate().collect(), &mut on_done).await
    }

    /// Run `jobs`, each with its index among the jobs of the whole collection (its
    /// sampling streams are keyed by it), handing each episode to `on_done` as it ends.
    async fn collect_jobs(
        &mut self,
        policy: &mut dyn Policy,
        jobs: Vec<(usize, Job)>,
        on_done: &mut impl FnMut(usize, Recorded),
    ) -> anyhow::Result<CollectStats> {
        let t0 = Instant::now();
        let n = jobs.len();
        let queue = Arc::new(Mutex::new(jobs.into_iter().collect::<VecDeque<_>>()));
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let mut handles = Vec::new();
        let policy_name = policy.name();
        for slot in self.envs.iter_mut().take(n.max(1)) {
            let env = slot.take();
            let ctx = WorkerCtx {
                cfg: self.cfg.clone(),
                queue: queue.clone(),
                tx: tx.clone(),
                keep_frames: self.keep_frames,
                policy_name: policy_name.clone(),
                unreachable: self.unreachable,
                started: self.started.clone(),
            };
            handles.push(tokio::spawn(worker(env, ctx)));
        }
        drop(tx);
        let bar = self.progress_bar(n);
        let mut stats = CollectStats::default();
        let mut fatal: Option<EnvError> = None;
        let mut pending: Vec<(ScreenState, u64, oneshot::Sender<Decision>)> = Vec::new();
        let mut alive = handles.len();
        let mut first_wait: Option<Instant> = None;
        // A policy that decodes token by token takes each state as it comes (continuous
        // batching); the others are called once per batch of waiting states.
        let mut decoder = policy.step_decoder(handles.len());
        let mut answering: HashMap<u64, oneshot::Sender<Decision>> = HashMap::new();
        let mut admitted = 0u64;
        loop {
            let decoding = answering.len();
            let mut msgs = Vec::new();
            if decoding == 0 {
                // Wait for messages; with requests pending, only until the batch window closes.
                let msg = match first_wait {
                    None => rx.recv().await,
                    Some(t) => {
                        let left = (t + self.batch_wait).saturating_duration_since(Instant::now());
                        tokio::time::timeout(left, rx.recv()).await.unwrap_or(Some(Msg::Flush))
                    }
                };
                let Some(first) = msg else { break };
                msgs.push(first);
            }
            // and whatever else has arrived meanwhile: states waiting together are acted on
            // together (one call for a policy whose decisions do not depend on the batch)
            while let Ok(m) = rx.try_recv() {
                msgs.push(m);
            }
            let mut flush = false;
            for msg in msgs {
                flush |= matches!(msg, Msg::Flush);
                match msg {
                    Msg::Act(s, key, reply) => {
                        first_wait.get_or_insert_with(Instant::now);
                        pending.push((s, key, reply));
                    }
                    Msg::Done(i, Ok(rec), agreed) => {
                        let rec = *rec;
                        // A hard stop (SIGTERM, a second Ctrl-C) kills the browsers: an
                        // episode failing for it is no episode of the task, and no other
                        // starts. What finished is still delivered.
                        if crate::env::profiles::stopping() {
                            queue.lock().expect("queue").clear();
                            if rec.trajectory.outcome.status.is_infrastructure_failure() {
                                continue;
                            }
                        }
                        stats.episodes += 1;
                        match agreed {
                            Some(true) => stats.reward_model_agree += 1,
                            Some(false) => stats.reward_model_disagree += 1,
                            None => {}
                        }
                        stats.env_steps += rec.trajectory.steps.len();
                        for st in &rec.trajectory.steps {
                            stats.env_action_secs += st.timings.action_ms / 1e3;
                            stats.env_settle_secs += st.timings.settle_ms / 1e3;
                            stats.env_screenshot_secs += st.timings.screenshot_ms / 1e3;
                        }
                        match rec.trajectory.outcome.status {
                            EpisodeStatus::EnvError => stats.env_errors += 1,
                            EpisodeStatus::PolicyError => stats.policy_errors += 1,
                            EpisodeStatus::JudgeError => stats.judge_errors += 1,
                            _ => {}
                        }
                        on_done(i, rec);
                        if let Some(b) = &bar {
                            b.inc(1);
                        }
                    }
                    Msg::Done(_, Err(e), _) => {
                        fatal.get_or_insert(e);
                        queue.lock().expect("queue").clear();
                    }
                    Msg::Unreachable(task, error) => {
                        // Its other jobs are not run; an env already on one fails alike.
                        queue.lock().expect("queue").retain(|(_, j)| j.task.id() != task);
                        stats.note_unreachable(task, error);
                    }
                    Msg::Exit => alive -= 1,
                    Msg::Flush => {}
                }
            }
            if let Some(dec) = decoder.as_mut() {
                // Every waiting state joins now; every live answer advances one token.
                let asked = Instant::now();
                for (state, key, reply) in pending.drain(..) {
                    off_runtime(|| dec.admit(admitted, &state, key))?;
                    answering.insert(admitted, reply);
                    admitted += 1;
                }
                off_runtime(|| dec.prefill())?;
                let prefilled = Instant::now();
                if dec.live() > 0 {
                    stats.policy_calls += 1;
                    stats.mean_batch += dec.live() as f64;
                    for (id, d) in off_runtime(|| dec.step())? {
                        let reply = answering.remove(&id).expect("an admitted state");
                        let _ = reply.send(d);
                    }
                }
                stats.prefill_secs += (prefilled - asked).as_secs_f64();
                stats.decode_secs += prefilled.elapsed().as_secs_f64();
                stats.policy_secs += asked.elapsed().as_secs_f64();
                first_wait = None;
                // the envs' tasks on this thread move on between steps (a current-thread
                // runtime has no other thread for them)
                tokio::task::yield_now().await;
                continue;
            }
            // One policy call serves every env that is waiting: call when all live envs
            // wait, or when the window since the first request has passed.
            let window_over = self.one_state_per_call
                || flush
                || first_wait.is_some_and(|t| t.elapsed() >= self.batch_wait);
            if !pending.is_empty() && (pending.len() >= alive || window_over) {
                let alone = self.one_state_per_call && !policy.batch_invariant();
                let per_call = if alone { 1 } else { pending.len() };
                let mut waiting = std::mem::take(&mut pending);
                while !waiting.is_empty() {
                    let rest = waiting.split_off(per_call.min(waiting.len()));
                    let call = std::mem::replace(&mut waiting, rest);
                    let states: Vec<ScreenState> = call.iter().map(|(s, _, _)| s.clone()).collect();
                    let keys: Vec<u64> = call.iter().map(|(_, k, _)| *k).collect();
                    let asked = Instant::now();
                    let decisions = off_runtime(|| policy.act_keyed(&states, &keys))?;
                    stats.policy_secs += asked.elapsed().as_secs_f64();
                    anyhow::ensure!(
                        decisions.len() == states.len(),
                        "the policy returned {} actions for {} states",
                        decisions.len(),
                        states.len()
                    );
                    stats.policy_calls += 1;
                    stats.mean_batch += states.len() as f64;
                    for ((_, _, reply), d) in call.into_iter().zip(decisions) {
                        let _ = reply.send(d);
                    }
                }
                first_wait = None;
            }
        }
        if crate::env::profiles::stopping() {
            // The signal handler ends the process once the browsers are gone. Until then
            // nothing may follow this collection (a report, a checkpoint) as if it had
            // finished: it waits here.
            std::future::pending::<()>().await;
        }
        for (slot, h) in self.envs.iter_mut().zip(handles) {
            *slot = h.await?;
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        stats.seconds = t0.elapsed().as_secs_f64();
        stats.mean_batch /= stats.policy_calls.max(1) as f64;
        if let Some(e) = fatal {
            return Err(anyhow::anyhow!(e));
        }
        Ok(stats)
    }

    fn progress_bar(&self, n: usize) -> Option<indicatif::ProgressBar> {
        if !self.progress {
            return None;
        }
        let b = indicatif::ProgressBar::new(n as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} episodes  {per_sec}  eta {eta}")
                .expect("static template"),
        );
        Some(b)
    }

    /// The versions of the first running browser (see [`GuiEnv::browser_versions`]).
    pub fn browser_versions(&self) -> Option<crate::env::BrowserVersions> {
        self.envs.iter().flatten().find_map(GuiEnv::browser_versions)
    }

    /// Close every browser.
    pub async fn close(&mut self) {
        for slot in &mut self.envs {
            if let Some(mut env) = slot.take() {
                env.close().await;
            }
        }
    }
}

/// What a worker shares with the collection.
struct WorkerCtx {
    cfg: EnvConfig,
    queue: Arc<Mutex<VecDeque<(usize, Job)>>>,
    tx: mpsc::UnboundedSender<Msg>,
    keep_frames: bool,
    policy_name: String,
    unreachable: UnreachableTask,
    started: Started,
}

/// The ids of the tasks an episode of which has started ([`Collector::started`]).
type Started = Arc<Mutex<std::collections::HashSet<String>>>;

fn has_started(started: &Started, task: Option<&str>) -> bool {
    let s = started.lock().expect("started");
    task.map_or(!s.is_empty(), |t| s.contains(t))
}

async fn worker(mut env: Option<GuiEnv>, ctx: WorkerCtx) -> Option<GuiEnv> {
    let WorkerCtx { cfg, queue, tx, keep_frames, policy_name, unreachable, started } = ctx;
    loop {
        let Some((i, job)) = queue.lock().expect("queue").pop_front() else { break };
        let e = match env.as_mut() {
            Some(e) => {
                if e.task().id() != job.task.id() {
                    e.set_task(job.task.clone());
                }
                e
            }
            None => env.insert(GuiEnv::new(job.task.clone(), cfg.clone())),
        };
        let (mut agreed, mut unreached) = (None, false);
        let r = episode(e, i, &job, &tx, keep_frames, &policy_name, &started).await.map(|ended| {
            (agreed, unreached) = (ended.agreed, ended.unreached);
            ended.rec
        });
        let id = job.task.id().to_string();
        let first_of_task = !has_started(&started, Some(&id));
        // Before any episode has started (of this collector, or of this task when the
        // collection skips a task whose page does not load), a page that never loads is a
        // user error (a wrong URL), not bad luck. A browser that crashed there is not the
        // task's doing: that episode is an env error like any other (a bench re-runs it).
        let msg = match (r, unreachable) {
            (Ok(rec), UnreachableTask::SkipTask) if first_of_task && unreached => {
                Msg::Unreachable(id, rec.trajectory.outcome.error.clone().unwrap_or_default())
            }
            (Ok(rec), UnreachableTask::Abort) if !has_started(&started, None) && unreached => Msg::Done(
                i,
                Err(EnvError::Setup(rec.trajectory.outcome.error.clone().unwrap_or_default())),
                None,
            ),
            (r, _) => Msg::Done(i, r.map(Box::new), agreed),
        };
        if tx.send(msg).is_err() {
            break;
        }
    }
    let _ = tx.send(Msg::Exit);
    env
}

/// How an episode ended, for its worker.
struct Ended {
    rec: Recorded,
    /// Whether the task's reward model agreed with its check (`None`: no model).
    agreed: Option<bool>,
    /// The episode never started because the task's first page did not load or did not
    /// behave as its protocol says: the task's failure, not the browser's.
    unreached: bool,
}

async fn episode(
    env: &mut GuiEnv,
    index: usize,
    job: &Job,
    tx: &mpsc::UnboundedSender<Msg>,
    keep_frames: bool,
    policy_name: &str,
    tasks_started: &Started,
) -> Result<Ended, EnvError> {
    let mut traj = Trajectory {
        version: FORMAT_VERSION,
        task_id: job.task.id().to_string(),
        task_digest: job.task.source_digest().map(str::to_string),
        seed: job.seed,
        instruction: String::new(),
        frame: Default::default(),
        max_steps: Some(env.max_steps()),
        rules: env.rules(),
        policy: policy_name.to_string(),
        group: job.group,
        steps: vec![],
        final_frame: None,
        outcome: Outcome { reward: 0.0, status: EpisodeStatus::Running, steps: 0, error: None },
        judge: None,
    };
    let mut frames = Vec::new();
    let started = match &job.prefix {
        None => env
            .reset(job.seed)
            .await
            .map(|(obs, _)| Reached { obs, steps: Vec::new() })
            .map_err(PrefixError::Env),
        Some(p) => p.replay(env).await,
    };
    let mut obs = match started {
        Ok(reached) => {
            tasks_started.lock().expect("started").insert(job.task.id().to_string());
            if let Some(p) = &job.prefix {
                traj.steps = reached.trajectory_steps(&p.steps);
                traj.outcome.reward = traj.steps.iter().map(|s| s.reward).sum();
                if keep_frames {
                    frames.extend(reached.steps.iter().map(|(seen, _)| seen.screenshot.clone()));
                }
            }
            reached.obs
        }
        // A browser that cannot start at all is the user's to fix until one has worked;
        // afterwards (a Grid refusing a session, a crashed relaunch) it costs one rollout.
        Err(PrefixError::Env(e @ (EnvError::Setup(_) | EnvError::Launch(_))))
            if !has_started(tasks_started, None) =>
        {
            return Err(e)
        }
        Err(e) => {
            let unreached = matches!(&e, PrefixError::Env(env) if UnreachableTask::is_the_tasks(env));
            traj.outcome.status = EpisodeStatus::EnvError;
            traj.outcome.error = Some(e.to_string());
            return Ok(Ended { rec: Recorded { trajectory: traj, frames: vec![] }, agreed: None, unreached });
        }
    };
    traj.instruction = obs.instruction.clone();
    traj.frame = obs.frame;
    // The screenshots before the final one that the task's judge looks at.
    let earlier = job.task.learned_reward().map_or(0, |l| l.frames() - 1);
    let mut recent: VecDeque<std::sync::Arc<image::RgbImage>> = VecDeque::new();
    loop {
        let (reply_tx, reply_rx) = oneshot::channel();
        if keep_frames {
            frames.push(obs.screenshot.clone());
        }
        if earlier > 0 {
            recent.push_back(obs.screenshot.clone());
            if recent.len() > earlier {
                recent.pop_front();
            }
        }
        tx.send(Msg::Act(
            obs.clone(),
            stream_key(job.stream.map_or(index, |s| s as usize), traj.steps.len() as u32),
            reply_tx,
        ))
        .map_err(|_| EnvError::Task("collection stopped".into()))?;
        let asked = Instant::now();
        let d = reply_rx.await.map_err(|_| EnvError::Task("the policy stopped answering".into()))?;
        let policy_ms = asked.elapsed().as_secs_f64() * 1e3;
        let (action_text, out) = match d.failure {
            // The policy could not answer: nothing is executed, and the episode is kept as
            // the policy's failure rather than the agent's.
            Some(PolicyFailure::Error(e)) => {
                // (The frame it was shown stays as the final frame.)
                traj.outcome.status = EpisodeStatus::PolicyError;
                traj.outcome.error = Some(e);
                break;
            }
            // An answer with no action in it is an invalid step, kept verbatim so a replay
            // meets the same text.
            Some(PolicyFailure::Unparsable(e)) => {
                let text = d.answer.clone().unwrap_or_default();
                (text, env.step_unparsed(e).await?)
            }
            None => (d.action.to_string(), env.step(&d.action).await?),
        };
        traj.outcome.reward += out.reward;
        traj.steps.push(TrajStep {
            action: action_text,
            reward: out.reward,
            status: out.info.status,
            timings: out.info.timings,
            frame: None,
            action_error: out.info.action_error.clone(),
            token_logprobs: d.token_logprobs,
            tokens: d.tokens,
            // `obs` is replaced by the next observation just below.
            elements: std::mem::take(&mut obs.elements),
            policy_ms,
            answer: d.answer,
            prefix: false,
        });
        obs = out.obs;
        if out.terminated || out.truncated {
            traj.outcome.status = out.info.status;
            traj.outcome.error = out.info.env_error;
            break;
        }
    }
    let agreed = match job.task.learned_reward() {
        Some(learned) => {
            recent.push_back(obs.screenshot.clone());
            super::scoring::apply_learned_reward(&mut traj, recent.make_contiguous(), learned)?
        }
        None => None,
    };
    if keep_frames && traj.outcome.status != EpisodeStatus::PolicyError {
        frames.push(obs.screenshot);
    }
    traj.outcome.steps = traj.steps.len() as u32;
    Ok(Ended { rec: Recorded { trajectory: traj, frames }, agreed, unreached: false })
}
