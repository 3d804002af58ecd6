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

/// The processes started for profile `dir`. chromedriver runs with the folder as its temp
/// folder (`TMPDIR`), in a process group of its own that the browser and its helpers
/// join; the helpers overwrite their environment and command line with a process title,
/// so they are found by that group. A browser started with the folder itself as
/// `--user-data-dir` (earlier guirl versions) is matched by its command line.
fn processes_of(dir: &Path) -> Vec<i32> {
    let env_entry = format!("TMPDIR={}", dir.display()).into_bytes();
    let arg = format!("--user-data-dir={}", dir.display()).into_bytes();
    let (me, own_group) = (std::process::id() as i32, unsafe { libc::getpgrp() });
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    // (pid, process group, started for `dir`)
    let procs: Vec<(i32, i32, bool)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let group = stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()?;
            let has = |file: &str, item: &[u8]| {
                std::fs::read(format!("/proc/{pid}/{file}"))
                    .is_ok_and(|bytes| bytes.split(|&b| b == 0).any(|field| field == item))
            };
            Some((pid, group, has("environ", &env_entry) || has("cmdline", &arg)))
        })
        .collect();
    let groups: Vec<i32> = procs.iter().filter(|p| p.2 && p.1 != own_group).map(|p| p.1).collect();
    procs.iter().filter(|p| p.2 || groups.contains(&p.1)).map(|p| p.0).collect()
}

/// Kill every process started for profile `dir` (chromedriver, the browser, its helpers).
pub(crate) fn kill_browser(dir: &Path) {
    for pid in processes_of(dir) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Whether a process started for profile `dir` still runs.
fn browser_alive(dir: &Path) -> bool {
    !processes_of(dir).is_empty()
}

/// Kill the browsers this process started and delete their profiles: for a signal handler
/// that is about to exit, when destructors will not run.
pub fn kill_all_started() {
    let dirs = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    dirs.iter().for_each(|d| discard(d));
}

/// Kill what runs for profile `dir` and delete the folder.
pub(crate) fn discard(dir: &Path) {
    // A helper still exiting can re-create the folder (its temp folder) or write into it
    // after a delete, so kill until nothing runs for it, then delete, for at most ~2 s.
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

/// Kill what runs for profile `dir`, delete the folder and forget it, off the async
/// threads: [`discard`] scans /proc and waits (10 ms to 2 s), which would stall the other
/// browsers' tasks on that thread (frames are issued every 2 ms). Inside a tokio runtime
/// the work goes to its blocking pool; await the handle to know it is done. A runtime
/// that shuts down first does it inline (the job's `Drop` runs either way), and outside
/// a runtime it runs here.
pub(crate) fn release(dir: PathBuf) -> Option<tokio::task::JoinHandle<()>> {
    struct Release(PathBuf);
    impl Drop for Release {
        fn drop(&mut self) {
            discard(&self.0);
            unregister(&self.0);
        }
    }
    let job = Release(dir);
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => Some(rt.spawn_blocking(move || drop(job))),
        Err(_) => {
            drop(job);
            None
        }
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
