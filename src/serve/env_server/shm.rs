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
//! The answer's `screenshot_shm` carries `path`, `offset`, `bytes` and `seq`. A reader
//! either copies the pixels and then checks that the header still holds `seq` (another
//! request on the same session would have overwritten them: [`read`]), or maps the file
//! and reads them in place until it sends the session's next request ([`FrameMap`]: no
//! copy at all). The file only grows, so a mapping never reaches past its end. The
//! folder is the owner's only (0700, files 0600), a session's file goes when the session
//! closes, the folder when the server stops, and folders of servers that died are swept
//! when the next one starts.

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
        Ok(FrameFile { path, file, map: None, seq: 0 })
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

/// One session's frame file; removed when dropped (the session closes). The server
/// writes it through a mapping: a copy into memory, where a `pwrite` of a 1280×720 frame
/// costs about three times as long in the kernel.
pub struct FrameFile {
    path: PathBuf,
    file: File,
    map: Option<memmap2::MmapMut>,
    seq: u64,
}

impl FrameFile {
    /// Write `pixels` as the next frame. The file only grows (a smaller frame leaves the
    /// bytes past its end as they were): a reader's mapping of it stays valid, where a
    /// file cut shorter would fault the reader that touches the cut part.
    pub fn write(&mut self, pixels: &[u8]) -> io::Result<FrameRef> {
        let n = pixels.len() as u64;
        let need = PIXELS_AT + n;
        let size = self.file.metadata()?.len();
        let mapped = self.map.as_ref().map_or(0, |m| m.len() as u64);
        if size < mapped {
            // Cut shorter by another process of this user: touching the mapping past the
            // file's end would kill the server (SIGBUS), so give it its length back.
            tracing::warn!("frame file {} was truncated by another process", self.path.display());
            self.file.set_len(mapped)?;
        }
        if need > mapped {
            self.file.set_len(need.max(size))?;
            // SAFETY: the file is this server's own (0600 in a 0700 folder) and only grows;
            // its length is checked before every write, above.
            self.map = Some(unsafe { memmap2::MmapMut::map_mut(&self.file)? });
        }
        let map = self.map.as_mut().expect("mapped above");
        self.seq += 1;
        map[PIXELS_AT as usize..need as usize].copy_from_slice(pixels);
        // The header last: a reader that sees this seq sees these pixels (it reads after
        // the answer, which is sent after this returns).
        let mut head = [0u8; PIXELS_AT as usize];
        head[..4].copy_from_slice(MAGIC);
        head[4..8].copy_from_slice(&VERSION.to_le_bytes());
        head[8..16].copy_from_slice(&self.seq.to_le_bytes());
        head[16..24].copy_from_slice(&n.to_le_bytes());
        map[..PIXELS_AT as usize].copy_from_slice(&head);
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

/// The `seq` in a frame file's first 16 bytes, or why they are not a frame's header.
fn header_seq(head: &[u8; 16], path: &str) -> Result<u64, ShmError> {
    if &head[..4] != MAGIC {
        return Err(ShmError(format!("{path} is not a guirl frame file")));
    }
    Ok(u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")))
}

/// The error for a frame overwritten by a later one.
fn overwritten(want: u64, seq: u64) -> ShmError {
    ShmError(format!(
        "frame {want} was overwritten by frame {seq}: read it before the session's next \
         request, and send one request at a time per session"
    ))
}

/// The error for a file that cannot be opened.
fn cannot_open(path: &str, e: io::Error) -> ShmError {
    ShmError(format!(
        "cannot open {path}: {e} (the server must run on this machine as this user; \
         otherwise ask for screenshot = \"raw\")"
    ))
}

/// Read the pixels `r` names (what a Rust client on the same machine does; the server
/// only writes): copied out, then checked against the header's `seq`.
pub fn read(r: &FrameRef) -> Result<Vec<u8>, ShmError> {
    let f = File::open(&r.path).map_err(|e| cannot_open(&r.path, e))?;
    // The header before and after the pixels: a frame overwritten meanwhile is refused.
    let check = || {
        let mut head = [0u8; 16];
        f.read_exact_at(&mut head, 0).map_err(|e| ShmError(format!("reading {}: {e}", r.path)))?;
        match header_seq(&head, &r.path)? {
            seq if seq == r.seq => Ok(()),
            seq => Err(overwritten(r.seq, seq)),
        }
    };
    check()?;
    let mut pixels = vec![0u8; r.bytes as usize];
    f.read_exact_at(&mut pixels, r.offset).map_err(|e| ShmError(format!("reading {}: {e}", r.path)))?;
    check()?;
    Ok(pixels)
}

/// A client's read-only mapping of one session's frame file: each frame read in place,
/// with no copy. A frame stays as it is until the session's next request, which writes
/// the next one over it: read it (or copy it) before sending that.
pub struct FrameMap {
    path: String,
    file: File,
    map: memmap2::Mmap,
}

impl FrameMap {
    /// Map the frame file at `path` (an answer's `screenshot_shm.path`).
    pub fn open(path: &str) -> Result<FrameMap, ShmError> {
        let file = File::open(path).map_err(|e| cannot_open(path, e))?;
        let map = Self::map(&file, path)?;
        Ok(FrameMap { path: path.to_string(), file, map })
    }

    fn map(file: &File, path: &str) -> Result<memmap2::Mmap, ShmError> {
        // SAFETY: the server only grows this file, so the mapping never reaches past its
        // end; its bytes change under the mapping, which is why a `Frame` reads them
        // through raw pointers and never lends them out as a slice.
        unsafe { memmap2::Mmap::map(file) }.map_err(|e| ShmError(format!("cannot map {path}: {e}")))
    }

    /// The frame `r` names, in place: refused unless the header holds its `seq`.
    pub fn frame(&mut self, r: &FrameRef) -> Result<Frame<'_>, ShmError> {
        if r.path != self.path {
            return Err(ShmError(format!("{} is another session's file than {}", r.path, self.path)));
        }
        let end = r.offset.checked_add(r.bytes).and_then(|e| usize::try_from(e).ok());
        let end = end.ok_or_else(|| ShmError(format!("a frame of {} bytes at {}", r.bytes, r.offset)))?;
        if end > self.map.len() {
            // The frame grew (a larger viewport): map the file again.
            self.map = Self::map(&self.file, &self.path)?;
            if end > self.map.len() {
                return Err(ShmError(format!(
                    "{} holds {} bytes, short of the frame's {end}",
                    self.path,
                    self.map.len()
                )));
            }
        }
        let mut head = [0u8; 16];
        // SAFETY: the mapping is at least 16 bytes (it holds a frame past the header).
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr(), head.as_mut_ptr(), 16) };
        match header_seq(&head, &self.path)? {
            seq if seq == r.seq => {}
            seq => return Err(overwritten(r.seq, seq)),
        }
        // SAFETY: offset + bytes <= the mapping's length, checked above.
        let ptr = unsafe { self.map.as_ptr().add(r.offset as usize) };
        Ok(Frame { ptr, len: r.bytes as usize, _map: std::marker::PhantomData })
    }
}

