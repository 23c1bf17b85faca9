//! Processes: descriptors handed to a child or taken at start, signals,
//! limits, CPU time, the allocator's spare memory.
//!
//! | function | Linux (`linux.rs`) | illumos (`illumos.rs`) |
//! |---|---|---|
//! | [`close_from`] | `close_range(2)`, else each of `/proc/self/fd` | each of `/proc/self/fd` |
//! | [`spawn_job_process`] | descriptors placed, the rest `close_range(CLOSE_RANGE_CLOEXEC)` | descriptors placed; the job closes the rest |
//! | [`release_free_memory`] | glibc's `malloc_trim(0)` | nothing |
//! | [`self_exe`] | `/proc/self/exe` | [`std::env::current_exe`] |
//! | [`run_in_root`] | `clone` into new mount, PID, network, UTS and IPC namespaces, `pivot_root`, fresh `/proc`, `/sys` read-only, `/dev` and `/tmp` tmpfs, `execve`, a `pidfd` wait with a timeout (`in_root_linux.rs`) | refused: unsupported |
//!
//! The rest is the same on every Unix: `posix.rs` (descriptors taken,
//! signals, the parent, `_exit`), `spawn.rs` (a child's descriptors),
//! `limits.rs` (`RLIMIT_NOFILE`, `RLIMIT_MEMLOCK`), `usage.rs` (CPU
//! time; another process's from `/proc/PID/stat` on Linux only).

mod in_root;
#[cfg(target_os = "linux")]
mod in_root_linux;
mod limits;
mod posix;
mod spawn;
mod usage;

#[cfg(not(target_os = "linux"))]
mod illumos;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
use illumos as platform;
#[cfg(target_os = "linux")]
use linux as platform;

#[cfg(not(target_os = "linux"))]
pub use illumos::run_in_root;
pub use in_root::{InRoot, InRootError, RunEnd};
#[cfg(target_os = "linux")]
pub use in_root_linux::run_in_root;
#[cfg(target_os = "linux")]
pub use limits::raise_memlock;
pub use limits::{nofile_limits, set_nofile_soft};
pub use platform::{release_free_memory, self_exe, shares_mount_namespace};
pub use posix::{
    close_from, exit_now, parent_pid, process_exists, signal, take_fd,
};
pub use spawn::{give_fds, spawn_job_process};
pub use usage::{CpuLoad, cpu_times, process_cpu_ticks, thread_cpu_time};
