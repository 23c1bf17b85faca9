//! What the reader's loop shares with its ways of making members (a
//! tree beneath the root, [`super::read`]; nodes in memory,
//! [`super::into_memory`]): the loop's state, whether it goes on, and
//! handing bodies to the pool.

use std::io::Read;

use zinstall_archive::tar::{self, TarError};

use super::batch::Batcher;
use super::budget::SMALL;
use super::ctx::{Ctx, ReadOutcome};
use super::job::FileJob;
use crate::error::{Error, Result};

/// Whether the loop goes on after a member.
pub(super) enum Flow {
    Go,
    /// The pool is gone: a worker failed, and said why.
    Stop,
}

/// The loop's state: the reader and what it read.
pub(super) struct Reading<'c, 'x, R> {
    pub(super) ctx: &'c Ctx<'x>,
    pub(super) rd: tar::Reader<R>,
    pub(super) out: ReadOutcome,
    /// The archive is a zinstall layer: its tree is under `root/`.
    pub(super) subtree: bool,
}

/// Hands `job` to `pool` (or writes it here, serial); false when the pool
/// is gone.
pub(super) fn send(
    ctx: &Ctx<'_>,
    pool: &mut Option<Batcher<'_>>,
    job: FileJob,
) -> bool {
    let held = job.body.held();
    ctx.pending.acquire(1, u64::MAX);
    let Some(pool) = pool else {
        ctx.write_job(job);
        return true;
    };
    if pool.push(job) {
        return true;
    }
    // Dropped unwritten: what it counted is given back.
    ctx.pending.release(1);
    ctx.budget.release(held);
    false
}

impl<R: Read> Reading<'_, '_, R> {
    /// Reads a body of `size` bytes in chunks into `tx`, to the worker
    /// that writes it.
    pub(super) fn feed(
        &mut self,
        tx: &crossbeam_channel::Sender<Vec<u8>>,
        size: u64,
    ) -> Result<Flow> {
        let ctx = self.ctx;
        let mut body = self.rd.body();
        let mut left = size;
        while left > 0 {
            if ctx.stopped() {
                return Ok(Flow::Stop);
            }
            let want = left.min(SMALL);
            let mut chunk = ctx.spare.take(want as usize);
            chunk.resize(want as usize, 0);
            if let Err(err) = body.read_exact(&mut chunk) {
                return Err(Error::tar(ctx.archive, TarError::from_io(err)));
            }
            left -= want;
            // Its worker stopped: it failed, and said why.
            if tx.send(chunk).is_err() {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }
}
