//! The session table both transports share: one `GuiEnv` (one browser) per session,
//! a capacity limit, and the idle reaper's bookkeeping.

use super::error::ApiError;
use super::guard::RequestGuard;
use super::shm::{FrameDir, FrameFile};
use super::wire::{self, ImageFormat, SessionOptions};
use crate::env::url_policy::UrlPolicy;
use crate::env::{EnvConfig, EpisodeRules, EpisodeStatus, GuiEnv};
use crate::tasks::Task;
use axum::body::Bytes;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The result of a reset or a step, before a transport formats it.
#[derive(Debug, Clone)]
pub struct Transition {
    /// The observation with `"screenshot": null` (None when a reset failed in the browser).
    pub observation: Option<Value>,
    /// The screenshot, encoded as the observation's `screenshot_format` says (None for
    /// `none` and `shm`): base64 into the JSON, or the bytes after it in a binary frame.
    pub image: Option<Bytes>,
    /// Reward of the step (0 after reset).
    pub reward: f64,
    /// The episode ended by the task's verdict.
    pub terminated: bool,
    /// The episode was cut short (step limit, or the browser failed).
    pub truncated: bool,
    /// Status, errors, rewards, timings and episode counters.
    pub info: Map<String, Value>,
}

/// An ending scored by the task's reward model or judge, as `guirl run` and training score
/// it: the score on the final screen goes into `info.reward_model` (and a judge's verdict
/// into `info.judge`); where the scorer decides (no success check of its own), it is the
/// step's reward, and a score at or above the threshold makes the episode a success. A
/// deciding judge that gives no verdict makes the episode `judge_error`.
fn learned_ending(
    learned: &crate::tasks::LearnedReward,
    out: &mut crate::env::StepOutcome,
    info: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let scored = crate::rollout::scoring::learned_verdict(
        learned,
        std::slice::from_ref(&out.obs.screenshot),
        &out.obs.instruction,
        &out.obs.history,
    )
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let (p, says_success) = (scored.p, scored.success);
    info.insert(
        "reward_model".into(),
        json!({ "p": p, "success": says_success, "threshold": learned.threshold, "decides": learned.decides }),
    );
    if let Some(j) = &scored.judge {
        info.insert("judge".into(), json!(j));
    }
    if learned.decides {
        if let Some(e) = scored.failed {
            out.info.status = EpisodeStatus::JudgeError;
            info.insert("status".into(), json!(EpisodeStatus::JudgeError.as_str()));
            info.insert("error".into(), json!(e));
            return Ok(());
        }
        out.reward = p;
        if says_success {
            out.info.status = EpisodeStatus::Success;
            info.insert("status".into(), json!(EpisodeStatus::Success.as_str()));
        }
    }
    Ok(())
}

/// What a session holds while nobody uses it.
struct SessionEnv {
    env: Option<GuiEnv>,
    /// The URL policy in the env's browser.
    guard: Option<Arc<RequestGuard>>,
    opts: SessionOptions,
    seed: Option<u64>,
    /// Resets so far (the OpenEnv `episode_id`).
    episodes: u64,
    steps: u32,
    status: Option<EpisodeStatus>,
    running: bool,
    closed: bool,
    /// Where `shm` frames go (made at the first).
    frames: Option<FrameFile>,
}

/// One client's environment.
pub struct Session {
    /// Its id (random hex).
    pub id: String,
    /// `rest` or `ws`.
    pub transport: &'static str,
    created: SystemTime,
    last_active: Mutex<Instant>,
    inner: tokio::sync::Mutex<SessionEnv>,
    base: EnvConfig,
    policy: Arc<UrlPolicy>,
    frame_dir: Arc<FrameDir>,
}

/// All sessions of a server.
pub struct SessionTable {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    max: usize,
    base: EnvConfig,
    policy: Arc<UrlPolicy>,
    frame_dir: Arc<FrameDir>,
}

fn random_id() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..16).map(|_| format!("{:02x}", rng.gen::<u8>())).collect()
}

