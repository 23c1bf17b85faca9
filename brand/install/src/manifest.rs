//! What an install laid out: `ZONEPATH/.zinstall.manifest`, recorded
//! beside the state marker when an install (or an update) completes, and
//! read by the next update to tell what the new source changed and what
//! the zone itself changed since.
//!
//! One entry per path in the root: its type, mode, owner, modification
//! time, size, symlink target, device number, hard-link group, a digest
//! of its extended attributes, and for a regular file an XXH3-128 hash of
//! its content. XXH3 is not a cryptographic hash: it tells a file the
//! zone edited from the one installed (as dpkg tells a changed conffile),
//! and the zone's root could only make its own edit look unchanged,
//! which keeps its own file, never writes one of the host's. It hashes
//! several times faster than SHA-256, so recording costs about a read of
//! the root from the page cache it was just written through.
//!
//! Each entry also holds the inode number and change time the file had
//! when it was recorded: when both still match, the content is the one
//! hashed and an update need not read it again (no write, `chmod`,
//! `chown` or link leaves the change time as it was).
//!
//! The file is zstd-compressed JSON lines: a header, then the entries
//! sorted by path. Written beside and renamed over, synced, as the
//! marker is; read back with every length bounded ([`MAX_FILE`],
//! [`MAX_LINE`], [`MAX_ENTRIES`]) before it sizes anything.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's name in the zonepath.
pub const MANIFEST: &str = ".zinstall.manifest";
/// The previous root's manifest (kept with `root.prev` for rollback).
pub const MANIFEST_PREV: &str = ".zinstall.manifest.prev";
/// The manifest of a root an update is building (`root.new`).
pub const MANIFEST_NEW: &str = ".zinstall.manifest.new";

/// The largest manifest file read back (compressed).
pub const MAX_FILE: u64 = 1 << 30;
/// The longest line (one entry) read back, decompressed.
pub const MAX_LINE: u64 = 64 << 10;
/// The most entries read back.
pub const MAX_ENTRIES: usize = 50_000_000;
/// The deepest a recorded (or updated) root goes: each level of the walk
/// holds a descriptor and a stack frame, so a deeper root is not recorded
/// (an update of it then needs `--force`, and is refused past this depth).
pub const MAX_DEPTH: usize = 128;
/// The format's version, in the header.
const VERSION: u32 = 1;

/// What one path of the root was when it was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative to the root, `/`-separated: text when the name is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<String>,
    /// The path's bytes in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub px: Option<String>,
    /// `d` directory, `f` file, `l` symlink, `c`/`b` device, `p` FIFO,
    /// `s` socket.
    pub k: char,
    /// Permission and special bits.
    pub m: u32,
    /// Owner.
    pub u: u32,
    /// Group.
    pub g: u32,
    /// Modification time: seconds, nanoseconds.
    pub t: (i64, i64),
    /// Size in bytes (regular files).
    #[serde(default)]
    pub s: u64,
    /// XXH3-128 of a regular file's content, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h: Option<String>,
    /// A symlink's target, hex of its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l: Option<String>,
    /// A device's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<u64>,
    /// Hard-link group: every entry with the same number is one inode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// XXH3-128 of the extended attributes (sorted names and values),
    /// hex; none when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// The profile tree the entry came from; none for everything else
    /// (layout, baseline, images, host files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o: Option<String>,
    /// Inode number and change time when recorded: both unchanged means
    /// the content is the one hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub i: Option<(u64, i64, i64)>,
    /// The zone's own edit of the entry was kept by an update: the entry
    /// records the source's version, the root holds the zone's (until an
    /// update with `--force`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub z: bool,
}

impl Entry {
    /// The path's bytes (borrowed unless the path is stored in hex).
    pub fn path(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        match (&self.p, &self.px) {
            (Some(p), _) => Cow::Borrowed(p.as_bytes()),
            (None, Some(x)) => Cow::Owned(unhex(x).unwrap_or_default()),
            (None, None) => Cow::Borrowed(&[]),
        }
    }

