//! Comparing two trees on every attribute a faithful copy keeps: what
//! `zinstall verify` runs, and what the tests and `zinstall tune` use to
//! check a copy. It reads both trees and writes nothing, so it stands
//! above the engine, using only its [`Error`] and [`Op`].
//!
//! Both trees are walked side by side, each in sorted order, so memory
//! stays flat however large they are: an entry of one tree is matched with
//! the entry of the same relative path in the other, or reported as
//! missing there. Only inodes with more than one name are remembered, to
//! check that both trees group names into hard links the same way.
//!
//! Access times of directories and symlinks are not compared: reading a
//! directory or a symlink (to compare it, or to copy it) changes its
//! access time, and no call reads either without doing so. Files are read
//! with `O_NOATIME` where the kernel allows it, so comparing does not
//! change what it compares.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use zinstall_engine::fsutil::read_xattrs;
use zinstall_engine::{Error, Op, Result};
use zinstall_sys::fs as sys;
use zinstall_sys::ident::euid;

/// What to compare besides types, modes, sizes and symlink targets.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Owners and groups (default: when running as root).
    pub owner: bool,
    /// File contents (default: yes).
    pub content: bool,
    /// Modification times to the nanosecond (default: yes).
    pub mtime: bool,
    /// Access times of files and special files (default: yes).
    pub atime: bool,
    /// Extended attributes (default: yes).
    pub xattrs: bool,
    /// That files with holes in A have no more allocated in B (default:
    /// no).
    pub sparse: bool,
    /// Descend into directories on other filesystems than the tree's top
    /// (default: no, as a copy does not: a mount point is compared as
    /// the directory it is, not what is mounted on it).
    pub cross_fs: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            owner: euid() == 0,
            content: true,
            mtime: true,
            atime: true,
            xattrs: true,
            sparse: false,
            cross_fs: false,
        }
    }
}

/// How an entry differs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiffKind {
    /// Only in the first tree.
    OnlyInA,
    /// Only in the second tree.
    OnlyInB,
    /// Different types (`file`, `dir`, `symlink`, `fifo`, ...).
    Type {
        /// Type in A.
        a: &'static str,
        /// Type in B.
        b: &'static str,
    },
    /// Different permission bits, special bits included.
    Mode {
        /// Mode in A.
        a: u32,
        /// Mode in B.
        b: u32,
    },
    /// Different owner or group.
    Owner {
        /// (uid, gid) in A.
        a: (u32, u32),
        /// (uid, gid) in B.
        b: (u32, u32),
    },
    /// Different sizes.
    Size {
        /// Size in A.
        a: u64,
        /// Size in B.
        b: u64,
    },
    /// Same size, different bytes from this offset.
    Content {
        /// First differing byte.
        offset: u64,
    },
    /// Symlinks pointing at different targets.
    SymlinkTarget,
    /// Different modification times, `(seconds, nanoseconds)`.
    Mtime {
        /// In A.
        a: (i64, i64),
        /// In B.
        b: (i64, i64),
    },
    /// Different access times.
    Atime {
        /// In A.
        a: (i64, i64),
        /// In B.
        b: (i64, i64),
    },
    /// An extended attribute missing on one side or with another value.
    Xattr {
        /// Its name.
        name: String,
    },
    /// The name is hard-linked to a different set of names.
    HardLinks,
    /// Different device numbers.
    Rdev,
    /// B allocates more than A where A has holes.
    Sparse {
        /// Bytes allocated in A.
        a: u64,
        /// Bytes allocated in B.
        b: u64,
    },
}

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Relative to both roots.
    pub path: PathBuf,
    /// How it differs.
    pub kind: DiffKind,
}

/// The outcome of [`compare`].
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Every difference found, in path order.
    pub differences: Vec<Difference>,
    /// Entries present in both trees and compared.
    pub entries_compared: u64,
}

impl Comparison {
    /// True if no difference was found.
    pub fn is_identical(&self) -> bool {
        self.differences.is_empty()
    }
}

impl fmt::Display for Comparison {
    /// One line per difference: the path (escaped) and what differs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.differences {
            writeln!(f, "{}: {}", escape(&d.path), d.kind)?;
        }
        Ok(())
    }
}

