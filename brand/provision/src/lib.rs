//! Provisioning guests from one image through a content-addressed cache.
//!
//! An image is told by its content ([`detect`]): a rootfs archive gives
//! directory guests, a raw or qcow2 disk gives disk guests. It is
//! extracted or decompressed once into a cache entry ([`cache::Cache`]);
//! an OCI image's layers each once, then its tree from them;
//! a raw base is written sparsely ([`write_sparse`]); each guest is then a
//! copy of the tree (reflink where the filesystem can) or a thin qcow2
//! overlay over the base ([`zinstall_qcow2::create_overlay`], or
//! [`qemu_img::create_overlay`] when asked).
//!
//! The library prints nothing: [`provision`] tells its caller of each
//! guest made through a callback, and every failure is a
//! [`ProvisionError`] carrying the path and operation.
//!
//! ```no_run
//! use std::path::Path;
//! use zinstall_provision::{ProvisionOptions, provision};
//!
//! let opts = ProvisionOptions {
//!     count: 8,
//!     out: "/var/lib/guests".into(),
//!     name: "guest".into(),
//!     size: None,
//!     cache: "/var/cache/zinstall".into(),
//!     sha256: None,
//!     qemu_img: None,
//!     tunables: copier::Tunables::default(),
//!     max_archive_bytes: 64 << 30,
//!     allow_devices: false,
//!     cancel: None,
//!     pool: None,
//!     listener: None,
//!     identity: zinstall_provision::identity::IdentityOptions::unique(),
//!     force: false,
//!     platform: None,
//!     pull: Default::default(),
//!     progress: None,
//! };
//! let report = provision(Path::new("debian.qcow2"), &opts, &mut |g| {
//!     eprintln!("made {}", g.path.display());
//! })?;
//! println!("{} guests", report.guests.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod cache;
mod detect;
mod error;
mod guests;
pub mod identity;
mod immutable;
mod oci;
pub mod qemu_img;
mod sparse;

pub use detect::{
    Compression, ForeignFormat, ImageKind, compression_of, decompress, detect,
};
pub use error::{ImageProblem, ProvisionError, Result};
pub use guests::{
    Guest, GuestKind, OVERLAY_MODE, ProvisionOptions, ProvisionPreview,
    ProvisionReport, Qcow2Build, build_qcow2_entry, preview, provision,
    provision_in,
};
pub use sparse::write_sparse;

/// Where a cache at `cache_root` keeps the images it pulls from
/// registries (an OCI layout; install pulls into the same one).
pub fn store_of(cache_root: &std::path::Path) -> std::path::PathBuf {
    oci::store_of(cache_root)
}