    /// Sets the path from its bytes.
    pub fn set_path(&mut self, path: &[u8]) {
        match std::str::from_utf8(path) {
            Ok(s) => (self.p, self.px) = (Some(s.to_string()), None),
            Err(_) => (self.p, self.px) = (None, Some(hex(path))),
        }
    }

    /// A symlink's target bytes.
    pub fn target(&self) -> Option<Vec<u8>> {
        self.l.as_deref().and_then(unhex)
    }
}

/// An image the install applied, and its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// As given on the command line.
    pub arg: String,
    /// `sha256:...` of the archive's bytes, or of an OCI image's
    /// manifest.
    pub digest: String,
}

/// The header line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The format's version.
    pub version: u32,
    /// The root directory's inode number: a manifest describes the
    /// `root` whose inode this is (how a switch interrupted between the
    /// root's rename and the manifest's is told apart).
    pub root_ino: u64,
    /// The profile's trees, as recorded.
    pub trees: Vec<String>,
    /// The images applied, in order.
    pub images: Vec<ImageRecord>,
    /// How many entries follow.
    pub entries: u64,
}

/// A manifest read back or about to be written.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The header.
    pub header: Header,
    /// The entries, sorted by path.
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// The entries by path.
    pub fn by_path(&self) -> HashMap<std::borrow::Cow<'_, [u8]>, &Entry> {
        self.entries.iter().map(|e| (e.path(), e)).collect()
    }
}

/// Why a manifest could not be read, recorded or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A system call on `path` failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The root is deeper than [`MAX_DEPTH`] directories.
    #[error(
        "{}: more than {MAX_DEPTH} directories deep; not recorded (an \
         update of this root needs --force)",
        path.display()
    )]
    TooDeep {
        /// The first directory past the limit.
        path: PathBuf,
    },
    /// The file is not a manifest this version reads.
    #[error("{}: {why}", path.display())]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// What is wrong, and where.
        why: String,
    },
}

fn io_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> ManifestError {
    let path = path.to_path_buf();
    move |source| ManifestError::Io { op, path, source }
}

/// Hex of `b`.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _infallible = write!(s, "{x:02x}");
    }
    s
}

/// The bytes `s` is the hex of.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// XXH3-128 of everything `r` reads, hex.
pub fn hash_reader(r: impl Read) -> io::Result<String> {
    hash_copy(r, &mut io::sink()).map(|(_, h)| h)
}

/// Copies everything `r` reads into `out`, hashing it as it goes (the
/// manifest's hash without a second read); the bytes and the hash.
pub fn hash_copy(
    mut r: impl Read,
    out: &mut impl Write,
) -> io::Result<(u64, String)> {
    // One buffer per thread: a fresh zeroed one per file cost more than
    // reading the file (tens of thousands of small files per root).
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> =
            std::cell::RefCell::new(vec![0u8; 256 << 10]);
    }
    BUF.with(|b| {
        let mut buf = b.borrow_mut();
        let mut h = twox_hash::XxHash3_128::new();
        let mut total = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.write(&buf[..n]);
            out.write_all(&buf[..n])?;
            total += n as u64;
        }
        Ok((total, format!("{:032x}", h.finish_128())))
    })
}

/// XXH3-128 of the file at `path` (never through a symlink).
pub fn hash_file(path: &Path) -> io::Result<String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    hash_reader(f)
}

/// The digest of the extended attributes of `path` (not followed), or
/// `None` when it has none (or the platform lists none).
pub fn xattrs_digest(path: &Path) -> io::Result<Option<String>> {
    #[cfg(target_os = "linux")]
    {
        Ok(digest_of(xattrs(path)?))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(None)
    }
}

