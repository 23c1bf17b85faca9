//! A failure as the wire carries it ([`WireError`]) and its kind: the
//! daemon's parts and its clients both read these.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::bounds::{
    MAX_ECHO, MAX_ERROR_TEXT, MAX_ERRORS, MAX_MESSAGE, clip, clip_middle,
    clip_path,
};

/// What kind of failure a [`WireError`] is: what a client decides on
/// (retry later, ask for a grant, report a bug). On the wire, the
/// kebab-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The request was malformed, or named a path that is not absolute
    /// and clean.
    Request,
    /// The caller is not granted the call.
    Denied,
    /// The daemon has no room for the connection or the job now.
    Busy,
    /// A system call failed (`op` and `path` say which).
    Io,
    /// The engine refused an input (a hostile archive, an unsafe path).
    Refused,
    /// The job was cancelled.
    Cancelled,
    /// The job's process made no progress for the configured time
    /// (`job_stall_secs`) and was killed.
    Stalled,
    /// An install, uninstall, update or rollback failed.
    Install,
    /// A provision failed.
    Provision,
    /// No such job.
    NotFound,
    /// The daemon failed in a way that is its own fault.
    Internal,
    /// A kind this client does not know (a newer daemon's).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The name the wire carries.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Request => "request",
            ErrorKind::Denied => "denied",
            ErrorKind::Busy => "busy",
            ErrorKind::Io => "io",
            ErrorKind::Refused => "refused",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Stalled => "stalled",
            ErrorKind::Install => "install",
            ErrorKind::Provision => "provision",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Internal => "internal",
            ErrorKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure as the wire carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The operation that failed, when a system call did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The path it failed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The whole message, as the CLI prints it.
    pub message: String,
    /// The errors of a copy that met several, first first: at most
    /// [`MAX_ERRORS`], each at most [`MAX_ERROR_TEXT`] bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Errors beyond those listed, counted only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_errors: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WireError {
    /// An error with only a kind and a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        WireError {
            kind,
            op: None,
            path: None,
            message: message.into(),
            errors: Vec::new(),
            more_errors: 0,
        }
    }

    /// From the engine's error.
    pub fn from_copier(e: &zinstall_engine::Error) -> Self {
        let kind = match e {
            zinstall_engine::Error::Cancelled { .. } => ErrorKind::Cancelled,
            zinstall_engine::Error::Io { .. } => ErrorKind::Io,
            _ => ErrorKind::Refused,
        };
        WireError {
            kind,
            op: e.op().map(|o| o.as_str().to_string()),
            path: Some(e.path().to_path_buf()),
            message: e.to_string(),
            errors: Vec::new(),
            more_errors: 0,
        }
    }

    /// From a copy that stopped on errors.
    pub fn from_failure(f: &zinstall_engine::Failure) -> Self {
        let mut w = f
            .first()
            .map(Self::from_copier)
            .unwrap_or_else(|| Self::new(ErrorKind::Internal, "copy failed"));
        w.message = f.to_string();
        w.errors = f.errors.iter().map(|e| e.to_string()).collect();
        w.more_errors = f.more_errors;
        w.bounded()
    }

    /// The error cut to what the daemon keeps, sends and logs: at most
    /// [`MAX_ERRORS`] errors of at most [`MAX_ERROR_TEXT`] bytes each
    /// (the rest counted), a message of at most [`MAX_MESSAGE`] bytes,
    /// and a path of at most [`MAX_ECHO`](super::MAX_ECHO). Whatever
    /// made it (a job's process, a hostile tree's long names), a stored
    /// failure costs a bounded amount of memory and of every reply.
    pub fn bounded(mut self) -> Self {
        if self.errors.len() > MAX_ERRORS {
            self.more_errors += (self.errors.len() - MAX_ERRORS) as u64;
            self.errors.truncate(MAX_ERRORS);
        }
        for e in &mut self.errors {
            if e.len() > MAX_ERROR_TEXT {
                *e = clip_middle(e, MAX_ERROR_TEXT);
            }
        }
        if self.message.len() > MAX_MESSAGE {
            self.message = clip_middle(&self.message, MAX_MESSAGE);
        }
        if let Some(p) = &self.path {
            self.path = Some(clip_path(p));
        }
        if let Some(op) = &self.op {
            self.op = Some(clip(op, MAX_ECHO));
        }
        self
    }

    /// The error in a line or two, for `jobs` and the log: its first
    /// line (at most [`MAX_ECHO`](super::MAX_ECHO) bytes) and how many
    /// more errors there were; the list itself left to `status`.
    pub fn summary(&self) -> Self {
        let first = self.message.lines().next().unwrap_or("");
        let more =
            (self.errors.len() as u64 + self.more_errors).saturating_sub(1);
        let mut message = clip_middle(first, 2 * MAX_ECHO);
        if more > 0 {
            message.push_str(&format!(" (and {more} more errors)"));
        }
        WireError {
            kind: self.kind,
            op: self.op.clone(),
            path: self.path.clone(),
            message,
            errors: Vec::new(),
            more_errors: 0,
        }
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WireError {}
