//! Sentinels: directories and files outside a root that nothing zinstall
//! does to the root may change. Their whole state (names, types, contents,
//! link targets, modes, owners, link counts, modification and change
//! times) is snapshotted when made and compared on demand.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One entry's state, as text so that a difference reads plainly.
type Snapshot = BTreeMap<PathBuf, String>;

/// A directory (or a single file) outside the root, and its state when
/// made.
pub struct Sentinel {
    /// The sentinel itself: a directory, or a file for [`Sentinel::file`].
    pub path: PathBuf,
    before: Snapshot,
}

/// The content every sentinel file starts with.
pub const CONTENT: &[u8] = b"sentinel: must never change\n";

fn describe(p: &Path) -> String {
    let md = match fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) => return format!("unreadable: {e}"),
    };
    let ft = md.file_type();
    let what = if ft.is_symlink() {
        format!(
            "symlink -> {:?}",
            fs::read_link(p).map(|t| t.display().to_string())
        )
    } else if ft.is_dir() {
        "dir".to_string()
    } else if ft.is_file() {
        match fs::read(p) {
            Ok(data) => format!("file {:?}", String::from_utf8_lossy(&data)),
            Err(e) => format!("file (unreadable: {e})"),
        }
    } else {
        "special".to_string()
    };
    format!(
        "{what} mode {:o} owner {}:{} nlink {} mtime {}.{:09} ctime {}.{:09}",
        md.mode(),
        md.uid(),
        md.gid(),
        if ft.is_dir() { 0 } else { md.nlink() },
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec()
    )
}

fn snapshot_into(top: &Path, p: &Path, out: &mut Snapshot) {
    let rel = p.strip_prefix(top).unwrap_or(p).to_path_buf();
    out.insert(rel, describe(p));
    let is_dir = fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !is_dir {
        return;
    }
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            snapshot_into(top, &e.path(), out);
        }
    }
}

fn snapshot(top: &Path) -> Snapshot {
    let mut s = Snapshot::new();
    snapshot_into(top, top, &mut s);
    s
}

fn set_mtime(p: &Path, secs: i64) {
    let c = zinstall_sys::cstr(p).unwrap();
    let t = zinstall_sys::fs::Times {
        atime: (secs, 0),
        mtime: (secs, 123_456_789),
    };
    zinstall_sys::fs::at::set_times(libc::AT_FDCWD, &c, &t)
        .unwrap_or_else(|e| panic!("utimensat {}: {e}", p.display()));
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

impl Sentinel {
    /// A directory at `path` holding a file `keep` (0640), a directory
    /// `sub` (0750) with a file `inner`, and names a root is likely to
    /// have (`etc`, `usr`) as a directory and a file, so that a write
    /// redirected here would replace or add to them. The directory itself
    /// is 0751. Every time is set to a known value.
    pub fn dir(path: &Path) -> Sentinel {
        fs::create_dir_all(path).unwrap();
        for (name, mode) in [("keep", 0o640), ("sub/inner", 0o600)] {
            let f = path.join(name);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(&f, CONTENT).unwrap();
            chmod(&f, mode);
        }
        fs::create_dir(path.join("etc")).unwrap();
        fs::write(path.join("etc/hostname"), CONTENT).unwrap();
        fs::write(path.join("usr"), CONTENT).unwrap();
        chmod(&path.join("sub"), 0o750);
        chmod(&path.join("etc"), 0o755);
        Self::settle(path)
    }

    /// An empty directory (0751): what an install would happily use as
    /// an empty root.
    pub fn empty_dir(path: &Path) -> Sentinel {
        fs::create_dir_all(path).unwrap();
        Self::settle(path)
    }

    /// A single file (0640).
    pub fn file(path: &Path) -> Sentinel {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, CONTENT).unwrap();
        chmod(path, 0o640);
        set_mtime(path, 1_500_000_000);
        Sentinel {
            path: path.to_path_buf(),
            before: snapshot(path),
        }
    }

    fn settle(path: &Path) -> Sentinel {
        let mut all = Snapshot::new();
        snapshot_into(path, path, &mut all);
        // Deepest first: setting a child's time does not change its
        // parent's, but be explicit about the order anyway.
        for (i, rel) in all.keys().rev().enumerate() {
            set_mtime(&path.join(rel), 1_500_000_000 + i as i64);
        }
        chmod(path, 0o751);
        Sentinel {
            path: path.to_path_buf(),
            before: snapshot(path),
        }
    }

    /// The differences between now and when it was made, one per line
    /// (the first 30); empty if none.
    pub fn changes(&self) -> String {
        let now = snapshot(&self.path);
        let mut lines = Vec::new();
        for (k, v) in &self.before {
            match now.get(k) {
                None => lines.push(format!("  removed {k:?} (was {v})\n")),
                Some(n) if n != v => {
                    lines.push(format!("  changed {k:?}:\n    {v}\n    {n}\n"))
                }
                _ => {}
            }
        }
        for (k, v) in &now {
            if !self.before.contains_key(k) {
                lines.push(format!("  added {k:?}: {v}\n"));
            }
        }
        let more = lines.len().saturating_sub(30);
        lines.truncate(30);
        if more > 0 {
            lines.push(format!("  ... and {more} more\n"));
        }
        lines.concat()
    }

    /// Panics, listing every change, if anything about it changed.
    pub fn assert_unchanged(&self, context: &str) {
        let c = self.changes();
        assert!(
            c.is_empty(),
            "{context}: the sentinel {} outside the root changed:\n{c}",
            self.path.display()
        );
    }
}
