//! The platform seam, as this crate names it: a connection's peer, names
//! of users and groups, a job's process. The system calls are made in
//! `zinstall-sys` (the workspace's one place with `unsafe`); this module
//! re-exports them, with the few safe helpers that need this crate.

use std::io;

pub use zinstall_sys::ident::{
    Identity, Peer, become_caller, group_id, peer, user_id,
};
pub use zinstall_sys::process::{
    close_from, parent_pid, process_cpu_ticks, release_free_memory, self_exe,
    shares_mount_namespace, signal, spawn_job_process, take_fd,
};
pub use zinstall_sys::socket::{activated_listener, hung_up, notify, readable};

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Sets a socket file's group.
pub fn chown_group(path: &std::path::Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(path, None, Some(gid))
}

/// Raises the soft limit on open descriptors to the hard one: each
/// connection holds one, each job several. The binary has done so at
/// start already ([`zinstall_engine::descriptors::raise_limit`]); this is for a
/// server run in a process that has not.
pub fn raise_nofile() {
    let _kept = zinstall_engine::descriptors::raise_limit();
}
