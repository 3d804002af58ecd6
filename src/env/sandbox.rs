//! Chromium's sandbox, on wherever the machine allows it.
//!
//! Chromium will not sandbox its renderers as root, so a guirl running as root (most
//! training machines and containers) used to start every browser with `--no-sandbox`,
//! and a page that exploited the renderer got root. Now, when guirl runs as root,
//! chromedriver and the browser it starts run as an unprivileged user ([`SandboxUser`])
//! and Chromium's namespace sandbox (user, PID and network namespaces plus seccomp) holds
//! the renderers. As any other user, guirl simply leaves `--no-sandbox` off.
//!
//! chromedriver itself is started as that user, rather than the browser binary behind a
//! wrapper that drops privileges: every file the browser writes (its profile,
//! `DevToolsActivePort`, downloads) then belongs to the user without guirl re-owning the
//! folders chromedriver makes, no wrapper file has to be written and trusted, and
//! chromedriver, which parses whatever reaches its port, holds no root either.
//!
//! Where the machine cannot give a sandbox (user namespaces off or restricted, no
//! unprivileged user) guirl says so once ([`support`]) and the browser runs as before.
//! `--no-sandbox` / `GUIRL_SANDBOX=0` ([`super::BrowserConfig::sandbox`]) turns it off.

use super::BrowserConfig;
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The variable that names the user browsers run as when guirl runs as root.
pub const USER_VAR: &str = "GUIRL_BROWSER_USER";
/// The users tried, in order, when [`USER_VAR`] is unset: the dedicated one
/// scripts/setup.sh creates, then the system's `nobody`.
pub const USERS: &[&str] = &["guirlbrowser", "nobody"];

/// The unprivileged account browsers run as when guirl runs as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxUser {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group (the browser gets no other group).
    pub gid: u32,
}

/// What this machine allows (found once per process, see [`support`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Browsers can run sandboxed: as `user` where guirl runs as root, else as guirl's user.
    Available {
        /// The account to switch to (`None`: guirl is not root and stays who it is).
        user: Option<SandboxUser>,
    },
    /// They cannot; why, in one line.
    Unavailable(String),
}

/// How one browser starts (see [`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Whether the sandbox is on (no `--no-sandbox`).
    pub on: bool,
    /// Who chromedriver and the browser run as, where guirl switches user.
    pub user: Option<SandboxUser>,
    /// One line for reports: `on (as user guirlbrowser)`, or `off: <why>`.
    pub note: String,
}

/// Look up a user by name in the system's user database.
pub fn lookup_user(name: &str) -> Option<SandboxUser> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // getpwnam_r: the reentrant lookup (getpwnam's static buffer is not thread-safe).
    let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then(|| SandboxUser {
        name: name.to_string(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

/// The user browsers run as when guirl is root: `$GUIRL_BROWSER_USER`, else the first of
/// [`USERS`] that exists; an error saying why there is none.
pub fn choose_user() -> Result<SandboxUser, String> {
    if let Some(name) = std::env::var(USER_VAR).ok().filter(|s| !s.is_empty()) {
        let user =
            lookup_user(&name).ok_or_else(|| format!("{USER_VAR}={name} names no user on this machine"))?;
        if user.uid == 0 {
            return Err(format!("{USER_VAR}={name} is root, which Chromium cannot sandbox"));
        }
        return Ok(user);
    }
    USERS.iter().filter_map(|n| lookup_user(n)).find(|u| u.uid != 0).ok_or_else(|| {
        format!(
            "no unprivileged user to run the browser as (none of {}); create one with \
             `useradd --system --user-group --no-create-home --shell /usr/sbin/nologin guirlbrowser` \
             (scripts/setup.sh does) or set {USER_VAR}",
            USERS.join(", ")
        )
    })
}

/// Whether a process running as `user` (or as guirl's user) can create the namespaces
/// Chromium's sandbox uses: a child switches user, then unshares a user namespace and,
/// inside it, PID and network namespaces (a restriction such as Ubuntu's AppArmor rule
/// lets the first succeed and the second fail). The child exits without exec'ing.
pub fn probe(user: Option<&SandboxUser>) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    const RESTRICTED: i32 = 3;
    const NO_SWITCH: i32 = 4;
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let ids = user.map(|u| (u.uid, u.gid));
    // Only system calls between fork and _exit (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = ids {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    libc::_exit(NO_SWITCH);
                }
            }
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNET) != 0 {
                libc::_exit(RESTRICTED);
            }
            libc::_exit(0)
        });
    }
    let status = cmd
        .spawn()
        .and_then(|mut c| c.wait())
        .map_err(|e| format!("unprivileged user namespaces are not available ({e})"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(RESTRICTED) => Err("user namespaces are restricted here (one can be made, but no PID or \
                                 network namespace inside it: an AppArmor or seccomp policy)"
            .into()),
        Some(NO_SWITCH) => {
            let u = user.expect("only a user switch exits so");
            Err(format!(
                "cannot switch to user {} (uid {}): is it mapped in this user namespace?",
                u.name, u.uid
            ))
        }
        _ => Err(format!("the namespace probe ended with {status}")),
    }
}