/// The digest of extended attributes (names and values, in any order):
/// `None` for none.
pub fn digest_of(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Option<String> {
    if pairs.is_empty() {
        return None;
    }
    pairs.sort();
    let mut h = twox_hash::XxHash3_128::new();
    for (n, v) in &pairs {
        h.write(&(n.len() as u64).to_le_bytes());
        h.write(n);
        h.write(&(v.len() as u64).to_le_bytes());
        h.write(v);
    }
    Some(format!("{:032x}", h.finish_128()))
}

/// The extended attributes of what `fd` is open on, names and values
/// (none where the platform lists none).
pub fn xattrs_fd(
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    #[cfg(target_os = "linux")]
    {
        let names = match read_sized(|b| rustix::fs::flistxattr(fd, b)) {
            Ok(n) => n,
            Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
            let v = read_sized(|b| rustix::fs::fgetxattr(fd, &c, b))?;
            out.push((name.to_vec(), v));
        }
        Ok(out)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Ok(Vec::new())
    }
}

/// What `call` reads into a buffer it is given (an xattr list or value):
/// a small buffer first, the largest the kernel allows only when the
/// first is too short. Zeroing 64 KiB per entry cost more than the calls
/// on a root of tens of thousands of entries.
#[cfg(target_os = "linux")]
pub(crate) fn read_sized(
    mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
) -> rustix::io::Result<Vec<u8>> {
    let mut small = [0u8; 1024];
    match call(&mut small) {
        Ok(n) => return Ok(small[..n].to_vec()),
        Err(rustix::io::Errno::RANGE) => {}
        Err(e) => return Err(e),
    }
    let mut big = vec![0u8; 64 << 10];
    let n = call(&mut big)?;
    big.truncate(n);
    Ok(big)
}

/// The extended attributes of `path` (not followed), names and values.
#[cfg(target_os = "linux")]
pub fn xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use rustix::fs::{lgetxattr, llistxattr};
    let names = match read_sized(|b| llistxattr(path, b)) {
        Ok(n) => n,
        Err(e) if e == rustix::io::Errno::NOTSUP => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        let v = read_sized(|b| lgetxattr(path, cname.as_c_str(), b))?;
        out.push((name.to_vec(), v));
    }
    Ok(out)
}

/// The entry for `rel` (bytes) as `st` (an `fstatat` without following)
/// says: no content hash, no xattr digest, no symlink target.
// The stat fields' types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn entry_of_stat(rel: &[u8], st: &rustix::fs::Stat) -> Entry {
    use rustix::fs::FileType;
    let k = match FileType::from_raw_mode(st.st_mode as _) {
        FileType::Directory => 'd',
        FileType::RegularFile => 'f',
        FileType::Symlink => 'l',
        FileType::CharacterDevice => 'c',
        FileType::BlockDevice => 'b',
        FileType::Fifo => 'p',
        _ => 's',
    };
    let mut e = Entry {
        p: None,
        px: None,
        k,
        m: st.st_mode as u32 & 0o7777,
        u: st.st_uid,
        g: st.st_gid,
        t: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        s: if k == 'f' { st.st_size as u64 } else { 0 },
        h: None,
        l: None,
        r: matches!(k, 'c' | 'b').then_some(st.st_rdev as u64),
        n: None,
        x: None,
        o: None,
        i: None,
        z: false,
    };
    e.set_path(rel);
    e
}

/// The entry for `rel` (bytes) as `md` says, without the content hash.
pub fn entry_of(
    rel: &[u8],
    full: &Path,
    md: &fs::Metadata,
    origin: Option<String>,
) -> io::Result<Entry> {
    let ft = md.file_type();
    use std::os::unix::fs::FileTypeExt;
    let k = if ft.is_dir() {
        'd'
    } else if ft.is_file() {
        'f'
    } else if ft.is_symlink() {
        'l'
    } else if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else if ft.is_fifo() {
        'p'
    } else {
        's'
    };
    let mut e = Entry {
        p: None,
        px: None,
        k,
        m: md.mode() & 0o7777,
        u: md.uid(),
        g: md.gid(),
        t: (md.mtime(), md.mtime_nsec()),
        s: if k == 'f' { md.size() } else { 0 },
        h: None,
        l: None,
        r: matches!(k, 'c' | 'b').then(|| md.rdev()),
        n: None,
        x: xattrs_digest(full)?,
        o: origin,
        i: None,
        z: false,
    };
    e.set_path(rel);
    if k == 'l' {
        e.l = Some(hex(fs::read_link(full)?.as_os_str().as_bytes()));
    }
    Ok(e)
}

