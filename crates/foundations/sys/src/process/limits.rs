//! Limits on what this process may hold: open descriptors, locked
//! memory.

use std::io;

use crate::ffi::check;

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`).
// rlim_t is u64 here, not everywhere.
#[allow(clippy::unnecessary_cast)]
pub fn nofile_limits() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit for getrlimit to fill.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    Ok((r.rlim_cur as u64, r.rlim_max as u64))
}

/// Sets the soft limit on open descriptors, the hard one kept.
#[allow(clippy::unnecessary_cast)]
pub fn set_nofile_soft(soft: u64) -> io::Result<()> {
    let (_, hard) = nofile_limits()?;
    let r = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: r is a valid rlimit.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })
}

/// Raises this process's locked-memory limit as far as it may go, so
/// that a bpftrace it starts inherits one it need not raise itself
/// (bpftrace prints an error when it cannot). Unlimited when the process
/// has CAP_SYS_RESOURCE; else the soft limit is lifted to the hard one.
/// True if the limit is now unlimited.
#[cfg(target_os = "linux")]
pub fn raise_memlock() -> bool {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
        return true;
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut now) } == 0 {
        now.rlim_cur = now.rlim_max;
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &now) };
    }
    now.rlim_max == libc::RLIM_INFINITY
}
