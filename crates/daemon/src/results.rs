//! What the operations return, typed from the job to the wire and back:
//! a job's result ([`JobResult`], one variant per kind of job), a quick
//! operation's answer ([`Answer`]), and a job as `jobs`, `status` and
//! `cancel` describe it ([`JobInfo`]).
//!
//! On the wire each is the reply it holds, with no tag of its own: the
//! request says which it is (and a [`JobInfo`], its `op`), and the client
//! reads it by that ([`Outcome::read`]), so a reply of the wrong shape is
//! an error naming the field, never a guess between look-alikes.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::protocol::error::WireError;
use crate::protocol::{Call, UpdateReply};
use crate::replies::{
    CacheEntryReply, CopyReply, GcReply, InstallReply, ProvisionReply,
    ZonepathReply,
};

/// A job's result: what its `done` reply carries, and what `status`
/// shows once it is done.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum JobResult {
    /// A copy's.
    Copy(CopyReply),
    /// An install's.
    Install(InstallReply),
    /// An uninstall's.
    Uninstall(ZonepathReply),
    /// An update's (or a dry run's).
    Update(UpdateReply),
    /// A rollback's.
    Rollback(ZonepathReply),
    /// A provision's.
    Provision(ProvisionReply),
    /// A cache collection's.
    CacheGc(GcReply),
}

/// The daemon's version, its protocol's and its worker budget.
// Fields in the order of their names, as the wire has always had them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionReply {
    /// The protocol version ([`crate::protocol::VERSION`]).
    pub protocol: u32,
    /// The daemon's version.
    pub version: String,
    /// The pool's walkers.
    pub walkers: usize,
    /// The pool's workers.
    pub workers: usize,
}

/// A quick operation's answer: what its `ok` reply carries.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// `version`'s.
    Version(VersionReply),
    /// `jobs`'s: every job the caller may see, oldest first.
    Jobs(Vec<JobInfo>),
    /// `status`'s and `cancel`'s: the job.
    Job(Box<JobInfo>),
    /// `cache-list`'s: the cache's entries, oldest first.
    CacheList(Vec<CacheEntryReply>),
}

/// What a call returned: a quick operation's answer, or a job's result.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A quick operation's.
    Answer(Answer),
    /// A job's.
    Job(Box<JobResult>),
}

/// Where a result is read from, as the type the call returns: the
/// client's reply lines.
pub trait ReadResult {
    /// Why a result could not be read.
    type Error;
    /// The result, read as a `T`.
    fn read<T: DeserializeOwned>(&mut self) -> Result<T, Self::Error>;
}

impl Outcome {
    /// The result of `call`, read from `from` as the type that call
    /// returns.
    pub fn read<R: ReadResult>(
        call: &Call,
        from: &mut R,
    ) -> Result<Outcome, R::Error> {
        use Answer as A;
        use JobResult as J;
        let job = |r: JobResult| Outcome::Job(Box::new(r));
        Ok(match call {
            Call::Version => Outcome::Answer(A::Version(from.read()?)),
            Call::Jobs => Outcome::Answer(A::Jobs(from.read()?)),
            Call::Status(_) | Call::Cancel(_) => {
                Outcome::Answer(A::Job(Box::new(from.read()?)))
            }
            Call::CacheList => Outcome::Answer(A::CacheList(from.read()?)),
            Call::Copy(_) => job(J::Copy(from.read()?)),
            Call::Install(_) => job(J::Install(from.read()?)),
            Call::Uninstall(_) => job(J::Uninstall(from.read()?)),
            Call::Update(_) => job(J::Update(from.read()?)),
            Call::Rollback(_) => job(J::Rollback(from.read()?)),
            Call::Provision(_) => job(J::Provision(from.read()?)),
            Call::CacheGc(_) => job(J::CacheGc(from.read()?)),
        })
    }
}

/// A job as `jobs`, `status` and `cancel` describe it: the daemon sends
/// it and the client reads it through this one type, so a field one side
/// renamed is an error the client reports, not a zero it prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "JobInfoRead")]
pub struct JobInfo {
    /// Its id.
    pub job: u64,
    /// The operation (`copy`, `install`, …).
    pub op: String,
    /// Its main path.
    pub what: String,
    /// Who asked.
    pub uid: u32,
    /// The asking client's pid.
    pub pid: i32,
    /// `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// What it is doing now.
    pub phase: String,
    /// Entries done.
    pub entries: u64,
    /// Data bytes done.
    pub bytes: u64,
    /// When it was asked for, in seconds since the epoch.
    pub started: u64,
    /// Since then, or until it ended.
    pub elapsed_ms: u64,
    /// Its client went away and it goes on.
    pub detached: bool,
    /// The process it runs in, when one of its own (a granted job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<u32>,
    /// Its result, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<JobResult>,
    /// Why it failed, once failed or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

/// A job's `op` and `result` as the wire carries them, read together:
/// the operation says what its result is.
#[derive(Deserialize)]
#[serde(tag = "op", content = "result", rename_all = "kebab-case")]
enum OpResult {
    Copy(Option<CopyReply>),
    Install(Option<InstallReply>),
    Uninstall(Option<ZonepathReply>),
    Update(Option<UpdateReply>),
    Rollback(Option<ZonepathReply>),
    Provision(Option<ProvisionReply>),
    CacheGc(Option<GcReply>),
}

impl OpResult {
    /// The operation's name and its result, if any.
    fn split(self) -> (&'static str, Option<JobResult>) {
        use JobResult as J;
        match self {
            OpResult::Copy(r) => ("copy", r.map(J::Copy)),
            OpResult::Install(r) => ("install", r.map(J::Install)),
            OpResult::Uninstall(r) => ("uninstall", r.map(J::Uninstall)),
            OpResult::Update(r) => ("update", r.map(J::Update)),
            OpResult::Rollback(r) => ("rollback", r.map(J::Rollback)),
            OpResult::Provision(r) => ("provision", r.map(J::Provision)),
            OpResult::CacheGc(r) => ("cache-gc", r.map(J::CacheGc)),
        }
    }
}

/// A [`JobInfo`] as the wire carries it.
#[derive(Deserialize)]
struct JobInfoRead {
    job: u64,
    what: String,
    uid: u32,
    pid: i32,
    state: String,
    phase: String,
    entries: u64,
    bytes: u64,
    started: u64,
    elapsed_ms: u64,
    detached: bool,
    #[serde(default)]
    process: Option<u32>,
    #[serde(default)]
    error: Option<WireError>,
    #[serde(flatten)]
    op: OpResult,
}

impl From<JobInfoRead> for JobInfo {
    fn from(j: JobInfoRead) -> JobInfo {
        let (op, result) = j.op.split();
        JobInfo {
            job: j.job,
            op: op.to_string(),
            what: j.what,
            uid: j.uid,
            pid: j.pid,
            state: j.state,
            phase: j.phase,
            entries: j.entries,
            bytes: j.bytes,
            started: j.started,
            elapsed_ms: j.elapsed_ms,
            detached: j.detached,
            process: j.process,
            result,
            error: j.error,
        }
    }
}
