//! The provisioning library's integration tests, one binary.

// Tests make and read their own fixtures by path: the seam is the
// product's.
#![allow(clippy::disallowed_methods)]

mod cache;
mod provision;
