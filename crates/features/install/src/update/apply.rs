//! The writes: the decisions carried out beneath the new root (a clone
//! of the old one), removals first, then each entry written, parents
//! before children, then the times of the directories touched.
//!
//! Every path is opened beneath the new root by the engine's writer,
//! never through a symlink; an entry is replaced (the old name removed,
//! a new one made), never edited in place, so an inode the clone shares
//! with the previous root is never written.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CStr, OsStr};
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use zinstall_engine::beneath::{Dir, Root};

use super::attrs::{self, parent, rel_path, shown as shown_in};
use super::decide::{Plan, shown};
use super::error::{UpdateError, errno_at, io_at};
use super::report::{Kept, Report};
use super::source::{From, Want};
use crate::manifest;

/// What the writes leave for the manifest and the flush.
#[derive(Default)]
pub(super) struct Written {
    /// Per want written by copying: its content's hash.
    pub(super) hashes: HashMap<usize, String>,
    /// Files whose data was written (copied or staged), to make durable.
    pub(super) data: Vec<Vec<u8>>,
    /// Directories made or changed, to make durable.
    pub(super) dirs: BTreeSet<Vec<u8>>,
    /// Wants not written after all: beneath an entry the zone keeps.
    pub(super) blocked: Vec<usize>,
    /// Per want written by copying: its inode and change time when done.
    pub(super) stamps: HashMap<usize, super::clone::Stamp>,
    /// A staged file was linked in: its stamp moves when the staging
    /// directory goes.
    pub(super) staged: bool,
}

/// The root directories of the write.
pub(super) struct Roots<'a> {
    pub(super) old: &'a Root,
    pub(super) new: &'a Root,
}

fn parent_rel(rel: &[u8]) -> Vec<u8> {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => rel[..i].to_vec(),
        None => Vec::new(),
    }
}

/// Carries out `plan`.
pub(super) fn apply(
    wants: &[Want],
    plan: &Plan,
    roots: &Roots<'_>,
    report: &mut Report,
) -> Result<Written, UpdateError> {
    let mut out = Written::default();
    remove_all(plan, roots.new, report, &mut out)?;
    // The first name written of each group, for the others.
    let mut first: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    let mut blocked: Vec<Vec<u8>> = Vec::new();
    for (n, w) in wants.iter().enumerate() {
        if !plan.write[n] {
            if plan.zones[n] {
                blocked.push(w.rel.clone());
            }
            continue;
        }
        // Beneath an entry the zone keeps (its file where the source
        // has a directory): kept with it.
        if blocked
            .iter()
            .any(|b| w.rel.starts_with(b) && w.rel.get(b.len()) == Some(&b'/'))
        {
            out.blocked.push(n);
            continue;
        }
        let (dir, name) = match parent(roots.new, &w.rel, true) {
            Ok(p) => p,
            Err(UpdateError::Copier(zinstall_engine::Error::Beneath {
                ..
            })) => {
                report.kept.push(Kept {
                    path: shown(&w.rel),
                    why: "beneath an entry of the zone's that is not a directory",
                });
                out.blocked.push(n);
                blocked.push(w.rel.clone());
                continue;
            }
            Err(e) => return Err(e),
        };
        out.dirs.insert(parent_rel(&w.rel));
        let linked = w.group.and_then(|g| first.get(&g)).cloned();
        let hash =
            write_one(w, &dir, &name, linked.as_deref(), roots, &mut out)?;
        report.bytes += hash.as_ref().map_or(0, |h| h.1);
        if let Some((h, _, stamp)) = hash {
            out.hashes.insert(n, h);
            out.stamps.insert(n, stamp);
        }
        if let Some(g) = w.group {
            first.entry(g).or_insert_with(|| w.rel.clone());
        }
        if w.entry.k == 'd' {
            out.dirs.insert(w.rel.clone());
        }
    }
    set_dir_times(wants, roots, &out.dirs)?;
    Ok(out)
}