/// Whether guirl runs as root.
pub fn running_as_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// What this machine allows: probed at the first call, which also warns (once per
/// process) when browsers cannot be sandboxed.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let found = if running_as_root() {
            choose_user().and_then(|u| probe(Some(&u)).map(|()| Support::Available { user: Some(u) }))
        } else {
            probe(None).map(|()| Support::Available { user: None })
        };
        let s = found.unwrap_or_else(Support::Unavailable);
        if let Support::Unavailable(why) = &s {
            tracing::warn!(
                "Chromium's sandbox is off on this machine: {why}; a page that exploits the \
                 browser gets guirl's user{}",
                if running_as_root() { " (root)" } else { "" }
            );
        }
        s
    })
}

/// How a browser started from `cfg` runs. Warns once per reason when the sandbox is off
/// for this browser only (a remote endpoint aside, whose set-up is its own).
pub fn plan(cfg: &BrowserConfig) -> Plan {
    let off = |why: String| Plan { on: false, user: None, note: format!("off: {why}") };
    if cfg.webdriver_url.is_some() {
        return off("the browser runs behind a remote WebDriver endpoint (guirl asks it for \
                    --no-sandbox; sandbox it there)"
            .into());
    }
    if !cfg.sandbox {
        return warn_once(off("turned off (--no-sandbox or GUIRL_SANDBOX=0)".into()));
    }
    let user = match support() {
        Support::Unavailable(why) => return off(why.clone()),
        Support::Available { user } => user.clone(),
    };
    let Some(user) = user else {
        return Plan { on: true, user: None, note: "on (as guirl's own user)".into() };
    };
    if cfg.headful {
        return warn_once(off(format!(
            "a visible browser started as root stays root (the display is root's, not {}'s)",
            user.name
        )));
    }
    if let Some(file) = cfg.local_site.as_ref().map(|s| s.entry()).filter(|f| !readable_by(f, &user)) {
        return warn_once(off(format!(
            "the task's page {} is not readable by user {}, whom a sandboxed browser runs as; \
             move it (and what it loads) somewhere that user can read, or serve it over http",
            file.display(),
            user.name
        )));
    }
    let note = format!("on (as user {})", user.name);
    Plan { on: true, user: Some(user), note }
}

/// `p`, after a warning the first time this process sees its reason.
fn warn_once(p: Plan) -> Plan {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.get_or_insert_with(HashSet::new).insert(p.note.clone()) {
        tracing::warn!("Chromium's sandbox is {}", p.note);
    }
    p
}

/// What a browser started from `cfg` would run under, as JSON for reports and `/health`:
/// `{"on": bool, "user": name or null, "detail": one line}`.
pub fn describe(cfg: &BrowserConfig) -> serde_json::Value {
    let p = plan(cfg);
    serde_json::json!({ "on": p.on, "user": p.user.map(|u| u.name), "detail": p.note })
}

/// The folder to make a browser's profile folder in: the temp folder, unless the browser
/// runs as `user` and that user cannot enter it (a private `$TMPDIR`, such as one made by
/// `mktemp -d`); then [`SHARED_TEMP`], where the user can.
pub fn profile_parent(user: Option<&SandboxUser>) -> std::path::PathBuf {
    let temp = std::env::temp_dir();
    match user {
        Some(u) if !readable_by(&temp, u) && readable_by(Path::new(SHARED_TEMP), u) => {
            tracing::debug!(
                "{} is private to guirl's user: browser profiles go to {SHARED_TEMP}",
                temp.display()
            );
            SHARED_TEMP.into()
        }
        _ => temp,
    }
}

/// Where a browser's profile folder goes when the temp folder is closed to its user.
pub const SHARED_TEMP: &str = "/tmp";

/// Whether `user` may read `path` by its permission bits (ACLs aside): read a file (or
/// search a folder) and search every folder above it. A path that does not exist counts
/// as readable: loading it fails either way.
pub fn readable_by(path: &Path, user: &SandboxUser) -> bool {
    use std::os::unix::fs::MetadataExt;
    let allows = |m: &std::fs::Metadata, bit: u32| {
        let shift = if m.uid() == user.uid {
            6
        } else if m.gid() == user.gid {
            3
        } else {
            0
        };
        (m.mode() >> shift) & bit != 0
    };
    let Ok(path) = std::fs::canonicalize(path) else { return true };
    let Ok(meta) = std::fs::metadata(&path) else { return true };
    let own = if meta.is_dir() { 0o1 } else { 0o4 };
    allows(&meta, own)
        && path.ancestors().skip(1).all(|d| std::fs::metadata(d).map_or(true, |m| allows(&m, 0o1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn readability_follows_the_permission_bits_of_the_file_and_every_folder_above() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("page.html");
        std::fs::write(&file, "<p>hi</p>").unwrap();
        let set =
            |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        // A user who owns nothing here: only the "other" bits count.
        let stranger = SandboxUser { name: "x".into(), uid: 4_000_000, gid: 4_000_000 };
        set(&file, 0o644);
        set(dir.path(), 0o700);
        assert!(!readable_by(&file, &stranger), "a 0700 folder above hides the file");
        set(dir.path(), 0o711);
        assert!(readable_by(&file, &stranger));
        set(&file, 0o600);
        assert!(!readable_by(&file, &stranger));
        assert!(readable_by(&dir.path().join("missing.html"), &stranger));
    }

    #[test]
    fn an_unknown_user_is_not_found_and_root_is() {
        assert_eq!(lookup_user("no-such-user-guirl").map(|u| u.uid), None);
        assert_eq!(lookup_user("root").map(|u| u.uid), Some(0));
    }
}
