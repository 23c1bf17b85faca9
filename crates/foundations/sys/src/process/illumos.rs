//! illumos: nothing to trim, the executable by its path, no
//! `close_range`.

use std::io;

/// libc's allocator keeps its heap; nothing to hand back here.
pub fn release_free_memory() {}

pub fn self_exe() -> io::Result<std::path::PathBuf> {
    std::env::current_exe()
}

/// illumos has no mount namespaces: every process sees the same mounts.
pub fn shares_mount_namespace(_pid: i32) -> io::Result<bool> {
    Ok(true)
}

/// illumos has no close_range: the job's process closes what it
/// inherited first thing (`/proc/self/fd`).
pub fn cloexec_from(_first: i32) {}

pub fn close_range(_first: i32) -> bool {
    false
}

/// Commands run inside a tree need Linux's namespaces (mount, PID,
/// network); a zone is the illumos way, and not made here.
pub fn run_in_root(
    _r: &super::in_root::InRoot<'_>,
) -> Result<super::in_root::RunEnd, super::in_root::InRootError> {
    Err(super::in_root::InRootError {
        step: "run a command inside a tree (Linux namespaces only)",
        error: io::Error::from(io::ErrorKind::Unsupported),
    })
}