/// Removals, deepest first.
fn remove_all(
    plan: &Plan,
    new: &Root,
    report: &mut Report,
    out: &mut Written,
) -> Result<(), UpdateError> {
    for (rel, whole) in &plan.remove {
        let Ok((dir, name)) = parent(new, rel, false) else {
            // Its directory went first, or is the zone's symlink.
            continue;
        };
        let at = shown_in(&dir, &name);
        if *whole {
            dir.remove_at(&name)?;
        } else {
            let st = match rustix::fs::statat(
                &dir,
                name.as_c_str(),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(errno_at("stat", &at)(e)),
            };
            let flags = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            match rustix::fs::unlinkat(&dir, name.as_c_str(), flags) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) => {
                    report.removed.retain(|c| c.path != shown(rel));
                    report.kept.push(Kept {
                        path: shown(rel),
                        why: "holds the zone's own files; the new source removes it",
                    });
                }
                Err(e) => return Err(errno_at("remove", &at)(e)),
            }
        }
        out.dirs.insert(parent_rel(rel));
    }
    Ok(())
}

/// Writes one want at `name` in `dir`; the hash and size of the content
/// it copied, if it copied any.
fn write_one(
    w: &Want,
    dir: &Dir,
    name: &CStr,
    linked: Option<&[u8]>,
    roots: &Roots<'_>,
    out: &mut Written,
) -> Result<Option<(String, u64, super::clone::Stamp)>, UpdateError> {
    let at = shown_in(dir, name);
    let e = &w.entry;
    let existing =
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok();
    let existing_dir = existing
        .as_ref()
        .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
    if e.k == 'd' {
        write_dir(w, dir, name, existing.is_some(), existing_dir, &at)?;
        return Ok(None);
    }
    // Anything else replaces what is there.
    if existing.is_some() {
        dir.remove_at(name)?;
    }
    if let Some(first) = linked {
        let (fdir, fname) = parent(roots.new, first, false)?;
        rustix::fs::linkat(
            &fdir,
            fname.as_c_str(),
            dir,
            name,
            AtFlags::empty(),
        )
        .map_err(errno_at("link", &at))?;
        return Ok(None);
    }
    match (&w.from, e.k) {
        (From::Staged(src), _) => {
            link_staged(w, src, dir, name, out, &at)?;
            Ok(None)
        }
        (From::Path(src), 'f') => {
            copy_path(w, src, dir, name, out, &at).map(Some)
        }
        (From::Recorded, 'f') => copy_recorded(w, dir, name, roots, out, &at),
        (_, 'l') => {
            write_symlink(w, dir, name, &at)?;
            Ok(None)
        }
        // Devices, FIFOs and sockets come only from staged archives.
        _ => Ok(None),
    }
}

/// Moves the name of `w`'s entry staged at `src` (unpacked on this
/// filesystem with its attributes) to `name` in `dir`: its data is not
/// written again.
fn link_staged(
    w: &Want,
    src: &Path,
    dir: &Dir,
    name: &CStr,
    out: &mut Written,
    at: &Path,
) -> Result<(), UpdateError> {
    rustix::fs::linkat(rustix::fs::CWD, src, dir, name, AtFlags::empty())
        .map_err(errno_at("link", at))?;
    if w.entry.k == 'f' {
        out.data.push(w.rel.clone());
    }
    out.staged = true;
    Ok(())
}

/// Copies the file `w` from the loose source `src` to `name` in `dir`,
/// with the metadata recorded; its hash, size and stamp.
fn copy_path(
    w: &Want,
    src: &Path,
    dir: &Dir,
    name: &CStr,
    out: &mut Written,
    at: &Path,
) -> Result<(String, u64, super::clone::Stamp), UpdateError> {
    let e = &w.entry;
    let from = zinstall_engine::beneath::open_file_nofollow(
        src,
        fs::OpenOptions::new().read(true),
    )?;
    let (file, hash, n) = copy_into(&from, dir, name, at)?;
    attrs::set_meta(file.as_fd(), e.u, e.g, e.m, &attrs::xattrs_of(src)?, at)?;
    attrs::set_times(file.as_fd(), w.atime, e.t, at)?;
    out.data.push(w.rel.clone());
    Ok((hash, n, stamp_of(&file, at)?))
}

/// Makes the directory `w` at `name` in `dir` (replacing a
/// non-directory there) and sets its metadata; one already there is
/// kept, its metadata set.
fn write_dir(
    w: &Want,
    dir: &Dir,
    name: &CStr,
    existing: bool,
    existing_dir: bool,
    at: &Path,
) -> Result<(), UpdateError> {
    let e = &w.entry;
    if existing && !existing_dir {
        dir.remove_at(name)?;
    }
    if !existing_dir {
        match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(err) => return Err(errno_at("make", at)(err)),
        }
    }
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_at("open", at))?;
    let x = match &w.from {
        From::Path(src) | From::Staged(src) => attrs::xattrs_of(src)?,
        _ => Vec::new(),
    };
    attrs::set_meta(fd.as_fd(), e.u, e.g, e.m, &x, at)?;
    Ok(())
}

