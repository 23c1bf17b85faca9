//! The copier's integration tests, one binary: each module is one concern
//! (a feature, a kind of input, a limit), run against real files.

// Tests make and read their own fixtures by path: the seam is the
// product's.
#![allow(clippy::disallowed_methods)]

mod archive;
mod beneath;
mod cancel;
// The fixtures set Linux xattrs; only the Linux-only modules use them.
#[cfg(target_os = "linux")]
mod common;
mod descriptors;
mod dry_unpack;
mod engine;
mod excludes;
mod fidelity;
mod mount_points;
mod on_error;
mod pool;
mod source_fd;
mod statemap;
mod tar_quirks;
mod tar_reader;
mod tar_support;
mod tar_types;
#[cfg(target_os = "linux")]
mod unpack_memory;
mod walk_only;
mod walkers;
mod writeback;
