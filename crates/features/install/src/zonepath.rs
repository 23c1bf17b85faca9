//! The zonepath itself: opened only where nobody but root could have
//! redirected it, made and removed for the CLI and the daemon, its state
//! marker read and written, and what it holds judged before zoneadm may
//! clean it. Apart from the steps: every hook checks the zonepath first.

use std::fs;
use std::path::Path;

use crate::error::{Aftermath, Cause, InstallError, Keep, Left, Stage};
use crate::state::{self, State};

/// Opens the zonepath only if nobody but root could have redirected it
/// ([`zinstall_engine::trusted::open_dir`]): not a symlink, no directory on the
/// way that another user may write (a sticky one only for entries root
/// owns), owned by root. Refused without touching anything otherwise,
/// and zoneadm is not told to clean it (that would follow the path too).
/// The CLI and the daemon make a missing zonepath through
/// [`prepare_zonepath`] first; the brand hook is given one zoneadm made.
pub fn open_zonepath(
    zonepath: &Path,
) -> Result<zinstall_engine::beneath::Root, InstallError> {
    zinstall_engine::trusted::open_dir(zonepath, None).map_err(|source| {
        InstallError::refused(Cause::Step {
            step: "zonepath".into(),
            source: Box::new(source),
        })
    })
}

/// A zonepath [`prepare_zonepath`] opened.
pub struct Zonepath {
    /// Its directory, held while the install runs.
    pub dir: zinstall_engine::beneath::Root,
    /// True if this call made it (it was missing): a failed install
    /// removes it again ([`discard_zonepath`]).
    pub made: bool,
    /// Its mode before it was set to 0700, when it existed: a failed
    /// install sets it back ([`Zonepath::undo`]).
    pub mode: Option<u32>,
}

impl Zonepath {
    /// After a failed install: undoes what [`prepare_zonepath`] did, so
    /// that a refusal's "(nothing was changed)" is true. A zonepath this
    /// install made is removed (once empty); an existing one gets its
    /// mode back. What could not be undone is put on the error, which
    /// then says what is left instead. Returns a line saying what was
    /// undone, for the user.
    pub fn undo(self, e: &mut InstallError) -> Option<String> {
        let path = self.dir.path().to_path_buf();
        if self.made {
            drop(self.dir);
            return match discard_zonepath(&path) {
                Ok(()) => Some(format!(
                    "removed {}, which this install made",
                    path.display()
                )),
                Err(source) => {
                    e.left(Left::Made { path, source });
                    None
                }
            };
        }
        let was = self.mode? & 0o7777;
        // A partial root left behind stays closed to other users.
        if was == 0o700 || e.stage == Stage::Partial {
            return None;
        }
        match self.dir.set_mode(was) {
            Ok(()) => {
                Some(format!("set {} back to mode {was:04o}", path.display()))
            }
            Err(source) => {
                e.left(Left::Mode {
                    path,
                    was,
                    source: Box::new(source),
                });
                None
            }
        }
    }
}

/// Makes the zonepath (0700) if missing and sets it to 0700 through its
/// descriptor, so that nobody else walks into the root while it is being
/// filled: what `zinstall install` and zinstalld do before an install.
/// Checked as [`open_zonepath`] says; nothing is made or changed when the
/// path is refused (a symlink, an unsafe directory on the way), nor when
/// an existing zonepath holds anything but zinstall's own entries and
/// `root` with no marker (an unrelated directory given by mistake).
pub fn prepare_zonepath(zonepath: &Path) -> Result<Zonepath, InstallError> {
    let fail = |source: zinstall_engine::Error| {
        InstallError::refused(Cause::Step {
            step: "zonepath".into(),
            source: Box::new(source),
        })
    };
    let before = fs::symlink_metadata(zonepath).ok();
    let existed = before.is_some();
    let dir = zinstall_engine::trusted::open_dir(zonepath, Some(0o700))
        .map_err(fail)?;
    if existed {
        check_unrelated(zonepath)?;
    }
    dir.set_mode(0o700).map_err(fail)?;
    Ok(Zonepath {
        dir,
        made: !existed,
        mode: before
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions())),
    })
}

/// Refuses an existing zonepath that holds entries zinstall does not
/// make and no marker. Read by path: [`zinstall_engine::trusted::open_dir`] has
/// just checked that only root could have redirected it.
fn check_unrelated(zonepath: &Path) -> Result<(), InstallError> {
    let marked = read_marker(zonepath).map_err(InstallError::refused)?;
    if marked.is_some() {
        return Ok(());
    }
    let entries = fs::read_dir(zonepath).map_err(|source| {
        InstallError::refused(Cause::RootUnreadable {
            root: zonepath.to_path_buf(),
            source,
        })
    })?;
    for e in entries {
        let e = e.map_err(|source| {
            InstallError::refused(Cause::RootUnreadable {
                root: zonepath.to_path_buf(),
                source,
            })
        })?;
        let name = e.file_name();
        // `root` is judged by the install itself (empty, or refused as
        // foreign); the lock and the marker's leftovers are zinstall's.
        let ours = name == "root"
            || name.to_str().is_some_and(|n| n.starts_with(".zinstall."));
        if !ours {
            return Err(InstallError::refused(Cause::ForeignZonepath {
                zonepath: zonepath.to_path_buf(),
                entry: name,
            }));
        }
    }
    Ok(())
}

/// After a failed install, removes the zonepath [`prepare_zonepath`]
/// made, if nothing is left in it. Returns whether it was removed; an
/// error says why it is left.
pub fn discard_zonepath(zonepath: &Path) -> std::io::Result<()> {
    fs::remove_dir(zonepath)
}

/// What `cleanup_zonepath()` may destroy without loss: `ZONEPATH/root`
/// absent or an empty directory, and none of zinstall's files there.
pub fn disposable(zonepath: &Path) -> Result<(), Keep> {
    let root = zonepath.join("root");
    match fs::symlink_metadata(&root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Keep::Unreadable { root, source }),
        Ok(m) if !m.is_dir() => return Err(Keep::NotDirectory { root }),
        Ok(_) => {
            let empty = fs::read_dir(&root)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if !empty {
                return Err(Keep::NotEmpty { root });
            }
        }
    }
    match state::own_entries(zonepath).into_iter().next() {
        Some(path) => Err(Keep::Own { path }),
        None => Ok(()),
    }
}

/// The last word on a failed install's status: a failure that would
/// let zoneadm clean the zonepath (254) becomes 255 when the zonepath
/// holds anything worth keeping.
pub(crate) fn settle(zonepath: &Path, mut e: InstallError) -> InstallError {
    if e.zoneadm_status() != 254 {
        return e;
    }
    if let Err(why) = disposable(zonepath) {
        e.stage = Stage::Refused;
        e.aftermath = Some(Box::new(Aftermath::Kept(why)));
    }
    e
}

pub(crate) fn read_marker(zonepath: &Path) -> Result<Option<State>, Cause> {
    state::read(zonepath).map_err(|source| Cause::Marker {
        op: "read",
        path: zonepath.join(state::STATE),
        source,
    })
}

pub(crate) fn write_marker(zonepath: &Path, st: State) -> Result<(), Cause> {
    state::write(zonepath, st).map_err(|source| Cause::Marker {
        op: match st {
            State::Installing => "mark installing",
            State::Installed => "mark installed",
        },
        path: zonepath.join(state::STATE),
        source,
    })
}

pub(crate) fn clear_marker(zonepath: &Path) -> Result<(), Cause> {
    state::clear(zonepath).map_err(|source| Cause::Marker {
        op: "remove",
        path: zonepath.join(state::STATE),
        source,
    })
}
