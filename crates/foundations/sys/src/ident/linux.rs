//! Linux: a connection's peer from `SO_PEERCRED` and its groups from
//! `SO_PEERGROUPS` (Linux 4.13); a job's process made the caller for good.

use std::io;
use std::os::fd::RawFd;

use super::types::{Identity, Peer};

pub fn peer(fd: RawFd) -> io::Result<Peer> {
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

/// The highest capability this kernel knows.
// The kernel's own file in /proc, not one anyone could plant.
#[allow(clippy::disallowed_methods)]
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

fn check(r: libc::c_int, step: &str) -> io::Result<()> {
    if r == -1 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{step}: {e}")));
    }
    Ok(())
}

fn caps_error(step: &str, e: caps::errors::CapsError) -> io::Error {
    io::Error::other(format!("{step}: {e}"))
}

pub fn become_caller(who: &Identity) -> io::Result<()> {
    use caps::CapSet;
    let last = last_cap();
    // The bounding set first: dropping from it takes CAP_SETPCAP, which
    // goes with root.
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments.
        let r = unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0)
        };
        // EINVAL: past what this kernel knows.
        if r == -1
            && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
        {
            return check(r, "drop the capability bounding set");
        }
    }
    caps::clear(None, CapSet::Ambient)
        .map_err(|e| caps_error("clear the ambient capabilities", e))?;
    check(
        // SAFETY: the pointer and count describe `who.groups`.
        unsafe { libc::setgroups(who.groups.len(), who.groups.as_ptr()) },
        "setgroups",
    )?;
    check(
        // SAFETY: integer arguments.
        unsafe { libc::setresgid(who.gid, who.gid, who.gid) },
        "setresgid",
    )?;
    // Without SECBIT_KEEP_CAPS the kernel empties the permitted and
    // effective sets as every uid leaves 0; the inheritable set is
    // emptied here.
    check(
        // SAFETY: integer arguments.
        unsafe { libc::setresuid(who.uid, who.uid, who.uid) },
        "setresuid",
    )?;
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set)
            .map_err(|e| caps_error("clear capabilities", e))?;
    }
    // SAFETY: prctl with integer arguments. The parent-death signal is
    // set after the uids, whose change resets it.
    unsafe {
        check(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
            "PR_SET_NO_NEW_PRIVS",
        )?;
        check(
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0),
            "PR_SET_DUMPABLE",
        )?;
        check(
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0),
            "PR_SET_PDEATHSIG",
        )?;
    }
    verify(who, last)?;
    // What ps and top show: the daemon's binary runs as /proc/self/exe,
    // whose name would be "exe".
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"zinstalld-job".as_ptr(), 0, 0, 0)
    };
    Ok(())
}

/// Reads back what [`become_caller`] set: a step the kernel ignored is an
/// error, not a job run with more than the caller has.
fn verify(who: &Identity, last: u32) -> io::Result<()> {
    use caps::CapSet;
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three valid out-pointers.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    let (mut gr, mut ge, mut gs) = (0, 0, 0);
    // SAFETY: as above.
    unsafe { libc::getresgid(&mut gr, &mut ge, &mut gs) };
    if [r, e, s] != [who.uid; 3] || [gr, ge, gs] != [who.gid; 3] {
        return Err(io::Error::other(format!(
            "uids {r},{e},{s} and gids {gr},{ge},{gs} after the change"
        )));
    }
    for set in [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
    ] {
        let left = caps::read(None, set)
            .map_err(|e| caps_error("read capabilities", e))?;
        if !left.is_empty() {
            return Err(io::Error::other(format!(
                "{set:?} capabilities left: {left:?}"
            )));
        }
    }
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments.
        let r = unsafe {
            libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0)
        };
        if r == 1 {
            return Err(io::Error::other(format!(
                "capability {cap} left in the bounding set"
            )));
        }
    }
    Ok(())
}
