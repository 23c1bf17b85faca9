//! illumos: the peer's credentials from `getpeerucred(3C)`.

use std::io;
use std::os::fd::RawFd;

use super::Peer;

/// illumos has no abstract sockets.
pub(super) fn abstract_addr(
    _name: &[u8],
) -> io::Result<std::os::unix::net::SocketAddr> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

pub(super) fn peer(fd: RawFd) -> io::Result<Peer> {
    let mut uc: *mut libc::ucred_t = std::ptr::null_mut();
    // SAFETY: getpeerucred allocates *uc on success.
    if unsafe { libc::getpeerucred(fd, &mut uc) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: uc is valid until ucred_free below.
    let peer = unsafe {
        let mut gids: *const libc::gid_t = std::ptr::null();
        let n = libc::ucred_getgroups(uc, &mut gids);
        let groups = if n > 0 && !gids.is_null() {
            std::slice::from_raw_parts(gids, n as usize).to_vec()
        } else {
            Vec::new()
        };
        Peer {
            uid: libc::ucred_geteuid(uc),
            gid: libc::ucred_getegid(uc),
            groups,
            pid: libc::ucred_getpid(uc),
        }
    };
    // SAFETY: allocated by getpeerucred.
    unsafe { libc::ucred_free(uc) };
    Ok(peer)
}

/// libc's allocator keeps its heap; nothing to hand back here.
pub(super) fn release_free_memory() {}
