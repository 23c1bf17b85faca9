//! The zinstall copier: a walk that hands batched jobs to a worker pool.
//!
//! ```text
//! source ──W walkers──▶ jobs ──batch──▶ bounded channel ──▶ N workers ──▶ dest
//! (dir tree,           (file, symlink,  (COPY_BATCH)       (COPY_THREADS,
//!  COPY_WALKERS         redirect,                           COPY_BUFSIZE,
//!  threads stealing     special)                            reflink/copy_file_range)
//!  directories)
//! ```
//!
//! One run is one [`Plan`] (source, destination, [`Tunables`], rules) and
//! one outcome: a [`Report`] (stats, notices, optional state recording) or
//! a [`Failure`] (every error met, each naming its operation and path).
//! The copy is faithful: types, modes with special bits, owners (as root),
//! nanosecond times, extended attributes (file capabilities and ACLs
//! included), hard links, holes and device numbers.
//!
//! The library has no CLI, no logger, no fixed paths and no process-global
//! state: every path (the defaults file included) and every knob comes
//! from the caller. The engine's design is described in the `engine`
//! module's source; the platform seam is `sys` (one module per platform).
//!
//! The API:
//! * [`Plan`] → [`Plan::run`] → [`Report`] or [`Failure`]: one copy;
//!   [`RuleSet`] (link, copy, skip by glob), [`Progress`] to watch it.
//! * [`unpack`]: a tar layer (plain, gzip, zstd, xz, bzip2, lz4) applied beneath a
//!   root by the same kind of writer.
//! * [`oci`]: OCI images (layout directories, oci-archives): layers
//!   checked against their digests and applied with their whiteouts.
//! * [`beneath`]: the writer's base: a [`beneath::Root`] opened without
//!   following links, directories opened beneath it, `remove_tree`.
//! * [`trusted`]: a directory a privileged process was given by path
//!   (a zonepath), opened only if nobody else could have redirected it.
//! * [`Pool`]: one worker budget shared by many runs (a service's);
//!   [`Credentials`]: a run that reads and writes as its caller would.
//! * [`Tunables`] and [`DefaultsFile`]: the knobs and `/etc/default/zinstall`.
//! * [`Stats`], [`Notice`]; [`trace`] (the recorder), [`probes`] (USDT).
//! * [`Error`]: every error names its operation ([`Op`]) and path.
//!
//! ```no_run
//! use zinstall_engine::{Plan, Tunables};
//!
//! let report = Plan::new("/usr/share", "/var/tmp/share")
//!     .tunables(Tunables { copy_threads: 4, ..Tunables::default() })
//!     .run()?;
//! println!("{} files, {} bytes", report.stats.files, report.stats.bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
// System calls are made in `zinstall-sys`, the workspace's one home for
// `unsafe` blocks to review. Deny rather than forbid: the USDT probe
// macros expand to `unsafe` blocks, allowed in `probes` alone.
#![deny(unsafe_code)]

pub mod beneath;
pub mod contents;
pub mod defaults;
pub mod descriptors;
mod engine;
pub mod error;
pub mod fsutil;
mod limit;
pub mod oci;
pub mod plan;
mod pool;
pub mod probes;
pub mod rules;
pub mod stats;
// System calls, made in `zinstall-sys` (the workspace's one place with
// `unsafe`) and re-exported.
mod sys;
pub mod trace;
pub mod trusted;
pub mod tunables;
pub mod unpack;
mod writeback;

pub use defaults::DefaultsFile;
pub use descriptors::Descriptors;
pub use error::{Error, Met, Op, Refusal, Result, Syntax};
pub use limit::WorkerLimit;
pub use plan::{
    EntryKind, Failure, Listener, Metered, OnError, Plan, Progress, Report,
};
pub use pool::{Credentials, Pool};
pub use rules::{Action, Rule, RuleSet};
pub use stats::{Notice, NoticeKind, Stats, WalkerStats, WorkerStats};
pub use trace::{Recording, ThreadState};
pub use tunables::{Tunables, Writeback};
pub use zinstall_archive::ArchiveRefusal;
// Shared with the registry client, the install library and the daemon,
// which need not depend on the engine for them.
pub use zinstall_core::Cancel;
