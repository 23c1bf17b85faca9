//! The few system calls the binaries make themselves (the engine's are in
//! `copier`'s `sys`): the only place in this crate with `unsafe`.

/// This machine's name.
pub(crate) fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Ends the process at once with `code`: no destructors, no atexit
/// handlers, no flushing of what other threads hold. For a panic hook,
/// where nothing else may be trusted to finish.
pub fn exit_now(code: u8) -> ! {
    // SAFETY: _exit only ends the process; no Rust state is used.
    unsafe { libc::_exit(i32::from(code)) }
}

/// True if the process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Raises this process's locked-memory limit as far as it may go, so
/// that a bpftrace it starts inherits one it need not raise itself
/// (bpftrace prints an error when it cannot). Unlimited when the process
/// has CAP_SYS_RESOURCE; else the soft limit is lifted to the hard one.
/// True if the limit is now unlimited.
#[cfg(target_os = "linux")]
pub(crate) fn raise_memlock() -> bool {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
        return true;
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut now) } == 0 {
        now.rlim_cur = now.rlim_max;
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &now) };
    }
    now.rlim_max == libc::RLIM_INFINITY
}

/// The running kernel's release (`uname -r`), if it can be read.
pub(crate) fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}
