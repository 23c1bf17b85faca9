//! The platform seam: a connection's peer, and names of users and groups.
//! This is the only place in the crate with `unsafe`.
//!
//! | function | Linux | illumos |
//! |---|---|---|
//! | `peer` | `SO_PEERCRED`, `SO_PEERGROUPS` | `getpeerucred(3C)` |
//! | `user_id`, `group_id` | `getpwnam_r`, `getgrnam_r` | the same |
//! | `release_free_memory` | glibc's `malloc_trim(0)` | nothing |

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as platform;

#[cfg(not(target_os = "linux"))]
mod illumos;
#[cfg(not(target_os = "linux"))]
use illumos as platform;

mod credentials;
pub use credentials::{Identity, Peer};

/// The credentials of the process that connected `sock`.
pub fn peer(sock: &impl AsRawFd) -> io::Result<Peer> {
    platform::peer(sock.as_raw_fd())
}

/// Hands memory the allocator holds free back to the kernel: a finished
/// job's buffers would otherwise stay in the process for good.
pub fn release_free_memory() {
    platform::release_free_memory()
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

/// Whether the client closed its end of `sock` (without blocking). A
/// client that only shut down its writing side is still there, reading.
pub fn hung_up(sock: &impl AsRawFd) -> bool {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && (p.revents & (libc::POLLHUP | libc::POLLERR)) != 0
}

/// The listening socket systemd handed over (`LISTEN_PID`, `LISTEN_FDS`:
/// the first passed descriptor, 3), if it is one.
pub fn activated_listener() -> Option<std::os::unix::net::UnixListener> {
    use std::os::fd::FromRawFd;
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || fds < 1 {
        return None;
    }
    const FIRST: i32 = 3;
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: ty and len describe an int.
    let r = unsafe {
        libc::getsockopt(
            FIRST,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == -1 || ty != libc::SOCK_STREAM {
        return None;
    }
    // SAFETY: systemd passed descriptor 3 to this process (LISTEN_PID) as
    // a stream socket (checked); nothing else owns it.
    let l = unsafe { std::os::unix::net::UnixListener::from_raw_fd(FIRST) };
    // SAFETY: FD_CLOEXEC on a descriptor we own.
    unsafe { libc::fcntl(FIRST, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(l)
}

/// Tells the service manager (`NOTIFY_SOCKET`) how the service is, when
/// there is one.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        platform::abstract_addr(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    let _best_effort = sent;
}

/// Waits up to `ms` for `sock` to be readable; true if it is.
pub fn readable(sock: &impl AsRawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n > 0
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Sets a socket file's group.
pub fn chown_group(path: &std::path::Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(path, None, Some(gid))
}

/// Raises the soft limit on open descriptors to the hard one: each
/// connection holds one, each job several. The binary has done so at
/// start already ([`copier::descriptors::raise_limit`]); this is for a
/// server run in a process that has not.
pub fn raise_nofile() {
    let _kept = copier::descriptors::raise_limit();
}

/// The running executable, to start a job's process from: on Linux the
/// kernel's link to the very file running (still right after a package
/// upgrade replaced it on disk).
pub fn self_exe() -> io::Result<std::path::PathBuf> {
    platform::self_exe()
}

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

/// Makes this process `who` for good: groups, gids and uids (real,
/// effective and saved), then no capability or privilege left in any set
/// (bounding set included), no new privileges through exec, not
/// traceable by the user it now is, and killed if the daemon dies. Each
/// is checked after; an error says which step failed. Must run before
/// the process has a second thread (Linux credentials are per thread).
pub fn become_caller(who: &Identity) -> io::Result<()> {
    if who.uid == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a job's process never runs as root",
        ));
    }
    platform::become_caller(who)
}