/// A recorded file that must be written (its group changed): its bytes
/// from the old root, as recorded.
fn copy_recorded(
    w: &Want,
    dir: &Dir,
    name: &CStr,
    roots: &Roots<'_>,
    out: &mut Written,
    at: &Path,
) -> Result<Option<(String, u64, super::clone::Stamp)>, UpdateError> {
    let e = &w.entry;
    // A recorded file that must be written (its group changed):
    // its bytes from the old root, as recorded.
    let (odir, oname) = parent(roots.old, &w.rel, false)?;
    let from = rustix::fs::openat(
        &odir,
        oname.as_c_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(errno_at("open", shown_in(&odir, &oname)))?;
    let x = attrs::xattrs_fd(from.as_fd(), at)?;
    let from = fs::File::from(from);
    let (file, hash, n) = copy_into(&from, dir, name, at)?;
    attrs::set_meta(file.as_fd(), e.u, e.g, e.m, &x, at)?;
    attrs::set_times(file.as_fd(), w.atime, e.t, at)?;
    out.data.push(w.rel.clone());
    Ok(Some((hash, n, stamp_of(&file, at)?)))
}

/// The symlink `w` at `name` in `dir`, owned and timed as recorded
/// unless it is a redirect or comes from a loose source.
fn write_symlink(
    w: &Want,
    dir: &Dir,
    name: &CStr,
    at: &Path,
) -> Result<(), UpdateError> {
    let e = &w.entry;
    let target = e.target().unwrap_or_default();
    rustix::fs::symlinkat(OsStr::from_bytes(&target), dir, name)
        .map_err(errno_at("make symlink", at))?;
    if !w.redirect && !w.from.loose() {
        attrs::set_link_owner_and_times(
            dir.as_fd(),
            name,
            (e.u, e.g),
            (w.atime, e.t),
            at,
        )?;
    }
    Ok(())
}

/// A new file `name` in `dir` holding what `from` reads: shared with it
/// where the filesystem clones, else copied; hashed either way.
fn copy_into(
    from: &fs::File,
    dir: &Dir,
    name: &CStr,
    at: &Path,
) -> Result<(fs::File, String, u64), UpdateError> {
    let fd = attrs::create_new(dir.as_fd(), name, at)?;
    let mut out = fs::File::from(fd);
    let (n, hash) =
        manifest::hash_copy(from, &mut out).map_err(io_at("write", at))?;
    Ok((out, hash, n))
}

/// Directory times last: every write above moved them. A wanted
/// directory gets the source's; one the update only wrote in keeps the
/// old root's.
fn set_dir_times(
    wants: &[Want],
    roots: &Roots<'_>,
    touched: &BTreeSet<Vec<u8>>,
) -> Result<(), UpdateError> {
    let wanted: HashMap<&[u8], &Want> =
        wants.iter().map(|w| (w.rel.as_slice(), w)).collect();
    for rel in touched.iter().rev() {
        if rel.is_empty() {
            continue;
        }
        let times = match wanted.get(rel.as_slice()) {
            Some(w) if w.entry.k == 'd' && !w.from.loose() => {
                Some((w.atime, w.entry.t))
            }
            Some(w) if w.entry.k != 'd' => None,
            _ => match parent(roots.old, rel, false) {
                Ok((d, n)) => rustix::fs::statat(
                    &d,
                    n.as_c_str(),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok()
                .filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                .map(|st| {
                    (
                        (st.st_atime as i64, st.st_atime_nsec as i64),
                        (st.st_mtime as i64, st.st_mtime_nsec as i64),
                    )
                }),
                Err(_) => None,
            },
        };
        let Some((a, m)) = times else { continue };
        let Ok((dir, name)) = parent(roots.new, rel, false) else {
            continue;
        };
        match rustix::fs::utimensat(
            &dir,
            name.as_c_str(),
            &attrs::timestamps(a, m),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                return Err(errno_at(
                    "set times of",
                    roots.new.path().join(rel_path(rel)),
                )(e));
            }
        }
    }
    Ok(())
}

/// A file's stamp, once everything is set.
fn stamp_of(
    f: &fs::File,
    at: &Path,
) -> Result<super::clone::Stamp, UpdateError> {
    let st = rustix::fs::fstat(f).map_err(errno_at("stat", at))?;
    Ok((
        st.st_ino as u64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ))
}
