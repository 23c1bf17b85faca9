//! Credentials: who this process is, who a connection's peer is, the
//! identity a thread takes for a run and the one a job's process becomes.
//!
//! | function | Linux | illumos |
//! |---|---|---|
//! | [`peer`] | `SO_PEERCRED`, `SO_PEERGROUPS` | `getpeerucred(3C)` |
//! | [`become_caller`] | `setgroups`, `setresgid`, `setresuid`, every capability set emptied, `prctl` | `setgroups`, `setgid`, `setuid` |
//! | [`assume`] (a run's identity, per thread) | `setfsuid`, `setfsgid`, `setgroups`, effective capabilities cleared (`capset`) | unsupported (an error) |
//! | [`euid`], [`egid`], [`groups`] | `geteuid`, `getegid`, `getgroups` | the same |
//! | [`user_id`], [`group_id`] | `getpwnam_r`, `getgrnam_r` | the same |

use std::io;
use std::os::fd::AsRawFd;

mod ids;
mod types;

#[cfg(target_os = "linux")]
mod assume_linux;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use assume_linux as assume_platform;
#[cfg(target_os = "linux")]
use linux as platform;

#[cfg(not(target_os = "linux"))]
mod assume_portable;
#[cfg(not(target_os = "linux"))]
mod illumos;
#[cfg(not(target_os = "linux"))]
use assume_portable as assume_platform;
#[cfg(not(target_os = "linux"))]
use illumos as platform;

pub use assume_platform::{Assumed, assume};
pub use ids::{egid, euid, group_id, groups, umask, user_id};
pub use types::{Identity, Peer};

/// The credentials of the process that connected `sock`.
pub fn peer(sock: &impl AsRawFd) -> io::Result<Peer> {
    platform::peer(sock.as_raw_fd())
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
