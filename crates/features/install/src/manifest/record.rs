//! Recording a root: the walk beneath it by descriptors, each entry's
//! attributes, hard-link groups, and the pool deep enough for it.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use super::digest::xattrs;
use super::digest::{digest_of, hash_reader, xattrs_digest, xattrs_fd};
use super::format::{
    Entry, Header, ImageRecord, MAX_DEPTH, Manifest, ManifestError, VERSION,
    hex, io_err,
};

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
    record_with(root, trees, images, None)
}

/// [`record`], taking each file's hash from `contents` (recorded as the
/// file was written) where it has one for the size found, rather than
/// reading the file again.
pub fn record_with(
    root: &Path,
    trees: &[String],
    images: Vec<ImageRecord>,
    contents: Option<&zinstall_engine::contents::Contents>,
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
        top: (st.st_dev as u64, mount_of(top.as_fd(), c"")),
        contents,
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
            root_ino: Some(
                crate::update::platform::root_id(root)
                    .unwrap_or(st.st_ino as u64),
            ),
            trees: trees.to_vec(),
            images,
            entries: entries.len() as u64,
            recipe: None,
            made: None,
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

/// The mount `name` in `dir` is on (`""`: `dir` itself), where the
/// kernel says (Linux 5.8 on); `None` where it does not, and then a
/// device number alone tells mount points.
pub(crate) fn mount_of(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> Option<u64> {
    use std::os::fd::AsRawFd;
    zinstall_sys::fs::mount_id(dir.as_raw_fd(), name)
        .ok()
        .flatten()
}

/// True if `name` in `dir`, a directory on device `dev`, is on the
/// mount of the walk's top (`top`: its device and mount): a bind mount
/// of the same filesystem is a mount point too.
pub(crate) fn same_mount(
    top: (u64, Option<u64>),
    dev: u64,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> bool {
    dev == top.0 && (top.1.is_none() || mount_of(dir, name) == top.1)
}

/// The walk of [`record`].
struct Walk<'a> {
    root: &'a Path,
    trees: &'a [String],
    /// The root's device and mount: a mount point beneath is recorded,
    /// not entered.
    top: (u64, Option<u64>),
    /// Hashes taken as files were written.
    contents: Option<&'a zinstall_engine::contents::Contents>,
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
        use rustix::fs::AtFlags;
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
        let mut below = self.contents(dir, name, &rel, &st, &mut e, depth)?;
        let linked = (e.k != 'd' && st.st_nlink > 1)
            .then_some((st.st_dev as u64, st.st_ino as u64));
        below.insert(0, Recorded { entry: e, linked });
        Ok(below)
    }

    /// Records into `e` what the entry `name` of `dir` (at `rel`, stat
    /// `st`) holds: its xattrs, a file's hash, a link's target; a
    /// directory's entries are returned.
    fn contents(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &std::ffi::CStr,
        rel: &[u8],
        st: &rustix::fs::Stat,
        e: &mut Entry,
        depth: usize,
    ) -> Result<Vec<Recorded>, ManifestError> {
        use rustix::fs::{Mode, OFlags};
        use std::os::fd::AsFd;
        let at = || self.at(rel);
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
        let known = self
            .contents
            .and_then(|c| c.get(rel))
            .filter(|r| e.k == 'f' && r.size == e.s && r.hash.is_some());
        match (e.k, known) {
            ('f', Some(r)) => {
                // Recorded as it was written: neither opened nor read.
                e.h = r.hash;
                e.x = match r.xattrs {
                    Some(x) => x,
                    None => symlink_xattrs(dir, name, &at())
                        .map_err(io_err("read xattrs of", &at()))?,
                };
            }
            ('f', None) => {
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
            ('d', _) => {
                let fd = open(OFlags::RDONLY | OFlags::DIRECTORY)?;
                e.x = digest_of(
                    xattrs_fd(fd.as_fd())
                        .map_err(io_err("read xattrs of", &at()))?,
                );
                if same_mount(self.top, st.st_dev as u64, dir, name) {
                    if depth >= MAX_DEPTH {
                        return Err(ManifestError::TooDeep { path: at() });
                    }
                    below = self.dir(fd.as_fd(), rel, depth + 1)?;
                }
            }
            ('l', _) => {
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
