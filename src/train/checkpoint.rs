//! Checkpoints: a folder that is also a policy (the files its kind saves), plus the
//! optimizer state and the trainer's position, enough to resume exactly.
//!
//! ```text
//! runs/<name>/checkpoints/iter-000010/
//!     model.safetensors, config.json                        the policy: guirl's small policy
//!     adapter_model.safetensors, adapter_config.json,       the policy: Qwen-VL (PEFT's layout
//!       qwen_policy.json                                      and the policy's settings)
//!     optimizer.safetensors, trainer.json
//!     (+ critic.safetensors, critic.json, critic_optimizer.safetensors: PPO)
//!     (+ behaviour/: the policy the next iteration collects with: [rollout] max_staleness = 1)
//!     (+ success_replay/: the success replay buffer, a trajectory set: [algo] success_replay)
//! runs/<name>/checkpoints/iter-000000/ after [sft]: + sft_optimizer.safetensors (cloning's AdamW)
//! runs/<name>/checkpoints/cloning/ while [sft] clones: the policy, sft_optimizer.safetensors and
//!     trainer.json (the epochs done), rewritten after each epoch; gone once iter-000000 is in place
//! runs/<name>/checkpoints/latest   a relative symlink to the newest checkpoint folder
//! runs/<name>/checkpoints/best     a relative symlink to the one with the best held-out success
//! ```
//!
//! Every write is atomic: a checkpoint is written under a temporary sibling name
//! (`.iter-000010.tmp-<pid>`), fsynced and renamed into place; the links are made under a
//! temporary name and renamed over the old ones. A run killed at any moment leaves
//! `latest` and `best` naming complete checkpoints; its temporary leftovers are removed
//! by the next save or open and ignored by readers. Runs written before the links were
//! symlinks (`checkpoints/latest` a file holding the folder's name, `RUN/best` a file
//! holding its path) still read.

use super::optim::AdamW;
use crate::policy::qwen_vl::policy::POLICY_FILE as QWEN_POLICY_FILE;
use crate::policy::vlm::CONFIG_FILE;
use crate::policy::TrainablePolicy;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The link to the newest checkpoint, inside `checkpoints/`.
pub const LATEST: &str = "latest";
/// The link to the best checkpoint, inside `checkpoints/`.
pub const BEST: &str = "best";
/// The trainer state file of a checkpoint.
pub const TRAINER_FILE: &str = "trainer.json";
/// Behaviour cloning's AdamW state, kept in the clone's checkpoint (`iter-000000`) so that
/// `[sft] start_epoch` can continue the cloning, and in `cloning/` so that `--resume` can.
pub const SFT_OPTIMIZER_FILE: &str = "sft_optimizer.safetensors";
/// The folder of a behaviour cloning that has not ended, inside `checkpoints/`.
pub const CLONING: &str = "cloning";

/// Where the trainer stands (written next to the weights).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    /// Iterations completed.
    pub iteration: u64,
    /// Env steps taken so far.
    pub env_steps: u64,
    /// Wall-clock seconds so far (across resumes).
    pub wall_secs: f64,
    /// Best held-out success so far, and the checkpoint that had it.
    pub best_eval: Option<(f64, String)>,
    /// Whether the `[sft]` stage has run (its result is checkpoint `iter-000000`).
    #[serde(default)]
    pub sft_done: bool,
    /// Epochs of `[sft]` cloned so far (counted from `sft.start_epoch`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sft_epochs: usize,
    /// Mean held-out reward of the best checkpoint (breaks ties in success).
    #[serde(default)]
    pub best_reward: f64,
    /// The adaptive KL coefficient β after the last iteration (`[algo] kl_target`; `None`:
    /// the configured `beta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_coef: Option<f64>,
    /// Each task's faded training success counts (`[tasks] sampling = "progress"`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub task_tallies: std::collections::BTreeMap<String, super::curriculum::TaskTally>,
    /// The ranks (processes) the run trained on (`--nproc`, `WORLD_SIZE`): a resume on
    /// another number is warned about, since its results then differ. Runs written before
    /// it was kept trained on one.
    #[serde(default = "one_rank")]
    pub world_size: usize,
}

impl Default for TrainerState {
    fn default() -> TrainerState {
        TrainerState {
            iteration: 0,
            env_steps: 0,
            wall_secs: 0.0,
            best_eval: None,
            sft_done: false,
            sft_epochs: 0,
            best_reward: 0.0,
            kl_coef: None,
            task_tallies: Default::default(),
            world_size: 1,
        }
    }
}

