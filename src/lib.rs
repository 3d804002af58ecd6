//! guirl: train and evaluate GUI agents with reinforcement learning in a real browser.
//!
//! A headless Chromium, driven over WebDriver and DevTools, is the environment; policies
//! see screenshots (and, in `pixels+dom` settings, the page's elements) and answer with
//! [`GuiAction`](env::GuiAction)s in one text form (`click(x, y)`, `type("...")`,
//! `key(Enter)`, ...); trainers turn task rewards into policy updates. The `guirl` command
//! ([`cli`]) is a thin layer over this library. The user guide is the mdBook in `docs/`.
//!
//! # Layers
//!
//! Data moves one way, and each arrow is a plain serde type: a task gives a
//! [`GuiEnv`](env::GuiEnv) its page, instruction and reward; the env gives a policy a
//! [`ScreenState`](env::ScreenState); the policy answers with a `GuiAction`; the collector
//! keeps the episode as a [`Trajectory`](rollout::Trajectory); the trainer learns from
//! groups of them. Modules import only from the layers below them:
//!
//! - [`tasks`]: where tasks come from: MiniWoB++ pages, the built-in suite, website specs
//!   (TOML), and the pages' server. [`tasks::load_task`] turns an id or a spec path into a
//!   task.
//! - [`env`](mod@env): the browser environment: a gymnasium-style [`GuiEnv`](env::GuiEnv)
//!   (`reset(seed)`, `step(&action)`, `render()`, `close()`), the action grammar, the
//!   observation, and the browser beneath (launch, DevTools, frame and page-time control).
//! - [`policy`]: the [`Policy`](policy::Policy) and [`TrainablePolicy`](policy::TrainablePolicy)
//!   traits and their implementations: random, scripted oracles, models behind an
//!   OpenAI-compatible API, the small Candle policy ([`policy::vlm`]), pretrained Qwen-VL
//!   backbones with LoRA ([`policy::qwen_vl`]), and the learned reward model.
//! - [`rollout`]: episodes over several browsers ([`Collector`](rollout::Collector)),
//!   trajectories and their on-disk format ([`TrajectoryWriter`](rollout::TrajectoryWriter),
//!   [`TrajectorySet`](rollout::TrajectorySet)), the GRPO groups buffer, replay, the HTML
//!   viewer and `guirl play`.
//! - [`train`]: the training loop (`guirl train`): advantage estimators (one a file),
//!   objectives, behaviour cloning, evaluation, checkpoints, metrics, plots, TensorBoard.
//! - [`bench`](mod@bench): environment speed (`guirl bench-env`), the benchmark harness (`guirl
//!   bench`) and the learning benchmark (`guirl bench-learn`).
//! - [`dist`]: data-parallel training over several processes (one per GPU, or CPU hosts):
//!   the ranks' rendezvous, gathers and gradient sums over TCP (gradients on CUDA over NCCL
//!   in a build with the `nccl` feature). It sits below `rollout`, whose collector splits
//!   its jobs over the ranks.
//! - [`serve`]: environments over REST and WebSocket for Python trainers (`guirl serve`),
//!   and a checkpoint behind an OpenAI-compatible API (`guirl serve-policy`).
//! - [`export`]: trajectory sets as parquet / JSON lines for veRL, TRL and `datasets`.
//! - [`doctor`]: checks of the set-up (`guirl doctor`).
//! - [`nn`]: guirl's own kernels: those both Candle policies train with, each with its own
//!   backward (candle's fused ops have none); decoding's, forward only, on the CPU and on
//!   CUDA; dropout's masks; and the launches of its CUDA kernels.
//!
//! # Example: open an env, reset, step, record
//!
//! A random policy plays one episode of MiniWoB++'s `click-test` (its pages come from
//! `scripts/setup.sh`), and the episode is appended to a trajectory set that `guirl view`,
//! `guirl replay` and `guirl export` read.
//!
//! ```no_run
//! use guirl::env::{EnvConfig, GuiEnv};
//! use guirl::policy::random::RandomPolicy;
//! use guirl::rollout::{Outcome, Recorded, TrajStep, Trajectory, TrajectoryWriter};
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     let task = guirl::tasks::load_task("miniwob/click-test")?;
//!     let mut env = GuiEnv::new(task, EnvConfig::default());
//!     let (mut obs, info) = env.reset(0).await?;
//!     println!("instruction: {}", obs.instruction);
//!
//!     let mut policy = RandomPolicy::new(0);
//!     let mut frames = vec![obs.screenshot.clone()];
//!     let (mut steps, mut total) = (Vec::new(), 0.0);
//!     let status = loop {
//!         let action = policy.sample(obs.screenshot.width(), obs.screenshot.height());
//!         let out = env.step(&action).await?;
//!         total += out.reward;
//!         steps.push(TrajStep::new(action.to_string(), out.reward, out.info.status));
//!         frames.push(out.obs.screenshot.clone());
//!         obs = out.obs;
//!         if out.terminated || out.truncated {
//!             break out.info.status;
//!         }
//!     };
//!
//!     let outcome = Outcome { reward: total, status, steps: steps.len() as u32, error: None };
//!     let mut trajectory = Trajectory::new(info.task_id, info.seed, steps, outcome);
//!     trajectory.instruction = obs.instruction.clone();
//!     let mut writer = TrajectoryWriter::open("runs/example".as_ref())?;
//!     writer.append(&Recorded { trajectory, frames })?; // frames/*.png + one jsonl line
//!     env.close().await;
//!     Ok(())
//! }
//! ```

#![warn(missing_docs)]

// The command's own lines to stdout and stderr. Unlike `println!` they do not panic when the
// stream is closed (`guirl tasks | head`, or a `| tee` that the same Ctrl-C stopped first):
// a report lost there must not cost the run its last checkpoint.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

pub mod bench;
pub mod cli;
pub mod dist;
pub mod doctor;
pub mod env;
pub mod export;
pub mod nn;
pub mod policy;
pub mod rollout;
pub mod serve;
pub mod tasks;
pub mod train;
