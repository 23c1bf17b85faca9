//! A command run inside a directory tree as its `/`: what is asked and
//! how it ended. Linux makes it (`in_root_linux.rs`); elsewhere the run
//! is refused as unsupported.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;

/// One command to run inside `root`.
pub struct InRoot<'a> {
    /// The directory that is the command's `/`.
    pub root: &'a Path,
    /// The program (absolute, in `root`) and its arguments.
    pub argv: &'a [&'a OsStr],
    /// A script the program finds as its descriptor 3 (`/dev/fd/3`), held
    /// in memory: nothing of it is written into the tree.
    pub script: Option<&'a [u8]>,
    /// Where the command's standard output and error go; its standard
    /// input is `/dev/null`.
    pub output: BorrowedFd<'a>,
    /// How long it may run before it and every process it started are
    /// killed.
    pub timeout: Duration,
    /// Asked while it runs (at least every 100 ms): true kills it and
    /// every process it started, as the timeout does. A job cancelled
    /// through zinstalld or a signal to zinstall stops its command.
    pub cancelled: Option<&'a (dyn Fn() -> bool + Sync)>,
}

/// How a command run in a root ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// It ran past its timeout and was killed, with every process of its
    /// PID namespace.
    TimedOut,
    /// The run was cancelled and it was killed, with every process of
    /// its PID namespace.
    Cancelled,
}

impl RunEnd {
    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        *self == RunEnd::Exited(0)
    }
}

impl fmt::Display for RunEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunEnd::Exited(c) => write!(f, "exited with status {c}"),
            RunEnd::Signalled(s) => write!(f, "was killed by signal {s}"),
            RunEnd::TimedOut => {
                write!(f, "ran past its timeout and was killed")
            }
            RunEnd::Cancelled => {
                write!(f, "was killed: the run was cancelled")
            }
        }
    }
}

/// Why a command could not be started in a root: the step that failed
/// (`mount /proc`, `pivot_root`, `exec`) and the system's error.
#[derive(Debug)]
pub struct InRootError {
    /// The step, as text.
    pub step: &'static str,
    /// The system's error.
    pub error: io::Error,
}

impl fmt::Display for InRootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

/// The system's error is in the message, so no `source()`
/// (CONTRIBUTING.md: a cause is said once).
impl std::error::Error for InRootError {}
