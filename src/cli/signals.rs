//! What Ctrl-C and SIGTERM do to a command.

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
                _ = int.recv() => 130,
                _ = term.recv() => 143,
            };
            if let Some(flag) = graceful.take() {
                // One line for a data-parallel run, from rank 0, not one per rank.
                if std::env::var("RANK").map_or(true, |r| r == "0") {
                    eprintln!(
                    "guirl: stopping after this iteration, which is then saved (behaviour cloning is saved only \
                     once it ends: stopped before, it starts again); signal again to stop now"
                    );
                }
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                continue;
            }
            // it waits for browsers being started: off the async threads, which start them
            let _ = tokio::task::spawn_blocking(crate::env::profiles::kill_all_started).await;
            eprintln!("guirl: interrupted; the browsers it started are closed");
            std::process::exit(code);
        }
    });
}
