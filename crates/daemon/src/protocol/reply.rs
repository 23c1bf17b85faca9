//! The reply lines ([`Reply`]) and progress.

use serde::{Deserialize, Serialize};

use super::bounds::VERSION;
use super::error::{ErrorKind, WireError};
use crate::results::{Answer, JobResult};

/// Progress of a job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressInfo {
    /// What the job is doing now (`queued`, `copy`, `unpack`, `provision`,
    /// …).
    pub phase: String,
    /// Entries done.
    pub entries: u64,
    /// Data bytes done.
    pub bytes: u64,
    /// Bytes per second over the last interval.
    pub rate: u64,
    /// Since the job started.
    pub elapsed_ms: u64,
}

/// One reply line. The daemon sends a quick operation's [`Answer`] and a
/// job's [`JobResult`]; a client reads them as the types its call returns
/// (`A` and `R`), as [`crate::results::Outcome::read`] says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply<A = Answer, R = JobResult> {
    /// A quick operation's result.
    Ok {
        /// The protocol version.
        v: u32,
        /// What it returns.
        result: A,
    },
    /// A job was started.
    Accepted {
        /// The protocol version.
        v: u32,
        /// Its id.
        job: u64,
    },
    /// A job's progress.
    Progress {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// Where it is.
        #[serde(flatten)]
        progress: ProgressInfo,
    },
    /// Something a job reports (an install's steps, a guest made).
    Event {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// The text the CLI prints for it.
        message: String,
    },
    /// A job's result.
    Done {
        /// The protocol version.
        v: u32,
        /// The job.
        job: u64,
        /// What it returns.
        result: R,
    },
    /// A refusal, or a job's failure.
    Error {
        /// The protocol version.
        v: u32,
        /// The job, if one was started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        /// What went wrong.
        error: WireError,
    },
}

impl<A: Serialize, R: Serialize> Reply<A, R> {
    /// The reply as one line (without its newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| unwritable(&e))
    }
}

/// The line sent in place of a reply that could not be written: an
/// internal error saying why.
fn unwritable(e: &serde_json::Error) -> String {
    let reply =
        Reply::error(WireError::new(ErrorKind::Internal, e.to_string()));
    // Strings alone: an error reply always becomes JSON.
    serde_json::to_string(&reply).unwrap_or_default()
}

impl Reply {
    /// An error reply not tied to a job.
    pub fn error(error: WireError) -> Reply {
        Reply::Error {
            v: VERSION,
            job: None,
            error,
        }
    }
}
