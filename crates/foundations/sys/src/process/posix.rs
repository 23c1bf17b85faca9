//! This process and others: descriptors handed over, signals, the
//! parent, the end.

use std::io;

#[cfg(not(target_os = "linux"))]
use super::illumos as platform;
#[cfg(target_os = "linux")]
use super::linux as platform;

/// Takes descriptor `fd`, handed to this process at start, if it is
/// open.
pub fn take_fd(fd: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the descriptor is open, was handed to this process by its
    // parent for this use, and nothing else in the process owns it.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl on the descriptor just taken.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(owned)
}

/// Closes every descriptor from `first` up: whatever a job's process
/// inherited beyond what it was handed.
pub fn close_from(first: i32) {
    if platform::close_range(first) {
        return;
    }
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|fd| *fd >= first)
                .collect()
        })
        .unwrap_or_default();
    for fd in open {
        // SAFETY: closing a descriptor nothing in this process uses yet
        // (called first thing in main); the one read_dir held is closed
        // already, so EBADF at worst.
        unsafe { libc::close(fd) };
    }
}

/// Sends `sig` to the process `pid`.
pub fn signal(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid, sig) };
}

/// This process's parent.
pub fn parent_pid() -> u32 {
    // SAFETY: getppid takes no arguments and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Whether the process `pid` exists (one of another user's too).
pub fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks that the process
    // exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Ends the process at once with `code`: no destructors, no atexit
/// handlers, no flushing of what other threads hold. For a panic hook,
/// where nothing else may be trusted to finish.
pub fn exit_now(code: u8) -> ! {
    // SAFETY: _exit only ends the process; no Rust state is used.
    unsafe { libc::_exit(i32::from(code)) }
}
