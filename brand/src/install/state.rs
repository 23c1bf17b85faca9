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
//! an install or uninstall, and holds the holder's pid so that a second one
//! can say who is in the way. `ZONEPATH/.zinstall.state` says `installing`
//! or `installed`; it is replaced atomically (written beside, synced,
//! renamed, directory synced), so a crash leaves one or the other.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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

/// The exclusive hold on a zonepath; released on drop (the lock file is
/// closed) or explicitly.
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
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // The zonepath is not trusted to hold what it should: a
            // symlink here must not have its target truncated.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| LockError::Io(path.clone(), nofollow_error(e)))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut s = String::new();
                let _unreadable = file.read_to_string(&mut s);
                return Err(LockError::Held {
                    path,
                    pid: s.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(LockError::Io(path, e)),
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(|e| LockError::Io(path.clone(), e))?;
        Ok(ZoneLock {
            file,
            zonepath: zonepath.to_path_buf(),
        })
    }

    /// The zonepath held.
    pub fn zonepath(&self) -> &Path {
        &self.zonepath
    }

    /// Releases the lock explicitly (a child forked meanwhile must not
    /// keep it).
    pub fn release(self) {
        let _unlocked = self.file.unlock();
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
    let text = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(zonepath.join(STATE))
        .map_err(nofollow_error)
        .and_then(|mut f| {
            let mut s = String::new();
            f.read_to_string(&mut s).map(|_| s)
        });
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
        Err(e) => Err(e),
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
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, zonepath.join(STATE))?;
    File::open(zonepath)?.sync_all()
}

/// Removes the marker (after an uninstall).
pub fn clear(zonepath: &Path) -> io::Result<()> {
    match fs::remove_file(zonepath.join(STATE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
        ZoneLock::take(d.path()).unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        write(d.path(), State::Installing).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(State::Installing));
        write(d.path(), State::Installed).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(State::Installed));
        clear(d.path()).unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
    }
}
