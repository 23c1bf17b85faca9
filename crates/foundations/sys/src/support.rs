//! Calls only tests and benchmarks make: swapping two names, a file's
//! extent map, a child's descriptor limit and its peak memory.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// `renameat2(a, b, RENAME_EXCHANGE)`: both names stay, their inodes
/// trade places atomically (how the race tests swap a directory and a
/// symlink under a running copy). False if the kernel refused.
#[cfg(target_os = "linux")]
pub fn exchange(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(a), Ok(b)) = (
        std::ffi::CString::new(a.as_os_str().as_bytes()),
        std::ffi::CString::new(b.as_os_str().as_bytes()),
    ) else {
        return false;
    };
    // SAFETY: two valid C strings; a plain system call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    rc == 0
}

/// `struct fiemap` with room for a few extents.
#[repr(C)]
pub struct Fiemap {
    /// Logical offset the map starts at.
    pub start: u64,
    /// Logical length asked for.
    pub length: u64,
    /// `FIEMAP_FLAG_*`.
    pub flags: u32,
    /// How many extents the kernel filled in.
    pub mapped_extents: u32,
    /// Room in `extents`.
    pub extent_count: u32,
    reserved: u32,
    /// The extents.
    pub extents: [FiemapExtent; 32],
}

/// `struct fiemap_extent`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct FiemapExtent {
    /// Logical offset in the file.
    pub logical: u64,
    /// Physical offset on the device.
    pub physical: u64,
    /// Length in bytes.
    pub length: u64,
    reserved64: [u64; 2],
    /// `FIEMAP_EXTENT_*`.
    pub flags: u32,
    reserved: [u32; 3],
}

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;

/// `FS_IOC_FIEMAP` of `f` with `flags`, up to 32 extents.
pub fn fiemap(f: &File, flags: u32) -> io::Result<Fiemap> {
    let mut m = Fiemap {
        start: 0,
        length: u64::MAX,
        flags,
        mapped_extents: 0,
        extent_count: 32,
        reserved: 0,
        extents: [FiemapExtent::default(); 32],
    };
    // SAFETY: m is a properly sized fiemap with 32 extent slots.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, &mut m) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(m)
}

/// Makes `cmd`'s child start with its descriptor limit (`RLIMIT_NOFILE`)
/// at `soft` and `hard`.
pub fn limit_nofile_on_exec(
    cmd: &mut std::process::Command,
    soft: u64,
    hard: u64,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// How a child that [`wait_with_rusage`] reaped ended.
#[cfg(target_os = "linux")]
pub struct Reaped {
    /// Whether it exited 0.
    pub ok: bool,
    /// Its peak resident memory in KiB (the kernel's count).
    pub max_rss_kib: u64,
}

/// Waits for the child `pid` with `wait4`, which also gives its peak
/// memory (std's wait does not).
#[cfg(target_os = "linux")]
pub fn wait_with_rusage(pid: u32) -> io::Result<Reaped> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = pid as libc::pid_t;
    // SAFETY: waits for the child just spawned.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        return Err(io::Error::last_os_error());
    }
    Ok(Reaped {
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        max_rss_kib: ru.ru_maxrss as u64,
    })
}
