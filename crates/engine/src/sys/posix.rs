//! POSIX calls that std does not offer in the form the engine needs
//! (no-follow variants, raw timespecs, device numbers), the same on every
//! Unix: re-exported from `zinstall-sys`.

pub(crate) use zinstall_sys::cstr;
pub(crate) use zinstall_sys::fs::{
    Stat, Times, at, makedev, mkdir, seek, set_times_fd,
};
pub(crate) use zinstall_sys::ident::{egid, euid, groups};
pub(crate) use zinstall_sys::process::{
    nofile_limits, set_nofile_soft, thread_cpu_time,
};
