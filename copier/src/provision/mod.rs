//! Provisioning guests from one image through the cache.
//!
//! An image is told by its content ([`detect`]): a rootfs archive gives
//! directory guests, a raw or qcow2 disk gives disk guests. It is
//! extracted or decompressed once into a cache entry
//! ([`crate::cache`]); a raw base is written sparsely
//! ([`write_sparse`]).

mod detect;
mod guests;
mod sparse;

pub(crate) use detect::read_up_to;
pub use detect::{Compression, ImageKind, compression_of, decompress, detect};
pub use guests::{
    Guest, GuestKind, ProvisionError, ProvisionOptions, ProvisionReport,
    provision,
};
pub use sparse::write_sparse;
