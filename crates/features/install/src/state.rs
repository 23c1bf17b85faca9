//! The zonepath's lock and state marker.
//!
//! ```text
//!   (none) ──install──▶ installing ──done──▶ installed
//!                          │   ▲                 │
//!                 killed,  │   │ next install    │ uninstall
//!                 failed   ▼   │ cleans, retries ▼
//!                       installing           (none)
//! ```
//!
//! `ZONEPATH/.zinstall.lock` is held (`flock`, exclusive) for the whole of
//! an install, uninstall or attach, and holds the holder's pid so that a
//! second one can say who is in the way. It exists only while held: the
//! holder unlinks it before unlocking (on every exit path, [`Drop`]), and
//! a taker checks after locking that the file it locked is still the one
//! at the path, so two processes never hold two files of the same name.
//! A holder killed by a signal leaves the file, unlocked; the next taker
//! locks it and removes it in turn.
//!
//! `ZONEPATH/.zinstall.state` says `installing` or `installed`; it is
//! replaced atomically (written beside, synced, renamed, directory
//! synced), so a crash leaves one or the other. It exists exactly while
//! zoneadm's own state is *incomplete* or *installed*: every exit that
//! lets zoneadm clean the zonepath (254) removes it first, so zoneadm's
//! `cleanup_zonepath()` meets only `root` and can destroy the zonepath.
//!
//! Beside it, `ZONEPATH/.zinstall.manifest` records what the install laid
//! out ([`crate::manifest`]), written just before the marker says
//! installed and removed with it; an update ([`crate::update`]) keeps its
//! journal in `ZONEPATH/.zinstall.update` and the previous root in
//! `ZONEPATH/root.prev`.

use std::fs::{self, File, OpenOptions};

use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use zinstall_core::Flock;
use zinstall_core::foreign;

/// The lock file's name in the zonepath.
pub const LOCK: &str = ".zinstall.lock";
/// The state marker's name in the zonepath.
pub const STATE: &str = ".zinstall.state";

/// Where an install stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Started, not finished: the root is partial.
    Installing,
    /// Finished.
    Installed,
}

/// The exclusive hold on a zonepath; released on drop or explicitly,
/// which removes the lock file, then unlocks it.
#[derive(Debug)]
pub struct ZoneLock {
    file: File,
    zonepath: PathBuf,
}

/// Why the zonepath could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it.
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder, as it wrote itself in the file.
        pid: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held {
                path,
                pid: Some(pid),
            } => write!(
                f,
                "{} is held by pid {pid}: another install or uninstall of this \
                 zonepath is running",
                path.display()
            ),
            LockError::Held { path, pid: None } => {
                write!(f, "{} is held by another process", path.display())
            }
            LockError::Io(p, e) => write!(f, "lock {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for LockError {}

impl ZoneLock {
    /// Takes the zonepath's lock, or says at once who holds it.
    pub fn take(zonepath: &Path) -> Result<ZoneLock, LockError> {
        let path = zonepath.join(LOCK);
        // A holder that released meanwhile unlinked the file we opened:
        // then try again on the new one. Bounded, so a path swapped
        // without end cannot keep us here.
        for _ in 0..100 {
            // The zonepath's lock file, ours: made here, never followed.
            #[allow(clippy::disallowed_methods)]
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                // The zonepath is not trusted to hold what it should: a
                // symlink here must not have its target truncated.
                .custom_flags(
                    libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
                .open(&path)
                .map_err(|e| LockError::Io(path.clone(), nofollow_error(e)))?;
            match file.try_flock_exclusive() {
                Ok(true) => {}
                Ok(false) => {
                    let mut s = String::new();
                    let _unreadable = file.read_to_string(&mut s);
                    return Err(LockError::Held {
                        path,
                        pid: s.trim().parse().ok(),
                    });
                }
                Err(e) => return Err(LockError::Io(path, e)),
            }
            if !same_file(&file, &path) {
                continue;
            }
            let pid = format!("{}\n", std::process::id());
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(pid.as_bytes()))
                .map_err(|e| LockError::Io(path.clone(), e))?;
            return Ok(ZoneLock {
                file,
                zonepath: zonepath.to_path_buf(),
            });
        }
        Err(LockError::Io(
            path,
            io::Error::other("replaced at every attempt to lock it"),
        ))
    }

    /// The zonepath held.
    pub fn zonepath(&self) -> &Path {
        &self.zonepath
    }

    /// Releases the lock explicitly: removes the lock file, then unlocks
    /// it (a child forked meanwhile must not keep it).
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for ZoneLock {
    fn drop(&mut self) {
        let path = self.zonepath.join(LOCK);
        // Only our own file: never one another process made meanwhile.
        if same_file(&self.file, &path) {
            let _gone = fs::remove_file(&path);
        }
        let _unlocked = self.file.flock_unlock();
    }
}

/// Whether `path` (not followed) is the file open as `file`.
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Says what ELOOP from an `O_NOFOLLOW` open means here.
fn nofollow_error(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            e.kind(),
            "is a symlink; zinstall never follows one in a zonepath",
        )
    } else {
        e
    }
}

