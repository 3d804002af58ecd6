//! Shared helpers for the integration tests (real headless Chromium).
#![allow(dead_code)]

use guirl::env::{EnvConfig, GuiEnv};
use std::path::PathBuf;

/// Path of a file in the repo.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// An env for a task id or spec path with default settings.
pub fn env_for(task: &str) -> GuiEnv {
    env_with(task, EnvConfig::default())
}

/// An env for a task id or spec path.
pub fn env_with(task: &str, cfg: EnvConfig) -> GuiEnv {
    let t = guirl::tasks::load_task(task).unwrap_or_else(|e| panic!("loading {task}: {e:#}"));
    GuiEnv::new(t, cfg)
}