fn one_rank() -> usize {
    1
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The folder name of iteration `iteration`'s checkpoint.
pub fn name(iteration: u64) -> String {
    format!("iter-{iteration:06}")
}

/// Write a folder atomically: `fill` writes into a temporary sibling (`.NAME.tmp-<pid>`),
/// whose files are then fsynced and which then replaces `dir`. A reader sees the old
/// folder or the new one, never half of one; a failed `fill` leaves `dir` as it was.
pub fn write_dir_atomically(
    dir: &Path,
    fill: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let (parent, base) = split(dir)?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = parent.join(temp_name(base, "tmp"));
    remove_path(&tmp);
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    if let Err(e) = fill(&tmp).and_then(|_| sync_tree(&tmp)) {
        remove_path(&tmp);
        return Err(e);
    }
    if std::fs::symlink_metadata(dir).is_err() {
        rename(&tmp, dir)?;
    } else if exchange(&tmp, dir).is_ok() {
        // `tmp` now holds the old folder.
        remove_path(&tmp);
    } else {
        // No atomic swap on this filesystem: move the old folder aside first. A kill in
        // between leaves only `.NAME.old-<pid>`, which `remove_leftovers` puts back.
        let old = parent.join(temp_name(base, "old"));
        rename(dir, &old)?;
        rename(&tmp, dir)?;
        remove_path(&old);
    }
    sync_dir(parent);
    Ok(())
}

/// Write a small file atomically: a temporary name in the same folder, fsync, rename.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let (parent, base) = split(path)?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = parent.join(temp_name(base, "tmp"));
    let written = File::create(&tmp).and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()));
    if let Err(e) = written {
        remove_path(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", tmp.display()));
    }
    rename(&tmp, path)?;
    sync_dir(parent);
    Ok(())
}

/// Point `link` (a relative symlink) at the folder `target` beside it, replacing what was
/// there (a link, or an old pointer file) atomically.
fn point(link: &Path, target: &Path) -> anyhow::Result<()> {
    let (parent, base) = split(link)?;
    let name = target.file_name().with_context(|| format!("{} has no folder name", target.display()))?;
    let tmp = parent.join(temp_name(base, "tmp"));
    remove_path(&tmp);
    std::os::unix::fs::symlink(name, &tmp)
        .with_context(|| format!("cannot create the link {}", tmp.display()))?;
    rename(&tmp, link)?;
    sync_dir(parent);
    Ok(())
}

/// Remove what a killed write left in a run folder and its `checkpoints/`: temporary
/// folders and files of processes no longer running. A checkpoint moved aside by a
/// killed re-save, with nothing in its place, is put back.
pub fn remove_leftovers(run_dir: &Path) {
    for dir in [run_dir.to_path_buf(), checkpoints_dir(run_dir)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some((base, kind, pid)) = name.to_str().and_then(parse_temp_name) else { continue };
            // Another live process may be writing this very moment.
            if pid != std::process::id() && process_alive(pid) {
                continue;
            }
            let target = dir.join(base);
            if kind == "old"
                && std::fs::symlink_metadata(&target).is_err()
                && std::fs::rename(e.path(), &target).is_ok()
            {
                continue;
            }
            tracing::info!("removing {}, left by a write that did not finish", e.path().display());
            remove_path(&e.path());
        }
    }
}

/// `.NAME.KIND-<pid>`, this process's temporary name for `NAME`.
fn temp_name(base: &str, kind: &str) -> String {
    format!(".{base}.{kind}-{}", std::process::id())
}

/// The parts of a name [`temp_name`] made: `(NAME, KIND, pid)`.
fn parse_temp_name(name: &str) -> Option<(&str, &str, u32)> {
    let rest = name.strip_prefix('.')?;
    let (head, pid) = rest.rsplit_once('-')?;
    let (base, kind) = head.rsplit_once('.')?;
    (matches!(kind, "tmp" | "old") && !base.is_empty()).then_some((base, kind, pid.parse().ok()?))
}

fn process_alive(pid: u32) -> bool {
    // Signal 0 checks existence only; EPERM means it exists under another user.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn split(path: &Path) -> anyhow::Result<(&Path, &str)> {
    let base = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} does not end in a file name", path.display()))?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((parent, base))
}

fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to).with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

/// Swap two paths in one step (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let b = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    let r = unsafe {
        libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Remove a file, link or folder, if there.
fn remove_path(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => drop(std::fs::remove_dir_all(p)),
        Ok(_) => drop(std::fs::remove_file(p)),
        Err(_) => {}
    }
}

/// fsync every file under `dir`, then the folders themselves.
fn sync_tree(dir: &Path) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            File::open(&p)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("cannot sync {}", p.display()))?;
        }
    }
    sync_dir(dir);
    Ok(())
}

/// fsync a folder (its entries), best effort: not every filesystem allows it.
fn sync_dir(dir: &Path) {
    let _ = File::open(dir).and_then(|f| f.sync_all());
}

/// The checkpoints folder of a run.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// Save a checkpoint for `state.iteration` atomically, then point `latest` at it; returns
/// its folder. Saving an iteration again replaces its folder as a whole.
pub fn save(
    run_dir: &Path,
    policy: &dyn TrainablePolicy,
    opt: &AdamW,
    state: &TrainerState,
) -> anyhow::Result<PathBuf> {
    save_with(run_dir, policy, opt, state, |_| Ok(()))
}

/// [`save`], with `extra` writing more files into the checkpoint folder (PPO's critic)
/// before it is put in place.
pub fn save_with(
    run_dir: &Path,
    policy: &dyn TrainablePolicy,
    opt: &AdamW,
    state: &TrainerState,
    extra: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    remove_leftovers(run_dir);
    let dir = checkpoints_dir(run_dir).join(name(state.iteration));
    write_dir_atomically(&dir, |tmp| {
        extra(tmp)?;
        policy.save(tmp)?;
        opt.save(&tmp.join("optimizer.safetensors"))?;
        write_state(tmp, state)
    })?;
    // After the folder is in place: `latest` only ever names a complete checkpoint.
    point(&checkpoints_dir(run_dir).join(LATEST), &dir)?;
    Ok(dir)
}

/// Point `checkpoints/best` at the checkpoint folder `ckpt` (one of this run's).
pub fn mark_best(run_dir: &Path, ckpt: &Path) -> anyhow::Result<()> {
    point(&checkpoints_dir(run_dir).join(BEST), ckpt)?;
    // The pointer file of older runs would otherwise name an older best.
    let legacy = run_dir.join(BEST);
    if legacy.is_file() {
        std::fs::remove_file(&legacy).with_context(|| format!("cannot remove {}", legacy.display()))?;
    }
    Ok(())
}

/// The newest complete checkpoint of a run, if any.
pub fn latest(run_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let ckpts = checkpoints_dir(run_dir);
    read_pointer(&ckpts.join(LATEST), &ckpts)
}

/// The checkpoint with the best held-out success, if the run has evaluated one.
pub fn best(run_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let ckpts = checkpoints_dir(run_dir);
    match read_pointer(&ckpts.join(BEST), &ckpts)? {
        Some(dir) => Ok(Some(dir)),
        None => read_pointer(&run_dir.join(BEST), &ckpts),
    }
}

/// Where `--resume` continues a run from.
#[derive(Debug, Clone, PartialEq)]
pub enum ResumePoint {
    /// The newest complete checkpoint (`latest`).
    Checkpoint(PathBuf),
    /// `checkpoints/cloning/`: behaviour cloning stopped before it ended.
    Cloning(PathBuf),
}

impl ResumePoint {
    /// The checkpoint folder, if the point is one (not a cloning under way).
    pub fn checkpoint(&self) -> Option<&Path> {
        match self {
            ResumePoint::Checkpoint(dir) => Some(dir),
            ResumePoint::Cloning(_) => None,
        }
    }
}

/// Where a run would resume: its latest checkpoint, else a behaviour cloning under way.
pub fn resume_point(run_dir: &Path) -> anyhow::Result<Option<ResumePoint>> {
    if let Some(dir) = latest(run_dir)? {
        return Ok(Some(ResumePoint::Checkpoint(dir)));
    }
    let cloning = cloning_dir(run_dir);
    Ok(cloning.join(TRAINER_FILE).is_file().then_some(ResumePoint::Cloning(cloning)))
}

/// `checkpoints/cloning/` of a run.
pub fn cloning_dir(run_dir: &Path) -> PathBuf {
    checkpoints_dir(run_dir).join(CLONING)
}

