//! What keeps a published entry as it was built: permissions no wider
//! than its source's, the immutable flag where it can be set, and the
//! stamp recorded in `meta.json` and checked before every reuse; and
//! removing an entry or scratch whatever flags it carries.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use zinstall_engine::Op;
use zinstall_engine::fsutil::remove_tree;

use super::layout::{Cache, Entry, EntryKind, Meta, hex, write_atomic};
use crate::error::{ProvisionError as Error, Result};
use crate::{immutable, records, sys};

impl Cache {
    /// Why `entry` no longer matches what was built, if it does not:
    /// marked altered earlier, no stamp recorded, or a stamp that differs
    /// from the payload's.
    pub(crate) fn altered(&self, entry: &Entry) -> Result<Option<String>> {
        let marker =
            self.entries_dir().join(format!("{}.altered", entry.name()));
        if let Ok(why) = records::read_text(&marker) {
            return Ok(Some(why.trim().to_string()));
        }
        let meta_path = entry.dir.join("meta.json");
        let meta: Option<Meta> = records::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(recorded) = meta.and_then(|m| m.stamp) else {
            return Ok(Some(format!(
                "{}: no stamp recorded, so it cannot be checked",
                meta_path.display()
            )));
        };
        let payload = entry.payload();
        let now = match stamp(&payload, entry.kind) {
            Ok(s) => s,
            Err(e) => return Ok(Some(format!("{e}"))),
        };
        Ok((now != recorded).then(|| {
            format!(
                "{} changed after it was built (stamp {recorded}, now {now})",
                payload.display()
            )
        }))
    }

    /// Whether `entry`'s payload holds device nodes, as recorded when it
    /// was built (an entry without the record holds none: it was built
    /// when provision made no device nodes).
    pub(crate) fn holds_devices(&self, entry: &Entry) -> bool {
        records::read(&entry.dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Meta>(&b).ok())
            .is_some_and(|m| m.devices)
    }

    pub(super) fn mark_altered(&self, entry: &Entry, why: &str) -> Result<()> {
        let marker =
            self.entries_dir().join(format!("{}.altered", entry.name()));
        if marker.exists() {
            return Ok(());
        }
        write_atomic(&marker, format!("{why}\n").as_bytes())
    }
}

/// Gives the entry (its directory, and for a disk its payload) no more
/// read permission than the least readable of `sources`, the files it
/// was made from (an image, its backing chain and data file, a key
/// file): a user who could not read one of them cannot read the entry.
///
/// A source readable by everyone constrains nothing. Of the others, each
/// read bit is kept only where every one has it; the owner is theirs if
/// they share one (root's otherwise), the group theirs if they share one
/// (else no group may read). Not running as root, the entry is ours, with
/// owner read (we read every source), and group read only for our group.
pub(super) fn restrict_like(
    dir: &Path,
    payload: &Path,
    kind: EntryKind,
    sources: &[fs::Metadata],
) -> Result<()> {
    let (euid, egid) = sys::effective_ids();
    let (read, owner) = least_readable(sources, euid, egid);
    // Directories: search where the file may be read.
    let dir_mode = read | (read >> 2) | 0o200;
    let chown = |p: &Path| -> Result<()> {
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid))
                .map_err(|e| Error::io(Op::Chown, p, e))?;
        }
        Ok(())
    };
    if kind == EntryKind::Raw {
        chown(payload)?;
        fs::set_permissions(payload, fs::Permissions::from_mode(read))
            .map_err(|e| Error::io(Op::Chmod, payload, e))?;
    }
    chown(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(dir_mode))
        .map_err(|e| Error::io(Op::Chmod, dir, e))
}

