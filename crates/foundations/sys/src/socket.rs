//! A connection's socket: whether it hung up or can be read, the listener
//! systemd hands over, notices to the service manager.

use std::io;
use std::os::fd::AsRawFd;

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
        abstract_addr(name)
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

/// An abstract socket address (`NOTIFY_SOCKET=@name`).
#[cfg(target_os = "linux")]
fn abstract_addr(name: &[u8]) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

/// illumos has no abstract sockets.
#[cfg(not(target_os = "linux"))]
fn abstract_addr(_name: &[u8]) -> io::Result<std::os::unix::net::SocketAddr> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
