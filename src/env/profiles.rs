//! The profile folders of the browsers guirl starts, so that no Chromium outlives guirl.
//!
//! chromedriver dies with guirl (`PR_SET_PDEATHSIG`), but the Chromium it started is
//! re-parented to init and keeps running. So each profile folder records its owner's pid
//! (`guirl.owner`); a signal handler kills the browsers of this process before it exits
//! ([`kill_all_started`]), and the first launch of a later process removes what a killed one
//! (SIGKILL, a crash) left behind (`sweep_stale`).
//!
//! chromedriver runs with the folder as its temp folder, so the profile it makes for the
//! browser (`--user-data-dir`) lies inside it and the browser's command line names it.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// Prefix of every profile folder guirl creates in the temp folder.
pub const PREFIX: &str = "guirl-chromium-";
/// The file in a profile folder naming the guirl process that owns it.
const OWNER_FILE: &str = "guirl.owner";

static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static SWEEP: Once = Once::new();
static STARTS: Starts = Starts::new();

/// The browsers being started, and whether the process is stopping. A start in flight has
/// registered its folder but may not have its browser yet: killing then would miss the
/// browser chromedriver starts a moment later, and a task that lost its browser to the
/// kill would start another. So a stop refuses new starts and waits for those in flight.
pub(crate) struct Starts {
    state: Mutex<(usize, bool)>,
    done: Condvar,
}

/// One start in flight (see [`Starts::begin`]); its end is its drop.
pub(crate) struct Starting<'a>(&'a Starts);

impl Starts {
    pub(crate) const fn new() -> Starts {
        Starts { state: Mutex::new((0, false)), done: Condvar::new() }
    }

    /// A start, or `None` once [`Starts::stop`] was called.
    pub(crate) fn begin(&self) -> Option<Starting<'_>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.1 {
            return None;
        }
        s.0 += 1;
        Some(Starting(self))
    }

    /// Refuse new starts, then wait up to `patience` for those in flight to end; whether
    /// they all did.
    pub(crate) fn stop(&self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = true;
        while s.0 > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self.done.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner()).0 -= 1;
        self.0.done.notify_all();
    }
}

/// Whether the process is stopping ([`kill_all_started`] was called): its browsers are
/// being killed, and it exits once they are gone.
pub fn stopping() -> bool {
    STARTS.state.lock().unwrap_or_else(|e| e.into_inner()).1
}

/// A local browser start of this process, from before its folder is registered until its
/// session is open; `None` once the process is stopping ([`kill_all_started`]).
pub(crate) fn starting() -> Option<Starting<'static>> {
    STARTS.begin()
}

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
/// join; the helpers overwrite their environment and command line with a process title
/// (which still names the profile inside the folder), so they are found by that group or
/// by the folder in their command line. `groups` carries the groups seen in earlier scans:
/// once the browser is killed its group has no member left that names the folder, but a
/// helper forked during the kill may still be in it.
fn processes_of(dir: &Path, groups: &mut Vec<i32>) -> Vec<i32> {
    let env_entry = format!("TMPDIR={}", dir.display()).into_bytes();
    // The folder's name is unique (random suffix), so any mention of it is ours: the
    // browser's `--user-data-dir=<dir>/...`, or the folder itself in earlier versions.
    let named = dir.display().to_string().into_bytes();
    let (me, own_group) = (std::process::id() as i32, unsafe { libc::getpgrp() });
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    // (pid, process group, started for `dir`)
    let procs: Vec<(i32, i32, bool)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command: state, parent, process group. A zombie (Z) or dead (X)
            // process runs nothing; skip it, as nobody may ever reap it (a container's
            // init often does not), and it would keep its group looking alive.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            if matches!(fields.next()?, "Z" | "X") {
                return None;
            }
            let group = fields.nth(1)?.parse().ok()?;
            let read = |file: &str| std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            let ours = read("environ").split(|&b| b == 0).any(|field| field == env_entry)
                || read("cmdline").windows(named.len()).any(|w| w == named);
            Some((pid, group, ours))
        })
        .collect();
    for p in &procs {
        if p.2 && p.1 != own_group && !groups.contains(&p.1) {
            groups.push(p.1);
        }
    }
    procs.iter().filter(|p| p.2 || groups.contains(&p.1)).map(|p| p.0).collect()
}