/// The read bits an entry made from `sources` may have, and as root the
/// owner and group it takes (see [`restrict_like`]).
pub(super) fn least_readable(
    sources: &[fs::Metadata],
    euid: u32,
    egid: u32,
) -> (u32, Option<(u32, u32)>) {
    let all = |m: &&fs::Metadata| m.mode() & 0o444 == 0o444;
    let constraining: Vec<&fs::Metadata> =
        sources.iter().filter(|m| !all(m)).collect();
    let read = sources.iter().fold(0o444, |r, m| r & m.mode());
    let first: Option<&fs::Metadata> =
        constraining.first().copied().or(sources.first());
    let same = |f: fn(&fs::Metadata) -> u32| {
        let v = first.map(f);
        v.filter(|v| constraining.iter().all(|m| f(m) == *v))
    };
    let (uid, gid) = (same(|m| m.uid()), same(|m| m.gid()));
    if euid == 0 {
        // Sources of several owners: only root reads the entry by owner.
        let mut read = read;
        if gid.is_none() {
            read &= !0o040;
        }
        return (read, Some((uid.unwrap_or(0), gid.unwrap_or(0))));
    }
    // The entry is ours: owner read for us, who could read every source.
    let mut read = read | 0o400;
    if gid != Some(egid) {
        read &= !0o040;
    }
    (read, None)
}

/// Sets the immutable flag on the payload (every file and directory of a
/// tree); false where it cannot be set.
pub(super) fn protect(payload: &Path, kind: EntryKind) -> Result<bool> {
    match kind {
        EntryKind::Raw => immutable::set(payload, true)
            .map_err(|e| Error::io(Op::Chmod, payload, e)),
        EntryKind::Tree | EntryKind::Layer => {
            // Through each directory's descriptor, one open at a time: a
            // tree of any depth.
            let mut all = true;
            zinstall_engine::fsutil::walk_tree(payload, &mut |v| {
                let t = v.stat.st_mode & libc::S_IFMT;
                if (t == libc::S_IFREG || t == libc::S_IFDIR)
                    && !immutable::set_at(v.dir, v.name, true)?
                {
                    all = false;
                    // Without the flag on one file there is none anywhere
                    // (same filesystem, same process).
                    return Ok(false);
                }
                Ok(true)
            })?;
            Ok(all)
        }
    }
}

/// The payload's stamp: inode, size, mtime and ctime (ns); for a tree, a
/// digest of those of every entry with its relative path.
pub(super) fn stamp(payload: &Path, kind: EntryKind) -> Result<String> {
    stamp_walk(payload, kind).map(|(s, _)| s)
}

/// The payload's stamp, and whether it holds a device node.
pub(super) fn stamp_walk(
    payload: &Path,
    kind: EntryKind,
) -> Result<(String, bool)> {
    match kind {
        EntryKind::Raw => {
            let md = fs::symlink_metadata(payload)
                .map_err(|e| Error::io(Op::Stat, payload, e))?;
            Ok((format!("raw:{}", stamp_fields(&md)), false))
        }
        EntryKind::Tree | EntryKind::Layer => {
            // Every entry with its path relative to the payload, in walkdir's
            // order (the order stamps were first recorded in): the payload,
            // then depth first, each directory's entries sorted by name.
            // Each is stat'ed relative to its directory's descriptor, so a
            // tree of any depth is stamped.
            use std::os::unix::ffi::OsStrExt;
            let mut h = Sha256::new();
            let mut devices = false;
            let top = fs::symlink_metadata(payload)
                .map_err(|e| Error::io(Op::Stat, payload, e))?;
            if !top.is_dir() {
                h.update([0]);
                h.update(stamp_fields(&top).as_bytes());
                h.update([b'\n']);
                return Ok((format!("tree:{}", hex(&h.finalize())), false));
            }
            zinstall_engine::fsutil::walk_tree(payload, &mut |v| {
                let t = v.stat.st_mode & libc::S_IFMT;
                devices |= t == libc::S_IFBLK || t == libc::S_IFCHR;
                h.update(v.rel.as_os_str().as_bytes());
                h.update([0]);
                h.update(stat_fields(v.stat).as_bytes());
                h.update([b'\n']);
                Ok(true)
            })?;
            Ok((format!("tree:{}", hex(&h.finalize())), devices))
        }
    }
}

