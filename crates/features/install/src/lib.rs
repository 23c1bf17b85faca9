//! Installing and uninstalling a zone root (illumos) or rootfs (Linux).
//!
//! One code path for both: the zoneadm hook (`brand install`) and
//! `zinstall install` build an [`Install`] and call [`Install::run`]; a
//! daemon does the same. The library prints nothing: every step is an
//! [`Event`] handed to the caller (the hook prints it as an
//! `INFO: zinstall:` line), recorded in the slog [`Logger`](slog::Logger) the caller
//! passes, and fired as a `step-start`/`step-done` probe pair. Every
//! failure is an [`InstallError`]: its [`Cause`] with the path and
//! operation, and the [`Stage`] that decides zoneadm's exit code.
//!
//! ```no_run
//! use zinstall_install::{Install, Profile};
//!
//! let profile = Profile::load(std::path::Path::new("/etc/zinstall/profile.toml"))?;
//! let mut show = |e: &zinstall_install::Event| println!("INFO: zinstall: {e}");
//! let summary = Install {
//!     zone: "web1".into(),
//!     zonepath: "/zones/web1".into(),
//!     profile,
//!     images: vec!["/var/tmp/app.tar.zst".into()],
//!     tunables: zinstall_engine::Tunables::default(),
//!     log: slog::Logger::root(slog::Discard, slog::o!()),
//!     events: &mut show,
//!     cancel: None,
//!     pool: None,
//!     listener: None,
//!     platform: None,
//!     store: None,
//!     pull: Default::default(),
//!     progress: None,
//!     sync: true,
//!     objects: None,
//! }
//! .run()?;
//! println!("{} bytes", summary.stats.bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The API: [`Install`] and [`Summary`]; [`uninstall`], [`attach`],
//! [`disposable`] and [`check_kind`]; [`profile::Profile`];
//! [`state::ZoneLock`] and the marker in [`state`]; [`log::open`], a
//! JSON-lines logger that never stops an install.
//!
//! Steps:
//!
//! 1. lock the zonepath; check the profile's trees, the baseline and
//!    every image (first member and kind) before writing anything;
//! 2. clean the root of an install that was interrupted;
//! 3. mark the zonepath `installing`; make `root` (0755);
//! 4. replicate each tree with the profile's link and prune rules;
//! 5. unpack the baseline, then each image layer in order;
//! 6. copy the host files;
//! 7. flush the root's filesystem to the disk ([`Install::sync`]);
//! 8. record what was laid out ([`manifest`]), for [`update`];
//!    mark the zonepath `installed`.
//!
//! # Failures and zoneadm's exit codes
//!
//! What zoneadm does with the hook's status decides what a failure must
//! return (see zinstall(7) for the whole table). 254
//! (`ZONE_SUBPROC_NOTCOMPLETE`) makes `zoneadm install` run
//! `cleanup_zonepath()`, which removes `ZONEPATH/root` (or destroys the
//! zonepath's dataset) and returns the zone to *configured*. Every other
//! failure (253, 255, a signal) leaves the zone *incomplete* and removes
//! nothing. So 254 is returned only when the zonepath holds nothing worth
//! keeping: no root, or an empty one, and none of zinstall's own files
//! (the marker is removed first, the lock on release). Whatever the
//! failure, [`Install::run`] checks that before it says 254, and says 255
//! otherwise: a root that is installed, that zinstall did not make, or
//! that another process is installing now is never handed to
//! `cleanup_zonepath()`. A failure after the root was started removes the
//! partial root itself, and is 254 if that worked. A killed install
//! leaves `installing`, which zoneadm sees as incomplete (a killed hook is
//! fatal); the next uninstall, or install, cleans it.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

/// What an install makes, as messages name it: a zone on illumos, a
/// root elsewhere (a Linux root is no zone). A macro, so that it joins
/// literals with `concat!`.
#[cfg(any(target_os = "illumos", target_os = "solaris"))]
macro_rules! made {
    () => {
        "zone"
    };
}
/// What an install makes, as messages name it: a zone on illumos, a
/// root elsewhere (a Linux root is no zone). A macro, so that it joins
/// literals with `concat!`.
#[cfg(not(any(target_os = "illumos", target_os = "solaris")))]
macro_rules! made {
    () => {
        "root"
    };
}

mod attach;
#[cfg(target_os = "linux")]
pub mod composefs;
#[cfg(target_os = "linux")]
mod composefs_build;
mod dry_run;
mod error;
mod event;
#[cfg(target_os = "linux")]
mod in_memory;
pub mod log;
pub mod manifest;
pub mod owners;
mod plan;
pub mod profile;
mod recipe;
pub mod state;
mod steps;
mod summary;
mod uninstall;
pub mod update;
mod zonepath;

pub use attach::attach;
pub use error::{Aftermath, Cause, InstallError, Keep, Left, Stage};
pub use event::Event;
#[cfg(target_os = "linux")]
pub use in_memory::Built;
pub use plan::{Install, check_kind, oci_image};
pub use profile::Profile;
pub use summary::Summary;
pub use uninstall::uninstall;
pub use zonepath::{
    Zonepath, discard_zonepath, disposable, open_zonepath, prepare_zonepath,
};

/// The system-wide defaults file (defopen(3C) format) that the CLI, the
/// brand hook and the daemon read the engine's tunables from
/// ([`zinstall_core::paths`] keeps every such place).
pub const DEFAULTS_FILE: &str = zinstall_core::paths::DEFAULTS_FILE;