impl SessionTable {
    /// A table of at most `max` sessions whose envs start from `base` and whose browsers
    /// request only what `policy` allows.
    pub fn new(max: usize, base: EnvConfig, policy: UrlPolicy) -> SessionTable {
        SessionTable {
            sessions: Mutex::new(HashMap::new()),
            max,
            base,
            policy: Arc::new(policy),
            frame_dir: Arc::new(FrameDir::default()),
        }
    }

    /// Most sessions at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Open a session (no browser yet: it starts at the first reset), or 503 when full.
    pub fn open(&self, transport: &'static str) -> Result<Arc<Session>, ApiError> {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.max {
            return Err(ApiError::capacity(map.len(), self.max));
        }
        let s = Arc::new(Session {
            id: random_id(),
            transport,
            created: SystemTime::now(),
            last_active: Mutex::new(Instant::now()),
            inner: tokio::sync::Mutex::new(SessionEnv {
                env: None,
                guard: None,
                opts: SessionOptions::default(),
                seed: None,
                episodes: 0,
                steps: 0,
                status: None,
                running: false,
                closed: false,
                frames: None,
            }),
            base: self.base.clone(),
            policy: self.policy.clone(),
            frame_dir: self.frame_dir.clone(),
        });
        map.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    /// The session `id`, or 404.
    pub fn get(&self, id: &str) -> Result<Arc<Session>, ApiError> {
        let map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id).cloned().ok_or_else(|| ApiError::unknown_session(id))
    }

    /// All open sessions.
    pub fn all(&self) -> Vec<Arc<Session>> {
        let map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = map.values().cloned().collect();
        v.sort_by_key(|s| s.created);
        v
    }

    /// Close session `id` and kill its browser (waits for a request in flight on it).
    pub async fn close(&self, id: &str) -> Result<(), ApiError> {
        let s = self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        let s = s.ok_or_else(|| ApiError::unknown_session(id))?;
        s.shut().await;
        Ok(())
    }

    /// Close every session (at shutdown).
    pub async fn close_all(&self) {
        let all: Vec<_> =
            self.sessions.lock().unwrap_or_else(|e| e.into_inner()).drain().map(|(_, s)| s).collect();
        futures::future::join_all(all.iter().map(|s| s.shut())).await;
        self.frame_dir.remove();
    }

    /// Close the sessions idle for longer than `timeout` that no request is using;
    /// returns how many were closed.
    pub async fn reap_idle(&self, timeout: Duration) -> usize {
        let idle: Vec<String> = self
            .all()
            .into_iter()
            .filter(|s| s.idle() > timeout && s.inner.try_lock().is_ok())
            .map(|s| s.id.clone())
            .collect();
        let mut n = 0;
        for id in idle {
            tracing::info!(session = %id, "closing a session idle for over {} s", timeout.as_secs());
            if self.close(&id).await.is_ok() {
                n += 1;
            }
        }
        n
    }
}

impl Session {
    /// Time since the last request on this session ended or began.
    pub fn idle(&self) -> Duration {
        self.last_active.lock().unwrap_or_else(|e| e.into_inner()).elapsed()
    }

    /// Mark the session as used now.
    pub fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    async fn shut(&self) {
        let mut inner = self.inner.lock().await;
        inner.closed = true;
        inner.running = false;
        inner.frames = None;
        if let Some(mut env) = inner.env.take() {
            env.close().await;
        }
    }

