//! The bounds on what an unpack holds in memory, and what waits on
//! them: the byte budget of bodies in flight, the count of queued files,
//! and the spare body buffers the workers hand back to the reader.

use std::sync::{Condvar, Mutex};

/// From a stream, bodies up to this size go to the pool in memory; larger
/// ones in chunks of this size as they are read. From a plain tar file
/// every body goes to the pool as a range of the file.
pub(super) const SMALL: u64 = 1 << 20;
/// Chunks of a large body read ahead of its worker: with the one being
/// read and the one being written, the memory a large body holds.
pub(super) const CHUNKS_AHEAD: usize = 4;
/// Bytes of bodies in flight at most (a few per worker).
pub(super) const BUDGET: u64 = 64 << 20;

/// Body buffers the workers are done with, for the reader to fill again:
/// a fresh one per body costs its pages' faults and zeroing, more than
/// the copy into it. Buffers come in size classes (powers of two from
/// 4 KiB to [`SMALL`]), so any spare one of a class fits a body of it;
/// what is kept is bounded by the byte budget.
#[derive(Default)]
pub(super) struct Spare {
    kept: Mutex<(Vec<Vec<Vec<u8>>>, u64)>,
}

impl Spare {
    const LEAST: usize = 4 << 10;

    /// The capacity of the buffer a body of `len` bytes is read into.
    pub(super) fn class(len: usize) -> usize {
        match len {
            0 => 0,
            _ => len.max(Self::LEAST).next_power_of_two(),
        }
    }

    fn index(class: usize) -> usize {
        (class.trailing_zeros() - Self::LEAST.trailing_zeros()) as usize
    }

    /// A buffer of `len`'s class, holding what it last held: the caller
    /// sizes it and reads over all of it.
    pub(super) fn take(&self, len: usize) -> Vec<u8> {
        let class = Self::class(len);
        if class == 0 {
            return Vec::new();
        }
        let mut g = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (lists, bytes) = &mut *g;
        if let Some(b) = lists.get_mut(Self::index(class)).and_then(Vec::pop) {
            *bytes -= class as u64;
            return b;
        }
        drop(g);
        Vec::with_capacity(class)
    }

    /// Keeps `b` for another body, within the budget. Its bytes stay:
    /// the next body is read over them, and `resize` then zeroes only
    /// what it adds past them.
    pub(super) fn give(&self, b: Vec<u8>) {
        let class = b.capacity();
        if !class.is_power_of_two()
            || !(Self::LEAST..=SMALL as usize).contains(&class)
        {
            return;
        }
        let i = Self::index(class);
        let mut g = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (lists, bytes) = &mut *g;
        // Full: room is made in the class holding the most, so what is
        // kept follows the sizes being read now.
        while *bytes + class as u64 > BUDGET {
            let most = (0..lists.len())
                .filter(|&j| j != i)
                .max_by_key(|&j| lists[j].len() << j);
            match most.and_then(|j| lists[j].pop()) {
                Some(dropped) => *bytes -= dropped.capacity() as u64,
                None => return,
            }
        }
        if lists.len() <= i {
            lists.resize_with(i + 1, Vec::new);
        }
        lists[i].push(b);
        *bytes += class as u64;
    }
}

/// A counter others can wait on: the byte budget, and jobs in flight.
#[derive(Default)]
pub(super) struct Gate {
    used: Mutex<u64>,
    cv: Condvar,
}

impl Gate {
    /// Adds `n`, first waiting until `used + n <= cap` (or nothing is
    /// used, so one oversized item still goes).
    pub(super) fn acquire(&self, n: u64, cap: u64) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *g > 0 && *g + n > cap {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        *g += n;
    }

    pub(super) fn release(&self, n: u64) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *g = g.saturating_sub(n);
        self.cv.notify_all();
    }

    /// Waits until nothing is used.
    pub(super) fn wait_empty(&self) {
        let mut g = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *g > 0 {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}