/// Save a behaviour cloning under way atomically: the policy, cloning's optimizer `opt`
/// and `state` (its `sft_epochs`). `latest` is left alone: it names finished checkpoints.
pub fn save_cloning(
    run_dir: &Path,
    policy: &dyn TrainablePolicy,
    opt: &AdamW,
    state: &TrainerState,
) -> anyhow::Result<PathBuf> {
    remove_leftovers(run_dir);
    let dir = cloning_dir(run_dir);
    write_dir_atomically(&dir, |tmp| {
        policy.save(tmp)?;
        opt.save(&tmp.join(SFT_OPTIMIZER_FILE))?;
        write_state(tmp, state)
    })?;
    Ok(dir)
}

/// Remove `checkpoints/cloning/` once the clone's own checkpoint has replaced it.
pub fn remove_cloning(run_dir: &Path) {
    remove_path(&cloning_dir(run_dir));
}

/// The checkpoint folder in `ckpts` that `link` names: a symlink, or (older runs) a file
/// holding the folder's name or path. Only the last part of the name counts, so a run
/// folder that was moved still reads.
fn read_pointer(link: &Path, ckpts: &Path) -> anyhow::Result<Option<PathBuf>> {
    let meta = match std::fs::symlink_metadata(link) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", link.display())),
    };
    let target = if meta.is_symlink() {
        std::fs::read_link(link).with_context(|| format!("cannot read the link {}", link.display()))?
    } else if meta.is_file() && meta.len() < 4096 {
        let text =
            std::fs::read_to_string(link).with_context(|| format!("cannot read {}", link.display()))?;
        PathBuf::from(text.trim())
    } else {
        bail!(
            "{} is not a link to a checkpoint folder: remove it, or make it one (ln -sfn iter-NNNNNN {})",
            link.display(),
            link.display()
        );
    };
    let Some(name) = target.file_name() else {
        bail!(
            "{} names no checkpoint folder ({:?}): point it at one (ln -sfn iter-NNNNNN {})",
            link.display(),
            target,
            link.display()
        );
    };
    let dir = ckpts.join(name);
    if !dir.is_dir() {
        bail!(
            "{} names {}, which does not exist: point it at a checkpoint that does (ln -sfn iter-NNNNNN {})",
            link.display(),
            dir.display(),
            link.display()
        );
    }
    Ok(Some(dir))
}

/// The forms a policy checkpoint can be given in (for error messages).
pub const POLICY_FORMS: &str =
    "a checkpoint folder (holding config.json, or qwen_policy.json for a Qwen-VL adapter; e.g. \
     RUN/checkpoints/iter-000010), \
     a run folder (its best checkpoint, else its latest), RUN/checkpoints/latest or RUN/checkpoints/best";

/// A checkpoint folder found by [`resolve_policy_dir`].
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDir {
    /// The checkpoint folder.
    pub dir: PathBuf,
    /// Which checkpoint of a run folder was chosen, and why (for the user), if the path
    /// was a run folder.
    pub note: Option<String>,
}

/// The checkpoint folder a policy path means: a checkpoint folder itself; a run folder
/// (its best checkpoint, else its latest); `RUN/checkpoints/latest` or `best` (symlinks,
/// or the pointer files of older runs, including `RUN/best`). Anything else is an error
/// that lists these forms.
pub fn resolve_policy_dir(path: &Path) -> anyhow::Result<PolicyDir> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("policy {} does not exist: give {POLICY_FORMS}", path.display()))?;
    let plain = |dir: PathBuf| Ok(PolicyDir { dir, note: None });
    if path.join(CONFIG_FILE).is_file() || path.join(QWEN_POLICY_FILE).is_file() {
        return match meta.is_symlink() {
            // `latest` / `best`: name the folder itself, so messages say which iteration.
            true => plain(path.parent().unwrap_or(Path::new(".")).join(std::fs::read_link(path)?)),
            false => plain(path.to_path_buf()),
        };
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if meta.is_file() && meta.len() < 4096 {
        // An older run's pointer file: `checkpoints/latest`, `checkpoints/best` or `RUN/best`.
        let ckpts = if parent.file_name().is_some_and(|n| n == "checkpoints") {
            parent.to_path_buf()
        } else {
            checkpoints_dir(parent)
        };
        if let Ok(Some(dir)) = read_pointer(path, &ckpts) {
            if dir.join(CONFIG_FILE).is_file() || dir.join(QWEN_POLICY_FILE).is_file() {
                return plain(dir);
            }
        }
    }
    if meta.is_dir() && (checkpoints_dir(path).is_dir() || path.join("config.toml").is_file()) {
        let (dir, which) = match best(path)? {
            Some(dir) => (dir, "its best checkpoint"),
            None => match latest(path)? {
                Some(dir) => (dir, "its latest checkpoint (it has no best one: no evaluation yet)"),
                None if cloning_dir(path).join(TRAINER_FILE).is_file() => bail!(
                    "run folder {} has no checkpoint yet: it stopped during behaviour cloning \
                     (continue it with guirl train --resume --out {}); its clone so far is {}",
                    path.display(),
                    path.display(),
                    cloning_dir(path).display()
                ),
                None => bail!(
                    "run folder {} has no checkpoint yet: train it longer, or give {POLICY_FORMS}",
                    path.display()
                ),
            },
        };
        let note = format!("run folder {}: using {which}, {}", path.display(), dir.display());
        return Ok(PolicyDir { dir, note: Some(note) });
    }
    bail!("{} is not a policy checkpoint: give {POLICY_FORMS}", path.display())
}

