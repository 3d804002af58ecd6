//! `guirl play`: one env stepped by hand, a line at a time, for writing task specs and
//! recording demonstrations.
//!
//! [`Play`] reads lines (an action in the text form, or a `:command`) and writes what
//! happened to any `Write`: the instruction after a reset, a status line after each step,
//! the path of the screenshot it keeps current, and, on request, the page's elements. It
//! needs no terminal, so a script (or a test) drives it as well as a person.
//!
//! Malformed action lines are refused with the parser's message and do not step (a
//! demonstration holds no junk); an action that parses but cannot be executed (a point
//! off the screen) is an env step like any other, with the env's `action_error`. With a
//! [`TrajectoryWriter`], every *finished* episode (terminated or truncated) is appended
//! in the format of `guirl run --record`, frames included, under policy name `human`;
//! an episode left unfinished (by `:reset` or `:quit`) is not recorded.
//!
//! With [`PlayOptions::capture`] the actions come from a person using the visible browser
//! window instead of from lines (see [`crate::env::capture`] and [`Play::poll_capture`]);
//! lines then only carry commands, `:done` among them.

use super::store::TrajectoryWriter;
use super::trajectory::{Outcome, Recorded, TrajStep, Trajectory};
use crate::env::{encode_png, EnvConfig, EpisodeStatus, GuiAction, GuiEnv, ScreenState, StepOutcome};
use crate::tasks::Task;
use anyhow::Context;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

mod capture;

/// The policy name recorded trajectories carry.
pub const HUMAN: &str = "human";

