//! The system calls the timing code makes, from `zinstall-sys` (the
//! workspace's one place with `unsafe`).

pub(crate) use zinstall_sys::fs::sync;
pub(crate) use zinstall_sys::process::CpuLoad;

/// Whether this process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    zinstall_sys::ident::euid() == 0
}
