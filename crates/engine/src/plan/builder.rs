//! The plan itself: what one run copies, where to, and how, set by
//! chained calls. Plain data the engine reads; running it is
//! [`Plan::run`], beside it in `plan.rs`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zinstall_core::Cancel;

use super::outcome::OnError;
use super::watch::{Listener, Progress};
use crate::beneath::{Root, RootAt};
use crate::limit::WorkerLimit;
use crate::pool::{Credentials, Pool};
use crate::rules::RuleSet;
use crate::tunables::Tunables;

/// Everything one copier run needs: source, destination, knobs, rules.
///
/// ```no_run
/// use zinstall_engine::{Plan, Tunables};
///
/// let report = Plan::new("/usr/share", "/tmp/share")
///     .tunables(Tunables { copy_threads: 4, ..Tunables::default() })
///     .run()
///     .map_err(|failure| failure.to_string())?;
/// println!("{}", report.stats);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone)]
pub struct Plan {
    pub(crate) src: PathBuf,
    pub(crate) dst: PathBuf,
    pub(crate) within: Option<RootAt>,
    pub(crate) source_within: Option<RootAt>,
    pub(crate) tunables: Tunables,
    pub(crate) cross_fs: bool,
    pub(crate) skip_special: bool,
    pub(crate) merge: bool,
    pub(crate) layered: bool,
    pub(crate) sync: bool,
    pub(crate) durable: bool,
    pub(crate) preserve_owner: Option<bool>,
    pub(crate) rules: Option<Arc<RuleSet>>,
    pub(crate) rule_base: PathBuf,
    pub(crate) progress: Option<Arc<dyn Progress>>,
    pub(crate) record: bool,
    pub(crate) cancel: Option<Cancel>,
    pub(crate) walk_only: bool,
    pub(crate) pool: Option<Pool>,
    pub(crate) worker_limit: Option<Arc<WorkerLimit>>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) listener: Option<Arc<dyn Listener>>,
    pub(crate) dry_run: bool,
    pub(crate) dry_run_empty: bool,
    pub(crate) on_error: OnError,
}

impl Plan {
    /// Copy `src` (a directory, file, symlink or special file) to `dst`.
    ///
    /// A directory source makes `dst` a copy of it: `dst` is created if
    /// missing and must otherwise be an empty directory (or see
    /// [`merge`](Plan::merge)). A non-directory source is copied to
    /// `dst`, or into it when `dst` is an existing directory.
    pub fn new(src: impl Into<PathBuf>, dst: impl Into<PathBuf>) -> Self {
        Plan {
            src: src.into(),
            dst: dst.into(),
            within: None,
            source_within: None,
            tunables: Tunables::default(),
            cross_fs: false,
            skip_special: false,
            merge: false,
            layered: false,
            sync: false,
            durable: false,
            preserve_owner: None,
            rules: None,
            rule_base: PathBuf::new(),
            progress: None,
            record: false,
            cancel: None,
            walk_only: false,
            pool: None,
            worker_limit: None,
            credentials: None,
            listener: None,
            dry_run: false,
            dry_run_empty: false,
            on_error: OnError::Stop,
        }
    }

    /// Write only beneath the directory `root`, of which the destination
    /// is a path: every directory from `root` down is opened from its
    /// parent's descriptor without following a symlink, and made (0755)
    /// when missing, so nothing inside `root` (a symlink an image planted,
    /// a directory swapped meanwhile) can take the copy elsewhere. A
    /// symlink met on the way is an
    /// [`Error::Beneath`](crate::Error::Beneath) naming it; a
    /// symlink at the destination itself is replaced (merging), never
    /// written through. `root` itself must not be a symlink.
    pub fn within(mut self, root: impl Into<PathBuf>) -> Self {
        self.within = Some(RootAt::Path(root.into()));
        self
    }

    /// As [`within`](Plan::within), with the root already open: the run
    /// writes beneath this descriptor and never opens the root by its
    /// path, so a root whose path could be changed meanwhile (its parent
    /// is someone else's), or one a process was handed as a descriptor
    /// ([`Root::from_fd`]), stays the directory that was opened. The
    /// destination's path must still start with the root's
    /// [path](Root::path), which says where beneath it to write.
    pub fn within_root(mut self, root: Root) -> Self {
        self.within = Some(RootAt::Open(root));
        self
    }