/// The tree of `trees` that `rel` is in.
pub fn origin_of(rel: &[u8], trees: &[String]) -> Option<String> {
    trees
        .iter()
        .find(|t| {
            let t = t.as_bytes();
            rel == t || (rel.starts_with(t) && rel.get(t.len()) == Some(&b'/'))
        })
        .cloned()
}

/// One entry recorded, with what groups hard links.
struct Recorded {
    entry: Entry,
    /// Device and inode of a non-directory with other names.
    linked: Option<(u64, u64)>,
}

/// Walks `root` (never following a symlink, never leaving its
/// filesystem) and records every entry. Everything is reached through
/// descriptors opened beneath the root without following a symlink
/// (what the zone's root holds decides nothing about where a read
/// goes), and directories are read and their files hashed in parallel.
pub fn record(
    root: &Path,
    trees: &[String],
    images: Vec<ImageRecord>,
) -> Result<Manifest, ManifestError> {
    use std::os::fd::AsFd;
    let top = rustix::fs::open(
        root,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_err("open", root)(e.into()))?;
    let st =
        rustix::fs::fstat(&top).map_err(|e| io_err("stat", root)(e.into()))?;
    let walk = Walk {
        root,
        trees,
        dev: st.st_dev as u64,
    };
    let mut all = match deep_pool() {
        Some(pool) => pool.install(|| walk.dir(top.as_fd(), b"", 1))?,
        None => walk.dir(top.as_fd(), b"", 1)?,
    };
    all.sort_by(|a, b| a.entry.path().cmp(&b.entry.path()));
    let mut inodes: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    for (i, r) in all.iter().enumerate() {
        if let Some(k) = r.linked {
            inodes.entry(k).or_default().push(i);
        }
    }
    let mut entries: Vec<Entry> = all.into_iter().map(|r| r.entry).collect();
    let mut groups: Vec<Vec<usize>> =
        inodes.into_values().filter(|v| v.len() > 1).collect();
    groups.sort();
    for (n, g) in groups.iter().enumerate() {
        for &i in g {
            entries[i].n = Some(n as u64);
        }
    }
    Ok(Manifest {
        header: Header {
            version: VERSION,
            root_ino: st.st_ino as u64,
            trees: trees.to_vec(),
            images,
            entries: entries.len() as u64,
        },
        entries,
    })
}

/// A pool for a walk that recurses one frame per directory level: its
/// threads get stacks for [`MAX_DEPTH`] levels with room to spare (the
/// global pool's are 2 MiB). `None` if it cannot be made: the caller's
/// pool then.
pub(crate) fn deep_pool() -> Option<rayon::ThreadPool> {
    let n = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .stack_size(32 << 20)
        .thread_name(|i| format!("manifest-{i}"))
        .build()
        .ok()
}

/// The walk of [`record`].
struct Walk<'a> {
    root: &'a Path,
    trees: &'a [String],
    /// The root's filesystem: a mount point beneath is recorded, not
    /// entered.
    dev: u64,
}