/// Reads the marker: `None` if there is none.
pub fn read(zonepath: &Path) -> io::Result<Option<State>> {
    // A marker is one word; more, a link, a FIFO or a device is not ours.
    let marker = foreign::Kind::Other {
        what: "a state marker",
        cap: 4096,
    };
    let text = foreign::read_to_string(
        &zonepath.join(STATE),
        foreign::Follow::No,
        marker,
    )
    .map_err(io::Error::from);
    match text {
        Ok(s) => match s.trim() {
            "installing" => Ok(Some(State::Installing)),
            "installed" => Ok(Some(State::Installed)),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: unknown state {other:?}",
                    zonepath.join(STATE).display()
                ),
            )),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("{}: {e}", zonepath.join(STATE).display()),
        )),
    }
}

/// Replaces the marker atomically and durably.
pub fn write(zonepath: &Path, state: State) -> io::Result<()> {
    let text = match state {
        State::Installing => "installing\n",
        State::Installed => "installed\n",
    };
    let tmp = zonepath.join(format!("{STATE}.{}", std::process::id()));
    // A leftover of a killed writer with our pid, or a planted symlink:
    // gone first, then made anew (O_EXCL never follows a symlink).
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // Our marker, made here (O_EXCL), and the zonepath opened only to
    // make the rename durable.
    #[allow(clippy::disallowed_methods)]
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, zonepath.join(STATE))?;
    #[allow(clippy::disallowed_methods)]
    let dir = File::open(zonepath)?;
    dir.sync_all()
}

/// Removes the marker, and any temporary of it a killed writer left
/// (`.zinstall.state.PID`), so that nothing of zinstall's stays in the
/// zonepath.
pub fn clear(zonepath: &Path) -> io::Result<()> {
    match fs::remove_file(zonepath.join(STATE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let prefix = format!("{STATE}.");
    // The manifest goes with the marker: it describes the root the
    // marker says is installed.
    remove_files_where(zonepath, |n| {
        n.strip_prefix(&prefix)
            .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            || n.starts_with(crate::manifest::MANIFEST)
    })
}

/// Removes every file (not directory) in `zonepath` whose name `pick`
/// takes; no zonepath, nothing to do.
pub(crate) fn remove_files_where(
    zonepath: &Path,
    pick: impl Fn(&str) -> bool,
) -> io::Result<()> {
    let entries = match fs::read_dir(zonepath) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        if e.file_name().to_str().is_some_and(&pick) && !e.file_type()?.is_dir()
        {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

/// zinstall's own entries in `zonepath` (lock, marker, leftovers of
/// either): what a zonepath must not hold when zoneadm cleans it.
pub fn own_entries(zonepath: &Path) -> Vec<PathBuf> {
    let Ok(d) = fs::read_dir(zonepath) else {
        return Vec::new();
    };
    d.filter_map(Result::ok)
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n == LOCK || n == STATE || n.starts_with(".zinstall.")
            })
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn second_lock_names_the_holder_and_marker_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let l = ZoneLock::take(d.path()).unwrap();
        let e = ZoneLock::take(d.path()).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        l.release();
        assert!(!d.path().join(LOCK).exists(), "released: gone");
        let l = ZoneLock::take(d.path()).unwrap();
        drop(l);
        assert!(!d.path().join(LOCK).exists(), "dropped: gone");
        // A lock file a killed holder left is taken, then removed.
        fs::write(d.path().join(LOCK), "99999999\n").unwrap();
        ZoneLock::take(d.path()).unwrap().release();
        assert!(own_entries(d.path()).is_empty());
        assert_eq!(read(d.path()).unwrap(), None);
        write(d.path(), State::Installing).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(State::Installing));
        write(d.path(), State::Installed).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(State::Installed));
        fs::write(d.path().join(format!("{STATE}.12345")), "x").unwrap();
        clear(d.path()).unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        assert!(own_entries(d.path()).is_empty());
    }
}
