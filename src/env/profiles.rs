//! The profile folders of the browsers guirl starts, so that no Chromium outlives guirl.
//!
//! chromedriver dies with guirl (`PR_SET_PDEATHSIG`), but the Chromium it started is
//! re-parented to init and keeps running. So each profile folder records its owner's pid
//! (`guirl.owner`); a signal handler kills the browsers of this process before it exits
//! ([`kill_all_started`]), and the first launch of a later process removes what a killed one
//! (SIGKILL, a crash) left behind ([`sweep_stale`]).
//!
//! chromedriver runs with the folder as its temp folder, so the profile it makes for the
//! browser (`--user-data-dir`) lies inside it and the browser's command line names it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, Once};

/// Prefix of every profile folder guirl creates in the temp folder.
pub const PREFIX: &str = "guirl-chromium-";
/// The file in a profile folder naming the guirl process that owns it.
const OWNER_FILE: &str = "guirl.owner";

static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static SWEEP: Once = Once::new();

/// Record `dir` as a profile of this process (owner file + live list).
pub(crate) fn register(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())?;
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(dir.to_path_buf());
    Ok(())
}

/// Forget `dir` (its browser was closed or killed).
pub(crate) fn unregister(dir: &Path) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| d != dir);
}

/// Run `tool` (`pkill` or `pgrep`) with `args` on the processes running with profile
/// `dir`; whether it matched any.
fn on_profile(tool: &str, args: &[&str], dir: &Path) -> bool {
    std::process::Command::new(tool)
        .args(args)
        .arg("-f")
        .arg(format!("user-data-dir={}", dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Kill every process running with profile `dir` (the browser and its helpers).
pub(crate) fn kill_browser(dir: &Path) {
    on_profile("pkill", &["-9"], dir);
}

/// Whether a process still runs with profile `dir`.
fn browser_alive(dir: &Path) -> bool {
    on_profile("pgrep", &[], dir)
}

/// Kill the browsers this process started and delete their profiles: for a signal handler
/// that is about to exit, when destructors will not run.
pub fn kill_all_started() {
    let dirs = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    dirs.iter().for_each(|d| discard(d));
}

/// Kill the browser of profile `dir` and delete the folder.
fn discard(dir: &Path) {
    // Seen under load: after one kill and delete, a folder holding only chrome_debug.log
    // came back, most likely from a helper the browser started while `pkill` ran. So kill
    // until nothing runs with the profile, then delete, for at most about two seconds.
    for _ in 0..40 {
        kill_browser(dir);
        if !browser_alive(dir) {
            let _ = std::fs::remove_dir_all(dir);
            if !dir.exists() && !browser_alive(dir) {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether process `pid` exists.
fn alive(pid: i32) -> bool {
    // kill(pid, 0) checks existence without sending anything; EPERM means it exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Once per process: kill the browsers of profile folders whose owning guirl process is
/// gone, and delete those folders. Folders without an owner file are left alone.
pub(crate) fn sweep_stale() {
    SWEEP.call_once(|| {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
        for e in entries.flatten() {
            let dir = e.path();
            let named = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PREFIX));
            let owner =
                std::fs::read_to_string(dir.join(OWNER_FILE)).ok().and_then(|s| s.trim().parse().ok());
            if let (true, Some(pid)) = (named, owner) {
                if !alive(pid) {
                    tracing::info!("removing the browser profile {} left by process {pid}", dir.display());
                    discard(&dir);
                }
            }
        }
    });
}
