//! An entry's users: each guest recorded with its path, device and
//! inode when made, a record ended when zinstall removes that guest, and
//! the guests found again for gc where they are now (at their path,
//! moved, copied, named as a qcow2 backing file, or open by a process).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use zinstall_engine::Op;

use super::layout::{Cache, Entry, EntryKind, UserRecord, append_line};
use crate::error::{ProvisionError as Error, Result};

impl Cache {
    /// Records that `guest` (a path that exists) was made from `entry`,
    /// with its device and inode, so that it is found after a move.
    pub fn add_user(&self, entry: &Entry, guest: &Path) -> Result<()> {
        let users = self.entries_dir().join(format!("{}.users", entry.name()));
        let md = fs::symlink_metadata(guest)
            .map_err(|e| Error::io(Op::Stat, guest, e))?;
        let abs =
            fs::canonicalize(guest).unwrap_or_else(|_| guest.to_path_buf());
        let rec = UserRecord {
            path: abs,
            dev: md.dev(),
            ino: md.ino(),
            released: false,
        };
        let mut line = serde_json::to_string(&rec)
            .map_err(|e| Error::io(Op::Record, &users, io::Error::other(e)))?;
        line.push('\n');
        append_line(&users, &line)
    }

    /// Ends the records of the guest file that was at `guest` with device
    /// and inode `id`, in every disk entry that has one: called once
    /// zinstall itself has removed that guest (`--force`, a failed run),
    /// the one case where a guest is known to be gone rather than moved.
    pub(crate) fn release_guest(
        &self,
        guest: &Path,
        id: (u64, u64),
    ) -> Result<()> {
        let dir = self.entries_dir();
        let names = match fs::read_dir(&dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(Op::ReadDir, &dir, e)),
        };
        for e in names {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(entry) = self.entry_named(&name) else {
                continue;
            };
            if entry.kind != EntryKind::Raw
                || !self
                    .user_records(&entry)?
                    .iter()
                    .any(|r| (r.dev, r.ino) == id)
            {
                continue;
            }
            let users = dir.join(format!("{name}.users"));
            let rec = UserRecord {
                path: guest.to_path_buf(),
                dev: id.0,
                ino: id.1,
                released: true,
            };
            let mut line = serde_json::to_string(&rec).map_err(|e| {
                Error::io(Op::Record, &users, io::Error::other(e))
            })?;
            line.push('\n');
            append_line(&users, &line)?;
        }
        Ok(())
    }

    /// Guests recorded for `entry`.
    pub(super) fn user_records(
        &self,
        entry: &Entry,
    ) -> Result<Vec<UserRecord>> {
        let path = self.entries_dir().join(format!("{}.users", entry.name()));
        let text = match crate::records::read_text(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(Error::io(Op::Read, &path, e)),
        };
        let mut records: Vec<UserRecord> = Vec::new();
        for l in text.lines().filter(|l| !l.is_empty()) {
            let r = serde_json::from_str(l).unwrap_or_else(|_| UserRecord {
                // A line of an older cache: the path alone.
                path: PathBuf::from(l),
                dev: 0,
                ino: 0,
                released: false,
            });
            // A release ends the records before it only: a later guest
            // may reuse the inode.
            if r.released {
                records.retain(|x| (x.dev, x.ino) != (r.dev, r.ino));
            } else {
                records.push(r);
            }
        }
        Ok(records)
    }

    /// For each entry in use, why: see the module documentation.
    pub(super) fn find_users(
        &self,
        entries: &[&Entry],
        search: &[PathBuf],
    ) -> Result<HashMap<String, String>> {
        let mut users = Users {
            roots: search.to_vec(),
            ..Users::default()
        };
        for &entry in entries {
            let records = self.user_records(entry)?;
            users.recorded(entry, records);
        }
        users.search();
        users.held_open();
        Ok(users.used)
    }
}

/// What is known of who uses the entries, as it is found.
#[derive(Default)]
struct Users {
    /// For each entry in use, why.
    used: HashMap<String, String>,
    /// Payloads of disk entries by (dev, ino).
    bases: HashMap<(u64, u64), String>,
    /// Recorded guests by (dev, ino).
    guests: HashMap<(u64, u64), String>,
    /// Where guests were made, and the directories asked to be searched:
    /// where a moved guest or an overlay may be.
    roots: Vec<PathBuf>,
}

