//! OCI images applied beneath a root (the format itself is
//! [`zinstall_oci`]).
//!
//! Each layer's blob is decompressed and unpacked by the same sealed
//! unpacker as any layer ([`crate::unpack`]), with whiteouts applied
//! ([`Whiteouts::Apply`]) or recorded ([`Whiteouts::Record`]). Its
//! digest is checked on the bytes read and its diff_id on the bytes
//! unpacked; a layer whose bytes are not what the image says is an error
//! naming the blob, and the caller throws away what it wrote.
//!
//! A layer unpacked alone (recorded) is applied later as a tree plus its
//! [`Change`]s: [`prepare_layer`] removes what its whiteouts remove and
//! keeps the metadata of directories the layer has no entry for, the
//! caller copies the tree onto the root ([`crate::Plan::layered`], which
//! reflinks where it can), and [`Kept::restore`] puts that metadata back.
//! The result is the one applying the layer's tar stream gives.

use std::ffi::{CString, OsStr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

pub use zinstall_oci::{
    Digest, Form, Image, Layer, Platform, Select, absolute_name, sniff,
    split_reference, transport_name,
};

use crate::beneath::{self, Chain, Root, WalkFail};
use crate::error::{Error, Met, Op, Result};
use crate::sys::posix::{Times, at, euid};
use crate::unpack::{self, Change, UnpackOptions, UnpackReport, Whiteouts};

/// Unpacks layer `i` of `image` into `root` as `opts` says (its
/// `whiteouts` should be [`Whiteouts::Apply`] onto the lower layers, or
/// [`Whiteouts::Record`] into an empty directory). Returns only once the
/// blob's digest and the stream's diff_id matched.
pub fn unpack_layer(
    image: &Image,
    i: usize,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    through_layer(image, i, opts.progress.as_ref(), |diff, shown| {
        unpack::unpack_from(diff, shown, root, opts)
    })
}

/// [`unpack_layer`] into `tree` rather than beneath a root
/// ([`unpack::unpack_from_to_memory`]): the layer's whiteouts remove what
/// lower layers left in the tree, its bodies go to `sink`.
pub fn unpack_layer_to_memory(
    image: &Image,
    i: usize,
    root: &Path,
    tree: &mut unpack::MemTree,
    sink: &dyn unpack::ObjectSink,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let opts = applying(opts);
    through_layer(image, i, opts.progress.as_ref(), |diff, shown| {
        unpack::unpack_from_to_memory(diff, shown, root, tree, sink, &opts)
    })
}

/// What [`unpack_layer`] would make of layer `i` of `image` in `root`,
/// nothing written ([`unpack::dry_run_from`]): the layer read through,
/// decompressed, and checked against its digest and diff_id as an unpack
/// checks it.
pub fn dry_run_layer(
    image: &Image,
    i: usize,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let opts = applying(opts);
    through_layer(image, i, None, |diff, shown| {
        unpack::dry_run_from(diff, shown, root, &opts)
    })
}

/// `opts` applying whiteouts onto what lower layers left.
fn applying(opts: &UnpackOptions) -> UnpackOptions {
    UnpackOptions {
        whiteouts: Whiteouts::Apply,
        ..opts.clone()
    }
}

/// Layer `i`'s tar stream, decompressed and checked against its diff_id
/// as `read` reads it, then against the blob's digest; `progress` hears
/// how far through the blob it is.
fn through_layer(
    image: &Image,
    i: usize,
    progress: Option<&Arc<dyn crate::Progress>>,
    read: impl FnOnce(&mut dyn std::io::Read, &Path) -> Result<UnpackReport>,
) -> Result<UnpackReport> {
    let layer = &image.layers[i];
    let shown = image.layer_path(i);
    let mut raw = image.layer(i)?;
    if let Some(p) = progress {
        p.begin(Some(layer.size));
    }
    let r = (|| {
        // Unbuffered: the decoder buffers what it reads.
        let mut blob = crate::Metered::new(&mut raw, progress.cloned());
        let head = layer_head(image, i, &mut blob, &shown)?;
        let stream = zinstall_archive::compress::decompress(
            std::io::Read::chain(&head[..], blob),
            layer.compression,
        )
        .map_err(|e| Error::io(Op::Read, &shown, e))?;
        // The blob read, its digest summed, decompressed and its diff_id
        // summed on a thread of its own, ahead of the tar reader.
        std::thread::scope(|s| {
            let diff = zinstall_oci::DiffReader::new(
                stream,
                &image.path,
                &layer.digest,
                &layer.diff_id,
            )
            .named(image.layer_name(i));
            let (mut ahead, diff) = zinstall_archive::ahead::read_ahead(
                s,
                crate::unpack::DECOMPRESS_THREAD,
                diff,
            )
            .map_err(|e| Error::io(Op::Read, &shown, e))?;
            let report = read(&mut ahead, &shown);
            // The thread stops and hands the stream back; what it read
            // and the tar reader did not need was summed all the same,
            // and the rest is read and summed here.
            drop(ahead);
            let mut diff =
                diff.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            let report = report?;
            diff.finish()?;
            Ok(report)
        })
    })();
    if let Err(Error::Cancelled { .. }) = &r {
        return r;
    }
    // The blob's own digest first: a blob that is not what it says
    // explains whatever else went wrong with it.
    raw.finish()?;
    r
}

/// The first bytes of layer `i`'s blob, read from `blob`, whose
/// compression must be the one its media type says: a blob that is
/// something else is refused naming both, before any of it is read as
/// tar.
fn layer_head(
    image: &Image,
    i: usize,
    blob: &mut impl std::io::Read,
    shown: &Path,
) -> Result<Vec<u8>> {
    use zinstall_archive::compress;
    let layer = &image.layers[i];
    let mut head = vec![0u8; compress::MAGIC_LEN];
    let n = compress::read_up_to(blob, &mut head)
        .map_err(|e| Error::io(Op::Read, shown, e))?;
    head.truncate(n);
    let found = compress::compression_of(&head);
    // An empty blob is left to the tar reader, which says so.
    if found != layer.compression && n > 0 {
        return Err(Error::Oci(zinstall_oci::Error::LayerCompression {
            image: image.path.clone(),
            digest: layer.digest.to_string(),
            media_type: layer.media_type.clone(),
            declared: layer.compression,
            found,
        }));
    }
    Ok(head)
}

/// Applies every layer of `image` onto `root` in order, whiteouts and
/// all; the stats are the layers' together.
pub fn apply(
    image: &Image,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let opts = applying(opts);
    let mut total = UnpackReport::default();
    for i in 0..image.layers.len() {
        let r = unpack_layer(image, i, root, &opts)?;
        total.stats.merge(&r.stats);
        total.notices.extend(r.notices);
    }
    Ok(total)
}

/// A layer's changes as bytes: one record per change, a tag (`r`
/// remove, `o` opaque, `d` directory without an entry), the path
/// relative to the root, and a NUL (paths need not be UTF-8 and cannot
/// hold NUL).
pub fn encode_changes(changes: &[Change]) -> Vec<u8> {
    let mut v = Vec::new();
    for c in changes {
        let (tag, p) = match c {
            Change::Remove(p) => (b'r', p),
            Change::Opaque(p) => (b'o', p),
            Change::Implicit(p) => (b'd', p),
            // Two records: the link, then its target.
            Change::Link { path, target } => {
                v.push(b'l');
                v.extend_from_slice(path.as_os_str().as_bytes());
                v.push(0);
                (b't', target)
            }
        };
        v.push(tag);
        v.extend_from_slice(p.as_os_str().as_bytes());
        v.push(0);
    }
    v
}

/// Why a layer's recorded changes do not decode.
#[derive(Debug, thiserror::Error)]
pub enum BadChanges {
    /// The last record has no terminating NUL.
    #[error("not NUL-terminated")]
    NotTerminated,
    /// A record with no tag.
    #[error("an empty record")]
    EmptyRecord,
    /// A path that is absolute or has `.`/`..` in it.
    #[error("{}: not a plain relative path", .0.display())]
    NotPlain(PathBuf),
    /// A record (shown) whose tag is unknown or out of place.
    #[error("bad record {0:?}")]
    BadRecord(String),
    /// A link record is the last.
    #[error("a link record without its target")]
    LinkWithoutTarget,
}

/// Reads what [`encode_changes`] wrote; every path must be relative
/// with plain components.
pub fn decode_changes(
    b: &[u8],
) -> std::result::Result<Vec<Change>, BadChanges> {
    let mut out = Vec::new();
    let Some(body) = b.strip_suffix(&[0]) else {
        return if b.is_empty() {
            Ok(out)
        } else {
            Err(BadChanges::NotTerminated)
        };
    };
    let mut link: Option<PathBuf> = None;
    for rec in body.split(|&c| c == 0) {
        let Some((&tag, path)) = rec.split_first() else {
            return Err(BadChanges::EmptyRecord);
        };
        let p = PathBuf::from(OsStr::from_bytes(path));
        if !p.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(BadChanges::NotPlain(p));
        }
        let bad =
            || BadChanges::BadRecord(String::from_utf8_lossy(rec).into_owned());
        if let Some(path) = link.take() {
            if tag != b't' || p.as_os_str().is_empty() {
                return Err(bad());
            }
            out.push(Change::Link { path, target: p });
            continue;
        }
        out.push(match tag {
            b'r' if !path.is_empty() => Change::Remove(p),
            b'o' => Change::Opaque(p),
            b'd' => Change::Implicit(p),
            b'l' if !path.is_empty() => {
                link = Some(p);
                continue;
            }
            _ => return Err(bad()),
        });
    }
    if link.is_some() {
        return Err(BadChanges::LinkWithoutTarget);
    }
    Ok(out)
}

