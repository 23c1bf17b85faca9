//! Linux: a thread's filesystem identity (fsuid, fsgid, groups,
//! effective capabilities), taken for a run and restored after.

use std::io;

/// A thread's filesystem identity, taken for a run: restored when
/// dropped. Linux keeps fsuid, fsgid, the supplementary groups and the
/// capability sets per thread in the kernel; glibc's `setgroups` changes
/// every thread, so the raw system call is made.
///
/// Besides the identity, the thread's effective capabilities are all
/// dropped (the permitted set stays, so that they can be raised again
/// when the run ends). A non-zero fsuid alone clears only the file
/// system capabilities: CAP_SETFCAP and CAP_SYS_ADMIN would stay, and
/// with them the power to write `security.capability` and `trusted.*`
/// on the caller's files.
///
/// A thread that already is the caller (one started by a thread that had
/// assumed the identity: Linux threads inherit fsuid, groups and
/// capabilities) keeps it as it is; it could not change it anyway, having
/// no capability left, and nothing is restored when the guard drops.
pub struct Assumed {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    effective: caps::CapsHashSet,
    changed: bool,
}

/// Takes `uid`, `gid` and `groups` as this thread's filesystem identity
/// and drops its effective capabilities, until the [`Assumed`] drops.
pub fn assume(uid: u32, gid: u32, groups: &[u32]) -> io::Result<Assumed> {
    let mut saved = vec![0 as libc::gid_t; 65536];
    // SAFETY: the buffer holds as many gids as its length says.
    let n = unsafe { libc::getgroups(saved.len() as i32, saved.as_mut_ptr()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    saved.truncate(n as usize);
    let effective =
        caps::read(None, caps::CapSet::Effective).map_err(caps_error)?;
    let mut before = Assumed {
        // SAFETY: setfsuid(-1) only reports the current value.
        uid: unsafe { libc::setfsuid(u32::MAX) } as u32,
        // SAFETY: as above.
        gid: unsafe { libc::setfsgid(u32::MAX) } as u32,
        groups: saved,
        effective,
        changed: false,
    };
    let same_groups = {
        let (mut have, mut want) = (before.groups.clone(), groups.to_vec());
        have.sort_unstable();
        have.dedup();
        want.sort_unstable();
        want.dedup();
        have == want
    };
    if (before.uid, before.gid) == (uid, gid)
        && same_groups
        && before.effective.is_empty()
    {
        return Ok(before);
    }
    before.changed = true;
    set_groups(groups)?;
    // Groups first: once the fsuid is not root, the thread may no longer
    // change them. setfs*id report no error: read the value back.
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        libc::setfsgid(gid);
        libc::setfsuid(uid);
    }
    // SAFETY: as above.
    let (now_uid, now_gid) = unsafe {
        (
            libc::setfsuid(u32::MAX) as u32,
            libc::setfsgid(u32::MAX) as u32,
        )
    };
    if (now_uid, now_gid) != (uid, gid) {
        drop(before);
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    // Last: lowering the effective set needs no capability; `None` is
    // this thread, never the process.
    if let Err(e) = caps::clear(None, caps::CapSet::Effective) {
        drop(before);
        return Err(caps_error(e));
    }
    Ok(before)
}

fn caps_error(e: caps::errors::CapsError) -> io::Error {
    io::Error::other(e.to_string())
}

fn set_groups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: the pointer and count describe `groups`.
    let r = unsafe {
        libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr())
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for Assumed {
    fn drop(&mut self) {
        if !self.changed {
            return;
        }
        // The capabilities first: setgroups needs CAP_SETGID. They were
        // effective before, so they are still permitted.
        let _restored =
            caps::set(None, caps::CapSet::Effective, &self.effective);
        // SAFETY: plain system calls; the uid first so that the groups may
        // be set again.
        unsafe {
            libc::setfsuid(self.uid);
            libc::setfsgid(self.gid);
        }
        let _restored = set_groups(&self.groups);
    }
}