/// What a stamp records of one file: inode, size, mtime and ctime (ns),
/// mode, owner and group.
fn stamp_fields(md: &fs::Metadata) -> String {
    format!(
        "{}:{}:{}.{:09}:{}.{:09}:{:o}:{}:{}",
        md.ino(),
        md.size(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
        md.mode(),
        md.uid(),
        md.gid()
    )
}

/// [`stamp_fields`] of an `lstat`, the same text.
// libc's stat field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn stat_fields(st: &libc::stat) -> String {
    format!(
        "{}:{}:{}.{:09}:{}.{:09}:{:o}:{}:{}",
        st.st_ino as u64,
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
        st.st_mode as u32,
        st.st_uid,
        st.st_gid
    )
}

/// Removes a tree (an entry being collected, or scratch) after clearing
/// any immutable flag in it.
pub(super) fn remove_entry_tree(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        // What cannot be walked is left to remove_tree to report.
        let mut failed = None;
        let _walked = zinstall_engine::fsutil::walk_tree(path, &mut |v| {
            let t = v.stat.st_mode & libc::S_IFMT;
            if (t == libc::S_IFREG || t == libc::S_IFDIR)
                && immutable::is_set_at(v.dir, v.name)
                && let Err(e) = immutable::set_at(v.dir, v.name, false)
            {
                failed = Some(Error::io(Op::Chmod, path.join(v.rel), e));
                return Ok(false);
            }
            Ok(true)
        });
        if let Some(e) = failed {
            return Err(e);
        }
    } else if immutable::is_set(path) {
        immutable::set(path, false)
            .map_err(|err| Error::io(Op::Chmod, path, err))?;
    }
    remove_tree(path).map_err(Error::from)
}

#[cfg(test)]
mod test {
    use std::fs;
    use std::path::Path;

    use sha2::{Digest, Sha256};

    use super::*;

    /// A tree stamp as entries built before were stamped: walkdir's order
    /// and paths. Stamps recorded then must still match.
    fn walkdir_stamp(payload: &Path) -> String {
        use std::os::unix::ffi::OsStrExt;
        let mut h = Sha256::new();
        for e in walkdir::WalkDir::new(payload)
            .follow_links(false)
            .sort_by_file_name()
        {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            let rel = e.path().strip_prefix(payload).unwrap();
            h.update(rel.as_os_str().as_bytes());
            h.update([0]);
            h.update(stamp_fields(&md).as_bytes());
            h.update([b'\n']);
        }
        format!("tree:{}", hex(&h.finalize()))
    }

    #[test]
    fn tree_stamps_are_those_recorded_before() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        // Names whose byte order differs from other orders (case,
        // punctuation, non-UTF-8), nested directories, an empty one,
        // symlinks to a directory and to nothing, a hard link.
        for dir in ["a/b/c", "a/B", "a.b", "a-b/x", "Z", "empty"] {
            fs::create_dir_all(t.join(dir)).unwrap();
        }
        for (i, f) in
            ["a/b/c/f", "a/B/g", "a.b/h", "a-b/x/i", "Z/j", "k", "a/b/l"]
                .iter()
                .enumerate()
        {
            fs::write(t.join(f), vec![b'x'; i * 100]).unwrap();
        }
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe-odd");
        fs::write(t.join("a").join(odd), b"odd").unwrap();
        std::os::unix::fs::symlink("a/b", t.join("link-dir")).unwrap();
        std::os::unix::fs::symlink("nowhere", t.join("a/dangling")).unwrap();
        fs::hard_link(t.join("k"), t.join("a/b/k2")).unwrap();
        let now = stamp(&t, EntryKind::Tree).unwrap();
        assert_eq!(now, walkdir_stamp(&t));
        // And it changes with any entry.
        fs::write(t.join("a/b/c/f"), b"edited").unwrap();
        assert_ne!(stamp(&t, EntryKind::Tree).unwrap(), now);
        assert_eq!(stamp(&t, EntryKind::Tree).unwrap(), walkdir_stamp(&t));
    }
}
