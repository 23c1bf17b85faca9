//! What the daemon and a job's process say to each other: the argument
//! that starts one, the descriptors it is handed, the order and its
//! reports. Both ends read these; neither end's code is needed to read them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::protocol::{NoticeInfo, WireError};

/// The first argument that makes `zinstalld` a job's process.
pub const CHILD_ARG: &str = "--job-process";

/// The descriptors a job's process is handed, in order.
pub(super) const CONTROL_FD: i32 = 3;
pub(super) const SRC_ROOT_FD: i32 = 4;
pub(super) const DST_ROOT_FD: i32 = 5;

/// The longest line either side sends: a result with its notices and up
/// to 100 errors of a few paths each.
pub(super) const MAX_LINE: usize = 4 << 20;

/// What the daemon asks of a job's process, once it is the caller.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Order {
    /// The paths as the caller named them (normalized): beneath
    /// `src_root` and `dst_root`, and shown in messages.
    pub(super) src: PathBuf,
    pub(super) dst: PathBuf,
    /// The granted prefixes the handed descriptors are, for messages and
    /// to take the paths relative to.
    pub(super) src_root: PathBuf,
    pub(super) dst_root: PathBuf,
    pub(super) merge: bool,
    pub(super) sync: bool,
    pub(super) skip_special: bool,
    pub(super) exclude: Vec<String>,
    /// The workers the process starts, of which `allowed` may work at
    /// first (its share of the budget; [`Told::Workers`] changes it).
    pub(super) threads: usize,
    pub(super) allowed: usize,
    /// The run's other knobs.
    pub(super) walkers: usize,
    pub(super) batch: usize,
    pub(super) bufsize: usize,
    pub(super) writeback: zinstall_engine::Writeback,
}

/// What a job's process says: progress while it works, then one result.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", tag = "say")]
pub(super) enum Said {
    /// Totals so far.
    Progress { entries: u64, bytes: u64 },
    /// The copy ended: what it did and what it did not keep.
    Done {
        stats: zinstall_engine::Stats,
        notices: Vec<NoticeInfo>,
    },
    /// The copy failed (or was cancelled).
    Failed { error: WireError },
}

/// What the daemon tells a job's process after its order: each a line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", tag = "tell")]
pub(super) enum Told {
    /// The workers it may run from now on: its share of the budget, as
    /// other jobs come and go.
    Workers { n: usize },
}
