//! Packing a tree into a zinstall archive: `zinstall.json`, then the
//! tree under `root/`, with every attribute a copy keeps (`zinstall
//! image pack`). It reads the tree and writes a stream, never into a
//! root, so it stands above the engine, using its [`Error`], [`Op`] and
//! [`Stats`].
//!
//! Members come in name order (the same tree gives the same archive,
//! byte for byte, but for the times in it). Each keeps its type, mode
//! with setuid, setgid and sticky, numeric owner, modification time to
//! the nanosecond, extended attributes (file capabilities included, as
//! `SCHILY.xattr.*` PAX records), POSIX ACLs (as `SCHILY.acl.*` text by
//! numeric id) and device numbers, all of which GNU tar (`--xattrs
//! --acls`), libarchive and this project's reader restore; a file with
//! holes is a PAX 1.0 sparse member holding its data only (the holes
//! found with `SEEK_DATA`/`SEEK_HOLE`), as `tar -S --format=pax` writes
//! it; a second name of an inode is a hard link to the first. Symlinks
//! are stored, never followed, and the walk stays on the source's
//! filesystem. Sockets cannot be archived and are skipped (counted in
//! [`Stats::skipped`]). A file whose size or times change while it is
//! read is refused rather than archived torn.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Instant;

use zinstall_archive::ArchiveKind;
use zinstall_archive::meta;
use zinstall_archive::tar::{Entry, WriteKind, Writer};

use zinstall_engine::fsutil::read_xattrs;
use zinstall_engine::{Error, Op, Refusal, Result, Stats};
use zinstall_sys::fs as sys;
use zinstall_sys::fs::{major_minor, seek};

/// How to pack.
#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Layer or baseline: what `zinstall.json` says.
    pub kind: ArchiveKind,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            kind: ArchiveKind::Layer,
        }
    }
}

/// Writes `src` as a zinstall archive onto `out` (uncompressed tar: wrap
/// `out` in an encoder to compress); `archive` names `out` in errors.
/// `on_entry` hears of each member packed, by its path relative to
/// `src`. Returns what was packed; `Stats::bytes` counts file data.
pub fn pack(
    src: &Path,
    out: impl Write,
    archive: &Path,
    opts: &PackOptions,
    on_entry: &mut dyn FnMut(&Path),
) -> Result<Stats> {
    let started = Instant::now();
    let top =
        fs::symlink_metadata(src).map_err(|e| Error::io(Op::Stat, src, e))?;
    if !top.is_dir() {
        return Err(Error::refused(src, Refusal::BadSource));
    }
    let mut w = Writer::new(out);
    let wrote = |e: std::io::Error| Error::io(Op::Write, archive, e);
    let json = format!("{{\"v\":\"1\",\"t\":\"{}\"}}\n", opts.kind.as_str());
    let m = Entry {
        name: meta::NAME.as_bytes().to_vec(),
        kind: WriteKind::File,
        mode: 0o444,
        size: json.len() as u64,
        mtime: (top.mtime(), 0),
        ..Entry::default()
    };
    w.append(&m, json.as_bytes()).map_err(wrote)?;
    let mut stats = Stats::default();
    // (dev, ino) of every multiply-linked file → its member name.
    let mut links: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    let walk = walkdir::WalkDir::new(src)
        .follow_links(false)
        .same_file_system(true)
        .sort_by_file_name();
    for item in walk {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(src).to_path_buf();
            let io = e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("filesystem loop"));
            Error::io(Op::ReadDir, path, io)
        })?;
        let path = item.path();
        let rel = path.strip_prefix(src).unwrap_or(Path::new(""));
        let md = fs::symlink_metadata(path)
            .map_err(|e| Error::io(Op::Stat, path, e))?;
        let ft = md.file_type();
        if ft.is_socket() {
            stats.skipped += 1;
            continue;
        }
        let mut name = b"root/".to_vec();
        name.extend_from_slice(rel.as_os_str().as_bytes());
        let (e, body) = member(path, &md, name.clone(), &links, &mut stats)?;
        if !ft.is_dir() && !ft.is_symlink() && md.nlink() > 1 {
            links.entry((md.dev(), md.ino())).or_insert(name);
        }
        match &body {
            Some((f, data)) => append_file(&mut w, &e, f, data, path, &md)?,
            None => w.append(&e, std::io::empty()).map_err(wrote)?,
        }
        on_entry(rel);
    }
    w.finish().map_err(wrote)?;
    stats.elapsed = started.elapsed();
    Ok(stats)
}

/// A regular file's body: the file, and its data segments (offset,
/// length).
type Body = (File, Vec<(u64, u64)>);

