//! The reader's state and its reads of the stream: whole blocks, exact
//! byte counts, skips (by seeking where it can), the declared-size count,
//! and the body of the current member.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};

use super::acl::NameTable;
use super::error::{TarError, TarErrorKind};
use super::header::{self, BLOCK, pad};
use super::limits::Limits;
use super::quirk::{Quirk, QuirkKind};

/// Skips `n` bytes by seeking (only for [`Reader::seekable`]).
type SeekFn<R> = fn(&mut R, u64) -> io::Result<u64>;

/// Reads members one after another from a tar stream.
pub struct Reader<R> {
    pub(super) inner: R,
    pub(super) limits: Limits,
    pub(super) names: Option<NameTable>,
    /// Position of the stream when the reader was made.
    pub(super) base: u64,
    /// Bytes consumed since.
    pub(super) pos: u64,
    pub(super) seek: Option<SeekFn<R>>,
    /// Length of the file (seekable readers), to see truncation before
    /// seeking past the end.
    pub(super) len: Option<u64>,
    /// Body bytes of the current member not yet read.
    pub(super) remaining: u64,
    /// Padding after the current member's body.
    pub(super) padding: u64,
    pub(super) member: String,
    pub(super) header_offset: u64,
    /// Global PAX records in force, by keyword.
    pub(super) globals: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(super) global_bytes: u64,
    pub(super) total: u64,
    pub(super) done: bool,
    pub(super) failed: bool,
    /// Quirks met and not yet taken by the caller.
    pub(super) quirks: Vec<Quirk>,
    /// A header block read to see whether a body was there, to be read
    /// again as the next member's first header.
    pub(super) pending: Option<[u8; BLOCK]>,
}

impl<R: Read> Reader<R> {
    /// A reader of the tar stream `inner`. Bodies not read are skipped by
    /// reading them. ACL entries that name a user or group without an id
    /// are resolved against the host's `/etc/passwd` and `/etc/group`
    /// (read when first needed); see [`Reader::with_names`].
    pub fn new(inner: R, limits: Limits) -> Self {
        Reader {
            inner,
            limits,
            names: None,
            base: 0,
            pos: 0,
            seek: None,
            len: None,
            remaining: 0,
            padding: 0,
            member: String::new(),
            header_offset: 0,
            globals: BTreeMap::new(),
            global_bytes: 0,
            total: 0,
            done: false,
            failed: false,
            quirks: Vec::new(),
            pending: None,
        }
    }

    /// Resolves ACL names with `names` instead of the host's files
    /// ([`NameTable::empty`] refuses them).
    pub fn with_names(mut self, names: NameTable) -> Self {
        self.names = Some(names);
        self
    }

    /// Offset of the next byte the reader will consume, counted like
    /// [`Member::data_offset`](super::member::Member::data_offset).
    pub fn position(&self) -> u64 {
        let held = if self.pending.is_some() {
            BLOCK as u64
        } else {
            0
        };
        self.base + self.pos - held
    }

    /// The stream underneath.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// The quirks met since the last call (in [`Reader::next`] and
    /// [`Reader::read_rest`]), in order.
    pub fn take_quirks(&mut self) -> Vec<Quirk> {
        std::mem::take(&mut self.quirks)
    }

    /// Notes a quirk of the current member.
    pub(super) fn quirk(&mut self, kind: QuirkKind) {
        self.quirks.push(Quirk {
            member: self.member.clone(),
            offset: self.header_offset,
            kind,
        });
    }

    pub(super) fn err(&self, kind: TarErrorKind) -> TarError {
        TarError {
            member: self.member.clone(),
            offset: self.header_offset,
            kind,
        }
    }

