//! Linux: the peer's credentials from `SO_PEERCRED` and its groups from
//! `SO_PEERGROUPS` (Linux 4.13).

use std::io;
use std::os::fd::RawFd;

use super::Peer;

/// An abstract socket address (`NOTIFY_SOCKET=@name`).
pub(super) fn abstract_addr(
    name: &[u8],
) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

pub(super) fn peer(fd: RawFd) -> io::Result<Peer> {
    // SAFETY: zeroed ucred is a valid out-parameter.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len describe a buffer of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0 as libc::gid_t; 256];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>())
            as libc::socklen_t;
        // SAFETY: groups and len describe the buffer.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / std::mem::size_of::<libc::gid_t>());
            break;
        }
        let e = io::Error::last_os_error();
        // ERANGE says how much room is needed; never more than the
        // kernel's NGROUPS_MAX (65536).
        if e.raw_os_error() == Some(libc::ERANGE) && groups.len() < 65536 {
            let want = len as usize / std::mem::size_of::<libc::gid_t>();
            groups.resize(want.clamp(groups.len() * 2, 65536), 0);
            continue;
        }
        return Err(e);
    }
    Ok(Peer {
        uid: cred.uid,
        gid: cred.gid,
        groups,
        pid: cred.pid,
    })
}

pub(super) fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointers; it walks glibc's own arenas
    // under their locks.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}