impl fmt::Display for DiffKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiffKind::OnlyInA => write!(f, "only in the first tree"),
            DiffKind::OnlyInB => write!(f, "only in the second tree"),
            DiffKind::Type { a, b } => write!(f, "type {a} vs {b}"),
            DiffKind::Mode { a, b } => write!(f, "mode {a:04o} vs {b:04o}"),
            DiffKind::Owner { a, b } => {
                write!(f, "owner {}:{} vs {}:{}", a.0, a.1, b.0, b.1)
            }
            DiffKind::Size { a, b } => write!(f, "size {a} vs {b}"),
            DiffKind::Content { offset } => {
                write!(f, "content differs at byte {offset}")
            }
            DiffKind::SymlinkTarget => write!(f, "symlink target differs"),
            DiffKind::Mtime { a, b } => {
                write!(f, "mtime {}.{:09} vs {}.{:09}", a.0, a.1, b.0, b.1)
            }
            DiffKind::Atime { a, b } => {
                write!(f, "atime {}.{:09} vs {}.{:09}", a.0, a.1, b.0, b.1)
            }
            DiffKind::Xattr { name } => write!(f, "xattr {name} differs"),
            DiffKind::HardLinks => write!(f, "hard links differ"),
            DiffKind::Rdev => write!(f, "device numbers differ"),
            DiffKind::Sparse { a, b } => {
                write!(f, "allocates {b} bytes where the original has {a}")
            }
        }
    }
}

/// Escapes a path for one line of text: control characters and bytes
/// that are not UTF-8 as `\xNN`.
fn escape(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Compares tree `a` with tree `b`.
pub fn compare(
    a: &Path,
    b: &Path,
    opts: &CompareOptions,
) -> Result<Comparison> {
    let mut wa = sorted_walk(a, opts.cross_fs);
    let mut wb = sorted_walk(b, opts.cross_fs);
    let mut cmp = Comparer {
        opts,
        out: Comparison::default(),
        links_a: HashMap::new(),
        links_b: HashMap::new(),
    };
    let mut ea = next(&mut wa, a)?;
    let mut eb = next(&mut wb, b)?;
    loop {
        let order = match (&ea, &eb) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => x.0.cmp(&y.0),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some((rel, ent)) = ea.take() {
                    if ent.file_type().is_dir() {
                        wa.skip_current_dir();
                    }
                    cmp.push(rel, DiffKind::OnlyInA);
                }
                ea = next(&mut wa, a)?;
            }
            std::cmp::Ordering::Greater => {
                if let Some((rel, ent)) = eb.take() {
                    if ent.file_type().is_dir() {
                        wb.skip_current_dir();
                    }
                    cmp.push(rel, DiffKind::OnlyInB);
                }
                eb = next(&mut wb, b)?;
            }
            std::cmp::Ordering::Equal => {
                if let (Some((rel, x)), Some((_, y))) = (ea.take(), eb.take()) {
                    let both_dirs =
                        x.file_type().is_dir() && y.file_type().is_dir();
                    if !both_dirs {
                        // Do not descend where the other side cannot.
                        if x.file_type().is_dir() {
                            wa.skip_current_dir();
                        }
                        if y.file_type().is_dir() {
                            wb.skip_current_dir();
                        }
                    }
                    cmp.entry(&rel, x.path(), y.path())?;
                }
                ea = next(&mut wa, a)?;
                eb = next(&mut wb, b)?;
            }
        }
    }
    Ok(cmp.out)
}

/// A sorted walk of one tree that stays on its root's mount unless
/// crossing: a directory on another device, or (where the system tells
/// mounts apart) on another mount of the same filesystem, a bind mount,
/// is compared but not descended into.
struct Walk {
    inner: walkdir::IntoIter,
    /// The root's mount id, when staying on it and the system says.
    mount: Option<u64>,
    /// The entry last yielded is a directory not descended into.
    skipped: bool,
}

impl Walk {
    /// Does not descend into the directory last yielded (once).
    fn skip_current_dir(&mut self) {
        if !self.skipped {
            self.inner.skip_current_dir();
            self.skipped = true;
        }
    }
}

fn sorted_walk(root: &Path, cross_fs: bool) -> Walk {
    let mount = (!cross_fs).then(|| mount_of(root)).flatten();
    Walk {
        inner: WalkDir::new(root)
            .follow_links(false)
            .same_file_system(!cross_fs)
            .sort_by_file_name()
            .into_iter(),
        mount,
        skipped: false,
    }
}