/// The action forms, as printed after a malformed action line.
pub const ACTIONS: &str = "\
actions (one a line, screenshot pixels, origin top-left):
  click(x, y)  double_click(x, y)  right_click(x, y)  hover(x, y)
  drag(x1, y1, x2, y2)  scroll(x, y, dx, dy)  type(\"text\")  key(Enter)  key(ctrl+a)
  wait(ms)  done()";

/// The lines [`Play`] understands, as `:help` prints them (after [`ACTIONS`]).
pub const COMMANDS: &str = "\
commands:
  :elements       the visible interactive elements (tag, text, box, centre)
  :done           end the episode with done() (the task's verdict, else a fail)
  :reset [SEED]   a new episode (default: the next seed)
  :help           this text
  :quit           stop (end of input also stops)";

/// How a [`Play`] session runs.
#[derive(Debug, Clone)]
pub struct PlayOptions {
    /// Seed of the first episode.
    pub seed: u64,
    /// Where the current screenshot is written (overwritten after every reset and step).
    pub screenshot: PathBuf,
    /// One JSON object a line per event instead of text.
    pub json: bool,
    /// Record what a person does in the (visible) browser window instead of reading
    /// actions from lines.
    pub capture: bool,
    /// Open the first episode at a recorded episode's mid-episode state (its seed is the
    /// session's first seed): its steps are replayed and checked screen by screen, and a
    /// recorded episode keeps them, marked as replayed.
    pub from: Option<super::prefix::Prefix>,
}

/// Whether to go on reading lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next line.
    Continue,
    /// The session is over (`:quit`).
    Quit,
}

/// The episode being played.
struct Current {
    rec: Recorded,
    obs: ScreenState,
    shown: Instant,
    over: bool,
}

/// What the capture (`--capture`, in `capture.rs`) knows between polls.
#[derive(Debug, Default)]
struct CaptureState {
    /// Polls in a row that could not read the page.
    failures: u32,
    /// The note that input after the episode's end is not recorded was given.
    said_over: bool,
}

/// An interactive session over one env, driven by lines.
pub struct Play {
    env: GuiEnv,
    opts: PlayOptions,
    writer: Option<TrajectoryWriter>,
    seed: u64,
    current: Option<Current>,
    capture: CaptureState,
    /// Episodes written to the trajectory set so far.
    pub recorded: usize,
}

impl Play {
    /// A session on `task`; with `writer`, finished episodes are recorded there. The
    /// browser starts at [`Play::start`].
    pub fn new(
        task: Arc<dyn Task>,
        cfg: EnvConfig,
        opts: PlayOptions,
        writer: Option<TrajectoryWriter>,
    ) -> Play {
        let seed = opts.seed;
        let capture = CaptureState::default();
        Play { env: GuiEnv::new(task, cfg), opts, writer, seed, current: None, capture, recorded: 0 }
    }

    /// Open the first episode (seed `opts.seed`). A browser or page that cannot start is
    /// an error here (the user's to fix).
    pub async fn start(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        match self.opts.from.take() {
            Some(p) => self.reset_to(p.seed, Some(&p), out).await,
            None => self.reset(self.seed, out).await,
        }
    }

    /// Handle one input line.
    pub async fn line(&mut self, line: &str, out: &mut dyn Write) -> anyhow::Result<Flow> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(Flow::Continue);
        }
        if let Some(cmd) = line.strip_prefix(':') {
            let mut words = cmd.split_whitespace();
            match (words.next().unwrap_or(""), words.next(), words.next()) {
                ("quit" | "q", None, _) => return Ok(Flow::Quit),
                ("help" | "h", None, _) => self.help(out, None)?,
                ("elements" | "e", None, _) => self.elements(out)?,
                ("done" | "d", None, _) => self.done(out).await?,
                ("reset" | "r", seed, None) => match seed.map(str::parse::<u64>).transpose() {
                    Ok(seed) => {
                        let seed = seed.unwrap_or(self.seed + u64::from(self.current.is_some()));
                        if let Err(e) = self.reset(seed, out).await {
                            self.error(out, &format!("reset failed: {e:#}"))?;
                        }
                    }
                    Err(_) => self.error(out, "`:reset` takes a seed, a whole number (`:reset 7`)")?,
                },
                _ => self.help(out, Some(&format!("unknown command `{line}`")))?,
            }
            return Ok(Flow::Continue);
        }
        if self.opts.capture {
            let msg = "with --capture the actions are what you do in the browser window; lines take \
                       :done, :elements, :reset [SEED], :help and :quit";
            self.error(out, msg)?;
        } else {
            self.act(line, out).await?;
        }
        Ok(Flow::Continue)
    }

    /// End the session: say whether an unfinished episode was left out, close the browser.
    pub async fn finish(mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        self.drop_unfinished(out)?;
        self.emit(
            out,
            json!({"event": "quit", "recorded": self.recorded}),
            format!("quit: {} episode(s) recorded", self.recorded),
        )?;
        self.env.close().await;
        Ok(())
    }

    /// Forget the current episode; when recording, say if it had steps and is left out.
    fn drop_unfinished(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        let left = match self.current.take() {
            Some(c) if !c.over && self.writer.is_some() => c.rec.trajectory.steps.len(),
            _ => 0,
        };
        if left == 0 {
            return Ok(());
        }
        self.emit(
            out,
            json!({"event": "note", "message": "unfinished episode not recorded", "steps": left}),
            format!("note: the unfinished episode ({left} steps) is not recorded; only finished ones are"),
        )
    }

    async fn reset(&mut self, seed: u64, out: &mut dyn Write) -> anyhow::Result<()> {
        self.reset_to(seed, None, out).await
    }

    /// A new episode on `seed`, at the reset screen or, with `prefix`, after its steps.
    async fn reset_to(
        &mut self,
        seed: u64,
        prefix: Option<&super::prefix::Prefix>,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        self.drop_unfinished(out)?;
        let (obs, steps, frames) = match prefix {
            None => (self.env.reset(seed).await?.0, Vec::new(), Vec::new()),
            Some(p) => {
                let reached = p.replay(&mut self.env).await?;
                let frames = reached.steps.iter().map(|(seen, _)| seen.screenshot.clone()).collect();
                (reached.obs.clone(), reached.trajectory_steps(&p.steps), frames)
            }
        };
        self.seed = seed;
        // `+ 0.0`: a float sum of nothing is -0.0, which would print as "total=-0.000".
        let reward: f64 = steps.iter().map(|s| s.reward).sum::<f64>() + 0.0;
        let n = steps.len();
        let mut traj = Trajectory::new(
            self.env.task().id(),
            seed,
            steps,
            Outcome { reward, status: EpisodeStatus::Running, steps: n as u32, error: None },
        );
        traj.instruction = obs.instruction.clone();
        traj.frame = obs.frame;
        traj.max_steps = Some(self.env.max_steps());
        traj.rules = self.env.rules();
        traj.task_digest = self.env.task().source_digest().map(str::to_string);
        traj.policy = HUMAN.into();
        let shot = self.write_screenshot(&obs)?;
        self.emit(
            out,
            json!({"event": "reset", "task": self.env.task().id(), "seed": seed, "instruction": obs.instruction,
                   "max_steps": self.env.max_steps(), "screenshot": shot, "step": n, "total": reward}),
            format!(
                "task={} seed={seed} max_steps={}\ninstruction: {}\n{}step={n} status=running reward=0.000 total={reward:.3}\nscreenshot: {shot}",
                self.env.task().id(),
                self.env.max_steps(),
                obs.instruction,
                if n > 0 { format!("replayed {n} recorded step(s); every screen matched the recording\n") } else { String::new() },
            ),
        )?;
        let rec = Recorded { trajectory: traj, frames };
        self.current = Some(Current { rec, obs, shown: Instant::now(), over: false });
        if self.opts.capture {
            self.start_capture(out).await?;
        }
        Ok(())
    }

    /// Why no action can be taken now (no episode, or it is over), if so.
    fn closed(&self) -> Option<String> {
        let Some(cur) = self.current.as_ref() else {
            return Some("no episode: `:reset` starts one".into());
        };
        let s = &cur.rec.trajectory.outcome;
        cur.over.then(|| {
            format!("the episode is over ({}, reward {:.3}); `:reset` starts the next", s.status, s.reward)
        })
    }

    /// `:done`: end the episode with `done()` (after what the window captured before it).
    async fn done(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        if self.opts.capture {
            self.poll_capture(out).await?;
        }
        match self.closed() {
            Some(why) => self.error(out, &why),
            None => self.apply(GuiAction::Done, false, out).await,
        }
    }

    async fn act(&mut self, line: &str, out: &mut dyn Write) -> anyhow::Result<()> {
        // A line that is no action says so first, open episode or not.
        let action = match GuiAction::parse(line) {
            Ok(a) => a,
            Err(e) => {
                let msg = format!("{e}; not executed (no step taken)");
                self.emit(
                    out,
                    json!({"event": "error", "message": msg, "help": ACTIONS}),
                    format!("error: {msg}\n{ACTIONS}"),
                )?;
                return Ok(());
            }
        };
        if let Some(why) = self.closed() {
            return self.error(out, &why);
        }
        self.apply(action, false, out).await
    }

    /// Step with `action`, or, when `happened` (captured from the window), record it
    /// without executing it; then keep the step, say what happened, and end the episode
    /// if it is over.
    async fn apply(&mut self, action: GuiAction, happened: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        let cur = self.current.as_ref().expect("an open episode");
        let policy_ms = cur.shown.elapsed().as_secs_f64() * 1e3;
        let stepped =
            if happened { self.env.record_step(&action).await } else { self.env.step(&action).await };
        let out_step: StepOutcome = match stepped {
            Ok(o) => o,
            Err(e) => {
                // Nothing sensible can follow in this episode; it is not recorded.
                self.current = None;
                return self.error(out, &format!("the step failed: {e}; `:reset` starts a new episode"));
            }
        };
        let cur = self.current.as_mut().expect("checked above");
        let t = &mut cur.rec.trajectory;
        cur.rec.frames.push(cur.obs.screenshot.clone());
        t.outcome.reward += out_step.reward;
        t.steps.push(TrajStep {
            action: action.to_string(),
            reward: out_step.reward,
            status: out_step.info.status,
            timings: out_step.info.timings,
            frame: None,
            action_error: out_step.info.action_error.clone(),
            token_logprobs: vec![],
            tokens: vec![],
            elements: std::mem::take(&mut cur.obs.elements),
            policy_ms,
            answer: None,
            prefix: false,
        });
        t.outcome.steps = t.steps.len() as u32;
        cur.obs = out_step.obs;
        cur.shown = Instant::now();
        cur.over = out_step.terminated || out_step.truncated;
        if cur.over {
            t.outcome.status = out_step.info.status;
            t.outcome.error = out_step.info.env_error.clone();
            // A task scored by a reward model is scored here as in `run` and training.
            if let Some(learned) = self.env.task().learned_reward() {
                let mut shots =
                    cur.rec.frames[cur.rec.frames.len().saturating_sub(learned.frames() - 1)..].to_vec();
                shots.push(cur.obs.screenshot.clone());
                super::scoring::apply_learned_reward(t, &shots, learned)?;
            }
            cur.rec.frames.push(cur.obs.screenshot.clone());
        }
        // As `serve` shows it: `invalid_action` for a wasted step the episode goes on after.
        let (n, total, status) = (t.steps.len(), t.outcome.reward, out_step.info.shown_status());
        let err = out_step.info.action_error.clone();
        let obs = cur.obs.clone();
        let shot = self.write_screenshot(&obs)?;
        let err_text = err.as_deref().map(|e| format!(" error={e:?}")).unwrap_or_default();
        let said = if happened { format!(" action={action}") } else { String::new() };
        self.emit(
            out,
            json!({"event": "step", "action": action.to_string(), "step": n, "status": status,
                   "reward": out_step.reward, "total": total, "action_error": err, "captured": happened,
                   "done": out_step.terminated || out_step.truncated, "screenshot": shot}),
            format!(
                "step={n}{said} status={status} reward={:.3} total={total:.3}{err_text}\nscreenshot: {shot}",
                out_step.reward
            ),
        )?;
        if out_step.terminated || out_step.truncated {
            self.episode_over(out)?;
        }
        Ok(())
    }

    /// The current episode has ended: record it, and say so.
    fn episode_over(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        let cur = self.current.as_ref().expect("an episode");
        let o = cur.rec.trajectory.outcome.clone();
        let mut recorded = None;
        if let Some(w) = self.writer.as_mut() {
            w.append(&cur.rec).context("recording the episode")?;
            self.recorded += 1;
            recorded = Some(w.dir().display().to_string());
        }
        let where_ = recorded.as_ref().map(|d| format!(", recorded in {d}")).unwrap_or_default();
        let err = o.error.as_deref().map(|e| format!(" error={e:?}")).unwrap_or_default();
        self.emit(
            out,
            json!({"event": "episode_end", "seed": self.seed, "status": o.status, "reward": o.reward,
                   "steps": o.steps, "error": o.error, "recorded": recorded}),
            format!(
                "episode over: seed={} status={} reward={:.3} steps={}{err}{where_}; `:reset` starts the next",
                self.seed, o.status, o.reward, o.steps
            ),
        )
    }

    fn elements(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        let Some(cur) = self.current.as_ref() else {
            return self.error(out, "no episode: `:reset` starts one");
        };
        let mut text = format!("{} elements:", cur.obs.elements.len());
        let mut list = Vec::new();
        for (i, e) in cur.obs.elements.iter().enumerate() {
            let (cx, cy) = e.bbox.center();
            let b = e.bbox;
            let mut desc = format!("\n  [{i}] {}", e.tag);
            for (k, v) in [("id", &e.id), ("text", &e.text), ("label", &e.label), ("value", &e.value)] {
                if !v.is_empty() {
                    desc.push_str(&format!(" {k}={v:?}"));
                }
            }
            if e.checked {
                desc.push_str(" checked");
            }
            desc.push_str(&format!(
                " box=({:.0}, {:.0}, {:.0}, {:.0}) centre=({cx}, {cy})",
                b.x, b.y, b.w, b.h
            ));
            text.push_str(&desc);
            list.push(json!({"tag": e.tag, "id": e.id, "text": e.text, "label": e.label, "value": e.value,
                             "checked": e.checked, "bbox": b, "center": [cx, cy]}));
        }
        self.emit(out, json!({"event": "elements", "elements": list}), text)
    }

    fn help(&self, out: &mut dyn Write, why: Option<&str>) -> anyhow::Result<()> {
        let help = format!("{ACTIONS}\n{COMMANDS}");
        let text = match why {
            Some(w) => format!("error: {w}\n{help}"),
            None => help.clone(),
        };
        let event = if why.is_some() { "error" } else { "help" };
        self.emit(out, json!({"event": event, "message": why, "help": help}), text)
    }

    fn error(&self, out: &mut dyn Write, msg: &str) -> anyhow::Result<()> {
        self.emit(out, json!({"event": "error", "message": msg}), format!("error: {msg}"))
    }

    fn emit(&self, out: &mut dyn Write, event: Value, text: String) -> anyhow::Result<()> {
        if self.opts.json {
            writeln!(out, "{event}")?;
        } else {
            writeln!(out, "{text}")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Write `obs`'s screenshot to the screenshot file; its path as printed.
    fn write_screenshot(&self, obs: &ScreenState) -> anyhow::Result<String> {
        let p = &self.opts.screenshot;
        std::fs::write(p, encode_png(&obs.screenshot)).with_context(|| format!("writing {}", p.display()))?;
        Ok(p.display().to_string())
    }
}