    /// Reads until `buf` is full or the stream ends; returns the count.
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(TarErrorKind::Io(e))),
            }
        }
        self.pos += n as u64;
        Ok(n)
    }

    /// The next header block (the one already read by
    /// [`Reader::body_follows`], if any); returns the bytes got, fewer
    /// than a block where the stream ends.
    pub(super) fn header_block(
        &mut self,
        block: &mut [u8; BLOCK],
    ) -> Result<usize, TarError> {
        match self.pending.take() {
            Some(b) => {
                *block = b;
                Ok(BLOCK)
            }
            None => self.fill(block),
        }
    }

    /// For a member whose size field says `stored` bytes but whose kind
    /// has no body in GNU tar or in bsdtar (see `decode::bodiless`):
    /// whether the body is really there. Where the next block is a
    /// header (or the end marker, or the stream ends), it is not: the
    /// block is kept for [`Reader::next`] and nothing is lost, as both
    /// tars lose nothing. Otherwise the declared body is skipped, which
    /// is where both tars find the next header after "Skipping to next
    /// header" (old archivers wrote the file's data after a hard link).
    pub(super) fn body_follows(
        &mut self,
        stored: u64,
    ) -> Result<bool, TarError> {
        if stored == 0 {
            return Ok(false);
        }
        let mut b = [0u8; BLOCK];
        match self.fill(&mut b)? {
            0 => return Ok(false),
            BLOCK => {}
            _ => return Err(self.err(TarErrorKind::Truncated("body"))),
        }
        if header::is_zero(&b) || header::check_sum(&b).is_ok() {
            self.pending = Some(b);
            return Ok(false);
        }
        self.count(stored)?;
        let rest = stored
            .checked_add(pad(stored))
            .ok_or_else(|| self.err(TarErrorKind::Truncated("body")))?
            - BLOCK as u64;
        self.skip(rest, "body")?;
        Ok(true)
    }

    /// A whole block; `part` names it if the stream ends inside it.
    pub(super) fn block(
        &mut self,
        part: &'static str,
    ) -> Result<[u8; BLOCK], TarError> {
        let mut b = [0u8; BLOCK];
        if self.fill(&mut b)? != BLOCK {
            return Err(self.err(TarErrorKind::Truncated(part)));
        }
        Ok(b)
    }

    /// Exactly `n` bytes (`n` already checked against a limit).
    pub(super) fn bytes(
        &mut self,
        n: u64,
        part: &'static str,
    ) -> Result<Vec<u8>, TarError> {
        let len = usize::try_from(n)
            .map_err(|_| self.err(TarErrorKind::Truncated(part)))?;
        let mut v = vec![0u8; len];
        if self.fill(&mut v)? != len {
            return Err(self.err(TarErrorKind::Truncated(part)));
        }
        self.skip(pad(n), part)?;
        Ok(v)
    }

    pub(super) fn skip(
        &mut self,
        n: u64,
        part: &'static str,
    ) -> Result<(), TarError> {
        if n == 0 {
            return Ok(());
        }
        if let Some(seek) = self.seek {
            let to = self
                .position()
                .checked_add(n)
                .ok_or_else(|| self.err(TarErrorKind::Truncated(part)))?;
            if self.len.is_some_and(|len| to > len) {
                return Err(self.err(TarErrorKind::Truncated(part)));
            }
            seek(&mut self.inner, to)
                .map_err(|e| self.err(TarErrorKind::Io(e)))?;
            self.pos += n;
            return Ok(());
        }
        let mut left = n;
        let mut buf = [0u8; 8192];
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let got = self.fill(&mut buf[..want])?;
            if got == 0 {
                return Err(self.err(TarErrorKind::Truncated(part)));
            }
            left -= got as u64;
        }
        Ok(())
    }

    pub(super) fn stored_size(
        &self,
        block: &[u8; BLOCK],
    ) -> Result<u64, TarError> {
        header::field::<u64>(block, 124..136, "size")
            .map_err(|e| self.field_err(e))
    }

    pub(super) fn field_err(&self, e: header::FieldError) -> TarError {
        self.err(TarErrorKind::Field {
            field: e.field,
            why: e.why,
        })
    }

    /// Counts `n` declared bytes against the total limit.
    pub(super) fn count(&mut self, n: u64) -> Result<(), TarError> {
        let limit = self.limits.max_total_bytes;
        match self.total.checked_add(n) {
            Some(t) if t <= limit => {
                self.total = t;
                Ok(())
            }
            _ => Err(self.err(TarErrorKind::Limit {
                what: "total declared bytes",
                limit,
            })),
        }
    }

    /// A reader of the current member's body: exactly its stored bytes
    /// (for a sparse member, its segments' data in order). Ending early
    /// is an `UnexpectedEof` error holding a [`TarError`] naming the
    /// member.
    pub fn body(&mut self) -> Body<'_, R> {
        Body { r: self }
    }

    /// Body bytes of the current member not yet read.
    pub fn body_remaining(&self) -> u64 {
        self.remaining
    }

    /// Skips the rest of the current member's body (the next
    /// [`Reader::next`] would too).
    pub fn skip_body(&mut self) -> Result<(), TarError> {
        let n = self.remaining;
        self.skip(n, "body")?;
        self.remaining = 0;
        Ok(())
    }
}

impl<R: Read + Seek> Reader<R> {
    /// A reader of a plain tar file: bodies are skipped by seeking, and a
    /// body reaching past the end of the file is refused when its member
    /// is returned. Offsets are offsets in the file.
    pub fn seekable(mut inner: R, limits: Limits) -> io::Result<Self> {
        let base = inner.stream_position()?;
        let len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(base))?;
        let mut r = Reader::new(inner, limits);
        r.base = base;
        r.len = Some(len);
        r.seek = Some(|inner, to| inner.seek(SeekFrom::Start(to)));
        Ok(r)
    }
}

/// The body of the current member; see [`Reader::body`].
pub struct Body<'a, R> {
    r: &'a mut Reader<R>,
}

impl<R: Read> Read for Body<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = &mut *self.r;
        if r.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(r.remaining).unwrap_or(usize::MAX));
        let n = loop {
            match r.inner.read(&mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    r.failed = true;
                    return Err(r.err(TarErrorKind::Io(e)).into());
                }
                Ok(n) => break n,
            }
        };
        if n == 0 {
            r.failed = true;
            return Err(r.err(TarErrorKind::Truncated("body")).into());
        }
        r.pos += n as u64;
        r.remaining -= n as u64;
        Ok(n)
    }
}