    async fn lock(&self) -> Result<tokio::sync::MutexGuard<'_, SessionEnv>, ApiError> {
        self.touch();
        self.peek().await
    }

    /// The session without counting as activity (reading its state must not keep an
    /// abandoned session alive).
    async fn peek(&self) -> Result<tokio::sync::MutexGuard<'_, SessionEnv>, ApiError> {
        let g = self.inner.lock().await;
        if g.closed {
            return Err(ApiError::unknown_session(&self.id));
        }
        Ok(g)
    }

    /// End the running episode, if any, with no status (after a refused reset).
    pub async fn end_episode(&self) {
        if let Ok(mut g) = self.lock().await {
            g.running = false;
            g.status = None;
        }
    }

    /// Point the session at `task` with `opts` (a new env when the options change, the
    /// same browser when only the task does).
    pub async fn configure(&self, task: Option<Arc<dyn Task>>, opts: SessionOptions) -> Result<(), ApiError> {
        let mut g = self.lock().await?;
        let same_env_options =
            g.opts.strict_actions == opts.strict_actions && g.opts.wall_clock_ms == opts.wall_clock_ms;
        match (task, g.env.as_mut()) {
            (Some(task), Some(env)) if same_env_options => {
                if task.id() != env.task().id() {
                    env.set_task(task);
                }
            }
            (Some(task), _) => self.replace_env(&mut g, task, &opts).await,
            (None, Some(env)) if !same_env_options => {
                let task = env.task().clone();
                self.replace_env(&mut g, task, &opts).await;
            }
            (None, Some(_)) => {}
            (None, None) => return Err(ApiError::invalid(
                "missing_task",
                "this session has no task yet: give \"task\" (a task id, see GET /v1/tasks) or \"task_spec\"",
            )),
        }
        if let Some(env) = g.env.as_mut() {
            env.set_max_steps(opts.max_steps);
        }
        g.opts = opts;
        g.running = false;
        // Made now, so a client can check it reads the file before its first frame.
        if g.opts.screenshot == ImageFormat::Shm && g.frames.is_none() {
            g.frames = Some(self.frame_dir.file().map_err(shm_failed)?);
        }
        Ok(())
    }

    async fn replace_env(&self, g: &mut SessionEnv, task: Arc<dyn Task>, opts: &SessionOptions) {
        if let Some(mut old) = g.env.take() {
            old.close().await;
        }
        let cfg = EnvConfig {
            max_steps: opts.max_steps,
            rules: EpisodeRules {
                wall_clock_ms: opts.wall_clock_ms,
                strict_actions: opts.strict_actions,
                ..self.base.rules
            },
            ..self.base.clone()
        };
        let mut env = GuiEnv::new(task, cfg);
        // Every session's browser, task ids too: a ws reset may switch a browser from a
        // task id to a client's spec.
        let guard = RequestGuard::new(self.policy.clone());
        env.guard_requests(guard.check());
        let policy = self.policy.clone();
        env.guard_hosts(std::sync::Arc::new(move |name, addrs| {
            policy.check_host(name, addrs).map_err(|r| r.0)
        }));
        g.guard = Some(guard);
        g.env = Some(env);
    }

    /// The session's options now.
    pub async fn options(&self) -> Result<SessionOptions, ApiError> {
        Ok(self.lock().await?.opts.clone())
    }

    /// Task id, step limit and screenshot size of the session's task (when it has one).
    pub async fn describe(&self) -> Result<Value, ApiError> {
        let g = self.lock().await?;
        let env = g.env.as_ref().ok_or_else(|| ApiError::no_episode("this session has no task yet"))?;
        let vp = env.task().viewport();
        let mut d = json!({
            "session_id": self.id, "task_id": env.task().id(), "max_steps": env.max_steps(),
            "width": vp.width, "height": vp.height,
        });
        if let Some(f) = &g.frames {
            d["screenshot_shm"] = json!({ "path": f.path() });
        }
        Ok(d)
    }

    /// Start an episode for `seed` (a random one when None); `image` overrides the
    /// session's screenshot encoding for this answer.
    pub async fn reset(&self, seed: Option<u64>, image: wire::ImageOverride) -> Result<Transition, ApiError> {
        let mut g = self.lock().await?;
        let seed = seed.unwrap_or_else(|| rand::random::<u64>() >> 33);
        let opts = image.apply(g.opts.clone());
        image.allows(opts.screenshot)?;
        g.episodes += 1;
        g.seed = Some(seed);
        g.steps = 0;
        let env = g.env.as_mut().ok_or_else(|| {
            ApiError::invalid(
                "missing_task",
                "reset needs a task: give \"task\" (see GET /v1/tasks) or \"task_spec\"",
            )
        })?;
        let started = Instant::now();
        let result = env.reset(seed).await;
        let (observation, image, mut info, status) = match result {
            Ok((obs, ri)) => {
                let mut info = reset_info(None);
                info.insert("browser_started".into(), json!(ri.browser_started));
                if let Some(why) = &ri.replaced_after {
                    info.insert("browser_replaced_after".into(), json!(why));
                }
                info.insert("reset_ms".into(), json!(ri.reset_ms));
                let (observation, image) = wire::observation(obs, &opts);
                let (observation, image) = self.shared_frame(&mut g, &opts, observation, image)?;
                (Some(observation), image, info, EpisodeStatus::Running)
            }
            Err(e) => {
                tracing::warn!(session = %self.id, seed, "reset failed: {e}");
                let mut info = reset_info(Some(e.to_string()));
                info.insert("reset_ms".into(), json!(started.elapsed().as_secs_f64() * 1000.0));
                (None, None, info, EpisodeStatus::EnvError)
            }
        };
        g.running = status == EpisodeStatus::Running;
        g.status = Some(status);
        let truncated = !g.running;
        counters(&g, &mut info);
        blocked(&g, &mut info);
        Ok(Transition { observation, image, reward: 0.0, terminated: false, truncated, info })
    }

    /// Take one step with action text `action`; `image` overrides the session's
    /// screenshot encoding for this answer.
    pub async fn step(
        &self,
        action: &wire::StepAction,
        image: wire::ImageOverride,
    ) -> Result<Transition, ApiError> {
        let mut g = self.lock().await?;
        if !g.running {
            let why = match g.status {
                None => "no episode is running: reset the session first".to_string(),
                Some(s) => format!("the episode has ended (status {s}): reset the session to start another"),
            };
            return Err(ApiError::no_episode(why));
        }
        // The server's own share of the step (what it does around the env), so a client can
        // tell it from the env's and from the network's (`timings.serve_ms`).
        let started = Instant::now();
        let opts = image.apply(g.opts.clone());
        image.allows(opts.screenshot)?;
        let env = g.env.as_mut().expect("a running episode has an env");
        let env_started = Instant::now();
        let stepped = match action {
            wire::StepAction::Text(text) => env.step_text(text).await,
            wire::StepAction::TooLong(n) => {
                let why = format!("the action is {n} characters long; at most {}", wire::MAX_ACTION_CHARS);
                env.step_unparsed(why).await
            }
        };
        let mut out = stepped
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
        let env_time = env_started.elapsed();
        let mut info = wire::step_info(&out.info);
        let ended = out.terminated || out.truncated;
        if let Some(learned) =
            env.task().learned_reward().filter(|_| ended && !out.info.status.is_infrastructure_failure())
        {
            learned_ending(learned, &mut out, &mut info)?;
        }
        g.steps = out.obs.step;
        g.status = Some(out.info.status);
        g.running = !ended;
        counters(&g, &mut info);
        blocked(&g, &mut info);
        let (observation, image) = wire::observation(out.obs, &opts);
        let (observation, image) = self.shared_frame(&mut g, &opts, observation, image)?;
        if let Some(Value::Object(t)) = info.get_mut("timings") {
            let own = started.elapsed().saturating_sub(env_time);
            t.insert("serve_ms".into(), json!(own.as_secs_f64() * 1000.0));
        }
        Ok(Transition {
            observation: Some(observation),
            image,
            reward: out.reward,
            terminated: out.terminated,
            truncated: out.truncated,
            info,
        })
    }

    /// For `shm`: the pixels written to the session's frame file, and the observation
    /// naming it in `screenshot_shm`; other formats pass through.
    fn shared_frame(
        &self,
        g: &mut SessionEnv,
        opts: &SessionOptions,
        mut observation: Value,
        image: Option<Bytes>,
    ) -> Result<(Value, Option<Bytes>), ApiError> {
        let (ImageFormat::Shm, Some(pixels)) = (opts.screenshot, image.as_deref()) else {
            return Ok((observation, image));
        };
        if g.frames.is_none() {
            g.frames = Some(self.frame_dir.file().map_err(shm_failed)?);
        }
        let at = g.frames.as_mut().expect("made above").write(pixels).map_err(shm_failed)?;
        if let Some(obj) = observation.as_object_mut() {
            obj.insert("screenshot_shm".into(), json!(at));
        }
        Ok((observation, None))
    }

    /// A fresh screenshot of the session's page.
    pub async fn render(&self) -> Result<image::RgbImage, ApiError> {
        let g = self.lock().await?;
        let env = g
            .env
            .as_ref()
            .filter(|_| g.status.is_some())
            .ok_or_else(|| ApiError::no_episode("nothing to render yet: reset the session first"))?;
        env.render().await.map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "env_error", e.to_string()))
    }

    /// The session's state (OpenEnv's `state`: `episode_id`, `step_count`, and more).
    pub async fn state(&self) -> Result<Value, ApiError> {
        let g = self.peek().await?;
        let created = self.created.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let env = g.env.as_ref();
        Ok(json!({
            "session_id": self.id,
            "transport": self.transport,
            "episode_id": g.episodes,
            "step_count": g.steps,
            "task_id": env.map(|e| e.task().id().to_string()),
            "max_steps": env.map(|e| e.max_steps()),
            "seed": g.seed,
            "status": g.status.map(|s| s.as_str()),
            "running": g.running,
            "created_at": created,
            "idle_s": self.idle().as_secs_f64(),
            "browser_profile_dir": env.and_then(|e| e.browser_profile_dir()),
        }))
    }
}