/// Kill every process started for profile `dir` (chromedriver, the browser, its helpers),
/// remembering the process groups seen in `groups`.
fn kill_seen(dir: &Path, groups: &mut Vec<i32>) {
    for pid in processes_of(dir, groups) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Kill the browsers this process started and delete their profiles: for a signal handler
/// that is about to exit, when destructors will not run. From the call on no browser
/// starts, and those being started get up to 10 s to have their browser, which is then
/// killed too. Blocks: call it off the async threads.
pub fn kill_all_started() {
    if !STARTS.stop(Duration::from_secs(10)) {
        tracing::warn!(
            "a browser still starting after 10 s may outlive this process; a later guirl run removes it"
        );
    }
    let dirs = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    dirs.iter().for_each(|d| discard(d));
}

/// Kill what runs for profile `dir` and delete the folder.
pub(crate) fn discard(dir: &Path) {
    // A helper still exiting can re-create the folder (its temp folder) or write into it
    // after a delete, so kill until nothing runs for it, then delete. A process in
    // uninterruptible I/O (a loaded machine) dies only when that I/O returns, so keep
    // trying for up to ~15 s before giving up with a warning.
    // The folder must also stay gone for a moment: a helper killed in the middle of
    // writing its cache has been seen to re-create it just after a delete.
    let (start, mut groups, mut gone_since) = (std::time::Instant::now(), Vec::new(), None);
    while start.elapsed() < std::time::Duration::from_secs(15) {
        kill_seen(dir, &mut groups);
        if processes_of(dir, &mut groups).is_empty() {
            let _ = std::fs::remove_dir_all(dir);
            if !dir.exists() && processes_of(dir, &mut groups).is_empty() {
                let since = *gone_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= std::time::Duration::from_millis(200) {
                    return;
                }
            } else {
                gone_since = None;
            }
        } else {
            gone_since = None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(dir);
    tracing::warn!(
        "the browser of profile {} did not stop within 15 s; a later guirl run removes it",
        dir.display()
    );
}

/// Kill what runs for profile `dir`, delete the folder and forget it, off the async
/// threads: [`discard`] scans /proc and waits (10 ms to seconds), which would stall the other
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
/// gone, and delete those folders. Folders without an owner file are left alone. Looks in
/// the temp folder and in the shared one sandboxed browsers use when it is private
/// ([`super::sandbox::profile_parent`]).
pub(crate) fn sweep_stale() {
    SWEEP.call_once(|| {
        let mut places = vec![std::env::temp_dir(), PathBuf::from(super::sandbox::SHARED_TEMP)];
        places.dedup();
        let entries = places.iter().filter_map(|p| std::fs::read_dir(p).ok()).flatten();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stop refuses new starts and waits for those in flight, up to its patience.
    #[test]
    fn a_stop_refuses_new_starts_and_waits_for_those_in_flight() {
        let starts: &'static Starts = Box::leak(Box::new(Starts::new()));
        let first = starts.begin().expect("no stop yet");
        let ends = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        let t0 = Instant::now();
        assert!(starts.stop(Duration::from_secs(10)), "the start in flight ended");
        assert!(t0.elapsed() >= Duration::from_millis(250), "the stop waited for it: {:?}", t0.elapsed());
        assert!(starts.begin().is_none(), "no start after a stop");
        ends.join().unwrap();
        // a start that does not end in time: the stop gives up after its patience
        let stuck = Starts::new();
        let _in_flight = stuck.begin().unwrap();
        assert!(!stuck.stop(Duration::from_millis(50)));
    }
}
