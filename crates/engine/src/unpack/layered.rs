//! OCI layers in the unpacker: whiteouts, type changes between layers,
//! and the times of directories a layer changes without an entry.
//!
//! An OCI layer is applied onto what the layers below it left. Its
//! members may be *whiteouts*: `DIR/.wh.NAME` removes `DIR/NAME`, a file
//! or a whole tree, and `DIR/.wh..wh..opq` removes everything in `DIR`.
//! Either applies only to what lower layers left: what this same layer
//! adds stays, whatever the order of its members (a tar's order is the
//! tool's), as containerd and umoci apply them. So the unpacker keeps the
//! set of paths this layer made, with their ancestors, and a removal
//! skips them, descending into a kept directory to remove what lower
//! layers put beside them. The whiteout files themselves are never
//! written.
//!
//! Every removal goes through the same descriptors as every write: the
//! directory is opened beneath the root without following a symlink (a
//! symlink on the way is refused, naming the member), and the tree is
//! removed with `*at` calls that never follow one. A removal that must
//! keep this layer's entries first waits for every file queued to the
//! workers, so nothing is removed from under a worker.
//!
//! Between layers an entry may change type: a directory of a lower layer
//! becomes a file, a symlink becomes a directory. What a lower layer left
//! is replaced (the tree removed beneath the root); within one layer the
//! usual refusals stand.
//!
//! A directory this layer adds to or removes from, but has no entry for,
//! keeps its access and modification times, as umoci restores them: its
//! times are taken before the first change and put back at the end.
//!
//! Recording instead of applying ([`Whiteouts::Record`]) is for a layer
//! unpacked alone into an empty directory (the provision cache): the
//! whiteouts, the directories made only to hold entries, and hard links
//! to files of lower layers are returned as [`Change`]s to apply when the
//! layer's tree is later copied onto a root.

use std::ffi::{CString, OsStr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::names::Name;

use super::ctx::Ctx;
use super::options::{Change, Whiteouts};
use super::paths::{NodeId, PathTree};
use crate::beneath::{self, Chain, WalkFail};
use crate::error::{Error, Met, Op, Result};
use crate::sys::posix::{Times, at};

/// What a member is, to the layered unpack.
pub(crate) enum Class {
    /// An ordinary entry.
    Entry,
    /// `.wh.NAME`: remove NAME in the member's directory.
    Whiteout(CString),
    /// `.wh..wh..opq`: the member's directory hides lower layers'.
    Opaque,
    /// AUFS bookkeeping (`.wh..wh.plnk`, ...): skipped, as Docker does.
    Skip,
}

const PREFIX: &[u8] = b".wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";
const META: &[u8] = b".wh..wh.";

/// A whiteout member that cannot be followed.
#[derive(Debug)]
pub(crate) enum BadWhiteout {
    /// A `.wh.` name (shown) with members beneath it.
    HasEntries(String),
    /// A `.wh.` name (shown) that names no entry: empty, `.` or `..`.
    NamesNothing(String),
    /// A NUL in the name it whites out.
    Nul,
}

impl std::fmt::Display for BadWhiteout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadWhiteout::HasEntries(name) => {
                write!(f, "whiteout {name:?} has entries beneath it")
            }
            BadWhiteout::NamesNothing(name) => {
                write!(f, "whiteout {name:?} names no entry")
            }
            BadWhiteout::Nul => f.write_str("NUL in a whiteout"),
        }
    }
}

/// Classifies a member by its checked name.
pub(crate) fn classify(
    parts: &[CString],
) -> std::result::Result<Class, BadWhiteout> {
    for (i, p) in parts.iter().enumerate() {
        let b = p.as_bytes();
        if !b.starts_with(PREFIX) {
            continue;
        }
        let leaf = i + 1 == parts.len();
        if leaf && b == OPAQUE {
            return Ok(Class::Opaque);
        }
        if b.starts_with(META) {
            return Ok(Class::Skip);
        }
        if !leaf {
            return Err(BadWhiteout::HasEntries(
                String::from_utf8_lossy(b).into_owned(),
            ));
        }
        let target = &b[PREFIX.len()..];
        if target.is_empty() || target == b"." || target == b".." {
            return Err(BadWhiteout::NamesNothing(
                String::from_utf8_lossy(b).into_owned(),
            ));
        }
        return CString::new(target)
            .map(Class::Whiteout)
            .map_err(|_| BadWhiteout::Nul);
    }
    Ok(Class::Entry)
}

fn path_of(parts: &[CString]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(Name::joined(parts).as_bytes()))
}

/// What the layered unpack knows of a path, by its node in the layer's
/// [`PathTree`]: a constant per path, at any depth.
#[derive(Clone, Copy, Default)]
struct Info {
    /// This layer made it, or something beneath it.
    made: bool,
    /// The layer has a directory entry for it.
    entry: bool,
    /// Recording: a directory above one of this layer's entries.
    holds: bool,
    /// Applying: what was there before this layer changed it.
    seen: Seen,
}

