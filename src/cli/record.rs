//! `--record DIR` of `run` and `play`: the trajectory set a command appends its episodes to.

use crate::bench::harness::MANIFEST_FILE;
use crate::rollout::{store, TrajectorySet, TrajectoryWriter};
use anyhow::bail;
use std::path::Path;

/// Open `dir` to record into, refusing a folder whose files are not a trajectory set (a
/// set would be mixed into them) and any folder of a bench (its sets are indexed by the
/// bench's journal, which an extra episode would not be in). Says when it appends.
pub fn open_set(dir: &Path) -> anyhow::Result<TrajectoryWriter> {
    let absolute = std::path::absolute(dir).unwrap_or(dir.to_path_buf());
    if let Some(bench) = absolute.ancestors().find(|a| a.join(MANIFEST_FILE).is_file()) {
        bail!(
            "--record {}: that is inside the bench folder {}, whose trajectory sets belong to its results; \
             record into a folder of your own",
            dir.display(),
            bench.display()
        );
    }
    let is_set = dir.join(store::TRAJECTORIES_FILE).is_file();
    let has_files = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if has_files && !is_set {
        bail!(
            "--record {}: the folder holds other files and no trajectory set ({}); record into a new or \
             empty folder, or a set's folder to add to it",
            dir.display(),
            store::TRAJECTORIES_FILE
        );
    }
    // Appending to a set nothing can read would leave it unreadable (a torn last line is
    // fine: the writer cuts it); and the count is of the episodes that read.
    let n = match is_set {
        true => {
            let set = TrajectorySet::read(dir).map_err(|e| {
                anyhow::anyhow!(
                    "--record {}: the trajectory set there does not read ({e:#}); repair it, or record elsewhere",
                    dir.display()
                )
            })?;
            set.trajectories.len()
        }
        false => 0,
    };
    if n > 0 {
        errln!("{} holds {n} episode(s) already: appending to them", dir.display());
    }
    TrajectoryWriter::open(dir)
}
