//! guirl: train and evaluate GUI agents with reinforcement learning in a real browser.
//!
//! - [`env`]: a headless Chromium behind WebDriver, as a gymnasium-style `GuiEnv`.
//! - [`tasks`]: MiniWoB++ pages, the built-in suite, and website specs.
//! - [`policy`]: the `Policy` trait, random and scripted-oracle policies.
//! - [`rollout`]: running episodes over several browsers, trajectories.
//! - [`bench`]: environment speed benchmarks and the benchmark harness (`guirl bench`).
//! - [`export`]: trajectory sets as parquet / JSON lines for Python trainers.
//! - [`serve`]: HTTP servers: a checkpoint behind an OpenAI-compatible API.
//! - [`doctor`]: checks of the set-up (`guirl doctor`).

pub mod bench;
pub mod cli;
pub mod doctor;
pub mod env;
pub mod export;
pub mod policy;
pub mod rollout;
pub mod serve;
pub mod tasks;
pub mod train;
