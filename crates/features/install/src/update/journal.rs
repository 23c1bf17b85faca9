//! The journal of an update or rollback under way, and what reads it:
//! an interrupted one finished or undone, a rollback, an update's files
//! removed at uninstall.

use std::fs;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;

use super::error::{UpdateError, io_at};
use super::names::{JOURNAL, ROOT_NEW, ROOT_PREV, STAGE, SWAP};
use super::switch::{exchange, undo_swap};
use crate::manifest;
use crate::state::ZoneLock;
use crate::zonepath::open_zonepath;

/// What the journal says is under way.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Journal {
    /// An update; the old root's inode.
    Update(u64),
    /// A rollback; the root's inode before it.
    Rollback(u64),
}

pub(super) fn write_journal(
    zonepath: &Path,
    j: &Journal,
) -> Result<(), UpdateError> {
    let text = match j {
        Journal::Update(i) => format!("update {i}\n"),
        Journal::Rollback(i) => format!("rollback {i}\n"),
    };
    let path = zonepath.join(JOURNAL);
    let tmp = zonepath.join(format!("{JOURNAL}.{}", std::process::id()));
    // Our own file, made new beside the journal and renamed over it.
    #[allow(clippy::disallowed_methods)]
    let r = (|| -> io::Result<()> {
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        manifest::sync_dir(zonepath)
    })();
    r.map_err(io_at("write", path))
}

fn read_journal(zonepath: &Path) -> Result<Option<Journal>, UpdateError> {
    let path = zonepath.join(JOURNAL);
    // Ours, in a zonepath: read as any file (never a link, never a
    // FIFO), and no more of it than a journal holds.
    let s = match zinstall_core::foreign::read(
        &path,
        zinstall_core::foreign::Follow::No,
        zinstall_core::foreign::Kind::Other {
            what: "an update's journal",
            cap: 256,
        },
    ) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(io_at("read", path)(e.into())),
    };
    let bad = || UpdateError::Io {
        op: "read",
        path: path.clone(),
        error: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a journal: {s:?}"),
        ),
    };
    let (word, ino) = s.trim().split_once(' ').ok_or_else(bad)?;
    let ino: u64 = ino.parse().map_err(|_| bad())?;
    match word {
        "update" => Ok(Some(Journal::Update(ino))),
        "rollback" => Ok(Some(Journal::Rollback(ino))),
        _ => Err(bad()),
    }
}

fn ino_of(p: &Path) -> Option<u64> {
    super::platform::root_id(p).ok()
}

pub(super) fn remove_if(p: &Path) -> Result<(), UpdateError> {
    match fs::symlink_metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at("stat", p)(e)),
        Ok(m) if m.is_dir() => {
            if removed_whole(p)? {
                return Ok(());
            }
            zinstall_engine::fsutil::remove_tree(p).map_err(UpdateError::Copier)
        }
        Ok(_) => fs::remove_file(p).map_err(io_at("remove", p)),
    }
}

/// Removes the directory `p` in one call where it is a btrfs subvolume
/// (a root an update snapshotted); false if it is not one.
fn removed_whole(p: &Path) -> Result<bool, UpdateError> {
    use std::os::unix::ffi::OsStrExt;
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Ok(false);
    };
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|e| io_at("remove", p)(io::Error::other(e)))?;
    let dir = zinstall_engine::beneath::Root::open(p)?;
    let up = zinstall_engine::beneath::Root::open(parent)?;
    super::platform::remove_subvolume(dir.as_fd(), up.as_fd(), &name)
        .map_err(io_at("remove", p))
}

/// Finishes or undoes an update or rollback a kill interrupted; says
/// which. Called with the zonepath's lock held.
pub fn recover(zonepath: &Path) -> Result<Option<&'static str>, UpdateError> {
    let root = zonepath.join("root");
    undo_swap(zonepath)?;
    let Some(j) = read_journal(zonepath)? else {
        return Ok(None);
    };
    let now = ino_of(&root);
    // What an update staged is of no use to anyone now.
    remove_if(&zonepath.join(STAGE))?;
    let done = match j {
        Journal::Update(old) if now == Some(old) => {
            remove_if(&zonepath.join(ROOT_NEW))?;
            remove_if(&zonepath.join(manifest::MANIFEST_NEW))?;
            fs::remove_file(zonepath.join(JOURNAL))
                .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
            "an interrupted update was undone: the old root is in place"
        }
        // An exchange never leaves no root: one that is missing was
        // taken by something else, and finishing would make root.new (or
        // nothing) the root. Left for a person to look at.
        Journal::Update(_) if now.is_none() => {
            return Err(UpdateError::Io {
                op: "recover",
                path: root,
                error: io::Error::new(
                    io::ErrorKind::NotFound,
                    "the root is missing while an update was under way; \
                     root.new, root.prev and the journal are left as they \
                     are",
                ),
            });
        }
        Journal::Update(_) => {
            finish_update(zonepath, &mut |_| {})?;
            "an interrupted update was finished: the new root is in place"
        }
        Journal::Rollback(old) => {
            if now != Some(old) {
                settle_manifests(zonepath)?;
            }
            fs::remove_file(zonepath.join(JOURNAL))
                .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
            if now == Some(old) {
                "an interrupted rollback was undone"
            } else {
                "an interrupted rollback was finished"
            }
        }
    };
    Ok(Some(done))
}

