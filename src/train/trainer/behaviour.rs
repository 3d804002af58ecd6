//! The overlap's state between iterations (`[rollout] max_staleness = 1`): the behaviour
//! weights and the next iteration's collection under way. The trainer's side of the
//! overlap, and its schedule, are in `overlap.rs`.

use crate::policy::TrainablePolicy;
use crate::rollout::Collector;
use crate::train::config::TrainConfig;
use crate::train::dynamic_sampling::Collection;
use crate::train::success_replay::SuccessReplay;
use anyhow::Context;
use std::path::Path;

/// The folder of a checkpoint holding the weights its next iteration collects with.
pub const BEHAVIOUR_DIR: &str = "behaviour";

/// Why a data-parallel run cannot overlap yet (the message of its refusal).
pub fn data_parallel_refusal(max_staleness: u32) -> String {
    format!(
        "rollout.max_staleness = {max_staleness} is not supported in data-parallel runs yet (each rank's \
         background collection would interleave with the update's collectives): set \
         rollout.max_staleness = 0, or train in one process"
    )
}

/// The overlap's state between iterations (empty with `max_staleness = 0`).
#[derive(Default)]
pub(crate) struct Overlap {
    /// The weights the last update started from: they collect the next iteration.
    pub(super) behaviour: Option<Box<dyn TrainablePolicy>>,
    /// The next iteration's collection.
    pub(super) pending: Option<Pending>,
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
        let mut b = policy.reference()?;
        b.load(&dir).with_context(|| format!("loading the behaviour weights {}", dir.display()))?;
        Ok(Overlap { behaviour: Some(b), pending: None })
    }
}