/// The member for `path` (`md` when walked), named `name`, and, for a
/// regular file, the file and its data segments to append; a second
/// name of a file already packed (in `links`) is a hard link to it.
/// Counts it in `stats`.
fn member(
    path: &Path,
    md: &fs::Metadata,
    name: Vec<u8>,
    links: &HashMap<(u64, u64), Vec<u8>>,
    stats: &mut Stats,
) -> Result<(Entry, Option<Body>)> {
    let ft = md.file_type();
    let mut e = Entry {
        name,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        xattrs: read_xattrs(path)?,
        ..Entry::default()
    };
    let mut body: Option<Body> = None;
    if ft.is_dir() {
        e.kind = WriteKind::Directory;
        stats.dirs += 1;
    } else if ft.is_symlink() {
        e.kind = WriteKind::Symlink;
        e.link = fs::read_link(path)
            .map_err(|er| Error::io(Op::Readlink, path, er))?
            .into_os_string()
            .into_vec();
        stats.symlinks += 1;
    } else if md.nlink() > 1
        && let Some(first) = links.get(&(md.dev(), md.ino()))
    {
        e.kind = WriteKind::HardLink;
        e.link = first.clone();
        e.xattrs.clear();
        stats.hardlinks += 1;
    } else if ft.is_file() {
        e.kind = WriteKind::File;
        e.size = md.len();
        let (f, data) = open_file(path, md)?;
        if data != [(0, md.len())] {
            e.sparse = Some(data.clone());
        }
        body = Some((f, data));
        stats.files += 1;
        stats.bytes += md.len();
    } else if ft.is_fifo() {
        e.kind = WriteKind::Fifo;
        stats.specials += 1;
    } else if ft.is_char_device() || ft.is_block_device() {
        e.kind = if ft.is_char_device() {
            WriteKind::CharDevice
        } else {
            WriteKind::BlockDevice
        };
        e.dev = major_minor(md.rdev());
        stats.specials += 1;
    }
    Ok((e, body))
}

/// Opens the file `path` that was `md` when walked, and finds its data
/// segments (fewer blocks than bytes: holes, to be stored as a sparse
/// member).
fn open_file(
    path: &Path,
    md: &fs::Metadata,
) -> Result<(File, Vec<(u64, u64)>)> {
    let f =
        sys::open_source(path).map_err(|er| Error::io(Op::Open, path, er))?;
    let now = f.metadata().map_err(|er| Error::io(Op::Stat, path, er))?;
    if (now.dev(), now.ino()) != (md.dev(), md.ino()) {
        return Err(Error::refused(path, Refusal::ChangedDuringCopy));
    }
    let data = if md.blocks().saturating_mul(512) < md.len() {
        data_segments(&f, md.len())
            .map_err(|er| Error::io(Op::Seek, path, er))?
    } else {
        vec![(0, md.len())]
    };
    Ok((f, data))
}

/// Appends the member `e` with the `data` segments of `f` (the file
/// `path`, `md` when walked); a file that grew, shrank or was rewritten
/// while it was read is refused.
fn append_file(
    w: &mut Writer<impl Write>,
    e: &Entry,
    f: &File,
    data: &[(u64, u64)],
    path: &Path,
    md: &fs::Metadata,
) -> Result<()> {
    let mut rd = Segments {
        f,
        data,
        at: 0,
        done: 0,
    };
    w.append(e, &mut rd).map_err(|er| {
        if er.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::refused(path, Refusal::ChangedDuringCopy)
        } else {
            Error::io(Op::Read, path, er)
        }
    })?;
    let after = f.metadata().map_err(|er| Error::io(Op::Stat, path, er))?;
    if after.len() != md.len()
        || (after.mtime(), after.mtime_nsec()) != (md.mtime(), md.mtime_nsec())
    {
        return Err(Error::refused(path, Refusal::ChangedDuringCopy));
    }
    Ok(())
}

/// The data segments of the file `f` of `len` bytes, found with
/// `SEEK_DATA`/`SEEK_HOLE` (a filesystem without them reports the whole
/// file as data).
fn data_segments(f: &File, len: u64) -> std::io::Result<Vec<(u64, u64)>> {
    let mut map = Vec::new();
    let mut off = 0;
    while off < len {
        let Some(start) = seek(f, off, true)? else {
            break;
        };
        if start >= len {
            break;
        }
        let end = seek(f, start, false)?.unwrap_or(len).min(len);
        if end <= start {
            break;
        }
        map.push((start, end - start));
        off = end;
    }
    Ok(map)
}

/// Reads the data segments of a file in order, by offset: a sparse
/// member's body.
struct Segments<'a> {
    f: &'a File,
    data: &'a [(u64, u64)],
    /// The segment being read.
    at: usize,
    /// Bytes of it read.
    done: u64,
}

impl std::io::Read for Segments<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        while let Some(&(off, len)) = self.data.get(self.at) {
            if self.done == len {
                self.at += 1;
                self.done = 0;
                continue;
            }
            let want = (len - self.done).min(buf.len() as u64) as usize;
            let n = self.f.read_at(&mut buf[..want], off + self.done)?;
            // Shorter than when it was mapped: the writer sees the body
            // end early and the file is refused as changed.
            if n == 0 {
                return Ok(0);
            }
            self.done += n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}