impl Users {
    /// What `entry`'s user records say: a guest still where it was
    /// made, and still the one made, uses it.
    fn recorded(&mut self, entry: &Entry, records: Vec<UserRecord>) {
        let name = entry.name();
        let base_id = (entry.kind == EntryKind::Raw)
            .then(|| fs::symlink_metadata(entry.payload()).ok())
            .flatten()
            .map(|m| (m.dev(), m.ino()));
        if let Some(id) = base_id {
            self.bases.insert(id, name.clone());
        }
        for rec in records {
            if let Some(p) = rec.path.parent() {
                self.roots.push(p.to_path_buf());
            }
            if rec.ino != 0 {
                self.guests.insert((rec.dev, rec.ino), name.clone());
            }
            if self.used.contains_key(&name) {
                continue;
            }
            let Ok(md) = fs::symlink_metadata(&rec.path) else {
                continue;
            };
            let here = match (entry.kind, base_id) {
                (EntryKind::Raw, Some(id)) => {
                    backing_of(&rec.path).is_some_and(|b| b == id)
                }
                (EntryKind::Raw, None) => false,
                // Guests are made from the image's tree, not a layer.
                (EntryKind::Layer, _) => false,
                // A tree guest is a copy; it is its own as long as it
                // is the directory made (or an old record without an
                // inode).
                (EntryKind::Tree, _) => {
                    rec.ino == 0 || (md.dev(), md.ino()) == (rec.dev, rec.ino)
                }
            };
            if here {
                self.used.insert(
                    name.clone(),
                    format!("used by {}", rec.path.display()),
                );
            }
        }
    }

    /// Searches the roots for recorded guests moved there and for
    /// overlays whose backing file is a disk entry's payload.
    fn search(&mut self) {
        self.roots.sort();
        self.roots.dedup();
        for root in &self.roots {
            let walk = walkdir::WalkDir::new(root)
                .follow_links(false)
                .max_depth(SEARCH_DEPTH);
            for e in walk.into_iter().filter_map(|e| e.ok()) {
                let Ok(md) = e.metadata() else { continue };
                if let Some(name) = self.guests.get(&(md.dev(), md.ino()))
                    && !self.used.contains_key(name)
                {
                    self.used.insert(
                        name.clone(),
                        format!("used by {} (moved there)", e.path().display()),
                    );
                }
                if md.is_file()
                    && let Some(id) = backing_of(e.path())
                    && let Some(name) = self.bases.get(&id)
                    && !self.used.contains_key(name)
                {
                    self.used.insert(
                        name.clone(),
                        format!(
                            "used by {} (its backing file)",
                            e.path().display()
                        ),
                    );
                }
            }
        }
    }

    /// Disk entries whose payload a process holds open.
    fn held_open(&mut self) {
        for (id, name) in &self.bases {
            if !self.used.contains_key(name)
                && let Some(pid) = open_by_process(*id)
            {
                self.used
                    .insert(name.clone(), format!("open by process {pid}"));
            }
        }
    }
}

/// How deep gc looks under each searched directory.
const SEARCH_DEPTH: usize = 4;

/// The (device, inode) of the backing file a qcow2 file at `path` names,
/// if it is a qcow2 file with a backing file that exists. A relative name
/// is resolved against the overlay's directory, as QEMU does.
// The backing an overlay names is found as QEMU finds it (followed):
// only its identity is asked, to know which base a guest holds.
#[allow(clippy::disallowed_methods)]
pub(crate) fn backing_of(path: &Path) -> Option<(u64, u64)> {
    let f =
        zinstall_core::foreign::open(path, zinstall_core::foreign::Follow::No)
            .ok()?;
    let mut head = [0u8; 20];
    f.read_exact_at(&mut head, 0).ok()?;
    if &head[..4] != b"QFI\xfb" {
        return None;
    }
    let off = u64::from_be_bytes(head[8..16].try_into().ok()?);
    let len = u32::from_be_bytes(head[16..20].try_into().ok()?) as usize;
    // The name lies in cluster 0 (at most 2 MiB) and is at most 1023
    // bytes (QEMU's limits).
    if off == 0 || len == 0 || len > 1023 || off > (2 << 20) {
        return None;
    }
    let mut name = vec![0u8; len];
    f.read_exact_at(&mut name, off).ok()?;
    use std::os::unix::ffi::OsStrExt;
    let name = Path::new(std::ffi::OsStr::from_bytes(&name));
    let full = match path.parent() {
        Some(dir) if name.is_relative() => dir.join(name),
        _ => name.to_path_buf(),
    };
    let md = fs::metadata(full).ok()?;
    Some((md.dev(), md.ino()))
}

/// A process that has the file `(dev, ino)` open, on Linux.
// /proc's links to open files, followed by the kernel to the files
// themselves: only their identity is asked.
#[allow(clippy::disallowed_methods)]
fn open_by_process(id: (u64, u64)) -> Option<u32> {
    let procs = fs::read_dir("/proc").ok()?;
    for p in procs.filter_map(|e| e.ok()) {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            if let Ok(md) = fs::metadata(fd.path())
                && (md.dev(), md.ino()) == id
            {
                return Some(pid);
            }
        }
    }
    None
}