fn shm_failed(e: std::io::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("cannot write frames to shared memory ({e}): ask for screenshot = \"raw\""),
    )
}

/// The `info` of a reset: the same fields as a step's, with nothing done yet.
fn reset_info(env_error: Option<String>) -> Map<String, Value> {
    let info = crate::env::StepInfo {
        status: if env_error.is_some() { EpisodeStatus::EnvError } else { EpisodeStatus::Running },
        raw_reward: 0.0,
        decayed_reward: 0.0,
        reason: None,
        action_error: None,
        env_error,
        timings: Default::default(),
    };
    wire::step_info(&info)
}

/// `info.blocked_urls`: the requests the URL policy blocked since the last answer (and
/// `blocked_more`, how many past the listed ones).
fn blocked(g: &SessionEnv, info: &mut Map<String, Value>) {
    let policy = g.guard.as_ref().map(|b| b.take_blocked()).unwrap_or_default();
    // Requests to this machine's loopback services, refused in every mode (see
    // `env::local_guard`).
    let local = g.env.as_ref().map(|e| e.take_blocked_urls()).unwrap_or_default();
    let (urls, more) = listed(policy, local);
    info.insert("blocked_urls".into(), json!(urls));
    if more > 0 {
        info.insert("blocked_more".into(), json!(more));
    }
}