    /// Read only a source beneath the directory `root`: when the run
    /// starts, every directory from `root` down to the source's parent is
    /// opened from its parent's descriptor without following a symlink
    /// (as the run's identity, see [`acting_as`](Plan::acting_as)); a
    /// symlink on the way is an
    /// [`Error::Beneath`](crate::Error::Beneath) naming it. The source
    /// is then read only through that parent's descriptor and its own
    /// name, never by path again, so a directory swapped for a symlink
    /// after that cannot take the read elsewhere. The source itself may
    /// be a symlink: it is copied as one, never followed (a trailing `/`
    /// does not follow it either). A service uses this (with
    /// [`within`](Plan::within)) to hold a caller to the directories it
    /// was granted.
    pub fn source_within(mut self, root: impl Into<PathBuf>) -> Self {
        self.source_within = Some(RootAt::Path(root.into()));
        self
    }

    /// As [`source_within`](Plan::source_within), with the root already
    /// open: the source is looked up beneath this descriptor and the
    /// root is never opened by its path, which someone able to rename
    /// in its parent could point elsewhere between the opening and the
    /// run. The source's path must start with the root's
    /// [path](Root::path).
    pub fn source_within_root(mut self, root: Root) -> Self {
        self.source_within = Some(RootAt::Open(root));
        self
    }

    /// Worker count, batch size and buffer size.
    pub fn tunables(mut self, t: Tunables) -> Self {
        self.tunables = t;
        self
    }

    /// Descend into directories on other filesystems (default: no; a
    /// mount point is copied as an empty directory, like `cp -x`, and
    /// named in a [`NoticeKind::MountPoint`](crate::NoticeKind) notice).
    pub fn cross_fs(mut self, yes: bool) -> Self {
        self.cross_fs = yes;
        self
    }

    /// Skip special files that cannot be recreated for lack of privilege,
    /// with a notice, instead of failing (default: fail).
    pub fn skip_special(mut self, yes: bool) -> Self {
        self.skip_special = yes;
        self
    }

    /// Copy into a non-empty destination: entries that differ (type, size
    /// or modification time) are replaced atomically (written beside and
    /// renamed over); entries that match are left alone. A directory never
    /// replaces a non-directory or the reverse; that is an error.
    pub fn merge(mut self, yes: bool) -> Self {
        self.merge = yes;
        self
    }

    /// Merge as an image layer goes onto the layers below it: every entry
    /// is written even where a like one is there (a layer may change only
    /// a file's mode, or its bytes but not its size and time), and an
    /// entry of another type in the way is removed first (a directory
    /// with everything in it, a symlink itself), never followed. Implies
    /// [`merge`](Plan::merge).
    pub fn layered(mut self, yes: bool) -> Self {
        self.layered = yes;
        self.merge |= yes;
        self
    }

    /// The caller flushes the destination's filesystem after the run (an
    /// install of several steps flushes once, at its end): with
    /// `COPY_WRITEBACK=sync` ([`crate::Writeback`]) each file's data
    /// starts back to the disk as soon as it is written, as when the run
    /// syncs itself.
    pub fn durable(mut self, yes: bool) -> Self {
        self.durable = yes;
        self
    }

    /// Flush the destination filesystem once at the end (`syncfs(2)`),
    /// instead of syncing file by file.
    pub fn sync(mut self, yes: bool) -> Self {
        self.sync = yes;
        self
    }

    /// Whether to set owners and groups. Default: when running as root.
    /// Not running as root, owners that cannot be set are reported once
    /// as a notice rather than as errors.
    pub fn preserve_owner(mut self, yes: bool) -> Self {
        self.preserve_owner = Some(yes);
        self
    }

    /// Link and skip rules, matched against `rule_base` joined with each
    /// path relative to the source (see [`crate::rules`]).
    pub fn rules(mut self, rules: Arc<RuleSet>, rule_base: &Path) -> Self {
        self.rules = Some(rules);
        self.rule_base = rule_base.to_path_buf();
        self
    }

    /// Where to report progress.
    pub fn progress(mut self, p: Arc<dyn Progress>) -> Self {
        self.progress = Some(p);
        self
    }

