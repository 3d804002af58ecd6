//! Blocking work inside the async collector's runtime.

/// Run `f` (a policy's forward or backward pass) without stalling the other tasks of a
/// multi-threaded runtime: the envs' tasks on this worker thread (frame pumps issue a
/// frame every 2 ms while a WebDriver command runs) move to other workers meanwhile.
/// On a current-thread runtime (`#[tokio::test]`) or outside one, `f` just runs.
pub fn off_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
