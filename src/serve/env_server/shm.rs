//! Screenshots in shared memory for clients on the server's machine (`screenshot =
//! "shm"`): the server writes a session's pixels into a file of its own under `/dev/shm`
//! and the answer says where, so a frame crosses no socket. A 1280×720 frame is 2.76 MB:
//! over loopback TCP that is a millisecond or more, written to and read from memory a
//! fraction of one (docs/serve.md, "Shared-memory frames").
//!
//! Layout of a session's file (version 1):
//!
//! ```text
//! offset  size  field
//! 0       4     magic "GRLS"
//! 4       4     version (1), unsigned little-endian
//! 8       8     seq: the answer this frame belongs to, unsigned little-endian
//! 16      8     n: bytes of pixels, unsigned little-endian
//! 24      8     reserved, zero
//! 32      n     RGB8 pixels, row by row
//! ```
//!
//! The answer's `screenshot_shm` carries `path`, `offset`, `bytes` and `seq`; a reader
//! copies the pixels, then checks that the header still holds `seq` (another request on
//! the same session would have overwritten them). The folder is the owner's only (0700,
//! files 0600), a session's file goes when the session closes, the folder when the server
//! stops, and folders of servers that died are swept when the next one starts.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The first four bytes of a frame file.
pub const MAGIC: &[u8; 4] = b"GRLS";
/// The layout version this server writes.
pub const VERSION: u32 = 1;
/// Where the pixels start.
pub const PIXELS_AT: u64 = 32;
/// How a server's folder is named: this, its process id, a random part.
const PREFIX: &str = "guirl-frames-";

/// Where frame folders go: `/dev/shm` (memory) where the machine has it, else the temp
/// folder (still the page cache, one copy more than memory).
fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A server's folder of frame files, made at the first `shm` session.
#[derive(Default)]
pub struct FrameDir {
    dir: Mutex<Option<PathBuf>>,
}

impl FrameDir {
    /// The folder, made on first use.
    fn path(&self) -> io::Result<PathBuf> {
        let mut g = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = g.as_ref() {
            return Ok(p.clone());
        }
        let name = format!("{PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>());
        let path = base_dir().join(name);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        *g = Some(path.clone());
        Ok(path)
    }

    /// A new file for one session.
    pub fn file(&self) -> io::Result<FrameFile> {
        let dir = self.path()?;
        let path = dir.join(format!("{:016x}.rgb", rand::random::<u64>()));
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)?;
        Ok(FrameFile { path, file, seq: 0, len: 0 })
    }

    /// Remove the folder and what is left in it (at shutdown).
    pub fn remove(&self) {
        if let Some(p) = self.dir.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

impl Drop for FrameDir {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Remove the frame folders of servers that no longer run (at a server's start, so a
/// killed one's frames do not hold memory until the next `shm` session).
pub fn sweep() {
    sweep_stale(&base_dir());
}

/// Remove the frame folders in `base` whose server process no longer runs.
fn sweep_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::debug!("removing the frame folder of a server that is gone: {}", e.path().display());
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// Where one answer's pixels are (the answer's `screenshot_shm`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FrameRef {
    /// The file.
    pub path: String,
    /// Where the pixels start in it.
    pub offset: u64,
    /// How many bytes of pixels.
    pub bytes: u64,
    /// The answer's number, also in the file's header.
    pub seq: u64,
}

/// One session's frame file; removed when dropped (the session closes).
pub struct FrameFile {
    path: PathBuf,
    file: File,
    seq: u64,
    len: u64,
}

impl FrameFile {
    /// Write `pixels` as the next frame.
    pub fn write(&mut self, pixels: &[u8]) -> io::Result<FrameRef> {
        let n = pixels.len() as u64;
        if n < self.len {
            // A smaller frame: leave no stale pixels past its end.
            self.file.set_len(PIXELS_AT + n)?;
        }
        self.len = n;
        self.seq += 1;
        self.file.write_all_at(pixels, PIXELS_AT)?;
        let mut head = [0u8; PIXELS_AT as usize];
        head[..4].copy_from_slice(MAGIC);
        head[4..8].copy_from_slice(&VERSION.to_le_bytes());
        head[8..16].copy_from_slice(&self.seq.to_le_bytes());
        head[16..24].copy_from_slice(&n.to_le_bytes());
        self.file.write_all_at(&head, 0)?;
        Ok(FrameRef { path: self.path.display().to_string(), offset: PIXELS_AT, bytes: n, seq: self.seq })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FrameFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Why a reader could not take a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared-memory frame: {0}")]
pub struct ShmError(pub String);

/// Read the pixels `r` names (what a Rust client on the same machine does; the server
/// only writes): copied out, then checked against the header's `seq`.
pub fn read(r: &FrameRef) -> Result<Vec<u8>, ShmError> {
    let f = File::open(&r.path).map_err(|e| {
        ShmError(format!(
            "cannot open {}: {e} (the server must run on this machine as this user; \
             otherwise ask for screenshot = \"raw\")",
            r.path
        ))
    })?;
    // The header before and after the pixels: a frame overwritten meanwhile is refused.
    let check = || {
        let mut head = [0u8; 16];
        f.read_exact_at(&mut head, 0).map_err(|e| ShmError(format!("reading {}: {e}", r.path)))?;
        if &head[..4] != MAGIC {
            return Err(ShmError(format!("{} is not a guirl frame file", r.path)));
        }
        let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if seq != r.seq {
            return Err(ShmError(format!(
                "frame {} was overwritten by frame {seq}: read it before the session's next \
                 request, and send one request at a time per session",
                r.seq
            )));
        }
        Ok(())
    };
    check()?;
    let mut pixels = vec![0u8; r.bytes as usize];
    f.read_exact_at(&mut pixels, r.offset).map_err(|e| ShmError(format!("reading {}: {e}", r.path)))?;
    check()?;
    Ok(pixels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn frames_read_back_private_and_gone_with_their_session() {
        let dir = FrameDir::default();
        let mut f = dir.file().unwrap();
        let path = f.path().to_path_buf();
        let folder = path.parent().unwrap().to_path_buf();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&folder).unwrap().permissions().mode() & 0o777, 0o700);
        let a = f.write(&[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!((a.offset, a.bytes, a.seq), (PIXELS_AT, 6, 1));
        assert_eq!(read(&a).unwrap(), vec![1, 2, 3, 4, 5, 6]);
        let b = f.write(&[9, 9, 9]).unwrap();
        assert_eq!(read(&b).unwrap(), vec![9, 9, 9]);
        assert_eq!(fs::metadata(&path).unwrap().len(), PIXELS_AT + 3, "no stale pixels past a smaller frame");
        let stale = read(&a).unwrap_err().0;
        assert!(stale.contains("overwritten by frame 2"), "{stale}");
        drop(f);
        assert!(!path.exists(), "a closed session's file is removed");
        dir.remove();
        assert!(!folder.exists(), "the server's folder goes at shutdown");
    }

    #[test]
    fn folders_of_dead_servers_are_swept() {
        let base = tempfile::tempdir().unwrap();
        // No process has an id this large (Linux's maximum is 2^22).
        let dead = base.path().join(format!("{PREFIX}4294967294-00"));
        let live = base.path().join(format!("{PREFIX}{}-00", std::process::id()));
        let other = base.path().join("someone-elses");
        for d in [&dead, &live, &other] {
            fs::create_dir(d).unwrap();
        }
        sweep_stale(base.path());
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }
}
