//! illumos: nothing to trim, the executable by its path, no
//! `close_range`.

use std::io;

/// libc's allocator keeps its heap; nothing to hand back here.
pub fn release_free_memory() {}

pub fn self_exe() -> io::Result<std::path::PathBuf> {
    std::env::current_exe()
}

/// illumos has no close_range: the job's process closes what it
/// inherited first thing (`/proc/self/fd`).
pub fn cloexec_from(_first: i32) {}

pub fn close_range(_first: i32) -> bool {
    false
}
