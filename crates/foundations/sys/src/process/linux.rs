//! Linux: glibc's spare heap, the running executable, descriptors
//! closed from a number up.

use std::io;

pub fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointers; it walks glibc's own arenas
    // under their locks.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

pub fn self_exe() -> io::Result<std::path::PathBuf> {
    Ok("/proc/self/exe".into())
}

/// Whether this process is in the mount namespace of the process `pid`:
/// the two `/proc/PID/ns/mnt` links name one namespace (the same nsfs
/// inode) or not.
pub fn shares_mount_namespace(pid: i32) -> io::Result<bool> {
    let ns = |path: &std::ffi::CStr| -> io::Result<(u64, u64)> {
        // SAFETY: a plain C struct, all zeros a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a C string and the buffer stat(2) fills; the link is
        // followed, as it must be to reach the namespace.
        if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.st_dev, st.st_ino))
    };
    let other = std::ffi::CString::new(format!("/proc/{pid}/ns/mnt"))
        .map_err(io::Error::other)?;
    Ok(ns(c"/proc/self/ns/mnt")? == ns(&other)?)
}

/// Marks every descriptor from `first` up close-on-exec
/// (`close_range(CLOSE_RANGE_CLOEXEC)`, Linux 5.11); older kernels leave
/// them to the job's process, which closes them first thing.
pub fn cloexec_from(first: i32) {
    // SAFETY: a system call with integer arguments; async-signal-safe.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
}

/// Closes every descriptor from `first` up; false when the kernel has no
/// `close_range` (before 5.9).
pub fn close_range(first: i32) -> bool {
    // SAFETY: a system call with integer arguments.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        ) == 0
    }
}
