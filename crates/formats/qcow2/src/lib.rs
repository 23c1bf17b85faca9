//! qcow2: reading images natively, and writing empty overlays.
//!
//! Guests share one raw base image; each gets a thin qcow2 *overlay* that
//! records only what the guest writes and reads the rest from the base.
//! An empty overlay is a few small, fully specified structures, so it is
//! written here directly ([`create_overlay`]) rather than by running
//! `qemu-img` once per guest (zinstall-provision does that when asked). Base
//! images that come as qcow2 are read natively ([`Image`]) and converted
//! once to a sparse raw file ([`convert_to_raw`]).
//!
//! The format (QEMU's `docs/interop/qcow2.rst`): a header in cluster 0; a
//! two-level table (L1, then L2 tables of 8-byte entries, one cluster
//! each) maps guest clusters to host offsets; a refcount table and blocks
//! count the references to each host cluster. Integers are big-endian.
//!
//! The API: [`Image`] (open, validate, read guest data through an L2
//! cache), [`convert_to_raw`], [`create_overlay`], [`Header`], and
//! [`Error`] (the image, the offset or table, and the cause).
//!
//! ```no_run
//! use std::path::Path;
//! use zinstall_qcow2::{ConvertOptions, Image, convert_to_raw, create_overlay};
//!
//! let img = Image::open(Path::new("debian.qcow2"))?;
//! let raw = std::fs::File::create("/var/cache/base.raw")?;
//! convert_to_raw(&img, &raw, &ConvertOptions { threads: 2 }, &|_done| {})?;
//! create_overlay(
//!     Path::new("/var/lib/guests/g0.qcow2"),
//!     Path::new("/var/cache/base.raw"),
//!     "raw",
//!     img.virtual_size(),
//! )?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod buf;
mod convert;
mod error;
mod header;
mod layout;
mod overlay;
mod reader;

pub use convert::{
    ConvertOptions, ConvertStats, KernelCopy, UserSpace, convert_to_raw,
    convert_to_raw_streaming, convert_to_raw_streaming_with,
};
pub use error::{Error, ErrorKind, Problem, Result};
pub use header::Header;
pub use layout::{MAX_CHAIN, MAX_L1_ENTRIES, max_virtual_size};
pub use overlay::{MAX_OVERLAY_SIZE, create_overlay};
pub use reader::{ChainOptions, Image, InDir};