    /// Record each thread's states for a statemap
    /// ([`Report::recording`](crate::Report::recording)).
    pub fn record_states(mut self, yes: bool) -> Self {
        self.record = yes;
        self
    }

    /// Stop when `cancel` is raised: the run fails with
    /// [`Error::Cancelled`](crate::Error::Cancelled) at its next entry.
    pub fn cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// A measurement aid, not a copy: the walkers do all their work (read
    /// every directory, make and open each destination directory, batch
    /// jobs) but discard each batch they fill instead of queuing it for
    /// workers, so no file, symlink, hard link or special file is
    /// written, and no worker runs. Directories are left as made (0700),
    /// without their metadata: in a copy that is the workers' work, done
    /// as each directory's contents finish. The [`Report`](crate::Report) counts each discarded job
    /// as the entry it stands for (a file's later names as files: the
    /// walkers do not stat files), with no bytes. What the walkers alone
    /// can sustain is read from the run's time; `bench walk` sets it
    /// beside one worker's copy rate.
    pub fn walk_only(mut self, yes: bool) -> Self {
        self.walk_only = yes;
        self
    }

    /// Do the jobs on `pool`'s workers, shared with other runs, instead
    /// of starting `copy_threads` workers for this run (the walk stays in
    /// the calling thread). Ignored by [`walk_only`](Plan::walk_only).
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Of the run's own workers ([`Tunables::copy_threads`]), only as
    /// many as `limit` says copy at once, however it changes while the
    /// run goes on (a service sharing one budget among many runs). Not
    /// for a run on a [`Pool`], whose workers are shared already.
    pub fn worker_limit(mut self, limit: Arc<WorkerLimit>) -> Self {
        self.worker_limit = Some(limit);
        self
    }

    /// Read and write as `who` (see [`Credentials`]): every open, creation
    /// and change is checked against that identity, owners are not set
    /// unless [`preserve_owner`](Plan::preserve_owner) asks, and a
    /// platform without per-thread identities fails the run.
    pub fn acting_as(mut self, who: Credentials) -> Self {
        self.credentials = Some(who);
        self
    }

    /// Tell `listener` of every entry written.
    pub fn listener(mut self, listener: Arc<dyn Listener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Write nothing: run the copy itself (its walk, rules, mount points,
    /// workers, every check and refusal about the source and the
    /// destination) with each write counted instead of made, tell the
    /// [`Listener`] of each entry that would be written, and report what
    /// would be done. Each source file is opened, as the copy opens it;
    /// the destination is read through the descriptors the copy opens
    /// (beneath its root, no symlink followed): merging, to decide each
    /// entry as the copy does (unchanged, replaced, in the way). A
    /// directory the copy would make is not there to open: the walk
    /// goes on below it taking it as empty, as the copy finds it when it
    /// has just made it (and so below a directory a layer would make in
    /// place of a file). The [`Report`](crate::Report)'s byte count is
    /// the data that would be copied; nothing is opened for writing, no
    /// directory is made, no metadata is set, nothing is synced.
    pub fn dry_run(mut self, yes: bool) -> Self {
        self.dry_run = yes;
        self
    }

    /// In a dry run, take the destination as missing, whatever is there
    /// now: what a caller that removes it before the real run will see
    /// (an install that cleans up an interrupted one first).
    pub fn dry_run_as_if_empty(mut self, yes: bool) -> Self {
        self.dry_run_empty = yes;
        self
    }

    /// Stop at the first failed entry (the default) or go on past it
    /// (see [`OnError`]).
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.on_error = policy;
        self
    }

    /// The source.
    pub fn source(&self) -> &Path {
        &self.src
    }

    /// The destination.
    pub fn destination(&self) -> &Path {
        &self.dst
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("src", &self.src)
            .field("dst", &self.dst)
            .field("tunables", &self.tunables)
            .field("cross_fs", &self.cross_fs)
            .field("skip_special", &self.skip_special)
            .field("merge", &self.merge)
            .field("layered", &self.layered)
            .field("sync", &self.sync)
            .field("durable", &self.durable)
            .field("rules", &self.rules.is_some())
            .field("walk_only", &self.walk_only)
            .field("dry_run", &self.dry_run)
            .field("on_error", &self.on_error)
            .field("pool", &self.pool)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}
