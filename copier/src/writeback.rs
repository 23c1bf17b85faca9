//! Early writeback: each file's data sent to the disk as soon as it is
//! written ([`crate::Writeback`]), so that a run's final flush waits only
//! for the last files instead of for everything the run wrote, and the
//! disk writes while the run still reads and creates.
//!
//! A large file is started chunk by chunk as it is written, and the
//! writer waits for the chunk before the previous one: one file never
//! holds more than about three chunks dirty or in flight, so a long copy
//! meets neither the kernel's dirty limits nor a stall when it reaches
//! them.
//!
//! Errors are not reported here: these calls only hint. A page that
//! cannot be written is reported by the run's final flush (`syncfs(2)`
//! returns the filesystem's writeback errors), and a run that does not
//! flush never promised it.

use std::fs::File;

use crate::sys;

/// Bytes of one file started back at a time: long sequential writes for
/// the disk, and little dirty data per file.
pub(crate) const CHUNK: u64 = 8 << 20;

/// The early writeback of one file as it is written.
pub(crate) struct FileWriteback<'f> {
    file: &'f File,
    on: bool,
    /// Everything below this offset has been started.
    started: u64,
    /// Everything below this offset is on the disk.
    waited: u64,
}

impl<'f> FileWriteback<'f> {
    /// The writeback of `file`; `on` false makes every call a no-op.
    pub(crate) fn new(file: &'f File, on: bool) -> Self {
        FileWriteback {
            file,
            on,
            started: 0,
            waited: 0,
        }
    }

    /// The most a writer should write in one call: one chunk when the
    /// writeback follows it, anything otherwise.
    pub(crate) fn step(&self, left: u64) -> u64 {
        if self.on { left.min(CHUNK) } else { left }
    }

    /// The file's data is written up to `end` (offsets only grow): starts
    /// a chunk's worth or more, and waits for what was started two chunks
    /// before.
    pub(crate) fn written(&mut self, end: u64) {
        if !self.on || end < self.started.saturating_add(CHUNK) {
            return;
        }
        let _hint =
            sys::start_writeback(self.file, self.started, end - self.started);
        self.started = end;
        let behind = self.started.saturating_sub(2 * CHUNK);
        if behind > self.waited {
            let _hint = sys::wait_writeback(
                self.file,
                self.waited,
                behind - self.waited,
            );
            self.waited = behind;
        }
    }

    /// The file is written: starts the rest of it (a length of 0 is "to
    /// the end of the file").
    pub(crate) fn done(self) {
        if self.on {
            let _hint = sys::start_writeback(self.file, self.started, 0);
        }
    }
}
