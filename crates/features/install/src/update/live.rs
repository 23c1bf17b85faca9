//! Whether a process uses a root: has it as its root directory (a
//! chroot, a container, a running zone), works in it, or holds a file
//! in it open. An update of a root in use would switch the root from
//! under it and lose what it writes between the clone and the switch.
//!
//! Read from `/proc`: each process's `root` and `cwd` (matched by the
//! directory's device and inode when it is the root itself, else by
//! path), and its open descriptors (by path). A process in another
//! mount namespace that has the root as its own `/` is found by the
//! first; what it holds beneath it shows as paths of its own namespace
//! and is not matched. Processes this one may not inspect are passed
//! over: run as root to see them all.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A process using the root, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its id.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// How it uses the root: "has it as its root directory", "works in
    /// /…", "holds /… open".
    pub what: String,
}

/// The first process found using `root` (not this one), if any.
// The kernel's own files in /proc, and the root's own directory, looked
// at by name: nothing here is read from a file someone else made.
#[allow(clippy::disallowed_methods)]
pub fn user_of(root: &Path) -> Option<User> {
    let md = fs::metadata(root).ok()?;
    let id = (md.dev(), md.ino());
    let me = std::process::id();
    let mut prefix = root.as_os_str().as_bytes().to_vec();
    prefix.push(b'/');
    let inside = |p: &Path| {
        let b = p.as_os_str().as_bytes();
        b == root.as_os_str().as_bytes() || b.starts_with(&prefix)
    };
    let procs = fs::read_dir("/proc").ok()?;
    for e in procs.flatten() {
        let Some(pid) =
            e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let base = e.path();
        let comm = || {
            fs::read_to_string(base.join("comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into())
        };
        if fs::metadata(base.join("root"))
            .is_ok_and(|m| (m.dev(), m.ino()) == id)
        {
            return Some(User {
                pid,
                comm: comm(),
                what: "has it as its root directory".into(),
            });
        }
        if let Ok(cwd) = fs::read_link(base.join("cwd"))
            && inside(&cwd)
        {
            return Some(User {
                pid,
                comm: comm(),
                what: format!("works in {}", cwd.display()),
            });
        }
        let Ok(fds) = fs::read_dir(base.join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            if inside(&target) {
                return Some(User {
                    pid,
                    comm: comm(),
                    what: format!("holds {} open", shown(&target)),
                });
            }
        }
    }
    None
}

fn shown(p: &Path) -> String {
    PathBuf::from(p).display().to_string()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_process_working_in_the_root_is_found() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        fs::create_dir_all(root.join("var")).unwrap();
        assert_eq!(user_of(&root), None);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(root.join("var"))
            .spawn()
            .unwrap();
        let found = (0..50).find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            user_of(&root)
        });
        let _ = child.kill();
        let _ = child.wait();
        let u = found.expect("the sleeping process in the root");
        assert_eq!(u.pid, child.id());
        assert!(u.what.starts_with("works in "), "{u:?}");
    }
}
