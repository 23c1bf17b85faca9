//! illumos: a connection's peer from `getpeerucred(3C)`; a job's process
//! made the caller for good.

use std::io;
use std::os::fd::RawFd;

use super::types::{Identity, Peer};

pub fn peer(fd: RawFd) -> io::Result<Peer> {
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

/// Groups, then gids, then uids: `setuid` by root sets the real,
/// effective and saved uid together, and a process that is not
/// privilege-aware loses its privileges with uid 0. The limit set is
/// left as it is.
pub fn become_caller(who: &Identity) -> io::Result<()> {
    let step = |r: libc::c_int, what: &str| {
        if r == -1 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
        }
        Ok(())
    };
    step(
        // SAFETY: the pointer and count describe `who.groups`.
        unsafe {
            libc::setgroups(
                who.groups.len() as libc::c_int,
                who.groups.as_ptr(),
            )
        },
        "setgroups",
    )?;
    // SAFETY: integer arguments.
    step(unsafe { libc::setgid(who.gid) }, "setgid")?;
    // SAFETY: integer arguments.
    step(unsafe { libc::setuid(who.uid) }, "setuid")?;
    // SAFETY: no arguments.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    if (uid, euid) != (who.uid, who.uid) {
        return Err(io::Error::other("the uid did not change"));
    }
    Ok(())
}
