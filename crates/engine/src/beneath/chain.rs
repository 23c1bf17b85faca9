//! The chain of directories last opened beneath a top directory, kept
//! so that archives, which come in tree order, reopen little; apart from
//! `resolve` because it is state with a bound on descriptors held.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use super::resolve::{StepFail, WalkFail, step};

/// The directories on the path last opened beneath a top directory, so
/// the next entry in the same or a nearby directory (archives come in
/// tree order) costs one `openat` or none, at any depth.
///
/// It holds the names of the path's directories, and descriptors of a
/// bounded few of them: the last [`Chain::RECENT`] levels, and every
/// `stride`-th level above them, the stride doubling whenever more than
/// [`Chain::MAX_CHECKPOINTS`] would be held. A level whose descriptor was
/// let go is opened again from the nearest one held, by name, one
/// component at a time, never through a symlink, as every open is. A
/// path thousands of levels deep so holds a few dozen descriptors, not
/// one per level, and going back up costs at most `stride` opens.
pub(crate) struct Chain {
    top: Arc<OwnedFd>,
    open: Vec<(CString, Option<Arc<OwnedFd>>)>,
    stride: usize,
}

impl Chain {
    /// Levels at the end of the path always held open.
    pub(crate) const RECENT: usize = 8;
    /// At most this many levels above the recent ones held open.
    pub(crate) const MAX_CHECKPOINTS: usize = 16;

    pub(crate) fn new(top: Arc<OwnedFd>) -> Self {
        Chain {
            top,
            open: Vec::new(),
            stride: 16,
        }
    }

    /// The directory `parts` beneath the top: the longest prefix already
    /// open is reused, the rest opened (or made, with `create`) one
    /// component at a time, none followed.
    pub(crate) fn open(
        &mut self,
        parts: &[CString],
        create: Option<u32>,
    ) -> std::result::Result<Arc<OwnedFd>, WalkFail> {
        let keep = self
            .open
            .iter()
            .zip(parts)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.open.truncate(keep);
        // The deepest level still held, to open the rest from.
        let held = self.open.iter().rposition(|(_, fd)| fd.is_some());
        let mut cur = match held {
            Some(i) => self.open[i].1.clone(),
            None => None,
        }
        .unwrap_or_else(|| Arc::clone(&self.top));
        let from = held.map_or(0, |i| i + 1);
        for (i, c) in parts.iter().enumerate().skip(from) {
            let fd = step(cur.as_raw_fd(), c, create).map_err(|f| match f {
                StepFail::Met(m) => WalkFail::Met(i, m),
                StepFail::Io(op, e) => WalkFail::Io(i, op, e),
            })?;
            cur = Arc::new(fd);
            if i < self.open.len() {
                self.open[i].1 = Some(Arc::clone(&cur));
            } else {
                self.open.push((c.clone(), Some(Arc::clone(&cur))));
            }
            self.let_go(i);
        }
        Ok(cur)
    }

    /// Having opened level `i`: lets go of the level that fell out of the
    /// recent ones, unless it is a checkpoint, and thins the checkpoints
    /// when there are too many.
    fn let_go(&mut self, i: usize) {
        let Some(old) = i.checked_sub(Self::RECENT) else {
            return;
        };
        if (old + 1) % self.stride != 0 {
            self.open[old].1 = None;
        }
        if (old + 1) / self.stride > Self::MAX_CHECKPOINTS {
            self.stride *= 2;
            let stride = self.stride;
            for (j, (_, fd)) in self.open[..=old].iter_mut().enumerate() {
                if (j + 1) % stride != 0 {
                    *fd = None;
                }
            }
        }
    }

    /// Descriptors held (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.open.iter().filter(|(_, fd)| fd.is_some()).count()
    }
}