/// What [`prepare_layer`] kept, to put back after the copy.
pub struct Kept {
    root: Root,
    dirs: Vec<(Vec<CString>, Saved)>,
}

enum Saved {
    /// A directory the layer has no entry for: all of it.
    Whole {
        mode: u32,
        uid: u32,
        gid: u32,
        times: Times,
    },
    /// A directory the layer removes from but does not hold: its times.
    Times(Times),
}

/// Before the tree `layer_tree` of a layer with `changes` is copied onto
/// `root`: removes what its whiteouts remove and keeps the metadata the
/// copy would wrongly change. `layer` names the layer in refusals (its
/// blob, as an install names it), with the member refused.
///
/// The outcome is the one applying the layer's tar stream onto `root`
/// gives ([`Whiteouts::Apply`]):
///
/// - A whiteout removes only what lower layers left, beneath the root,
///   never through a symlink. Where a lower layer left a file on the way
///   there is nothing of theirs beneath it to remove; where it left a
///   symlink and this layer's tree has a directory there (this layer
///   turns the symlink into a directory, with whiteouts inside), the
///   same. A symlink anywhere else on the way is refused.
/// - A directory the layer holds entries in but has no entry for must be
///   a directory below already: a symlink or a file there is refused, as
///   an install refuses writing through it.
pub fn prepare_layer(
    root: &Path,
    layer_tree: &Path,
    layer: &Path,
    changes: &[Change],
) -> Result<Kept> {
    let top = Root::open(root)?;
    let tree_top = Root::open(layer_tree)?;
    let mut p = Preparing {
        root,
        layer,
        chain: Chain::new(Arc::clone(top.fd())),
        tree: Chain::new(Arc::clone(tree_top.fd())),
    };
    // First what must be kept, before anything changes it.
    let dirs = p.keep(changes)?;
    p.remove(changes)?;
    // Links to lower layers' files last, once the removals are done, and
    // before the layer's tree replaces any of their targets.
    for c in changes {
        let Change::Link { path, target } = c else {
            continue;
        };
        link_lower(&mut p.chain, root, layer, path, target)?;
    }
    Ok(Kept { root: top, dirs })
}

