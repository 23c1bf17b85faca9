//! zinstall-composefs's integration tests, one binary: real trees, the
//! store on disk, images checked by erofs-utils and mounted by the kernel.

// composefs is Linux's: the crate is empty elsewhere.
#![cfg(target_os = "linux")]
// Tests make and read their own fixtures by path: the seam is the
// product's.
#![allow(clippy::disallowed_methods)]

mod compare;
mod full;
mod image;
mod mount;
mod parallel;
mod refs;
mod store;
mod sweep;
mod tree;
mod verity;
