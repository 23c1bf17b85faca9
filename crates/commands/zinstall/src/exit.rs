//! How a command ends: the one exit status type of `zinstall` and
//! `zinstalld` (the brand hook speaks zoneadm's `ZONE_SUBPROC_*` instead,
//! see [`crate::hook`]).

use std::process::ExitCode;

use crate::interrupt::Reason;

/// A command's outcome, as its exit status tells a shell or a script:
/// zinstall(8) and zinstalld(8) list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Ok,
    /// 1: the work failed, or a comparison found a difference.
    Failed,
    /// 2: the command line or a configuration was wrong; nothing was
    /// done.
    Usage,
    /// 128 + the signal's number, as a shell reports a process a signal
    /// ended: stopped by a signal, or by standard output closing
    /// (`SIGPIPE`), after undoing what was half done.
    Interrupted(Reason),
}

impl Exit {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Interrupted(why) => why.exit_status(),
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn codes_are_what_the_manuals_say() {
        assert_eq!(Exit::Ok.code(), 0);
        assert_eq!(Exit::Failed.code(), 1);
        assert_eq!(Exit::Usage.code(), 2);
        let int = Exit::Interrupted(Reason::Signal(libc::SIGINT));
        assert_eq!(int.code(), 130);
        assert_eq!(Exit::Interrupted(Reason::StdoutClosed).code(), 141);
    }
}
