//! illumos and other Unix systems: no per-thread identity, so a run
//! given one fails.

use std::io;

/// No per-thread identity here: a run given one fails.
pub struct Assumed;

/// Always `Unsupported` here.
pub fn assume(_uid: u32, _gid: u32, _groups: &[u32]) -> io::Result<Assumed> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
