//! The wire protocol: JSON lines over a Unix stream socket.
//!
//! A client writes one request per line and reads reply lines. A request:
//!
//! ```json
//! {"v":1,"op":"copy","args":{"src":"/srv/a","dst":"/srv/b"},"detach":false}
//! ```
//!
//! `v` is the protocol version ([`VERSION`]); a daemon refuses others.
//! `op` names the operation ([`Call`]), `args` its arguments (unknown
//! fields are refused, so a typo never goes unnoticed), `detach` keeps a
//! long job running when its client goes away. A line is at most
//! [`MAX_LINE`] bytes and nests at most [`MAX_DEPTH`] arrays and objects
//! deep; it is read straight into the typed request, so a line that is
//! not one is refused at its first wrong byte, field or type, without
//! anything being built from the rest. Client text an error quotes (an
//! operation's name, a path, a field) is cut at [`MAX_ECHO`] bytes.
//!
//! Replies ([`Reply`]), one per line, each with `v` and `reply`: a quick
//! operation gets `ok` (with its `result`) or `error`. A long one (copy,
//! install, uninstall, provision, cache gc) gets `accepted` with the job's
//! id at once, then `progress` (about four a second) and `event` lines,
//! and ends with `done` (its `result`) or `error`. An error carries
//! `kind`, and where there is one the `op` and `path` that failed.
//! Requests on one connection are served in turn.

mod args;
mod bounds;
pub(crate) mod error;
mod parse;
mod path;
mod reply;
mod request;
#[cfg(test)]
mod test;
mod update_reply;

pub use self::args::{
    CopyArgs, GcArgs, InstallArgs, JobRef, MAX_EXCLUDES, ProvisionArgs,
    RollbackArgs, RootFormat, UninstallArgs, UpdateArgs,
};
pub use self::bounds::{
    MAX_DEPTH, MAX_ECHO, MAX_ERROR_TEXT, MAX_ERRORS, MAX_JOBS_REPLY, MAX_LINE,
    MAX_LOG_LINE, MAX_MESSAGE, VERSION, clip, clip_middle, clip_path,
};
pub use self::error::{ErrorKind, WireError};
pub use self::parse::BadRequest;
pub use self::path::{CleanPath, ImageArg, UncleanPath, is_reference};
pub use self::reply::{ProgressInfo, Reply};
pub use self::request::{Call, Request};
pub use self::update_reply::{
    UpdateChange, UpdateCounts, UpdateKept, UpdateReply,
};
pub use crate::replies::{
    CacheEntryReply, ComposefsInstall, CopyReply, GcEntryDecision, GcReply,
    GuestInfo, InstallReply, NoticeInfo, ProvisionReply, ReplacedInfo,
    StoreGcInfo, StoreImageDecision, ZonepathReply,
};
pub use crate::results::{
    Answer, JobInfo, JobResult, Outcome, ReadResult, VersionReply,
};
