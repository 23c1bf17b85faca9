//! OCI layers in an unpack into memory: the layered unpack's rules
//! ([`super::layered`]) on the tree held in memory. A whiteout removes
//! what lower layers left, never what this layer made (whatever the order
//! of its members); a lower layer's directory becomes a file, or its
//! symlink a directory, by removing what it left; and a directory this
//! layer changes without an entry for it keeps the time it had.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;

use zinstall_archive::ArchiveRefusal;

use super::ctx::Ctx;
use super::memory::{MemTree, Met, NodeId, NodeKind};
use crate::error::Result;

/// One layer's state while it is applied onto the tree.
#[derive(Default)]
pub(super) struct MemLayer {
    /// Paths this layer made, with their ancestors.
    made: HashSet<Vec<CString>>,
    /// Paths this layer has a directory entry for.
    entries: HashSet<Vec<CString>>,
    /// Directories this layer changed: `Some(time)` a lower layer's,
    /// with its time before; `None` made by this layer.
    seen: HashMap<Vec<CString>, Option<(i64, u32)>>,
}

impl MemLayer {
    /// Whether this layer made `parts` or anything beneath it.
    pub(super) fn made(&self, parts: &[CString]) -> bool {
        self.made.contains(parts)
    }

    /// Notes an entry of this layer, with its ancestors; `dir` if it is a
    /// directory entry.
    pub(super) fn note(&mut self, parts: &[CString], dir: bool) {
        if dir {
            self.entries.insert(parts.to_vec());
        }
        for k in (0..=parts.len()).rev() {
            if !self.made.insert(parts[..k].to_vec()) {
                break;
            }
        }
    }

    /// The layer's own entry for the root (`./`).
    pub(super) fn note_root_entry(&mut self) {
        self.entries.insert(Vec::new());
    }

    /// Before anything is made in or removed from the directory `parts`:
    /// keeps its time, and those of the directories above it this layer
    /// has not changed yet, the first time.
    pub(super) fn touch(&mut self, tree: &mut MemTree, parts: &[CString]) {
        if self.seen.contains_key(parts) {
            return;
        }
        for k in 0..=parts.len() {
            let p = &parts[..k];
            if self.seen.contains_key(p) {
                continue;
            }
            match tree.walk(p, false) {
                Ok(id) => {
                    let t = tree.node(id).attrs.mtime;
                    self.seen.insert(p.to_vec(), Some(t));
                }
                // Missing: this layer makes it and what is below.
                Err(Met::Missing) => {
                    for below in k..=parts.len() {
                        self.seen.insert(parts[..below].to_vec(), None);
                    }
                    return;
                }
                // In the way: the walk that follows refuses it.
                Err(_) => return,
            }
        }
    }

    /// `.wh.LEAF` in the directory `parent`.
    pub(super) fn whiteout(
        &mut self,
        ctx: &Ctx<'_>,
        tree: &mut MemTree,
        parent: &[CString],
        leaf: &CString,
        entry: &str,
    ) -> Result<()> {
        let mut target = parent.to_vec();
        target.push(leaf.clone());
        if self.made(&target) {
            // Made by this layer: only what lower layers left beneath it
            // goes.
            return self.prune(ctx, tree, &target, entry);
        }
        self.touch(tree, parent);
        if let Some(dir) = existing(ctx, tree, parent, entry)? {
            tree.unset(dir, leaf.as_bytes());
        }
        Ok(())
    }

    /// `.wh..wh..opq` in the directory `dir`.
    pub(super) fn opaque(
        &mut self,
        ctx: &Ctx<'_>,
        tree: &mut MemTree,
        dir: &[CString],
        entry: &str,
    ) -> Result<()> {
        self.prune(ctx, tree, dir, entry)
    }

    /// Removes from the directory `top`, and from every directory below
    /// it this layer made entries in, what this layer did not make.
    fn prune(
        &mut self,
        ctx: &Ctx<'_>,
        tree: &mut MemTree,
        top: &[CString],
        entry: &str,
    ) -> Result<()> {
        let mut stack = vec![top.to_vec()];
        while let Some(parts) = stack.pop() {
            self.touch(tree, &parts);
            let Some(dir) = existing(ctx, tree, &parts, entry)? else {
                continue;
            };
            let names: Vec<Vec<u8>> = match &tree.node(dir).kind {
                NodeKind::Dir(e) => e.keys().cloned().collect(),
                _ => Vec::new(),
            };
            for n in names {
                let mut child = parts.clone();
                child.push(CString::new(n.clone()).unwrap_or_default());
                if !self.made(&child) {
                    tree.unset(dir, &n);
                } else if tree.get(dir, &n).is_some_and(|c| {
                    matches!(tree.node(c).kind, NodeKind::Dir(_))
                }) {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// At the layer's end: the times of the lower layers' directories it
    /// changed without an entry put back.
    pub(super) fn finish(self, tree: &mut MemTree) {
        for (parts, was) in self.seen {
            let Some(t) = was else { continue };
            if self.entries.contains(&parts) {
                continue;
            }
            // Removed since, or replaced: nothing to put back.
            if let Ok(id) = tree.walk(&parts, false) {
                tree.node_mut(id).attrs.mtime = t;
            }
        }
    }
}

/// The directory `parts` if it is there; `None` if it (or a directory on
/// the way) is missing or not a directory. A symlink on the way is
/// refused, as the layered unpack beneath a root refuses it.
fn existing(
    ctx: &Ctx<'_>,
    tree: &mut MemTree,
    parts: &[CString],
    entry: &str,
) -> Result<Option<NodeId>> {
    match tree.walk(parts, false) {
        Ok(id) => Ok(Some(id)),
        Err(Met::Symlink) => {
            Err(ctx.refuse(entry, ArchiveRefusal::ThroughSymlink))
        }
        Err(Met::NotADirectory | Met::Missing) => Ok(None),
    }
}
