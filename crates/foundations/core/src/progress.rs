//! Watching a run as it goes: the [`Progress`] it reports to, and
//! [`Metered`], a reader that reports how far through its input it is.
//! Copies, unpacks, archive and image readers and downloads all use them.

use std::fmt;
use std::sync::Arc;

/// Receives progress as the workers finish batches. Calls come from many
/// threads; implementations should be cheap (an atomic add, a rate-limited
/// redraw).
///
/// A run whose size is known beforehand (an archive or image file's
/// length, a tree's data counted by an earlier pass) also says how far
/// through it it is: [`begin`](Progress::begin) with the total, then
/// [`read`](Progress::read) as it goes, so that a percentage and a time
/// left can be shown; a part of unknown size begins with `None`.
pub trait Progress: Send + Sync + fmt::Debug {
    /// `entries` more entries and `bytes` more bytes of data are done.
    fn advance(&self, entries: u64, bytes: u64);

    /// A part of the work begins: `Some(total)` bytes of input whose
    /// progress [`read`](Progress::read) reports, or `None` when its
    /// size is not known. Default: ignored.
    fn begin(&self, _total: Option<u64>) {}

    /// `bytes` more of the input announced by
    /// [`begin`](Progress::begin) are done. Default: ignored.
    fn read(&self, _bytes: u64) {}
}

/// A reader (or seekable reader, from its start) that tells a
/// [`Progress`] how far through its input it is: the furthest offset it
/// has read to or skipped to. A seek from the end (to learn the length)
/// is no progress.
pub struct Metered<R> {
    inner: R,
    progress: Option<Arc<dyn Progress>>,
    /// The offset now, and the furthest one reported.
    at: u64,
    reported: u64,
}

impl<R> Metered<R> {
    /// `inner`, at its start, reporting to `progress` (none: a plain
    /// wrapper).
    pub fn new(inner: R, progress: Option<Arc<dyn Progress>>) -> Self {
        Metered {
            inner,
            progress,
            at: 0,
            reported: 0,
        }
    }

    fn moved(&mut self, to: u64, counts: bool) {
        self.at = to;
        if counts && to > self.reported {
            if let Some(p) = &self.progress {
                p.read(to - self.reported);
            }
            self.reported = to;
        }
    }
}

impl<R: std::io::Read> std::io::Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.moved(self.at + n as u64, true);
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Metered<R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let after = self.inner.seek(to)?;
        self.moved(after, !matches!(to, std::io::SeekFrom::End(_)));
        Ok(after)
    }
}

#[cfg(test)]
mod test {
    use std::io::{Read, Seek, SeekFrom};
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Default)]
    struct Seen(Mutex<Vec<u64>>);

    impl Progress for Seen {
        fn advance(&self, _entries: u64, _bytes: u64) {}
        fn read(&self, bytes: u64) {
            self.0.lock().unwrap().push(bytes);
        }
    }

    #[test]
    fn metered_reports_the_furthest_offset_once() {
        let seen = Arc::new(Seen::default());
        let data = std::io::Cursor::new(vec![0u8; 100]);
        let mut m = Metered::new(data, Some(Arc::clone(&seen) as _));
        let mut buf = [0u8; 10];
        m.read_exact(&mut buf).unwrap();
        assert_eq!(m.seek(SeekFrom::End(0)).unwrap(), 100);
        m.seek(SeekFrom::Start(5)).unwrap();
        m.read_exact(&mut buf).unwrap();
        m.seek(SeekFrom::Start(50)).unwrap();
        assert_eq!(*seen.0.lock().unwrap(), [10, 5, 35]);
    }
}
