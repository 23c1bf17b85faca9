//! Who this process is, and the ids behind user and group names.

use std::ffi::CString;

/// The effective user id; decides whether ownership can be kept.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id: what new files get as group when not root.
pub fn egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}

/// The supplementary groups of this thread (empty if they cannot be
/// read).
pub fn groups() -> Vec<u32> {
    let mut g = vec![0 as libc::gid_t; 65536];
    // SAFETY: the buffer holds as many gids as its length says.
    let n = unsafe { libc::getgroups(g.len() as libc::c_int, g.as_mut_ptr()) };
    g.truncate(usize::try_from(n).unwrap_or(0));
    g
}

/// The uid of the user named `name`.
pub fn user_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwnam_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer's length is
    // passed with it.
    let r = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    (r == 0 && !out.is_null()).then_some(pw.pw_uid)
}

/// The gid of the group named `name`.
pub fn group_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 65536];
    // SAFETY: zeroed group is a valid out-parameter for getgrnam_r.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as above.
    let r = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut gr,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    (r == 0 && !out.is_null()).then_some(gr.gr_gid)
}

/// The process's file-mode creation mask, as the kernel reports it in
/// `/proc/self/status` (Linux 4.7 and later); `None` where it does not.
/// Read, not set: `umask(2)` cannot be read without changing it for
/// every thread a moment.
pub fn umask() -> Option<u32> {
    // The kernel's own report of this process, not a file from outside.
    #[allow(clippy::disallowed_methods)]
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let value = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(value.trim(), 8).ok()
}
