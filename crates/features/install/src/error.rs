//! What can stop an install, an uninstall or an attach: each cause with
//! the path and operation, and how far the install got.

use std::fmt;
use std::io;
use std::path::PathBuf;

use zinstall_archive::ArchiveKind;

use crate::profile::ProfileError;
use crate::state::LockError;

/// Where in the install a failure happened, which decides what zoneadm
/// is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing was written into the root, and nothing of value is there.
    BeforeRoot,
    /// Refused without touching anything, because the zonepath holds
    /// what must be kept: an installed root, a root zinstall did not
    /// make, or an install another process is running.
    Refused,
    /// The root was written, then removed again.
    Cleaned,
    /// The root was written and could not be removed.
    Partial,
}

/// Why an install, uninstall or attach stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum Cause {
    /// The profile could not be read or is invalid.
    Profile(ProfileError),
    /// The zonepath's lock: held by another process, or not takeable.
    Lock(LockError),
    /// The state marker could not be read, written or removed.
    Marker {
        /// `read`, `write` or `remove`.
        op: &'static str,
        /// The marker file.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The zonepath's marker says installed.
    AlreadyInstalled {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// `ZONEPATH/root` is there and is not a directory (a symlink is
    /// never followed).
    RootNotDirectory {
        /// The root.
        root: PathBuf,
    },
    /// The zonepath holds entries zinstall does not make, and no marker
    /// says an install of zinstall's is there: an unrelated directory.
    ForeignZonepath {
        /// The zonepath.
        zonepath: PathBuf,
        /// One of the entries found (the first read).
        entry: std::ffi::OsString,
    },
    /// `ZONEPATH/root` has content and no marker says zinstall made it.
    ForeignRoot {
        /// The root.
        root: PathBuf,
        /// Removing it was asked (`uninstall`): `-x foreign` is needed.
        removing: bool,
    },
    /// `ZONEPATH/root` could not be examined.
    RootUnreadable {
        /// The root.
        root: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// A tree the profile copies is not a directory on the host.
    TreeMissing {
        /// The tree on the host.
        tree: PathBuf,
        /// The profile.
        profile: PathBuf,
    },
    /// The profile's required baseline archive is nowhere it looked.
    BaselineMissing {
        /// The file name.
        file: String,
        /// Where it looked.
        search: Vec<PathBuf>,
        /// The profile.
        profile: PathBuf,
    },
    /// A zinstall archive of the other kind (a baseline given as a
    /// layer, or the reverse).
    WrongArchive {
        /// The archive.
        path: PathBuf,
        /// What its `zinstall.json` says it is.
        found: ArchiveKind,
        /// What was expected.
        expected: ArchiveKind,
    },
    /// A step failed in the engine: a file operation with its path, or a
    /// refused archive member. `step` says which (`unpack /x.tar.zst`,
    /// `replicate /usr`, `remove /zones/z/root`).
    Step {
        /// The step.
        step: String,
        /// The engine's error.
        source: Box<zinstall_engine::Error>,
    },
    /// An image named by registry reference could not be pulled.
    Pull(zinstall_registry::RegistryError),
    /// An image is named by registry reference, and no store to pull it
    /// into was given.
    NoStore {
        /// The reference.
        reference: String,
    },
    /// A copy step failed: every error the copy met.
    Copy {
        /// The step.
        step: String,
        /// The copy's errors.
        source: zinstall_engine::Failure,
    },
    /// Staging the profile's links and mount points failed.
    Layout {
        /// The entry (`dir usr/lib`, `link bin`) or staging directory.
        what: String,
        /// The system's error.
        source: io::Error,
    },
    /// The zonepath holds the partial root of an interrupted install
    /// (attach refuses it).
    Interrupted {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// Attach: no root to attach.
    NoRoot {
        /// The root.
        root: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// Attach: the root lacks what the profile lays out.
    NotProfileRoot {
        /// The root.
        root: PathBuf,
        /// The profile.
        profile: PathBuf,
        /// What it lacks (`tree usr`, `link bin -> usr/bin`).
        missing: Vec<String>,
    },
}

/// What followed the failure and changed what zoneadm is told.
#[derive(Debug)]
#[non_exhaustive]
pub enum Aftermath {
    /// The marker could not be removed before handing the zonepath to
    /// zoneadm's cleanup.
    MarkerKept {
        /// The marker.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The zonepath holds something worth keeping, so zoneadm is not
    /// told to clean it.
    Kept(Keep),
    /// What could not be undone of the zonepath's preparation, after
    /// what followed before.
    Left(Left, Option<Box<Aftermath>>),
}

impl fmt::Display for Aftermath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Aftermath::MarkerKept { path, source } => {
                write!(f, "; then: remove {}: {source}", path.display())
            }
            Aftermath::Kept(why) => write!(
                f,
                "; and {why}, so zoneadm is not told to clean the zonepath"
            ),
            Aftermath::Left(left, before) => {
                if let Some(b) = before {
                    write!(f, "{b}")?;
                }
                write!(f, "; {left}")
            }
        }
    }
}

/// What a failed install could not undo of what it did to the zonepath
/// before it stopped, and so is left.
#[derive(Debug)]
#[non_exhaustive]
pub enum Left {
    /// The zonepath it made could not be removed.
    Made {
        /// The zonepath.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The existing zonepath's mode could not be set back.
    Mode {
        /// The zonepath.
        path: PathBuf,
        /// Its mode before.
        was: u32,
        /// The system's error.
        source: Box<zinstall_engine::Error>,
    },
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Left::Made { path, source } => write!(
                f,
                "{} is left, although this install made it ({source}); \
                 remove it once its content is not needed",
                path.display()
            ),
            Left::Mode { path, was, source } => write!(
                f,
                "{} is left at mode 0700, from {was:04o} ({source}); \
                 chmod {was:04o} it",
                path.display()
            ),
        }
    }
}

/// What in a zonepath is worth keeping (so `cleanup_zonepath()` must not
/// run).
#[derive(Debug)]
#[non_exhaustive]
pub enum Keep {
    /// The root could not be examined.
    Unreadable {
        /// The root.
        root: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The root is not a directory.
    NotDirectory {
        /// The root.
        root: PathBuf,
    },
    /// The root has content.
    NotEmpty {
        /// The root.
        root: PathBuf,
    },
    /// One of zinstall's own files is there.
    Own {
        /// The file.
        path: PathBuf,
    },
}

/// A failed install, uninstall or attach.
#[derive(Debug)]
pub struct InstallError {
    /// How far it got.
    pub stage: Stage,
    /// Why it stopped.
    pub cause: Cause,
    /// What followed, if it changed the stage.
    pub aftermath: Option<Box<Aftermath>>,
}

impl InstallError {
    pub(crate) fn new(stage: Stage, cause: Cause) -> Self {
        InstallError {
            stage,
            cause,
            aftermath: None,
        }
    }

    /// Records what could not be undone: the message then says it is
    /// left, never that nothing was changed.
    pub(crate) fn left(&mut self, l: Left) {
        let before = self.aftermath.take();
        self.aftermath = Some(Box::new(Aftermath::Left(l, before)));
    }

    pub(crate) fn before(cause: Cause) -> Self {
        Self::new(Stage::BeforeRoot, cause)
    }

    pub(crate) fn refused(cause: Cause) -> Self {
        Self::new(Stage::Refused, cause)
    }

    pub(crate) fn partial(cause: Cause) -> Self {
        Self::new(Stage::Partial, cause)
    }

    /// The exit status zoneadm understands (see the crate docs): 254
    /// only when there is nothing in the zonepath to keep.
    pub fn zoneadm_status(&self) -> u8 {
        match self.stage {
            Stage::BeforeRoot | Stage::Cleaned => 254,
            Stage::Refused | Stage::Partial => 255,
        }
    }

    /// Whether the profile decided this outcome: the failure is the
    /// profile's own, or about a tree, path or baseline it named. A
    /// failure of an image, a signature, a registry or the zonepath is
    /// the same under any profile, so no note on profiles belongs there.
    pub fn profile_decided(&self) -> bool {
        match &self.cause {
            Cause::Profile(_)
            | Cause::TreeMissing { .. }
            | Cause::BaselineMissing { .. }
            | Cause::Layout { .. }
            | Cause::NotProfileRoot { .. } => true,
            Cause::Step { step, .. } | Cause::Copy { step, .. } => {
                ["replicate ", "host file ", "layout"]
                    .iter()
                    .any(|s| step.starts_with(s))
            }
            _ => false,
        }
    }

    /// The errno behind the failure, if a system call failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match &self.cause {
            Cause::Lock(LockError::Io(_, e))
            | Cause::Marker { source: e, .. }
            | Cause::RootUnreadable { source: e, .. }
            | Cause::Layout { source: e, .. }
            | Cause::NoRoot { source: e, .. } => e.raw_os_error(),
            Cause::Step { source, .. } => source.raw_os_error(),
            Cause::Copy { source, .. } => {
                source.first().and_then(|e| e.raw_os_error())
            }
            _ => None,
        }
    }
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keep::Unreadable { root, source } => {
                write!(f, "{}: {source}", root.display())
            }
            Keep::NotDirectory { root } => {
                write!(f, "{} is not a directory", root.display())
            }
            Keep::NotEmpty { root } => {
                write!(f, "{} is not empty", root.display())
            }
            Keep::Own { path } => write!(f, "{} is there", path.display()),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Profile(e) => write!(f, "{e}"),
            Cause::Lock(e) => write!(f, "{e}"),
            Cause::Marker { op, path, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            Cause::AlreadyInstalled { zonepath } => write!(
                f,
                "{} is already installed (its marker says so and its root \
                 is kept); to replace it, uninstall it first (zinstall \
                 uninstall --zonepath, or zoneadm uninstall for a zone)",
                zonepath.display()
            ),
            Cause::RootNotDirectory { root } => write!(
                f,
                "{} is not a directory (a symlink is never followed); \
                 remove it first",
                root.display()
            ),
            Cause::ForeignZonepath { zonepath, entry } => write!(
                f,
                "{} is not empty (it holds {}) and has no zinstall marker: \
                 it is not a zonepath zinstall made, so nothing in it was \
                 touched; give a new or empty directory",
                zonepath.display(),
                std::path::Path::new(entry).display()
            ),
            Cause::ForeignRoot {
                root,
                removing: false,
            } => write!(
                f,
                "{} is not empty and zinstall did not make it (no marker in \
                 the zonepath); it is kept as it is",
                root.display()
            ),
            Cause::ForeignRoot {
                root,
                removing: true,
            } => write!(
                f,
                "{} has no zinstall marker: zinstall did not make {} (or its \
                 marker was lost), so it is kept; to remove it anyway: \
                 zoneadm uninstall -F -x foreign (zinstall uninstall -F)",
                root.parent().unwrap_or(root).display(),
                root.display()
            ),
            Cause::RootUnreadable { root, source } => {
                write!(f, "{}: {source}", root.display())
            }
            Cause::TreeMissing { tree, profile } => write!(
                f,
                "tree {} (profile {}): not a directory",
                tree.display(),
                profile.display()
            ),
            Cause::BaselineMissing {
                file,
                search,
                profile,
            } => write!(
                f,
                "baseline {file} not found in {search:?} (profile {})",
                profile.display()
            ),
            Cause::WrongArchive {
                path,
                found: k,
                expected,
            } => write!(
                f,
                "{}: archive is a {}, not a {}",
                path.display(),
                k.as_str(),
                expected.as_str()
            ),
            Cause::Step { step, source } => {
                write!(f, "{step}: {source}")?;
                if let zinstall_engine::Error::Archive {
                    reason: zinstall_archive::ArchiveRefusal::DeviceNotAllowed,
                    ..
                } = source.as_ref()
                {
                    f.write_str(" (the profile's allow_devices is false)")?;
                }
                Ok(())
            }
            Cause::Pull(e) => write!(f, "pull: {e}"),
            Cause::NoStore { reference } => write!(
                f,
                "{reference}: a registry image needs a store to pull into \
                 (--cache)"
            ),
            // Unlike `zinstall copy`, which goes on as `cp -a` does.
            Cause::Copy { step, source } => {
                // A full disk fails every worker's entry in flight the
                // same way: said once, as what it is.
                let full = source.first().filter(|e| {
                    matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSPC | libc::EDQUOT)
                    )
                });
                match full {
                    Some(first) => write!(
                        f,
                        "{step}: the root's filesystem is full (first: \
                         {first}); an install stops at its first error, \
                         since a root with holes is not a root"
                    ),
                    None => write!(
                        f,
                        "{step}: {source}; an install stops at its first \
                         error, since a root with holes is not a root"
                    ),
                }
            }
            Cause::Layout { what, source } => {
                write!(f, "layout: {what}: {source}")
            }
            Cause::Interrupted { zonepath } => write!(
                f,
                "{} holds the partial root of an interrupted install; \
                 install the zone again, or uninstall it",
                zonepath.display()
            ),
            Cause::NoRoot { root, source } => write!(
                f,
                "{}: {source}: nothing to attach; install the zone",
                root.display()
            ),
            Cause::NotProfileRoot {
                root,
                profile,
                missing,
            } => write!(
                f,
                "{} is not a root of profile {}: no {}; attach -F takes it \
                 as it is",
                root.display(),
                profile.display(),
                missing.join(", no ")
            ),
        }
    }
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cause)?;
        if let Some(a) = &self.aftermath {
            write!(f, "{a}")?;
        }
        let left =
            matches!(self.aftermath.as_deref(), Some(Aftermath::Left(..)));
        match self.stage {
            Stage::BeforeRoot => Ok(()),
            Stage::Refused if left => Ok(()),
            Stage::Refused => f.write_str(" (nothing was changed)"),
            Stage::Cleaned => f.write_str(" (the partial root was removed)"),
            Stage::Partial => f.write_str(concat!(
                " (the partial root remains; uninstall the ",
                made!(),
                ")"
            )),
        }
    }
}

/// Every cause is in the message, so no `source()` (CONTRIBUTING.md: a
/// cause is said once).
impl std::error::Error for InstallError {}
