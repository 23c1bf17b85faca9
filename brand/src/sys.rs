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