/// The URL policy's refusals, then the loopback guard's, cut as the policy's are: at most
/// [`super::guard::MAX_LISTED`] listed in all, the rest counted.
fn listed(
    (mut urls, mut more): (Vec<String>, usize),
    (local, n): (Vec<String>, usize),
) -> (Vec<String>, usize) {
    urls.extend(local.iter().map(|u| wire::short(u)));
    more += n;
    if urls.len() > super::guard::MAX_LISTED {
        more += urls.len() - super::guard::MAX_LISTED;
        urls.truncate(super::guard::MAX_LISTED);
    }
    (urls, more)
}

fn counters(g: &SessionEnv, info: &mut Map<String, Value>) {
    let env = g.env.as_ref();
    info.insert("seed".into(), json!(g.seed));
    info.insert("step".into(), json!(g.steps));
    info.insert("max_steps".into(), json!(env.map(|e| e.max_steps())));
    info.insert("episode_id".into(), json!(g.episodes));
    info.insert("task_id".into(), json!(env.map(|e| e.task().id().to_string())));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_guards_refusals_are_listed_as_one_list_cut_alike() {
        let policy = ((0..15).map(|i| format!("http://10.0.0.{i}/")).collect(), 2);
        let mut local: Vec<String> = (0..9).map(|i| format!("http://127.0.0.1:{}/", 9000 + i)).collect();
        local[0] = format!("http://localhost:9515/{}", "a".repeat(280));
        let (urls, more) = listed(policy, (local, 1));
        assert_eq!(urls.len(), super::super::guard::MAX_LISTED);
        // 2 + 1 counted by the guards, 4 past the 20 listed
        assert_eq!(more, 7);
        assert!(urls[15].ends_with("[cut: 302 characters in all]"), "{}", urls[15]);
        assert_eq!(urls[16], "http://127.0.0.1:9001/");
    }
}
