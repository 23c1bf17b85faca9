//! gzip, member after member as `gzip -d` reads them, what follows the
//! last logged as ignored.

use std::io::{self, BufRead, Read};

use super::ignored::{Ignored, IgnoredLog};
use super::input::Peeked;
use super::magic::GZIP;

/// gzip members one after another, as `gzip -d` reads them: after the
/// last, zeros and bytes that are not a member are read, ignored and
/// logged.
pub(super) struct GzipMembers<R: BufRead> {
    /// The member being read, or (between members) none.
    member: Option<flate2::bufread::GzDecoder<Peeked<R>>>,
    /// The input between members.
    input: Option<Peeked<R>>,
    /// The first member has been started.
    started: bool,
    ignored: IgnoredLog,
}

impl<R: BufRead> GzipMembers<R> {
    pub(super) fn new(r: R, ignored: IgnoredLog) -> Self {
        GzipMembers {
            member: None,
            input: Some(Peeked::new(r)),
            started: false,
            ignored,
        }
    }

    /// Between members: starts the next one; false at the end, having
    /// read and logged anything after the last member. An error leaves
    /// the input where it was.
    fn next_member(&mut self) -> io::Result<bool> {
        let Some(input) = self.input.as_mut() else {
            return Ok(false);
        };
        let head = input.peek(2)?;
        if head.is_empty() && self.started {
            self.input = None;
            return Ok(false);
        }
        // The first member is read whatever it starts with: its header
        // is checked by the decoder.
        if !self.started || head == GZIP {
            self.started = true;
            self.member =
                self.input.take().map(flate2::bufread::GzDecoder::new);
            return Ok(true);
        }
        let at = input.taken;
        let (len, zeros) = input.skip_rest(|b| b.iter().all(|&x| x == 0))?;
        self.ignored.push(if zeros {
            Ignored::GzipPadding { at, len }
        } else {
            Ignored::GzipGarbage { at, len }
        });
        self.input = None;
        Ok(false)
    }
}

impl<R: BufRead> Read for GzipMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(m) = &mut self.member {
                let n = m.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            // The member's trailer (CRC32, ISIZE) is checked: on to the
            // input after it.
            if let Some(m) = self.member.take() {
                self.input = Some(m.into_inner());
            }
            if !self.next_member()? {
                return Ok(0);
            }
        }
    }
}