// The stat fields' types differ between platforms.
#[allow(clippy::unnecessary_cast)]
impl Walk<'_> {
    /// Where `rel` is, for an error.
    fn at(&self, rel: &[u8]) -> PathBuf {
        self.root.join(std::ffi::OsStr::from_bytes(rel))
    }

    /// Every entry beneath `dir` (at `rel`), its subdirectories in
    /// parallel, each opening its own descriptor when it starts.
    fn dir(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        rel: &[u8],
        depth: usize,
    ) -> Result<Vec<Recorded>, ManifestError> {
        use rayon::prelude::*;
        let names = rustix::fs::Dir::read_from(dir)
            .map_err(|e| io_err("read", &self.at(rel))(e.into()))?
            .map(|e| e.map(|e| e.file_name().to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io_err("read", &self.at(rel))(e.into()))?;
        let per_name = names
            .par_iter()
            .filter(|n| n.to_bytes() != b"." && n.to_bytes() != b"..")
            .map(|name| self.entry(dir, rel, name, depth))
            .collect::<Result<Vec<Vec<Recorded>>, ManifestError>>()?;
        Ok(per_name.into_iter().flatten().collect())
    }

    /// The entry `name` of `dir`, and everything beneath it.
    fn entry(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        parent: &[u8],
        name: &std::ffi::CStr,
        depth: usize,
    ) -> Result<Vec<Recorded>, ManifestError> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        use std::os::fd::AsFd;
        let mut rel = parent.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.to_bytes());
        let at = || self.at(&rel);
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err("stat", &at())(e.into()))?;
        let mut e = entry_of_stat(&rel, &st);
        e.o = origin_of(&rel, self.trees);
        e.i = Some((
            st.st_ino as u64,
            st.st_ctime as i64,
            st.st_ctime_nsec as i64,
        ));
        let open = |flags: OFlags| {
            rustix::fs::openat(
                dir,
                name,
                flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(|e| io_err("open", &at())(e.into()))
        };
        let mut below = Vec::new();
        match e.k {
            'f' => {
                let fd = open(OFlags::RDONLY)?;
                e.x = digest_of(
                    xattrs_fd(fd.as_fd())
                        .map_err(io_err("read xattrs of", &at()))?,
                );
                e.h = Some(
                    hash_reader(File::from(fd))
                        .map_err(io_err("hash", &at()))?,
                );
            }
            'd' => {
                let fd = open(OFlags::RDONLY | OFlags::DIRECTORY)?;
                e.x = digest_of(
                    xattrs_fd(fd.as_fd())
                        .map_err(io_err("read xattrs of", &at()))?,
                );
                if st.st_dev as u64 == self.dev {
                    if depth >= MAX_DEPTH {
                        return Err(ManifestError::TooDeep { path: at() });
                    }
                    below = self.dir(fd.as_fd(), &rel, depth + 1)?;
                }
            }
            'l' => {
                let target = rustix::fs::readlinkat(dir, name, Vec::new())
                    .map_err(|e| io_err("read link", &at())(e.into()))?;
                e.l = Some(hex(target.as_bytes()));
                e.x = symlink_xattrs(dir, name, &at())
                    .map_err(io_err("read xattrs of", &at()))?;
            }
            _ => {
                // A device, FIFO or socket is never opened (that could
                // block or act); its xattrs are read through its parent.
                e.x = symlink_xattrs(dir, name, &at())
                    .map_err(io_err("read xattrs of", &at()))?;
            }
        }
        let linked = (e.k != 'd' && st.st_nlink > 1)
            .then_some((st.st_dev as u64, st.st_ino as u64));
        below.insert(0, Recorded { entry: e, linked });
        Ok(below)
    }
}

/// The digest of the xattrs of `name` in `dir`, not followed: through
/// the directory's descriptor (`/proc/self/fd`), since a symlink or a
/// device cannot be opened for its own; by its path `full` where /proc
/// is not mounted.
#[cfg(target_os = "linux")]
fn symlink_xattrs(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    full: &Path,
) -> io::Result<Option<String>> {
    use std::os::fd::AsRawFd;
    let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    p.extend_from_slice(name.to_bytes());
    match xattrs(Path::new(std::ffi::OsStr::from_bytes(&p))) {
        Ok(x) => Ok(digest_of(x)),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                && !Path::new("/proc/self/fd").is_dir() =>
        {
            Ok(digest_of(xattrs(full)?))
        }
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn symlink_xattrs(
    _: std::os::fd::BorrowedFd<'_>,
    _: &std::ffi::CStr,
    _: &Path,
) -> io::Result<Option<String>> {
    Ok(None)
}

/// Writes `m` to `zonepath/name` atomically and durably.
pub fn write(
    zonepath: &Path,
    name: &str,
    m: &Manifest,
) -> Result<(), ManifestError> {
    let path = zonepath.join(name);
    let tmp = zonepath.join(format!("{name}.{}", std::process::id()));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_err("remove", &tmp)(e));
        }
        _ => {}
    }
    let written = (|| -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        // The JSON writer's many small writes are gathered before the
        // encoder: one compression call per write cost more than the
        // walk. Level 1: the manifest is written on every install.
        let mut z = io::BufWriter::with_capacity(
            256 << 10,
            zstd::stream::Encoder::new(f, 1)?,
        );
        serde_json::to_writer(&mut z, &m.header)?;
        z.write_all(b"\n")?;
        for e in &m.entries {
            serde_json::to_writer(&mut z, e)?;
            z.write_all(b"\n")?;
        }
        let f = z.into_inner().map_err(|e| e.into_error())?.finish()?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(zonepath)?.sync_all()
    })();
    if let Err(e) = written {
        let _already_failing = fs::remove_file(&tmp);
        return Err(io_err("write", &path)(e));
    }
    Ok(())
}

