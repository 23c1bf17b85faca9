//! The provisioning library's integration tests, one binary.

mod cache;
mod provision;
