//! Provisioning guests from one image through a content-addressed cache.
//!
//! An image is told by its content ([`detect`]): a rootfs archive gives
//! directory guests, a raw or qcow2 disk gives disk guests. It is
//! extracted or decompressed once into a cache entry ([`cache::Cache`]);
//! an OCI image's layers each once, then its tree from them;
//! a raw base is written sparsely ([`write_sparse`]); each guest is then a
//! copy of the tree (reflink where the filesystem can) or a thin qcow2
//! overlay over the base ([`zinstall_qcow2::create_overlay`], or
//! `qemu-img create` when asked).
//!
//! The library prints nothing: [`provision`] tells its caller of each
//! guest made through a callback, and every failure is a
//! [`ProvisionError`] carrying the path and operation.
//!
//! ```no_run
//! use std::path::Path;
//! use zinstall_provision::{
//!     DEFAULT_CACHE, ProvisionOptions, ProvisionRequest, provision,
//! };
//!
//! let request = ProvisionRequest {
//!     count: 8,
//!     out: "/var/lib/guests".into(),
//!     name: "guest".into(),
//!     ..Default::default()
//! };
//! let opts = ProvisionOptions::new(request, DEFAULT_CACHE);
//! let report = provision(Path::new("debian.qcow2"), &opts, &mut |g| {
//!     eprintln!("made {}", g.path.display());
//! })?;
//! println!("{} guests", report.guests.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Where each part is
//!
//! Each module names only those above it in this list, so that none
//! depends on itself through another:
//!
//! | module | what it holds |
//! |---|---|
//! | `options` | [`ProvisionOptions`], the [`ProvisionRequest`] a command line or a daemon's client makes, identity choices, [`DEFAULT_CACHE`] and the other defaults and bounds |
//! | `sys` | every system call Rust cannot check, made in `zinstall-sys` and re-exported as small safe functions |
//! | `sparse` | [`write_sparse`]: a stream into a sparse file |
//! | `error` | [`ProvisionError`], [`ImageProblem`] |
//! | `immutable` | the immutable flag (`chattr +i`) on files and trees |
//! | `detect` | [`detect`]: what an image is, from its bytes |
//! | `customize` | what virt-customize(1) does to a guest: the options' values checked ([`customize::spec`]), each guest's steps read and checked before the first guest, then applied beneath its root (keys, passwords, first-boot service, files, time zone); [`customize::wire`] and [`customize::sent`] the same as a daemon's client sends it, files read into it |
//! | `identity` | each directory guest's own hostname, machine-id and SSH host keys |
//! | [`seed`] | each disk guest's NoCloud seed (`cidata`): meta-data, the options as cloud-config merged into user-data, network-config; [`seed::sent`] its request as a daemon's client sends it |
//! | `qemu_img` | running `qemu-img`, fenced in, for overlays when asked and for formats zinstall does not read |
//! | [`cache`] | the content-addressed cache: layout and locks, obtaining an entry, stamp and protection, guest records, gc |
//! | `oci` | an OCI image's entry from its layers, each cached once |
//! | `build` | an image read once into a cache entry's payload |
//! | `composefs` | composefs guests: the entry's image made once in the cache's composefs store, each guest's directories, identity and customisation through its mounted overlay, its record |
//! | `guests` | [`provision`]: the guests made from an entry, all or nothing |
//! | `dry_run` | [`dry_run`]: what a provision would do, nothing written |
//! | `asked` | seeds and customisation read and checked by the kind of guest an image makes, before the cache is touched |

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod asked;
mod build;
pub mod cache;
mod composefs;
pub mod customize;
mod detect;
mod dry_run;
mod error;
mod guests;
pub mod identity;
mod immutable;
mod oci;
mod options;
mod qemu_img;
mod records;
pub mod seed;
mod sparse;
mod sys;

pub use detect::{Compression, ImageKind, decompress, detect};
pub use dry_run::{ProvisionDryRun, dry_run};
pub use error::{ImageProblem, ProvisionError};
pub use guests::{Guest, GuestKind, ProvisionReport, provision, provision_in};
pub use options::{
    CustomizeOptions, DEFAULT_CACHE, DEFAULT_RUN_TIMEOUT, GuestFormat,
    MAX_RUN_TIMEOUT, ProvisionOptions, ProvisionRequest, SeedRequest, Supplied,
};
pub use sparse::write_sparse;

/// Where a cache at `cache_root` keeps the images it pulls from
/// registries (an OCI layout; install pulls into the same one).
pub fn store_of(cache_root: &std::path::Path) -> std::path::PathBuf {
    cache::store_of(cache_root)
}

/// Where a cache at `cache_root` keeps its composefs object store and
/// images (install and provision share it).
pub fn composefs_store_of(cache_root: &std::path::Path) -> std::path::PathBuf {
    cache::composefs_store_of(cache_root)
}
