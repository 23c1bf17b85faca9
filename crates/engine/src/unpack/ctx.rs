//! The state one unpack shares between its reader and its workers
//! ([`Ctx`]), what the reader's loop hands back, and the few things every
//! room asks of the state: stopping, refusing, naming a path, opening a
//! directory beneath the root.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use zinstall_archive::tar;
use zinstall_archive::{ArchiveMeta, ArchiveRefusal};

use super::budget::{Gate, Spare};
use super::job::Meta;
use super::members::quirk_notice;
use super::memory::ObjectsTo;
use super::options::{Change, UnpackOptions};
use super::paths::{NodeId, PathTree};
use crate::beneath::{Chain, WalkFail};
use crate::error::{Error, Met, Result};
use crate::stats::{NoticeBoard, NoticeKind, Stats};
use crate::writeback::Flusher;

/// What the reader and the workers of one unpack share.
pub(super) struct Ctx<'a> {
    /// The archive, as errors, notices and probes name it.
    pub(super) archive: &'a Path,
    /// The root's path as given: where the paths in messages start;
    /// nothing is opened by it (writes go through `root_fd`).
    pub(super) root: &'a Path,
    /// What the caller asked.
    pub(super) opts: &'a UnpackOptions,
    /// Running as root: an owner or an xattr that cannot be set is then
    /// an error, not a notice.
    pub(super) is_root: bool,
    /// Whether owners are set from the archive (the option, else when
    /// root).
    pub(super) preserve_owner: bool,
    /// Raised at the first failure, so the reader and the workers stop
    /// at their next member or job.
    pub(super) quit: AtomicBool,
    /// The first failure: the unpack's error (later ones follow from it).
    pub(super) error: Mutex<Option<Error>>,
    /// What could not be kept, from the reader and the workers alike.
    pub(super) notices: NoticeBoard,
    /// Bytes of in-memory bodies in flight, bounded by `BUDGET`: the
    /// reader waits on it before it reads another body.
    pub(super) budget: Gate,
    /// Body buffers the workers gave back, to read the next bodies into.
    pub(super) spare: Spare,
    /// Files queued and not yet written: a barrier waits for none.
    pub(super) pending: Gate,
    /// Counts temporary names, so that each is unique in the unpack (an
    /// entry replacing another is made under one, then renamed).
    pub(super) temp: AtomicU64,
    /// Bytes of file bodies written, by whichever thread wrote them.
    pub(super) bytes_written: AtomicU64,
    /// Files written, likewise.
    pub(super) files: AtomicU64,
    /// The plain tar file bodies are copied from, when seekable.
    pub(super) body_source: Option<File>,
    /// Flushes the root's filesystem as the unpack goes, when it will be
    /// flushed at its end ([`crate::Writeback`]).
    pub(super) flusher: Option<Flusher>,
    /// In an unpack into memory: where the workers store bodies.
    pub(super) objects: Option<ObjectsTo<'a>>,
}

#[derive(Default)]
pub(super) struct ReadOutcome {
    pub(super) stats: Stats,
    pub(super) meta: Option<ArchiveMeta>,
    pub(super) dirs: DirList,
    pub(super) changes: Vec<Change>,
}

/// The directory entries whose metadata is applied at the end, each by
/// its node in a tree of their paths: a constant per directory at any
/// depth, where a list of full paths grows with the square of it.
pub(super) struct DirList {
    pub(super) tree: PathTree,
    pub(super) list: Vec<(NodeId, Meta)>,
}

impl Default for DirList {
    fn default() -> Self {
        DirList {
            tree: PathTree::new(),
            list: Vec::new(),
        }
    }
}

impl DirList {
    pub(super) fn push(&mut self, parts: &[CString], meta: Meta) {
        let id = self.tree.intern(parts);
        self.list.push((id, meta));
    }
}

impl<'a> Ctx<'a> {
    /// The state of an unpack of `archive` into `root` as `opts` ask,
    /// with no body source and no flusher.
    pub(super) fn new(
        archive: &'a Path,
        root: &'a Path,
        opts: &'a UnpackOptions,
    ) -> Ctx<'a> {
        let is_root = crate::sys::posix::euid() == 0;
        Ctx {
            archive,
            root,
            opts,
            is_root,
            preserve_owner: opts.preserve_owner.unwrap_or(is_root),
            quit: AtomicBool::new(false),
            error: Mutex::new(None),
            notices: NoticeBoard::default(),
            budget: Gate::default(),
            spare: Spare::default(),
            pending: Gate::default(),
            temp: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            files: AtomicU64::new(0),
            body_source: None,
            flusher: None,
            objects: None,
        }
    }

    pub(super) fn fail(&self, e: Error) {
        self.quit.store(true, Ordering::Relaxed);
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
    }

    pub(super) fn stopped(&self) -> bool {
        self.quit.load(Ordering::Relaxed) || self.cancelled()
    }

    pub(super) fn cancelled(&self) -> bool {
        self.opts.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    pub(super) fn refuse(&self, entry: &str, reason: ArchiveRefusal) -> Error {
        Error::Archive {
            archive: self.archive.to_path_buf(),
            entry: entry.to_string(),
            reason,
        }
    }

    /// A member an unpack into memory leaves to one into a tree.
    pub(super) fn unmodeled(
        &self,
        entry: &str,
        why: impl Into<String>,
    ) -> Error {
        Error::Unmodeled {
            archive: self.archive.to_path_buf(),
            entry: entry.to_string(),
            why: why.into(),
        }
    }

    pub(super) fn shown(&self, parts: &[CString]) -> PathBuf {
        let mut p = self.root.to_path_buf();
        for c in parts {
            p.push(std::ffi::OsStr::from_bytes_compat(c.as_bytes()));
        }
        p
    }

    pub(super) fn notice(&self, kind: NoticeKind, path: &Path) {
        self.notices.add(kind, path);
    }

    /// The reader's quirks since the last call, each a notice.
    pub(super) fn reader_quirks<R: Read>(&self, rd: &mut tar::Reader<R>) {
        for q in rd.take_quirks() {
            let (kind, path) = quirk_notice(self.archive, q);
            self.notice(kind, &path);
        }
    }

    pub(super) fn temp_name(&self) -> CString {
        let n = self.temp.fetch_add(1, Ordering::Relaxed);
        CString::new(format!(".zi{:x}.{n:x}", std::process::id()))
            .unwrap_or_default()
    }

    /// Opens the directory `parts` beneath the root through `chain`,
    /// never through a symlink; missing directories are made (0755) when
    /// `create`.
    pub(super) fn open_dir(
        &self,
        chain: &mut Chain,
        parts: &[CString],
        entry: &str,
        create: bool,
    ) -> Result<Arc<OwnedFd>> {
        chain
            .open(parts, create.then_some(0o755))
            .map_err(|f| match f {
                WalkFail::Met(_, Met::Symlink) => {
                    self.refuse(entry, ArchiveRefusal::ThroughSymlink)
                }
                WalkFail::Met(_, Met::NotADirectory) => {
                    self.refuse(entry, ArchiveRefusal::FileOverDirectory)
                }
                f => f.into_error(self.root, parts, &self.shown(parts)),
            })
    }
}

/// `OsStr` from bytes without the unix-only import at each call site.
trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &Self;
}

impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &Self {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}
