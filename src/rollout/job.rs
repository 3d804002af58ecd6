//! What a collection is asked to run: its jobs (a task, a seed, a group, a prefix) and
//! what it does with a task whose page does not load.

use super::prefix::Prefix;
use crate::policy::episode_stream;
use crate::tasks::page::EnvError;
use crate::tasks::Task;
use std::sync::Arc;

/// One episode to run: a task, a seed, and the GRPO group it belongs to.
#[derive(Debug, Clone)]
pub struct Job {
    /// The task.
    pub task: Arc<dyn Task>,
    /// Its seed.
    pub seed: u64,
    /// Group id (rollouts of the same task and seed share it).
    pub group: Option<u64>,
    /// Start from a recorded mid-episode state instead of the reset screen: the prefix's
    /// steps are replayed (and checked screen by screen) before the policy acts, and are
    /// kept in the trajectory marked [`super::TrajStep::prefix`]. Its seed is `seed`.
    pub prefix: Option<Arc<Prefix>>,
    /// The episode's sampling stream ([`episode_stream`]), so that its draws depend on
    /// its task and seed alone, not on which other jobs share the collection (a bench, a
    /// resumed one, `guirl run`). `None`: its index in the collection (training's groups,
    /// whose members share task and seed).
    pub stream: Option<u64>,
}

impl Job {
    /// The episode of `task` on `seed`, drawing from its own stream ([`Job::stream`]).
    pub fn episode(task: Arc<dyn Task>, seed: u64) -> Job {
        let stream = Some(episode_stream(task.id(), seed));
        Job { task, seed, group: None, prefix: None, stream }
    }

    /// `group_size` jobs per (task, seed), each group numbered from `first_group`.
    pub fn groups(instances: &[(Arc<dyn Task>, u64)], group_size: usize, first_group: u64) -> Vec<Job> {
        let mut jobs = Vec::new();
        for (g, (task, seed)) in instances.iter().enumerate() {
            for _ in 0..group_size.max(1) {
                jobs.push(Job {
                    task: task.clone(),
                    seed: *seed,
                    group: Some(first_group + g as u64),
                    prefix: None,
                    stream: None,
                });
            }
        }
        jobs
    }
}

/// What a collection does when a task's first page does not load (a wrong URL, a site
/// that is down): nothing of that task has started in this collector yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnreachableTask {
    /// Abort, until any episode of the collector has started: one task is being run, and
    /// its URL is the user's to fix. (Afterwards the failure ends that rollout as
    /// `env_error`.)
    #[default]
    Abort,
    /// Leave that task's jobs unrun and go on with the others, naming it in
    /// [`super::CollectStats::unreachable`] (a bench of many tasks).
    SkipTask,
}

impl UnreachableTask {
    /// Whether an episode that could not start failed by its task: the first page did not
    /// load, or did not behave as the task's protocol says. A browser that crashed or
    /// could not be (re)started is not the task's doing, and such an episode is an env
    /// error like any other.
    pub fn is_the_tasks(e: &EnvError) -> bool {
        matches!(e, EnvError::PageLoad { .. } | EnvError::Task(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_page_that_fails_makes_a_task_unreachable() {
        let page = EnvError::PageLoad { url: "http://127.0.0.1:9/".into(), reason: "refused".into() };
        assert!(UnreachableTask::is_the_tasks(&page));
        assert!(UnreachableTask::is_the_tasks(&EnvError::Task("core is not defined".into())));
        for browser in [
            EnvError::Browser("chrome not reachable".into()),
            EnvError::Launch("chromedriver exited".into()),
            EnvError::Setup("no chromium".into()),
        ] {
            assert!(!UnreachableTask::is_the_tasks(&browser), "{browser}");
        }
    }
}
