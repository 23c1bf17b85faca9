//! What one unpack made, by a hash of each path: what lets the reader
//! skip the look at what is there for a name no one made yet.

use std::collections::HashSet;

/// Paths tracked in [`Made`] at most: past them, every entry is looked
/// at again (16 MiB of hashes, whatever the archive's length).
const MAX_MADE: usize = 1 << 20;

/// Directories an unpack created and paths it placed.
#[derive(Default)]
pub(super) struct Made {
    dirs: HashSet<u64>,
    placed: HashSet<u64>,
    /// Past [`MAX_MADE`]: nothing is tracked any more.
    full: bool,
}

impl Made {
    /// Whether `rel`, in the directory `parent`, is known to be free.
    pub(super) fn free(&self, parent: u64, rel: u64) -> bool {
        !self.full && self.dirs.contains(&parent) && !self.placed.contains(&rel)
    }

    pub(super) fn placed(&mut self, rel: u64) {
        if self.full {
            return;
        }
        if self.placed.len() + self.dirs.len() >= MAX_MADE {
            *self = Made {
                full: true,
                ..Made::default()
            };
            return;
        }
        self.placed.insert(rel);
    }

    pub(super) fn dir(&mut self, rel: u64) {
        if !self.full {
            self.dirs.insert(rel);
        }
    }
}
