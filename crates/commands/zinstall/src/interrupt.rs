//! What stops a run started from the command line: SIGINT (Ctrl-C),
//! SIGTERM and SIGHUP, and a standard output that was closed under a
//! listing (`zinstall copy -v … | head`). Each raises one
//! [`zinstall_engine::Cancel`] the running command holds, so that a
//! copy stops at its next entry and says what it left, and an install
//! removes what it made, as a failed install does. A second signal ends
//! the process at once (exit status 1).
//!
//! The handlers only store into atomics (signal-hook's `flag` module):
//! no thread waits for signals, so a traced run has no thread of this
//! module's.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use zinstall_engine::Cancel;

/// Why the run was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A signal (its number).
    Signal(i32),
    /// Standard output was closed.
    StdoutClosed,
}

impl Reason {
    /// The exit status a shell shows for a process ended by the signal
    /// (128 + its number; SIGPIPE's for a closed output).
    pub fn exit_status(self) -> u8 {
        let n = match self {
            Reason::Signal(s) => s,
            Reason::StdoutClosed => libc::SIGPIPE,
        };
        u8::try_from(128 + n).unwrap_or(1)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Signal(s) => f.write_str(match *s {
                libc::SIGINT => "interrupted (SIGINT)",
                libc::SIGTERM => "terminated (SIGTERM)",
                libc::SIGHUP => "hung up (SIGHUP)",
                _ => "stopped by a signal",
            }),
            Reason::StdoutClosed => f.write_str("standard output was closed"),
        }
    }
}

struct Watch {
    cancel: Cancel,
    /// 0: not stopped; a signal's number; [`STDOUT_CLOSED`].
    reason: Arc<AtomicUsize>,
}

/// The process's one watch: signals are the process's, so is this.
static WATCH: OnceLock<Watch> = OnceLock::new();

const STDOUT_CLOSED: usize = usize::MAX;

fn watch() -> &'static Watch {
    WATCH.get_or_init(|| Watch {
        cancel: Cancel::new(),
        reason: Arc::new(AtomicUsize::new(0)),
    })
}

/// Starts watching for SIGINT, SIGTERM and SIGHUP. Called once by a
/// command that writes, before it starts; an error is said by the
/// caller and the command runs unwatched, as before.
pub fn watch_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use signal_hook::flag;
    let w = watch();
    for s in [SIGINT, SIGTERM, SIGHUP] {
        // In this order: a signal that finds the flag already raised
        // ends the process; otherwise it names itself and raises it.
        flag::register_conditional_shutdown(s, 1, w.cancel.flag())?;
        flag::register_usize(s, Arc::clone(&w.reason), s as usize)?;
        flag::register(s, w.cancel.flag())?;
    }
    Ok(())
}

/// The flag the running command gives its run.
pub fn cancel() -> Cancel {
    watch().cancel.clone()
}

/// Standard output was closed: the run stops, as for a signal.
pub fn stdout_closed() {
    let w = watch();
    let _ = w.reason.compare_exchange(
        0,
        STDOUT_CLOSED,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    w.cancel.cancel();
}

/// Why the run was stopped, if it was.
pub fn reason() -> Option<Reason> {
    match watch().reason.load(Ordering::Relaxed) {
        0 => None,
        STDOUT_CLOSED => Some(Reason::StdoutClosed),
        s => Some(Reason::Signal(i32::try_from(s).unwrap_or(0))),
    }
}
