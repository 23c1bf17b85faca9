//! The few system calls the binaries make themselves (the engine's too
//! are in `zinstall-sys`, the workspace's one place with `unsafe`),
//! re-exported.

pub use zinstall_sys::process::exit_now;

pub(crate) use zinstall_sys::host::{hostname, kernel_release};
#[cfg(target_os = "linux")]
pub(crate) use zinstall_sys::process::raise_memlock;

/// True if the process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    zinstall_sys::ident::euid() == 0
}