/// Reads `zonepath/name`: `None` if there is none.
pub fn read(
    zonepath: &Path,
    name: &str,
) -> Result<Option<Manifest>, ManifestError> {
    let path = zonepath.join(name);
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("open", &path)(e)),
    };
    let md = f.metadata().map_err(io_err("stat", &path))?;
    if !md.is_file() || md.len() > MAX_FILE {
        return Err(ManifestError::Invalid {
            path,
            why: format!("not a regular file of at most {MAX_FILE} bytes"),
        });
    }
    let z = zstd::stream::Decoder::new(f.take(MAX_FILE))
        .map_err(io_err("read", &path))?;
    let mut r = BufReader::new(z);
    let invalid = |why: String| ManifestError::Invalid {
        path: path.clone(),
        why,
    };
    let mut line = Vec::new();
    let next = |r: &mut BufReader<_>,
                line: &mut Vec<u8>|
     -> Result<bool, ManifestError> {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_LINE + 1)
            .read_until(b'\n', line)
            .map_err(io_err("read", &path))?;
        if n as u64 > MAX_LINE {
            return Err(ManifestError::Invalid {
                path: path.clone(),
                why: format!("a line longer than {MAX_LINE} bytes"),
            });
        }
        Ok(n > 0)
    };
    if !next(&mut r, &mut line)? {
        return Err(invalid("empty".into()));
    }
    let header: Header = serde_json::from_slice(&line)
        .map_err(|e| invalid(format!("header: {e}")))?;
    if header.version != VERSION {
        return Err(invalid(format!(
            "version {} (this zinstall reads {VERSION})",
            header.version
        )));
    }
    if header.entries > MAX_ENTRIES as u64 {
        return Err(invalid(format!(
            "{} entries, more than {MAX_ENTRIES}",
            header.entries
        )));
    }
    // Sized by the header only up to a bound: the entries themselves
    // decide the rest.
    let mut entries =
        Vec::with_capacity((header.entries as usize).min(1 << 20));
    let mut lineno = 1u64;
    while next(&mut r, &mut line)? {
        lineno += 1;
        if entries.len() >= MAX_ENTRIES {
            return Err(invalid(format!("more than {MAX_ENTRIES} entries")));
        }
        let e: Entry = serde_json::from_slice(&line)
            .map_err(|e| invalid(format!("line {lineno}: {e}")))?;
        entries.push(e);
    }
    if entries.len() as u64 != header.entries {
        return Err(invalid(format!(
            "{} entries, the header says {}",
            entries.len(),
            header.entries
        )));
    }
    Ok(Some(Manifest { header, entries }))
}

/// Removes every manifest of the zonepath and their temporaries.
pub fn clear(zonepath: &Path) -> io::Result<()> {
    crate::state::remove_files_where(zonepath, |n| n.starts_with(MANIFEST))
}

/// The digest of an image argument as the install applied it.
pub fn file_digest(path: &Path) -> io::Result<String> {
    use sha2::Digest;
    let mut f = File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex(&h.finalize())))
}