/// The member a change comes from, for messages.
fn member_of(c: &Change) -> String {
    match c {
        Change::Remove(p) => {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            p.with_file_name(format!(".wh.{name}"))
                .to_string_lossy()
                .into_owned()
        }
        Change::Opaque(d) => {
            d.join(".wh..wh..opq").to_string_lossy().into_owned()
        }
        Change::Implicit(d) => format!("{}/", d.to_string_lossy()),
        Change::Link { path, .. } => path.to_string_lossy().into_owned(),
    }
}

/// [`prepare_layer`]'s walks: `chain` beneath the root, `tree` beneath
/// the layer's tree.
struct Preparing<'a> {
    root: &'a Path,
    layer: &'a Path,
    chain: Chain,
    tree: Chain,
}

impl Preparing<'_> {
    fn refuse(&self, entry: String, reason: crate::ArchiveRefusal) -> Error {
        Error::Archive {
            archive: self.layer.to_path_buf(),
            entry,
            reason,
        }
    }

    fn parts_of(&self, p: &Path) -> Result<Vec<CString>> {
        beneath::components(p).ok_or_else(|| {
            self.refuse(
                p.to_string_lossy().into_owned(),
                crate::ArchiveRefusal::EscapesRoot,
            )
        })
    }

    /// The metadata of the directories the changes touch that copying
    /// the layer's tree would wrongly change.
    fn keep(
        &mut self,
        changes: &[Change],
    ) -> Result<Vec<(Vec<CString>, Saved)>> {
        let mut dirs = Vec::new();
        let mut have = std::collections::HashSet::new();
        for c in changes {
            let (dir, whole) = match c {
                Change::Implicit(d) => (d.as_path(), true),
                Change::Opaque(d) => (d.as_path(), false),
                Change::Remove(p) => {
                    (p.parent().unwrap_or(Path::new("")), false)
                }
                // Its directory is the layer's (an entry, or implicit).
                Change::Link { .. } => continue,
            };
            let parts = self.parts_of(dir)?;
            // The layer's own directory entry decides its metadata.
            if !whole && tree_dir(&mut self.tree, &parts) {
                continue;
            }
            if !have.insert(parts.clone()) {
                continue;
            }
            let fd = match self.chain.open(&parts, None) {
                Ok(fd) => fd,
                Err(WalkFail::Io(_, _, e))
                    if e.raw_os_error() == Some(libc::ENOENT) =>
                {
                    continue;
                }
                // Whiteouts beneath a lower file: nothing to keep or
                // remove.
                Err(WalkFail::Met(_, Met::NotADirectory)) if !whole => {
                    continue;
                }
                Err(WalkFail::Met(_, Met::Symlink)) => {
                    return Err(self.refuse(
                        member_of(c),
                        crate::ArchiveRefusal::ThroughSymlink,
                    ));
                }
                Err(WalkFail::Met(_, Met::NotADirectory)) => {
                    return Err(self.refuse(
                        member_of(c),
                        crate::ArchiveRefusal::FileOverDirectory,
                    ));
                }
                Err(f) => {
                    let shown = self.root.join(dir);
                    return Err(f.into_error(self.root, &parts, &shown));
                }
            };
            let st = at::fstat(&*fd)
                .map_err(|e| Error::io(Op::Stat, self.root.join(dir), e))?;
            let times = times_of(&st);
            let saved = if whole {
                Saved::Whole {
                    mode: st.st_mode & 0o7777,
                    uid: st.st_uid,
                    gid: st.st_gid,
                    times,
                }
            } else {
                Saved::Times(times)
            };
            dirs.push((parts, saved));
        }
        Ok(dirs)
    }

    /// Removes what the whiteouts remove of what lower layers left.
    fn remove(&mut self, changes: &[Change]) -> Result<()> {
        for c in changes {
            let (dir_parts, leaf) = match c {
                Change::Implicit(_) | Change::Link { .. } => continue,
                Change::Remove(p) => {
                    let mut parts = self.parts_of(p)?;
                    let Some(leaf) = parts.pop() else {
                        continue;
                    };
                    (parts, Some(leaf))
                }
                Change::Opaque(d) => (self.parts_of(d)?, None),
            };
            let fd = match self.chain.open(&dir_parts, None) {
                Ok(fd) => fd,
                Err(WalkFail::Io(_, _, e))
                    if e.raw_os_error() == Some(libc::ENOENT) =>
                {
                    continue;
                }
                Err(WalkFail::Met(_, Met::NotADirectory)) => continue,
                // A lower symlink this layer makes a directory: nothing
                // of the lower layers' is beneath it.
                Err(WalkFail::Met(i, Met::Symlink))
                    if tree_dir(&mut self.tree, &dir_parts[..=i]) =>
                {
                    continue;
                }
                Err(WalkFail::Met(_, Met::Symlink)) => {
                    return Err(self.refuse(
                        member_of(c),
                        crate::ArchiveRefusal::ThroughSymlink,
                    ));
                }
                Err(f) => {
                    let shown = shown_of(self.root, &dir_parts);
                    return Err(f.into_error(self.root, &dir_parts, &shown));
                }
            };
            let shown = shown_of(self.root, &dir_parts);
            match leaf {
                Some(leaf) => {
                    let target = shown.join(OsStr::from_bytes(leaf.as_bytes()));
                    beneath::remove_at(fd.as_raw_fd(), &leaf, &target)?;
                }
                None => {
                    let names = at::read_names(&*fd)
                        .map_err(|e| Error::io(Op::ReadDir, &shown, e))?;
                    for n in names {
                        let child = shown.join(OsStr::from_bytes(n.as_bytes()));
                        beneath::remove_at(fd.as_raw_fd(), &n, &child)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether the layer's tree has a directory at `parts` (opened beneath
/// it, no symlink followed).
fn tree_dir(tree: &mut Chain, parts: &[CString]) -> bool {
    tree.open(parts, None).is_ok()
}

/// `root` joined with `parts`, for messages.
fn shown_of(root: &Path, parts: &[CString]) -> PathBuf {
    let mut p = root.to_path_buf();
    for c in parts {
        p.push(OsStr::from_bytes(c.as_bytes()));
    }
    p
}

/// Makes the hard link `path` to `target`, a file lower layers left in
/// `root`, replacing what lower layers left at `path`; both walked
/// beneath the root without following a symlink.
fn link_lower(
    chain: &mut Chain,
    root: &Path,
    layer: &Path,
    path: &Path,
    target: &Path,
) -> Result<()> {
    let refused = || Error::Archive {
        archive: layer.to_path_buf(),
        entry: path.to_string_lossy().into_owned(),
        reason: crate::ArchiveRefusal::HardLinkOutside,
    };
    let parts_of = |p: &Path| beneath::components(p).ok_or_else(refused);
    let tparts = parts_of(target)?;
    let lparts = parts_of(path)?;
    let (Some((tleaf, tparent)), Some((leaf, parent))) =
        (tparts.split_last(), lparts.split_last())
    else {
        return Err(refused());
    };
    let tdir = match chain.open(tparent, None) {
        Ok(fd) => fd,
        Err(_) => return Err(refused()),
    };
    let shown_target = root.join(target);
    match at::lstat(tdir.as_raw_fd(), tleaf)
        .map_err(|e| Error::io(Op::Stat, &shown_target, e))?
    {
        Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {}
        _ => return Err(refused()),
    }
    let shown = root.join(path);
    let dir = chain.open(parent, Some(0o755)).map_err(|f| match f {
        WalkFail::Met(_, Met::Symlink) => Error::Archive {
            archive: layer.to_path_buf(),
            entry: path.to_string_lossy().into_owned(),
            reason: crate::ArchiveRefusal::ThroughSymlink,
        },
        f => f.into_error(root, parent, &shown),
    })?;
    beneath::remove_at(dir.as_raw_fd(), leaf, &shown)?;
    at::link(tdir.as_raw_fd(), tleaf, dir.as_raw_fd(), leaf)
        .map_err(|e| Error::io(Op::Link, &shown, e))
}

impl Kept {
    /// Puts back what [`prepare_layer`] kept, once the layer's tree is
    /// copied.
    pub fn restore(self) -> Result<()> {
        let mut chain = Chain::new(Arc::clone(self.root.fd()));
        let root = self.root.path().to_path_buf();
        for (parts, saved) in &self.dirs {
            let Some(fd) = open_existing(&mut chain, &root, parts)? else {
                continue;
            };
            let shown = || {
                let mut p = root.clone();
                for c in parts {
                    p.push(OsStr::from_bytes(c.as_bytes()));
                }
                p
            };
            let times = match saved {
                Saved::Whole {
                    mode,
                    uid,
                    gid,
                    times,
                } => {
                    if euid() == 0 {
                        at::fchown(&*fd, *uid, *gid)
                            .map_err(|e| Error::io(Op::Chown, shown(), e))?;
                    }
                    at::fchmod(&*fd, *mode)
                        .map_err(|e| Error::io(Op::Chmod, shown(), e))?;
                    times
                }
                Saved::Times(times) => times,
            };
            at::futimens(&*fd, times)
                .map_err(|e| Error::io(Op::SetTimes, shown(), e))?;
        }
        Ok(())
    }
}

/// The directory `parts` beneath the root, if there; a symlink (or a
/// file) on the way is refused, as in an unpack.
fn open_existing(
    chain: &mut Chain,
    root: &Path,
    parts: &[CString],
) -> Result<Option<Arc<std::os::fd::OwnedFd>>> {
    let shown = || {
        let mut p = root.to_path_buf();
        for c in parts {
            p.push(OsStr::from_bytes(c.as_bytes()));
        }
        p
    };
    match chain.open(parts, None) {
        Ok(fd) => Ok(Some(fd)),
        Err(WalkFail::Io(_, _, e))
            if e.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(None)
        }
        Err(f @ WalkFail::Met(_, Met::Symlink | Met::NotADirectory)) => {
            Err(f.into_error(root, parts, &shown()))
        }
        Err(f) => Err(f.into_error(root, parts, &shown())),
    }
}

// libc's stat field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn times_of(st: &libc::stat) -> Times {
    Times {
        atime: (st.st_atime as i64, st.st_atime_nsec as i64),
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn changes_round_trip_and_hostile_paths_are_refused() {
        let c = vec![
            Change::Remove("a/b".into()),
            Change::Opaque("".into()),
            Change::Implicit("usr/lib".into()),
            Change::Link {
                path: "usr/bin/b".into(),
                target: "usr/bin/a".into(),
            },
            Change::Remove("c".into()),
        ];
        assert_eq!(decode_changes(&encode_changes(&c)).unwrap(), c);
        assert_eq!(decode_changes(b"").unwrap(), vec![]);
        for bad in [
            &b"r../x\0"[..],
            b"r/etc\0",
            b"ra/../b\0",
            b"x\0",
            b"r\0",
            b"ra",
            b"la\0",
            b"la\0rb\0",
            b"la\0t\0",
            b"la\0t../x\0",
            b"tb\0",
        ] {
            assert!(decode_changes(bad).is_err(), "{bad:?}");
        }
    }
}
