//! composefs: file contents stored once in a content-addressed object
//! store, and each tree an EROFS image of metadata only whose regular
//! files point into the store; mounted under overlayfs with the store as
//! its data-only lower layer.
//!
//! The format is composefs's (composefs-rs, the `composefs` crate, and
//! mkcomposefs): objects under `objects/XX/<62 hex>`, named by the
//! fs-verity SHA-256 digest of their contents; files of at most
//! [`INLINE_MAX`] bytes kept in the image; the image written by
//! composefs-rs's EROFS writer, so that its ID (the fs-verity digest of
//! the image, itself an object) is the one `cfsctl` gives.
//!
//! The API: [`Store`] (open, put, verify an object; [`Store::sync`] once
//! an image's objects are written; refs), [`write_image`] (a directory
//! tree into the store and an image, synced), [`scan`] and
//! [`image_bytes`] for the two steps apart, [`Root`] (a root's
//! directory and record: mount, unmount, the mount(8) commands) over
//! [`mount_root`], and [`Error`] (the path, the operation and the
//! cause). Collecting: [`Store::sweep`] keeps what refs name and removes
//! the rest under the store's lock held exclusively; every writer holds
//! [`Store::lock_shared`] from before its first object until its ref is
//! added. [`Store::verify_all`] re-hashes every object.
//!
//! composefs is Linux's: on other systems (illumos) the crate is empty,
//! since the `composefs` crate builds only on Linux.
//!
//! ```no_run
//! use std::path::Path;
//! use zinstall_composefs::{Store, hex, write_image};
//!
//! let store = Store::open(Path::new("/var/cache/zinstall/composefs"))?;
//! let image = write_image(Path::new("/srv/root"), &store)?;
//! println!("{}", hex(&image.id));
//! store.verify(&image.id)?;
//! # Ok::<(), zinstall_composefs::Error>(())
//! ```

#![cfg(target_os = "linux")]
#![forbid(unsafe_code)]

mod adopt;
mod build;
mod digest;
mod error;
mod image;
mod mount;
mod record;
mod refs;
mod scan;
mod store;
mod sweep;
mod unnamed;
mod verity;

pub use build::{Builder, Entry, EntryStat, LeafKind, LeafRef, is_inline};
pub use digest::{
    BodyHasher, INLINE_MAX, ObjectId, from_bytes, hex, object_path, of_bytes,
    parse_hex,
};
pub use error::{Error, Op, Problem};
pub use image::{
    Image, image_bytes, write_image, write_image_with, write_scanned,
};
pub use mount::{
    Backing, Layers, MountVerity, Mounting, Root, mount_root, unmount,
};
pub use record::{
    RECORD, ROOT_DIR, Record, Top, UPPER_DIR, WORK_DIR, match_upper,
};
pub use refs::{REF_NAME_MAX, install_ref, valid_ref_name};
pub use scan::{Counts, Known, ScanOptions, Scanned, scan, scan_with};
pub use store::{Put, Store};
pub use sweep::{IMAGE_MAX, StoreLock, SweepReport, VerifyReport};
pub use verity::Verity;