#[derive(Clone, Copy, Default)]
enum Seen {
    /// Not yet changed by this layer.
    #[default]
    No,
    /// Made by this layer.
    Made,
    /// A lower layer's directory this layer changes: its times before.
    Kept(Times),
}

/// The layered unpack's state.
pub(crate) struct Layered {
    mode: Whiteouts,
    paths: PathTree,
    /// By node.
    info: Vec<Info>,
    /// Recording: the whiteouts, in the archive's order.
    changes: Vec<Change>,
}

impl Layered {
    pub(crate) fn new(mode: Whiteouts) -> Option<Layered> {
        (mode != Whiteouts::Off).then(|| Layered {
            mode,
            paths: PathTree::new(),
            info: vec![Info::default()],
            changes: Vec::new(),
        })
    }

    pub(crate) fn applying(&self) -> bool {
        self.mode == Whiteouts::Apply
    }

    /// The node of `parts`, interned.
    fn node(&mut self, parts: &[CString]) -> NodeId {
        let id = self.paths.intern(parts);
        if self.info.len() < self.paths.len() {
            self.info.resize(self.paths.len(), Info::default());
        }
        id
    }

    fn info(&mut self, id: NodeId) -> &mut Info {
        &mut self.info[id as usize]
    }

    /// The nodes from the top down to `id`, the top included.
    fn chain_of(&self, id: NodeId) -> Vec<NodeId> {
        let mut v = Vec::with_capacity(self.paths.depth(id) as usize + 1);
        let mut at = id;
        loop {
            v.push(at);
            if at == PathTree::ROOT {
                break;
            }
            at = self.paths.parent(at);
        }
        v.reverse();
        v
    }

    /// Recording: the hard link `parts` to `target`, a file this layer
    /// does not hold, to make when the layer is applied.
    pub(crate) fn defer_link(&mut self, parts: &[CString], target: &[CString]) {
        self.changes.push(Change::Link {
            path: path_of(parts),
            target: path_of(target),
        });
    }

    /// Whether this layer made `parts` or anything beneath it.
    pub(crate) fn made(&self, parts: &[CString]) -> bool {
        self.paths
            .find(parts)
            .is_some_and(|id| self.info[id as usize].made)
    }

    /// Notes an entry of this layer, with its ancestors; `dir` if it is
    /// a directory entry.
    pub(crate) fn note(&mut self, parts: &[CString], dir: bool) {
        let id = self.node(parts);
        if dir {
            self.info(id).entry = true;
        }
        if self.info(id).made {
            return;
        }
        self.info(id).made = true;
        let recording = self.mode == Whiteouts::Record;
        let mut at = id;
        while at != PathTree::ROOT {
            at = self.paths.parent(at);
            let i = self.info(at);
            if recording {
                i.holds = true;
            }
            if i.made {
                break;
            }
            i.made = true;
        }
    }

    /// The layer's own directory entry for the root (`./`).
    pub(crate) fn note_root_entry(&mut self) {
        self.info(PathTree::ROOT).entry = true;
    }