/// What an image argument is recorded as, to tell at an update whether
/// it is the one installed: an archive by its size and modification
/// time (as rsync tells files apart; reading it through for a digest
/// cost an install of `/usr/share` as much as its unpack), an OCI
/// layout by the `sha256:` of its `index.json`, a registry reference as
/// given (`ref:` and the reference), which names a version when it has
/// a digest.
pub fn image_digest(arg: &Path) -> String {
    if arg.is_dir() {
        if let Ok(d) = file_digest(&arg.join("index.json")) {
            return d;
        }
    } else if let Ok(md) = fs::metadata(arg) {
        return format!(
            "file:{}:{}.{:09}",
            md.size(),
            md.mtime(),
            md.mtime_nsec()
        );
    }
    format!("ref:{}", arg.display())
}

/// What an install laid out, recorded (not yet written): made on a
/// thread of its own while the install's flush waits on the disk.
pub(crate) struct Pending {
    recorded: Result<Manifest, ManifestError>,
    took: std::time::Duration,
}

impl Pending {
    /// A recording that failed for `why`.
    pub(crate) fn failed(root: &Path, why: &str) -> Pending {
        Pending {
            recorded: Err(ManifestError::Invalid {
                path: root.to_path_buf(),
                why: why.into(),
            }),
            took: std::time::Duration::ZERO,
        }
    }
}

/// Records the root at `root` for an install of `trees` from `images`:
/// the images' identities beside the walk of the root.
pub(crate) fn pending(
    root: &Path,
    trees: &[PathBuf],
    images: &[PathBuf],
) -> Pending {
    let t0 = std::time::Instant::now();
    let trees: Vec<String> = trees
        .iter()
        .map(|t| String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned())
        .collect();
    let (images, recorded) = rayon::join(
        || {
            images
                .iter()
                .map(|i| ImageRecord {
                    arg: i.display().to_string(),
                    digest: image_digest(i),
                })
                .collect()
        },
        || record(root, &trees, Vec::new()),
    );
    Pending {
        recorded: recorded.map(|mut m| {
            m.header.images = images;
            m
        }),
        took: t0.elapsed(),
    }
}

impl crate::Install<'_> {
    /// Writes what the install laid out, before it is marked complete.
    /// A failure is logged and the install goes on: the zone works, and
    /// an update of it says that it needs `--force`.
    pub(crate) fn save_manifest(&mut self, p: Pending) {
        let t0 = std::time::Instant::now();
        match p.recorded.and_then(|m| {
            write(&self.zonepath, MANIFEST, &m).map(|()| m.entries.len())
        }) {
            Ok(n) => slog::info!(self.log, "manifest recorded"; "entries" => n,
                                 "ms" => (p.took + t0.elapsed()).as_millis() as u64),
            Err(e) => {
                slog::error!(self.log, "manifest not recorded; an update of this root needs --force";
                                   "error" => %e)
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn round_trips_and_refuses_long_lines() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/a"), "a").unwrap();
        fs::hard_link(root.join("usr/bin/a"), root.join("usr/bin/b")).unwrap();
        std::os::unix::fs::symlink("a", root.join("usr/bin/c")).unwrap();
        let m = record(&root, &["usr".into()], Vec::new()).unwrap();
        assert_eq!(m.entries.len(), 5);
        write(d.path(), MANIFEST, &m).unwrap();
        let back = read(d.path(), MANIFEST).unwrap().unwrap();
        assert_eq!(back.entries, m.entries);
        assert_eq!(back.header, m.header);
        let a = &back.entries[2];
        assert_eq!(a.n, back.entries[3].n);
        assert!(a.n.is_some());
        assert_eq!(back.entries[4].target().unwrap(), b"a");
        // A line past the bound is refused, not read into memory.
        let mut z = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        z.write_all(&vec![b'x'; (MAX_LINE + 10) as usize]).unwrap();
        fs::write(d.path().join(MANIFEST), z.finish().unwrap()).unwrap();
        let e = read(d.path(), MANIFEST).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        clear(d.path()).unwrap();
        assert!(read(d.path(), MANIFEST).unwrap().is_none());
    }
}
