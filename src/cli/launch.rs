//! `guirl train --nproc N`: start N ranks of the same command on this machine, with the
//! variables torchrun would set, and wait for them all.

use anyhow::Context;
use std::ffi::OsString;

/// The arguments without `--nproc N` / `--nproc=N`.
fn without_nproc(mut args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    while let Some(a) = args.next() {
        if a == "--nproc" {
            args.next();
        } else if !a.to_string_lossy().starts_with("--nproc=") {
            out.push(a);
        }
    }
    out
}

/// Start `n` ranks and wait for every one. Each rank runs in a process group of its own, so
/// a Ctrl-C reaches them once, passed on by this process (the first signal asks for a
/// checkpoint and a stop at the end of the iteration, a second stops at once); on Linux a
/// rank is also told to stop if this process dies.
/// `Some(status)` when a signal stopped every rank gracefully (each saved, then exited
/// with a signal's status): `guirl train` ends with that status, not an error.
pub async fn ranks(n: usize) -> anyhow::Result<Option<u8>> {
    // a mistake every rank would make is said once, before any starts
    if let Ok(v) = std::env::var("GUIRL_DIST_BACKEND") {
        crate::dist::GpuSum::parse(&v)?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("no free local port for the ranks to meet on")?
        .port();
    let exe = std::env::current_exe().context("cannot find this guirl binary to start the ranks")?;
    let args = without_nproc(std::env::args_os().skip(1));
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(&args)
            .env("WORLD_SIZE", n.to_string())
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .process_group(0);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        children.push(cmd.spawn().with_context(|| format!("cannot start rank {rank} ({})", exe.display()))?);
    }
    let pids: Vec<i32> = children.iter().filter_map(|c| c.id()).map(|p| p as i32).collect();
    forward_signals(pids);
    let mut failed = Vec::new();
    let mut codes = Vec::with_capacity(n);
    for (rank, c) in children.iter_mut().enumerate() {
        let status = c.wait().await?;
        codes.push(status.code());
        if !status.success() {
            failed.push(format!("rank {rank} {status}"));
        }
    }
    // The ranks were told SIGTERM (see `forward_signals`); a graceful stop ends each with 143.
    if let Some(signal) = super::signals::received() {
        if codes.iter().all(|&c| matches!(c, Some(0 | 130 | 143))) {
            return Ok((!failed.is_empty()).then_some(signal));
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "the run stopped: {} (each rank's error is in the log above)",
        failed.join(", ")
    );
    Ok(None)
}

/// Pass every Ctrl-C / SIGTERM on to the ranks as SIGTERM.
fn forward_signals(pids: Vec<i32>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        tracing::warn!("cannot watch for Ctrl-C / SIGTERM: stop the ranks with kill");
        return;
    };
    tokio::spawn(async move {
        loop {
            let code = tokio::select! {
                _ = int.recv() => 130,
                _ = term.recv() => 143,
            };
            super::signals::note(code);
            for &pid in &pids {
                // SAFETY: kill only sends a signal to a process this one started.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ranks_get_every_argument_but_nproc() {
        let args = ["train", "c.toml", "--nproc", "2", "--out", "r", "--nproc=3", "--resume"];
        let kept = super::without_nproc(args.iter().map(std::ffi::OsString::from));
        assert_eq!(kept, ["train", "c.toml", "--out", "r", "--resume"]);
    }
}
