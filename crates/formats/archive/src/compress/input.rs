//! Input shared by the decoders: a buffered reader whose next bytes can be
//! looked at before a decoder takes them, and reading a buffer full.

use std::io::{self, BufRead, Read};

/// A buffered reader whose next bytes can be looked at before a decoder
/// takes them (a gzip member's or lz4 frame's magic may straddle two of
/// the inner reader's buffers), counting the bytes taken, and noting
/// whether a read met the end of the stream.
pub(super) struct Peeked<R> {
    inner: R,
    /// Bytes looked at and not yet taken, before `inner`'s.
    front: Vec<u8>,
    /// Bytes taken.
    pub(super) taken: u64,
    /// A read (not a peek) met the end.
    pub(super) met_end: bool,
}

impl<R: BufRead> Peeked<R> {
    pub(super) fn new(inner: R) -> Self {
        Peeked {
            inner,
            front: Vec::new(),
            taken: 0,
            met_end: false,
        }
    }

    /// The next `n` bytes, or fewer where the stream ends.
    pub(super) fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.front.len() < n {
            let b = self.inner.fill_buf()?;
            if b.is_empty() {
                break;
            }
            let k = b.len().min(n - self.front.len());
            self.front.extend_from_slice(&b[..k]);
            self.inner.consume(k);
        }
        Ok(&self.front[..n.min(self.front.len())])
    }

    /// Reads and discards the rest: how many bytes, and whether `check`
    /// held for every piece of them.
    pub(super) fn skip_rest(
        &mut self,
        check: impl Fn(&[u8]) -> bool,
    ) -> io::Result<(u64, bool)> {
        let mut n = 0u64;
        let mut all = true;
        loop {
            let b = self.fill_buf()?;
            if b.is_empty() {
                return Ok((n, all));
            }
            all &= check(b);
            let k = b.len();
            n += k as u64;
            self.consume(k);
        }
    }
}

impl<R: BufRead> Read for Peeked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let b = self.fill_buf()?;
        let k = b.len().min(buf.len());
        buf[..k].copy_from_slice(&b[..k]);
        self.consume(k);
        if k == 0 && !buf.is_empty() {
            self.met_end = true;
        }
        Ok(k)
    }
}

impl<R: BufRead> BufRead for Peeked<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.front.is_empty() {
            self.inner.fill_buf()
        } else {
            Ok(&self.front)
        }
    }

    fn consume(&mut self, n: usize) {
        if self.front.is_empty() {
            self.inner.consume(n);
        } else {
            self.front.drain(..n);
        }
        self.taken += n as u64;
    }
}

/// Reads until `buf` is full or the stream ends.
pub fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