/// After the exchange: the manifests follow the roots, the old root
/// becomes `root.prev`, the journal goes. Each step can be redone.
pub(super) fn finish_update(
    zonepath: &Path,
    stage: &mut dyn FnMut(&str),
) -> Result<(), UpdateError> {
    let m = zonepath.join(manifest::MANIFEST);
    let mnew = zonepath.join(manifest::MANIFEST_NEW);
    let mprev = zonepath.join(manifest::MANIFEST_PREV);
    if mnew.exists() {
        if m.exists() {
            fs::rename(&m, &mprev).map_err(io_at("rename", &m))?;
        }
        fs::rename(&mnew, &m).map_err(io_at("rename", &mnew))?;
    }
    stage("settled");
    let new = zonepath.join(ROOT_NEW);
    if fs::symlink_metadata(&new).is_ok() {
        remove_if(&zonepath.join(ROOT_PREV))?;
        fs::rename(&new, zonepath.join(ROOT_PREV))
            .map_err(io_at("rename", &new))?;
    }
    manifest::sync_dir(zonepath).map_err(io_at("sync", zonepath))?;
    fs::remove_file(zonepath.join(JOURNAL))
        .map_err(io_at("remove", zonepath.join(JOURNAL)))
}

/// Makes `.zinstall.manifest` the one describing `root` (its header
/// names the root's inode), exchanging it with the previous one if a
/// rollback stopped between the two.
fn settle_manifests(zonepath: &Path) -> Result<(), UpdateError> {
    // A missing root matches only a missing manifest; a manifest naming
    // no root (`Some(None)`) matches no root.
    let root = ino_of(&zonepath.join("root")).map(Some);
    let cur = manifest::read(zonepath, manifest::MANIFEST)?
        .map(|m| m.header.root_ino);
    if cur == root {
        return Ok(());
    }
    let prev = manifest::read(zonepath, manifest::MANIFEST_PREV)?
        .map(|m| m.header.root_ino);
    if prev == root {
        let zdir = zinstall_engine::beneath::Root::open(zonepath)?;
        exchange(
            zdir.as_fd(),
            manifest::MANIFEST,
            manifest::MANIFEST_PREV,
            zonepath,
        )?;
    }
    Ok(())
}

/// What a rollback did.
#[derive(Clone, Debug)]
pub struct Rolled {
    /// An interrupted update or rollback finished or undone first.
    pub recovered: Option<&'static str>,
    /// How the root now in place was made, as its manifest says.
    pub now: Option<manifest::Made>,
    /// How the one now in `root.prev` was made.
    pub prev: Option<manifest::Made>,
}

impl Rolled {
    /// Which root is in place, as a user reads it.
    pub fn message(&self) -> String {
        let made = |m: &Option<manifest::Made>| match m {
            Some(m) if m.how == "install" => {
                format!("the installed root (generation 0, {})", when(m.at))
            }
            Some(m) => {
                format!("the root of update {} ({})", m.generation, when(m.at))
            }
            None => "a root with no record of how it was made".into(),
        };
        format!(
            "{} is in place; root.prev holds {} (roll back again to return to it)",
            made(&self.now),
            made(&self.prev)
        )
    }
}

/// `at` (seconds since the epoch) as UTC, `YYYY-MM-DD HH:MM:SS`.
fn when(at: i64) -> String {
    let days = at.div_euclid(86_400);
    let secs = at.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Switches back to the root before the last update: `root` and
/// `root.prev` exchanged, and their manifests. Rolling back twice
/// returns to the updated root; [`Rolled::message`] says which is in
/// place.
pub fn rollback(zonepath: &Path) -> Result<Rolled, UpdateError> {
    let _held = open_zonepath(zonepath).map_err(|e| UpdateError::Io {
        op: "open zonepath",
        path: zonepath.to_path_buf(),
        error: io::Error::other(e.to_string()),
    })?;
    let lock = ZoneLock::take(zonepath)?;
    let r = (|| {
        let recovered = recover(zonepath)?;
        let prev = zonepath.join(ROOT_PREV);
        if !fs::symlink_metadata(&prev).is_ok_and(|m| m.is_dir()) {
            if let Some(e) = super::error::composefs_root(zonepath) {
                return Err(e);
            }
            return Err(UpdateError::NoPrevious {
                zonepath: zonepath.to_path_buf(),
            });
        }
        let root = zonepath.join("root");
        let ino =
            super::platform::root_id(&root).map_err(io_at("stat", &root))?;
        write_journal(zonepath, &Journal::Rollback(ino))?;
        let zdir = zinstall_engine::beneath::Root::open(zonepath)?;
        exchange(zdir.as_fd(), "root", ROOT_PREV, zonepath)?;
        settle_manifests(zonepath)?;
        fs::remove_file(zonepath.join(JOURNAL))
            .map_err(io_at("remove", zonepath.join(JOURNAL)))?;
        let made = |name| {
            manifest::read(zonepath, name)
                .ok()
                .flatten()
                .and_then(|m| m.header.made)
        };
        Ok(Rolled {
            recovered,
            now: made(manifest::MANIFEST),
            prev: made(manifest::MANIFEST_PREV),
        })
    })();
    lock.release();
    r
}

/// Removes what updates leave in a zonepath (`root.new`, `root.prev`,
/// the journal, the manifests): part of an uninstall.
pub fn clear(zonepath: &Path) -> Result<(), UpdateError> {
    undo_swap(zonepath)?;
    remove_if(&zonepath.join(ROOT_NEW))?;
    remove_if(&zonepath.join(ROOT_PREV))?;
    remove_if(&zonepath.join(SWAP))?;
    remove_if(&zonepath.join(STAGE))?;
    remove_if(&zonepath.join(JOURNAL))?;
    manifest::clear(zonepath).map_err(io_at("remove manifests in", zonepath))
}