/// One frame's pixels in a [`FrameMap`], read in place.
pub struct Frame<'a> {
    ptr: *const u8,
    len: usize,
    _map: std::marker::PhantomData<&'a FrameMap>,
}

impl Frame<'_> {
    /// How many bytes of pixels.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame has no pixels.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte at `i` (RGB8, row by row), or None past the end.
    pub fn get(&self, i: usize) -> Option<u8> {
        // SAFETY: i < len, inside the mapping; volatile, as another process writes it.
        (i < self.len).then(|| unsafe { std::ptr::read_volatile(self.ptr.add(i)) })
    }

    /// The pixels, copied out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: len bytes from ptr lie inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), self.len) };
        out
    }
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
        let mut map = FrameMap::open(&a.path).unwrap();
        assert_eq!(map.frame(&a).unwrap().to_vec(), vec![1, 2, 3, 4, 5, 6], "read in place");
        let b = f.write(&[9, 9, 9]).unwrap();
        assert_eq!(read(&b).unwrap(), vec![9, 9, 9]);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            PIXELS_AT + 6,
            "the file never shrinks under a mapping"
        );
        let in_place = map.frame(&b).unwrap();
        assert_eq!((in_place.len(), in_place.get(2), in_place.get(3)), (3, Some(9), None));
        let stale = read(&a).unwrap_err().0;
        assert!(stale.contains("overwritten by frame 2"), "{stale}");
        let stale = map.frame(&a).err().unwrap().0;
        assert!(stale.contains("overwritten by frame 2"), "{stale}");
        // A larger frame grows the file past the mapping: it is mapped again.
        let big: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let c = f.write(&big).unwrap();
        assert_eq!(map.frame(&c).unwrap().to_vec(), big);
        // A file cut short by someone else is given its length back, not written past.
        drop(map);
        OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
        let d = f.write(&[7; 4]).unwrap();
        assert_eq!(read(&d).unwrap(), vec![7; 4]);
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