/// Load a checkpoint's trainer state and optimizer state (weights load with the policy).
pub fn load_state(dir: &Path, opt: &mut AdamW) -> anyhow::Result<TrainerState> {
    opt.load(&dir.join("optimizer.safetensors"))?;
    read_state(dir)
}

/// Write `state` as `dir`'s trainer state (inside a folder being written atomically).
fn write_state(dir: &Path, state: &TrainerState) -> anyhow::Result<()> {
    let p = dir.join(TRAINER_FILE);
    std::fs::write(&p, serde_json::to_string_pretty(state)?)
        .with_context(|| format!("cannot write {}", p.display()))
}

/// A checkpoint's (or `cloning/`'s) trainer state.
pub fn read_state(dir: &Path) -> anyhow::Result<TrainerState> {
    let p = dir.join(TRAINER_FILE);
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a trainer state", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    }

    #[test]
    fn atomic_writes_replace_whole_or_not_at_all() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        write_dir_atomically(&dir, |t| Ok(std::fs::write(t.join("a"), "1")?)).unwrap();
        write_dir_atomically(&dir, |t| Ok(std::fs::write(t.join("b"), "2")?)).unwrap();
        assert!(!dir.join("a").exists() && dir.join("b").is_file(), "the old folder is replaced whole");
        let e = write_dir_atomically(&dir, |t| {
            std::fs::write(t.join("c"), "3")?;
            bail!("disk full")
        });
        assert!(e.is_err() && dir.join("b").is_file() && !dir.join("c").exists());
        write_file_atomically(&root.path().join("f.txt"), b"x").unwrap();
        write_file_atomically(&root.path().join("f.txt"), b"y").unwrap();
        assert_eq!(std::fs::read(root.path().join("f.txt")).unwrap(), b"y");
        let names: Vec<_> =
            std::fs::read_dir(root.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary names left: {names:?}");
    }

    #[test]
    fn leftovers_of_dead_writers_go_and_a_moved_aside_checkpoint_comes_back() {
        let run = tempfile::tempdir().unwrap();
        let ckpts = checkpoints_dir(run.path());
        let dead = dead_pid();
        for name in [format!(".iter-000003.old-{dead}"), format!(".iter-000004.tmp-{dead}")] {
            std::fs::create_dir_all(ckpts.join(name)).unwrap();
        }
        std::fs::write(run.path().join(format!(".config.toml.tmp-{dead}")), "").unwrap();
        // Our parent is alive: what it writes is left alone.
        let live = format!(".iter-000005.tmp-{}", std::os::unix::process::parent_id());
        std::fs::create_dir_all(ckpts.join(&live)).unwrap();
        remove_leftovers(run.path());
        let mut names: Vec<String> = std::fs::read_dir(&ckpts)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, vec![live, "iter-000003".to_string()]);
        assert_eq!(std::fs::read_dir(run.path()).unwrap().count(), 1, "only checkpoints/ is left");
        assert_eq!(parse_temp_name(".latest.tmp-12"), Some(("latest", "tmp", 12)));
        assert_eq!(parse_temp_name(".hidden"), None);
        assert_eq!(parse_temp_name(".x.tmp-abc"), None);
    }
}
