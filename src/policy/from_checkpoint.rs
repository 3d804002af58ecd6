//! A policy loaded from a checkpoint folder, named with that folder.

use super::{Decision, Policy, StepDecoder, TrainablePolicy};
use crate::env::ScreenState;
use std::path::Path;

/// A checkpoint's policy under a name that says which checkpoint: a recording, a report
/// and `guirl stats --by policy` then tell two checkpoints of one shape apart (the
/// policy's own name gives its family and shape only). Everything else is the policy's.
pub struct FromCheckpoint {
    inner: Box<dyn TrainablePolicy>,
    dir: String,
}

impl FromCheckpoint {
    /// `inner`, loaded from the checkpoint folder `dir`.
    pub fn new(inner: Box<dyn TrainablePolicy>, dir: &Path) -> FromCheckpoint {
        FromCheckpoint { inner, dir: dir.display().to_string() }
    }
}

impl Policy for FromCheckpoint {
    fn name(&self) -> String {
        format!("{} from {}", self.inner.name(), self.dir)
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        self.inner.act(states)
    }
    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> anyhow::Result<Vec<Decision>> {
        self.inner.act_keyed(states, keys)
    }
    fn batch_invariant(&self) -> bool {
        self.inner.batch_invariant()
    }
    // the policy's own (a bench records the checkpoint beside it)
    fn info(&self) -> serde_json::Value {
        self.inner.info()
    }
    fn step_decoder(&self, live: usize) -> Option<Box<dyn StepDecoder>> {
        self.inner.step_decoder(live)
    }
}