    /// Before anything is made in or removed from the directory `parts`
    /// (applying): keeps its times, and those of the directories above
    /// it this layer has not changed yet, the first time.
    pub(crate) fn touch(
        &mut self,
        ctx: &Ctx<'_>,
        chain: &mut Chain,
        parts: &[CString],
    ) -> Result<()> {
        if !self.applying() {
            return Ok(());
        }
        let id = self.node(parts);
        if !matches!(self.info(id).seen, Seen::No) {
            return Ok(());
        }
        let nodes = self.chain_of(id);
        for (k, &n) in nodes.iter().enumerate() {
            if !matches!(self.info(n).seen, Seen::No) {
                continue;
            }
            match chain.open(&parts[..k], None) {
                Ok(fd) => {
                    let st = at::fstat(&*fd).map_err(|e| {
                        Error::io(Op::Stat, ctx.shown(&parts[..k]), e)
                    })?;
                    self.info(n).seen = Seen::Kept(times_of(&st));
                }
                // Missing: this layer makes it and what is below.
                Err(WalkFail::Io(_, _, e))
                    if e.raw_os_error() == Some(libc::ENOENT) =>
                {
                    for &below in &nodes[k..] {
                        self.info(below).seen = Seen::Made;
                    }
                    return Ok(());
                }
                // A symlink or a file in the way: the open that follows
                // refuses it, naming the member.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// `.wh.NAME` (`leaf`) in the directory `parent`. Applying, the
    /// caller has waited for the workers if this layer made NAME or
    /// anything beneath it ([`Layered::made`]).
    pub(crate) fn whiteout(
        &mut self,
        ctx: &Ctx<'_>,
        chain: &mut Chain,
        parent: &[CString],
        leaf: &CString,
        entry: &str,
    ) -> Result<()> {
        let mut target = parent.to_vec();
        target.push(leaf.clone());
        if !self.applying() {
            self.changes.push(Change::Remove(path_of(&target)));
            return Ok(());
        }
        if self.made(&target) {
            // Made by this layer: only what lower layers left beneath it
            // goes.
            return self.prune(ctx, chain, &target, entry);
        }
        self.touch(ctx, chain, parent)?;
        let Some(dir) = open_existing(ctx, chain, parent, entry)? else {
            return Ok(());
        };
        beneath::remove_at(dir.as_raw_fd(), leaf, &ctx.shown(&target))
    }

    /// `.wh..wh..opq` in the directory `dir`. Applying, the caller has
    /// waited for the workers.
    pub(crate) fn opaque(
        &mut self,
        ctx: &Ctx<'_>,
        chain: &mut Chain,
        dir: &[CString],
        entry: &str,
    ) -> Result<()> {
        if !self.applying() {
            self.changes.push(Change::Opaque(path_of(dir)));
            return Ok(());
        }
        self.prune(ctx, chain, dir, entry)
    }

    /// Removes from the directory `top`, and from every directory below
    /// it this layer made entries in, what this layer did not make. Not a
    /// directory, or missing: nothing to do.
    fn prune(
        &mut self,
        ctx: &Ctx<'_>,
        chain: &mut Chain,
        top: &[CString],
        entry: &str,
    ) -> Result<()> {
        let mut stack: Vec<Vec<CString>> = vec![top.to_vec()];
        while let Some(parts) = stack.pop() {
            self.touch(ctx, chain, &parts)?;
            let Some(dir) = open_existing(ctx, chain, &parts, entry)? else {
                continue;
            };
            let shown = ctx.shown(&parts);
            let names = at::read_names(&*dir)
                .map_err(|e| Error::io(Op::ReadDir, &shown, e))?;
            let here = self.paths.find(&parts);
            for n in names {
                let made = here
                    .and_then(|h| self.paths.child(h, &n))
                    .is_some_and(|c| self.info[c as usize].made);
                let mut child = parts.clone();
                child.push(n.clone());
                if !made {
                    beneath::remove_at(
                        dir.as_raw_fd(),
                        &n,
                        &ctx.shown(&child),
                    )?;
                } else if at::lstat(dir.as_raw_fd(), &n)
                    .map_err(|e| Error::io(Op::Stat, ctx.shown(&child), e))?
                    .is_some_and(|st| {
                        st.st_mode & libc::S_IFMT == libc::S_IFDIR
                    })
                {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// At the end: applying, puts back the times of the directories
    /// changed without an entry; recording, returns the whiteouts and the
    /// directories made only to hold entries.
    pub(crate) fn finish(
        mut self,
        ctx: &Ctx<'_>,
        chain: &mut Chain,
    ) -> Result<Vec<Change>> {
        if self.mode == Whiteouts::Record {
            let mut implicit: Vec<PathBuf> = (0..self.info.len())
                .filter(|&i| self.info[i].holds && !self.info[i].entry)
                .map(|i| path_of(&self.paths.parts(i as NodeId)))
                .collect();
            implicit.sort();
            self.changes
                .extend(implicit.into_iter().map(Change::Implicit));
            return Ok(self.changes);
        }
        for i in 0..self.info.len() {
            let Info {
                seen: Seen::Kept(times),
                entry: false,
                ..
            } = self.info[i]
            else {
                continue;
            };
            let parts = self.paths.parts(i as NodeId);
            // Removed since, or replaced: nothing to put back.
            let Ok(fd) = chain.open(&parts, None) else {
                continue;
            };
            at::futimens(&*fd, &times)
                .map_err(|e| Error::io(Op::SetTimes, ctx.shown(&parts), e))?;
        }
        Ok(Vec::new())
    }
}

/// The directory `parts` beneath the root if it is there; `None` if it
/// (or a directory on the way) is missing or not a directory, so holds
/// nothing to remove. A symlink on the way is refused.
fn open_existing(
    ctx: &Ctx<'_>,
    chain: &mut Chain,
    parts: &[CString],
    entry: &str,
) -> Result<Option<std::sync::Arc<std::os::fd::OwnedFd>>> {
    match chain.open(parts, None) {
        Ok(fd) => Ok(Some(fd)),
        Err(WalkFail::Met(_, Met::Symlink)) => {
            Err(ctx.refuse(entry, ArchiveRefusal::ThroughSymlink))
        }
        Err(WalkFail::Met(_, Met::NotADirectory)) => Ok(None),
        Err(WalkFail::Io(_, _, e))
            if e.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(None)
        }
        Err(f) => Err(f.into_error(ctx.root, parts, &ctx.shown(parts))),
    }
}

// libc's stat field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn times_of(st: &libc::stat) -> Times {
    Times {
        atime: (st.st_atime as i64, st.st_atime_nsec as i64),
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
    }
}
