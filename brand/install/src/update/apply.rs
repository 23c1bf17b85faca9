//! The writes: the diff's plan carried out beneath the new root,
//! removals first, then each entry added or changed, then the times of
//! the directories touched.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::beneath::{
    open_dir, parent_of, remove_beneath, set_owner_mode, set_times_fd,
    set_xattrs_fd, timestamps, unlink_any, xattrs_of,
};
use super::diff::{Op, Plan, Want, shown};
use super::error::{UpdateError, errno_at, io_at};
use super::report::{Kept, Report};
use crate::manifest;

/// A file the update wrote: its content's hash, and its inode and
/// change time when done (none for a hard-link group's, which later
/// links move).
pub(super) struct Written {
    pub(super) hash: String,
    pub(super) stat: Option<(u64, i64, i64)>,
}

/// Writes the plan into the new root: removals deepest first, then each
/// entry added or changed, parents first; then the times of every
/// directory touched.
pub(super) fn apply(
    plan: &Plan,
    wants: &[Want],
    old: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    new_path: &Path,
    report: &mut Report,
    written: &mut HashMap<Vec<u8>, Written>,
) -> Result<(), UpdateError> {
    let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
    let parent = |rel: &[u8]| -> Vec<u8> {
        match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => rel[..i].to_vec(),
            None => Vec::new(),
        }
    };
    for (rel, kind) in &plan.remove {
        let at = new_path.join(OsStr::from_bytes(rel));
        let Ok((dir, name)) = parent_of(new, rel, false) else {
            continue;
        };
        let flags = if *kind == 'd' {
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
            Err(e) => return Err(errno_at("remove", at)(e)),
        }
        touched.insert(parent(rel));
    }
    // The first name written of each source inode, for the others.
    let mut first: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    for (i, w) in wants.iter().enumerate() {
        if plan.ops[i] == Op::Same || plan.kept.contains(&i) {
            continue;
        }
        let at = new_path.join(OsStr::from_bytes(&w.rel));
        let (dir, name) = parent_of(new, &w.rel, true)
            .map_err(io_at("open the parent of", &at))?;
        touched.insert(parent(&w.rel));
        let e = &w.entry;
        // An entry of the other kind (directory or not) in the way: only
        // where the plan replaces it, or `force` overwrites the zone's.
        if let Ok(st) =
            rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
        {
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if is_dir != (e.k == 'd') {
                remove_beneath(dir.as_fd(), &name, &at)?;
            }
        }
        match e.k {
            'd' => {
                match rustix::fs::mkdirat(
                    &dir,
                    name.as_c_str(),
                    Mode::from_raw_mode(0o700),
                ) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(err) => return Err(errno_at("make", &at)(err)),
                }
                let fd =
                    open_dir(dir.as_fd(), &name).map_err(io_at("open", &at))?;
                set_owner_mode(fd.as_fd(), e.u, e.g, e.m, &at)?;
                set_xattrs_fd(fd.as_fd(), &xattrs_of(&w.src)?, &at)?;
                touched.insert(w.rel.clone());
            }
            'f' => {
                unlink_any(&dir, &name, &at)?;
                if let Some(f) = w.inode.and_then(|n| first.get(&n)) {
                    let (fdir, fname) = parent_of(new, f, false)
                        .map_err(io_at("open the parent of", &at))?;
                    rustix::fs::linkat(
                        &fdir,
                        fname.as_c_str(),
                        &dir,
                        name.as_c_str(),
                        AtFlags::empty(),
                    )
                    .map_err(errno_at("link", &at))?;
                    continue;
                }
                let fd = rustix::fs::openat(
                    &dir,
                    name.as_c_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(errno_at("create", &at))?;
                let mut out = fs::File::from(fd);
                let src =
                    fs::File::open(&w.src).map_err(io_at("open", &w.src))?;
                let (n, hash) =
                    copy_data(src, &mut out).map_err(io_at("write", &at))?;
                report.bytes += n;
                set_owner_mode(out.as_fd(), e.u, e.g, e.m, &at)?;
                set_xattrs_fd(out.as_fd(), &xattrs_of(&w.src)?, &at)?;
                set_times_fd(out.as_fd(), w.atime, e.t, &at)?;
                let st =
                    rustix::fs::fstat(&out).map_err(errno_at("stat", &at))?;
                written.insert(
                    w.rel.clone(),
                    Written {
                        hash,
                        stat: w.inode.is_none().then_some((
                            st.st_ino,
                            st.st_ctime as i64,
                            st.st_ctime_nsec as i64,
                        )),
                    },
                );
                if let Some(n) = w.inode {
                    first.insert(n, w.rel.clone());
                }
            }
            'l' => {
                unlink_any(&dir, &name, &at)?;
                let target = e.target().unwrap_or_default();
                rustix::fs::symlinkat(
                    OsStr::from_bytes(&target),
                    &dir,
                    name.as_c_str(),
                )
                .map_err(errno_at("make symlink", &at))?;
                if !w.redirect {
                    use rustix::fs::{Gid, Uid};
                    rustix::fs::chownat(
                        &dir,
                        name.as_c_str(),
                        Some(Uid::from_raw(e.u)),
                        Some(Gid::from_raw(e.g)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno_at("chown", &at))?;
                    rustix::fs::utimensat(
                        &dir,
                        name.as_c_str(),
                        &timestamps(w.atime, e.t),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno_at("set times of", &at))?;
                }
            }
            _ => {}
        }
    }
    // Directory times last: every write above moved them.
    let wanted: HashMap<&[u8], &Want> =
        wants.iter().map(|w| (w.rel.as_slice(), w)).collect();
    for rel in touched.iter().rev() {
        if rel.is_empty() {
            continue;
        }
        let at = new_path.join(OsStr::from_bytes(rel));
        let times = match wanted.get(rel.as_slice()) {
            Some(w) if w.entry.k == 'd' => Some((w.atime, w.entry.t)),
            // Now a file: its own times were set as it was written.
            Some(_) => None,
            None => match parent_of(old, rel, false) {
                Ok((d, n)) => rustix::fs::statat(
                    &d,
                    n.as_c_str(),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok()
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
        let Ok((dir, name)) = parent_of(new, rel, false) else {
            continue;
        };
        match rustix::fs::utimensat(
            &dir,
            name.as_c_str(),
            &timestamps(a, m),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(errno_at("set times of", at)(e)),
        }
    }
    Ok(())
}

fn copy_data(src: fs::File, out: &mut fs::File) -> io::Result<(u64, String)> {
    manifest::hash_copy(src, out)
}
