//! What Ctrl-C and SIGTERM do to a command.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;

/// What a command has finished so far, said when a signal stops it (`guirl run`: the
/// episodes that ended, and where they are recorded).
static DONE_SO_FAR: Mutex<Option<String>> = Mutex::new(None);

/// Do `keep` (write what finished to disk), then set the line a signal's exit prints (see
/// [`DONE_SO_FAR`]) to `line`, under one lock: the exit holds it while it prints, so the
/// count said is the count kept, never one behind.
pub(super) fn done_so_far<T>(keep: impl FnOnce() -> T, line: impl FnOnce() -> String) -> T {
    let mut said = DONE_SO_FAR.lock().unwrap_or_else(|e| e.into_inner());
    let kept = keep();
    *said = Some(line());
    kept
}

/// The exit status of the first signal received (130 Ctrl-C, 143 SIGTERM), 0 before any.
static RECEIVED: AtomicU8 = AtomicU8::new(0);

/// Raised while the browsers are killed for an exit: what fails in them from then on is
/// the stop itself, not news, so the log goes quiet.
pub(super) static QUIET: AtomicBool = AtomicBool::new(false);

/// Remember the first signal's exit status.
pub(super) fn note(code: u8) {
    let _ = RECEIVED.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
}

/// The exit status a command stopped by a signal should end with, if one was received.
pub(super) fn received() -> Option<u8> {
    Some(RECEIVED.load(Ordering::SeqCst)).filter(|&c| c != 0)
}

/// Ctrl-C and SIGTERM. With `graceful` (training), the first signal raises that flag (the
/// trainer finishes the iteration, saves a checkpoint and closes its browsers); otherwise,
/// or at a second signal, kill the browsers this process started and exit at once
/// (status 130 / 143), since destructors do not run on `exit`. Call inside the runtime.
pub(super) fn watch_signals(graceful: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        tracing::warn!("cannot watch for Ctrl-C / SIGTERM: browsers may outlive an interrupted run");
        return;
    };
    tokio::spawn(async move {
        let mut graceful = graceful;
        loop {
            let code = tokio::select! {
                _ = int.recv() => 130u8,
                _ = term.recv() => 143,
            };
            note(code);
            if let Some(flag) = graceful.take() {
                // One line for a data-parallel run, from rank 0, not one per rank.
                if std::env::var("RANK").map_or(true, |r| r == "0") {
                    errln!(
                        "guirl: stopping after this iteration (or cloning epoch), which is then saved; \
                         signal again to stop now"
                    );
                }
                flag.store(true, Ordering::SeqCst);
                continue;
            }
            QUIET.store(true, Ordering::SeqCst);
            // it waits for browsers being started: off the async threads, which start them
            let _ = tokio::task::spawn_blocking(crate::env::profiles::kill_all_started).await;
            errln!("guirl: interrupted; the browsers it started are closed");
            // Held to the exit: no episode is kept after the count is said.
            let said = DONE_SO_FAR.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(line) = said.as_ref() {
                errln!("guirl: {line}");
            }
            std::process::exit(code.into());
        }
    });
}
