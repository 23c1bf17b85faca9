//! What an install, uninstall or attach reports as it goes.
//!
//! The library prints nothing: each step is an [`Event`] handed to the
//! caller's callback. Its `Display` is the line a person reads (the
//! brand hook prints it after `INFO: zinstall: `, as zoneadm expects);
//! its fields are what a log record or a socket message carries.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use zinstall_archive::ArchiveKind;
use zinstall_engine::stats::{count, human_bytes, human_duration};
use zinstall_engine::{Notice, Stats};

/// One thing an install, uninstall or attach did or is about to do.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// The install starts.
    Installing {
        /// The zone.
        zone: String,
        /// Its zonepath.
        zonepath: PathBuf,
    },
    /// The partial root of an interrupted install is being removed.
    CleaningInterrupted,
    /// Everything is laid out; the root's filesystem is being flushed to
    /// the disk before the install is marked complete.
    Flushing,
    /// Images were given and the profile says to lay them out alone:
    /// what it makes of the host is left out.
    ImagesAlone {
        /// The profile.
        profile: PathBuf,
    },
    /// Images were given and the profile lays them over what it makes
    /// of the host.
    ImagesOverHost {
        /// The host trees copied first, as `/usr`.
        trees: Vec<String>,
        /// The profile.
        profile: PathBuf,
    },
    /// The profile's links and mount points are being made.
    LayingOut,
    /// A host tree is being copied.
    Replicating {
        /// The tree, as `/usr`.
        tree: String,
    },
    /// A host tree was copied.
    Replicated {
        /// The tree, as `/usr`.
        tree: String,
        /// What the copy did.
        stats: Stats,
    },
    /// An archive is being unpacked.
    Unpacking {
        /// The archive.
        path: PathBuf,
        /// Baseline or layer.
        kind: ArchiveKind,
    },
    /// An archive was unpacked.
    Unpacked {
        /// The archive.
        path: PathBuf,
        /// What the unpack did.
        stats: Stats,
        /// How long it took.
        took: Duration,
    },
    /// A host file is being copied.
    CopyingHostFile {
        /// The file on the host.
        path: PathBuf,
    },
    /// A host file is a symlink whose target the root lacks: the file it
    /// resolves to is copied by content.
    HostFileByContent {
        /// The host file.
        path: PathBuf,
        /// What it resolves to on the host.
        real: PathBuf,
    },
    /// Something the engine noticed (one per kind for the whole install).
    Notice(Notice),
    /// The install finished.
    Complete {
        /// The zone.
        zone: String,
        /// Everything copied, linked and unpacked.
        stats: Stats,
        /// How long it took.
        took: Duration,
    },
    /// Attach takes a root with no marker that has the profile's layout.
    Adopting {
        /// The root.
        root: PathBuf,
    },
    /// Attach succeeded.
    Attached {
        /// The root.
        root: PathBuf,
    },
    /// Uninstall: the zonepath does not exist.
    NothingToRemove {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// Uninstall starts removing the root.
    Uninstalling {
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// Uninstall finished.
    Uninstalled {
        /// The zonepath.
        zonepath: PathBuf,
    },
}

/// `N files, N dirs, N linked, 1.50 MiB in 25 ms` for a summary line,
/// in the units of the progress line.
pub(crate) fn summary(s: &Stats, took: Duration) -> String {
    format!(
        "{}, {}, {} linked, {} in {}",
        count(
            s.files + s.symlinks + s.hardlinks + s.specials,
            "file",
            "files"
        ),
        count(s.dirs, "dir", "dirs"),
        s.redirects,
        human_bytes(s.bytes),
        human_duration(took)
    )
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Installing { zone, zonepath } => {
                write!(
                    f,
                    concat!("installing ", made!(), " {} @ {:?}..."),
                    zone, zonepath
                )
            }
            Event::CleaningInterrupted => {
                f.write_str("cleaning up an interrupted install...")
            }
            Event::ImagesAlone { profile } => write!(
                f,
                "laying out the images alone: the host trees, links and \
                 mount points of {} are for installs without an image \
                 (images_over_host = true lays the images over them)",
                profile.display()
            ),
            Event::ImagesOverHost { trees, profile } => write!(
                f,
                "laying the images over the host's {} ({}: images_over_host \
                 = true)",
                if trees.is_empty() {
                    "baseline, links and mount points".to_string()
                } else {
                    format!("{} and the profile's links", trees.join(", "))
                },
                profile.display()
            ),
            Event::Flushing => f.write_str("flushing the root to disk..."),
            Event::LayingOut => {
                f.write_str("laying out links and mount points...")
            }
            Event::Replicating { tree } => {
                write!(f, "replicating {tree} tree...")
            }
            Event::Replicated { tree, stats: s } => write!(
                f,
                "replicated {tree}: {}, {} linked, {} in {}",
                count(s.files + s.symlinks + s.hardlinks, "file", "files"),
                s.redirects,
                human_bytes(s.bytes),
                human_duration(s.elapsed)
            ),
            Event::Unpacking {
                kind: ArchiveKind::Baseline,
                ..
            } => f.write_str("unpacking baseline archive..."),
            Event::Unpacking { path, .. } => {
                write!(f, "unpacking image {:?}...", path.display().to_string())
            }
            Event::Unpacked {
                path,
                stats: s,
                took,
            } => {
                let files = s.files + s.symlinks + s.hardlinks + s.specials;
                write!(
                    f,
                    "unpacked {}: {}, {} in {}",
                    path.display(),
                    count(files, "file", "files"),
                    human_bytes(s.bytes),
                    human_duration(*took)
                )
            }
            Event::CopyingHostFile { path } => {
                write!(f, "copying {}...", path.display())
            }
            Event::HostFileByContent { path, real } => write!(
                f,
                "{} links to what the root lacks: copying {} by content",
                path.display(),
                real.display()
            ),
            Event::Notice(n) => write!(f, "note: {n}"),
            Event::Complete { zone, stats, took } => write!(
                f,
                concat!("install of ", made!(), " {} complete: {}"),
                zone,
                summary(stats, *took)
            ),
            Event::Adopting { root } => write!(
                f,
                "adopting {} (no marker; it has the profile's layout)",
                root.display()
            ),
            Event::Attached { root } => {
                write!(f, "attached {}", root.display())
            }
            Event::NothingToRemove { zonepath } => write!(
                f,
                "{} does not exist: nothing to remove",
                zonepath.display()
            ),
            Event::Uninstalling { zonepath } => {
                write!(f, "uninstalling {}...", zonepath.display())
            }
            Event::Uninstalled { zonepath } => {
                write!(f, "uninstalled {}", zonepath.display())
            }
        }
    }
}