/// The mount id of `p` (not followed), where the system tells it.
fn mount_of(p: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    sys::mount_id(libc::AT_FDCWD, &c).ok().flatten()
}

fn next(
    w: &mut Walk,
    root: &Path,
) -> Result<Option<(PathBuf, walkdir::DirEntry)>> {
    w.skipped = false;
    match w.inner.next() {
        None => Ok(None),
        Some(Err(e)) => Err(Error::walk(Op::ReadDir, root, e)),
        Some(Ok(e)) => {
            if let Some(top) = w.mount
                && e.depth() > 0
                && e.file_type().is_dir()
                && mount_of(e.path()).is_some_and(|m| m != top)
            {
                // A mount point: compared as a directory, not entered.
                w.skip_current_dir();
            }
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap_or(Path::new(""))
                .to_path_buf();
            Ok(Some((rel, e)))
        }
    }
}

struct Comparer<'o> {
    opts: &'o CompareOptions,
    out: Comparison,
    /// (dev, ino) → first name seen, for inodes with several names.
    links_a: HashMap<(u64, u64), PathBuf>,
    links_b: HashMap<(u64, u64), PathBuf>,
}

fn type_name(md: &Metadata) -> &'static str {
    let t = md.file_type();
    if t.is_dir() {
        "dir"
    } else if t.is_file() {
        "file"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "unknown"
    }
}

impl Comparer<'_> {
    fn push(&mut self, path: PathBuf, kind: DiffKind) {
        self.out.differences.push(Difference { path, kind });
    }

    fn entry(&mut self, rel: &Path, a: &Path, b: &Path) -> Result<()> {
        self.out.entries_compared += 1;
        let ma =
            fs::symlink_metadata(a).map_err(|e| Error::io(Op::Stat, a, e))?;
        let mb =
            fs::symlink_metadata(b).map_err(|e| Error::io(Op::Stat, b, e))?;
        let rel = rel.to_path_buf();
        let (ta, tb) = (type_name(&ma), type_name(&mb));
        if ta != tb {
            self.push(rel, DiffKind::Type { a: ta, b: tb });
            return Ok(());
        }
        let is_link = ma.file_type().is_symlink();
        if !is_link && ma.mode() & 0o7777 != mb.mode() & 0o7777 {
            self.push(
                rel.clone(),
                DiffKind::Mode {
                    a: ma.mode() & 0o7777,
                    b: mb.mode() & 0o7777,
                },
            );
        }
        if self.opts.owner && (ma.uid(), ma.gid()) != (mb.uid(), mb.gid()) {
            self.push(
                rel.clone(),
                DiffKind::Owner {
                    a: (ma.uid(), ma.gid()),
                    b: (mb.uid(), mb.gid()),
                },
            );
        }
        if ma.file_type().is_file() {
            self.file(&rel, a, b, &ma, &mb)?;
        }
        if is_link {
            let la =
                fs::read_link(a).map_err(|e| Error::io(Op::Readlink, a, e))?;
            let lb =
                fs::read_link(b).map_err(|e| Error::io(Op::Readlink, b, e))?;
            if la != lb {
                self.push(rel.clone(), DiffKind::SymlinkTarget);
            }
        }
        let ft = ma.file_type();
        if (ft.is_char_device() || ft.is_block_device())
            && ma.rdev() != mb.rdev()
        {
            self.push(rel.clone(), DiffKind::Rdev);
        }
        self.times(&rel, &ma, &mb);
        if self.opts.xattrs {
            for name in differing_xattrs(a, b)? {
                self.push(rel.clone(), DiffKind::Xattr { name });
            }
        }
        if !ft.is_dir() && (ma.nlink() > 1 || mb.nlink() > 1) {
            self.hard_links(rel, &ma, &mb);
        }
        Ok(())
    }

    /// Regular files' sizes, contents and sparseness.
    fn file(
        &mut self,
        rel: &Path,
        a: &Path,
        b: &Path,
        ma: &Metadata,
        mb: &Metadata,
    ) -> Result<()> {
        if ma.len() != mb.len() {
            self.push(
                rel.to_path_buf(),
                DiffKind::Size {
                    a: ma.len(),
                    b: mb.len(),
                },
            );
        } else if self.opts.content
            && let Some(offset) = first_difference(a, b)?
        {
            self.push(rel.to_path_buf(), DiffKind::Content { offset });
        }
        let (alloc_a, alloc_b) = (ma.blocks() * 512, mb.blocks() * 512);
        if self.opts.sparse
            && alloc_a < ma.len()
            && alloc_b > alloc_a + (64 << 10)
        {
            self.push(
                rel.to_path_buf(),
                DiffKind::Sparse {
                    a: alloc_a,
                    b: alloc_b,
                },
            );
        }
        Ok(())
    }

    /// Modification and access times, as the options ask.
    fn times(&mut self, rel: &Path, ma: &Metadata, mb: &Metadata) {
        let ft = ma.file_type();
        let times = |m: &Metadata| {
            ((m.mtime(), m.mtime_nsec()), (m.atime(), m.atime_nsec()))
        };
        let ((mta, ata), (mtb, atb)) = (times(ma), times(mb));
        if self.opts.mtime && mta != mtb {
            self.push(rel.to_path_buf(), DiffKind::Mtime { a: mta, b: mtb });
        }
        if self.opts.atime && !ft.is_dir() && !ft.is_symlink() && ata != atb {
            self.push(rel.to_path_buf(), DiffKind::Atime { a: ata, b: atb });
        }
    }

    /// Whether the two files at `rel`, with other names, share them with
    /// the same entries: each inode's first name stands for it.
    fn hard_links(&mut self, rel: PathBuf, ma: &Metadata, mb: &Metadata) {
        let leader_a = self
            .links_a
            .entry((ma.dev(), ma.ino()))
            .or_insert_with(|| rel.clone())
            .clone();
        let leader_b = self
            .links_b
            .entry((mb.dev(), mb.ino()))
            .or_insert_with(|| rel.clone())
            .clone();
        if leader_a != leader_b {
            self.push(rel, DiffKind::HardLinks);
        }
    }
}

