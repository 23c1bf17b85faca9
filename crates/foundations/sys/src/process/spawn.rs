//! Starting programs with the descriptors they are handed, and nothing
//! else of this process's.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

#[cfg(not(target_os = "linux"))]
use super::illumos as platform;
#[cfg(target_os = "linux")]
use super::linux as platform;

/// Starts `exe` with `args` as a job's process: `fds` become its
/// descriptors 3, 4, ... in order, its standard streams are `/dev/null`,
/// its environment is empty, and every other descriptor the daemon holds
/// is closed before it runs (close-on-exec or not). It starts as root;
/// it takes the caller's identity itself before it reads its job.
pub fn spawn_job_process(
    exe: &std::path::Path,
    args: &[String],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    const MAX_FDS: usize = 8;
    if fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut raw = [-1; MAX_FDS];
    for (r, f) in raw.iter_mut().zip(fds) {
        *r = f.as_raw_fd();
    }
    let n = fds.len();
    let mut cmd = Command::new(exe);
    cmd.arg0("zinstalld-job")
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec the closure only makes system calls
    // (fcntl, dup2, close, close_range) on a fixed array: no allocation,
    // no lock.
    unsafe {
        cmd.pre_exec(move || place_fds(&raw[..n]));
    }
    cmd.spawn()
}

/// In the forked child: moves `raw` to 3, 4, ... (through copies above
/// them, so that no move lands on a descriptor not yet moved) and marks
/// every descriptor above them close-on-exec.
fn place_fds(raw: &[i32]) -> io::Result<()> {
    const ABOVE: i32 = 64;
    let mut moved = [-1; 8];
    for (m, fd) in moved.iter_mut().zip(raw) {
        // SAFETY: fcntl on a descriptor this process holds.
        let t = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, ABOVE) };
        if t < 0 {
            return Err(io::Error::last_os_error());
        }
        *m = t;
    }
    for (i, m) in moved.iter().take(raw.len()).enumerate() {
        // SAFETY: dup2 between descriptors; the copy at 3 + i has no
        // close-on-exec flag, so it is what the new program finds.
        if unsafe { libc::dup2(*m, 3 + i as i32) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the copy is ours alone.
        unsafe { libc::close(*m) };
    }
    platform::cloexec_from(3 + raw.len() as i32);
    Ok(())
}

/// Makes `cmd`'s child find the descriptors `fds` (open in this process,
/// and still open when it is spawned) as its descriptors `at`, and no
/// others of this process's but those std passes (0, 1 and 2).
pub fn give_fds<const N: usize>(
    cmd: &mut Command,
    fds: [RawFd; N],
    at: [RawFd; N],
) {
    let pre_exec = move || {
        // Out of the way of the targets first: a source may be one of
        // them. Close-on-exec: only the dup2 copies reach the program.
        let mut high = [0; N];
        for (h, fd) in high.iter_mut().zip(fds) {
            // SAFETY: fcntl on a descriptor the parent keeps open
            // until the spawn returns.
            *h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
            if *h < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for (h, to) in high.into_iter().zip(at) {
            // SAFETY: dup2 of the descriptor just made.
            if unsafe { libc::dup2(h, to) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: between fork and exec the closure calls only fcntl and
    // dup2, which are async-signal-safe, allocates nothing and touches
    // nothing but descriptors.
    unsafe {
        cmd.pre_exec(pre_exec);
    }
}
