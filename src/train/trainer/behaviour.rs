//! The overlap's state between iterations (`[rollout] max_staleness = 1`): the behaviour
//! weights and the next iteration's collection under way. The trainer's side of the
//! overlap, and its schedule, are in `overlap.rs`.

use crate::policy::device::second_stream;
use crate::policy::{copy_trainable, TrainablePolicy};
use crate::rollout::Collector;
use crate::train::config::TrainConfig;
use crate::train::dynamic_sampling::Collection;
use crate::train::success_replay::SuccessReplay;
use anyhow::Context;
use std::path::Path;

/// The folder of a checkpoint holding the weights its next iteration collects with.
pub const BEHAVIOUR_DIR: &str = "behaviour";

/// The overlap's state between iterations (empty with `max_staleness = 0`).
#[derive(Default)]
pub(crate) struct Overlap {
    /// The weights the last update started from: they collect the next iteration.
    pub(super) behaviour: Option<Box<dyn TrainablePolicy>>,
    /// The next iteration's collection.
    pub(super) pending: Option<Pending>,
    /// The policy's copy on a second stream of its GPU, which the behaviour weights are
    /// frozen from.
    copy: StreamCopy,
}

/// The policy's copy on a second stream, made at the first freeze.
#[derive(Default)]
enum StreamCopy {
    #[default]
    NotYet,
    /// On a CPU, for a policy that makes no copy, or where making it failed: the behaviour
    /// weights share the policy's base weights and stream.
    Shared,
    Made(Box<dyn TrainablePolicy>),
}

/// A background collection's results.
pub(super) struct Finished {
    pub(super) collected: anyhow::Result<Collection>,
    /// The success-replay buffer after it.
    pub(super) replay: SuccessReplay,
}

/// The next iteration's collection.
pub(super) enum Pending {
    /// Under way: the task holds the collector.
    Running { it: u64, task: tokio::task::JoinHandle<(Collector, Finished)> },
    /// Done, the collector back (an evaluation waited for it).
    Done { it: u64, finished: Box<Finished> },
}

impl Overlap {
    /// The state a run resumes with: with `max_staleness > 0`, the behaviour weights saved
    /// in the checkpoint `latest` (a copy of `policy` with them loaded).
    pub(super) fn resume(
        cfg: &TrainConfig,
        policy: &dyn TrainablePolicy,
        latest: Option<&Path>,
    ) -> anyhow::Result<Overlap> {
        let dir = match latest {
            Some(d) if d.join(BEHAVIOUR_DIR).is_dir() => d.join(BEHAVIOUR_DIR),
            _ => return Ok(Overlap::default()),
        };
        if cfg.rollout.max_staleness == 0 {
            tracing::warn!(
                "{} holds the weights an overlapped run collects its next iteration with; \
                 rollout.max_staleness = 0 collects with the current weights instead",
                dir.display()
            );
            return Ok(Overlap::default());
        }
        let mut overlap = Overlap::default();
        let mut b = overlap.freeze(policy)?;
        b.load(&dir).with_context(|| format!("loading the behaviour weights {}", dir.display()))?;
        overlap.behaviour = Some(b);
        Ok(overlap)
    }

    /// A frozen copy of `policy`'s weights as they are now, for a collection that runs
    /// beside the update. On a GPU it lives on a second stream (a copy of the whole policy
    /// there, made once, its trainable weights refreshed at each freeze), so the
    /// collection's kernels and host reads do not queue behind the update's; elsewhere it
    /// shares the policy's base weights ([`TrainablePolicy::reference`]).
    pub(super) fn freeze(
        &mut self,
        policy: &dyn TrainablePolicy,
    ) -> anyhow::Result<Box<dyn TrainablePolicy>> {
        if matches!(self.copy, StreamCopy::NotYet) {
            self.copy = match stream_copy(policy) {
                Ok(Some(copy)) => StreamCopy::Made(copy),
                Ok(None) => StreamCopy::Shared,
                Err(e) => {
                    tracing::warn!(
                        "overlapped collections share the update's stream: no copy of the policy on a second \
                         stream ({e:#})"
                    );
                    StreamCopy::Shared
                }
            };
        }
        match &self.copy {
            StreamCopy::Made(copy) => {
                copy_trainable(policy, copy.as_ref())?;
                copy.reference()
            }
            _ => policy.reference(),
        }
    }
}

/// `policy` copied onto a second stream of its GPU; `None` on a CPU or where the policy
/// makes no copy.
fn stream_copy(policy: &dyn TrainablePolicy) -> anyhow::Result<Option<Box<dyn TrainablePolicy>>> {
    let Some(device) = second_stream(policy.device())? else { return Ok(None) };
    let copy = policy.copy_on(&device)?;
    if copy.is_some() {
        tracing::info!("overlapped collections decode on a copy of the policy on a second stream of its GPU");
    }
    Ok(copy)
}