/// The first offset where two files of equal length differ.
fn first_difference(a: &Path, b: &Path) -> Result<Option<u64>> {
    let fa = sys::open_source(a).map_err(|e| Error::io(Op::Open, a, e))?;
    let fb = sys::open_source(b).map_err(|e| Error::io(Op::Open, b, e))?;
    let len = fa.metadata().map_err(|e| Error::io(Op::Stat, a, e))?.len();
    let (mut ba, mut bb) = (vec![0u8; 256 << 10], vec![0u8; 256 << 10]);
    let seek = |f: &std::fs::File, p: &Path, off: u64, data: bool| {
        sys::seek(f, off, data)
            .map(|o| o.unwrap_or(len).min(len))
            .map_err(|e| Error::io(Op::Seek, p, e))
    };
    let mut off = 0u64;
    // Where both files have holes both read as zeros: only ranges where
    // either has data are read, so a 9 GiB sparse file costs its data.
    while off < len {
        let start = seek(&fa, a, off, true)?.min(seek(&fb, b, off, true)?);
        if start >= len {
            break;
        }
        let end = seek(&fa, a, start, false)?.max(seek(&fb, b, start, false)?);
        let mut at = start;
        while at < end {
            let want = (end - at).min(ba.len() as u64) as usize;
            let na = read_full_at(&fa, &mut ba[..want], at)
                .map_err(|e| Error::io(Op::Read, a, e))?;
            let nb = read_full_at(&fb, &mut bb[..want], at)
                .map_err(|e| Error::io(Op::Read, b, e))?;
            let n = na.min(nb);
            if ba[..n] != bb[..n] {
                let i = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y);
                return Ok(Some(at + i.unwrap_or(0) as u64));
            }
            if na != nb || n == 0 {
                return Ok(Some(at + n as u64));
            }
            at += n as u64;
        }
        off = end.max(start + 1);
    }
    Ok(None)
}

/// Reads until `buf` is full or the file ends.
fn read_full_at(
    f: &std::fs::File,
    buf: &mut [u8],
    off: u64,
) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Names of the attributes missing on one side or differing in value.
fn differing_xattrs(a: &Path, b: &Path) -> Result<Vec<String>> {
    let read = |p: &Path| -> Result<HashMap<Vec<u8>, Vec<u8>>> {
        Ok(read_xattrs(p)?.into_iter().collect())
    };
    let (xa, xb) = (read(a)?, read(b)?);
    let mut names: Vec<String> = xa
        .iter()
        .filter(|(k, v)| xb.get(*k) != Some(v))
        .map(|(k, _)| k)
        .chain(xb.keys().filter(|k| !xa.contains_key(*k)))
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    names.sort();
    Ok(names)
}
