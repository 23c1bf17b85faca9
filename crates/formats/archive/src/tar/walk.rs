//! The walk through the archive: the headers before each member (PAX,
//! GNU long names, volume labels, Solaris ACLs), global PAX records, and
//! what follows the end marker.

use std::io::Read;

use super::error::{TarError, TarErrorKind};
use super::extended::Extensions;
use super::header::{self, BLOCK, lossy, pad};
use super::member::Member;
use super::pax::{Record, parse_pax};
use super::quirk::QuirkKind;
use super::reader::Reader;

impl<R: Read> Reader<R> {
    /// The next member, its extended headers applied; `None` at the end of
    /// the archive. What is left of the previous member's body is skipped
    /// first. After an error the reader stays failed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Member>, TarError> {
        if self.done {
            return Ok(None);
        }
        if self.failed {
            return Err(self.err(TarErrorKind::Malformed(
                "the reader stopped at an earlier error".into(),
            )));
        }
        let r = self.next_member();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn next_member(&mut self) -> Result<Option<Member>, TarError> {
        self.skip(self.remaining, "body")?;
        self.remaining = 0;
        self.skip(self.padding, "padding")?;
        self.padding = 0;
        self.member.clear();
        let mut ext = Extensions::default();
        let mut first_offset = None;
        loop {
            let offset = self.position();
            self.header_offset = *first_offset.get_or_insert(offset);
            let mut block = [0u8; BLOCK];
            let got = self.header_block(&mut block)?;
            if got == 0 || (got == BLOCK && header::is_zero(&block)) {
                return self.end(got, offset, &ext);
            }
            if got != BLOCK {
                return Err(self.err(TarErrorKind::Truncated("header")));
            }
            if let Err((stored, computed)) = header::check_sum(&block) {
                if self.member.is_empty() {
                    self.member = lossy(header::cstr(&block[..100]));
                }
                return Err(
                    self.err(TarErrorKind::Checksum { stored, computed })
                );
            }
            let typ = block[156];
            match typ {
                b'x' | b'g' => {
                    self.pax_header(&block, typ == b'g', &mut ext)?
                }
                b'L' | b'K' => self.long_name(&block, typ == b'L', &mut ext)?,
                b'V' => {
                    self.volume_label(&block, &ext)?;
                    first_offset = None;
                }
                b'A' => {
                    self.solaris_acl(&block)?;
                    first_offset = None;
                }
                b'M' | b'N' => {
                    return Err(self.err(TarErrorKind::Unsupported(format!(
                        "GNU {} member",
                        if typ == b'M' {
                            "multi-volume continuation"
                        } else {
                            "old long-name"
                        }
                    ))));
                }
                _ => return self.member(&block, ext).map(Some),
            }
        }
    }

    /// A zero block, or the stream's end (`got` 0), at `offset`: the end
    /// of the archive, unless extended headers wait for their member.
    fn end(
        &mut self,
        got: usize,
        offset: u64,
        ext: &Extensions,
    ) -> Result<Option<Member>, TarError> {
        // An empty PAX header says nothing: before the end marker
        // it is no sign of a lost member (GNU tar and bsdtar end
        // there quietly).
        let empty_pax = got == BLOCK
            && ext.long_name.is_none()
            && ext.long_link.is_none()
            && ext.pax.as_ref().is_some_and(Vec::is_empty);
        if empty_pax {
            self.quirk(QuirkKind::EmptyPaxHeader);
        } else if ext.any() {
            return Err(self.err(TarErrorKind::Truncated(
                "member after its extended headers",
            )));
        }
        // GNU tar and libarchive both stop at the first zero
        // block, and accept a stream ending on a block boundary
        // (bsdtar silently, GNU tar too; said here, since a cut
        // download ends so as well).
        if got == 0 && offset > self.base {
            self.quirk(QuirkKind::NoEndMarker);
        }
        self.done = true;
        Ok(None)
    }

    /// A GNU volume label, which names the archive, not a file.
    fn volume_label(
        &mut self,
        block: &[u8; BLOCK],
        ext: &Extensions,
    ) -> Result<(), TarError> {
        if ext.any() {
            return Err(self.err(TarErrorKind::Malformed(
                "extended headers before a volume label".into(),
            )));
        }
        // GNU tar takes a label's size for a body, bsdtar
        // does not (decode::bodiless): one is skipped only
        // where it is there, so no member is lost.
        let size = self.stored_size(block)?;
        if !self.body_follows(size)? && size > 0 {
            self.quirk(QuirkKind::NoBody {
                what: "volume label",
                bytes: size,
            });
        }
        Ok(())
    }

    /// A Solaris ACL header (star, Solaris tar) for the member after it:
    /// GNU tar and bsdtar skip it as an unknown extended header, and so
    /// does this reader.
    fn solaris_acl(&mut self, block: &[u8; BLOCK]) -> Result<(), TarError> {
        let size = self.stored_size(block)?;
        self.count(size)?;
        let was = std::mem::replace(
            &mut self.member,
            lossy(header::cstr(&block[..100])),
        );
        self.skip(size, "Solaris ACL header")?;
        self.skip(pad(size), "Solaris ACL header")?;
        self.quirk(QuirkKind::SolarisAcl);
        self.member = was;
        Ok(())
    }

    /// A PAX extended header (`x`, for the next member) or a global one
    /// (`g`, for every member after it), within their byte limits.
    fn pax_header(
        &mut self,
        block: &[u8; BLOCK],
        is_global: bool,
        ext: &mut Extensions,
    ) -> Result<(), TarError> {
        let size = self.stored_size(block)?;
        let limit = self.limits.max_pax_bytes;
        let left = if is_global {
            limit.saturating_sub(self.global_bytes)
        } else {
            limit
        };
        if size > left {
            return Err(self.err(TarErrorKind::Limit {
                what: if is_global {
                    "global PAX header bytes"
                } else {
                    "PAX extended header bytes"
                },
                limit,
            }));
        }
        let data = self.bytes(size, "PAX extended header")?;
        let records = parse_pax(&data)
            .map_err(|why| self.err(TarErrorKind::Pax(why.to_string())))?;
        if is_global {
            return self.add_globals(&records);
        }
        if ext.pax.is_some() {
            return Err(self.err(TarErrorKind::Malformed(
                "two PAX extended headers for one member".into(),
            )));
        }
        let owned: Vec<(Vec<u8>, Vec<u8>)> = records
            .iter()
            .map(|r| (r.key.to_vec(), r.value.to_vec()))
            .collect();
        if let Some((_, p)) = owned.iter().rev().find(|(k, _)| k == b"path") {
            self.member = lossy(p);
        }
        ext.pax = Some(owned);
        Ok(())
    }

    /// A GNU long name (`L`) or long link target (`K`) for the next
    /// member. Of two of a kind (Android's tar writes them) the last is
    /// used, as GNU tar uses it.
    fn long_name(
        &mut self,
        block: &[u8; BLOCK],
        is_name: bool,
        ext: &mut Extensions,
    ) -> Result<(), TarError> {
        let size = self.stored_size(block)?;
        if size > self.limits.max_name_bytes {
            return Err(self.err(TarErrorKind::Limit {
                what: "long name bytes",
                limit: self.limits.max_name_bytes,
            }));
        }
        let data = self.bytes(size, "GNU long name")?;
        let name = header::cstr(&data).to_vec();
        let slot = if is_name {
            &mut ext.long_name
        } else {
            &mut ext.long_link
        };
        if slot.is_some() {
            // Said once the member's name is known.
            ext.repeated
                .push(QuirkKind::RepeatedLongName { link: !is_name });
        }
        *slot = Some(name);
        if is_name && let Some(n) = &ext.long_name {
            self.member = lossy(n);
        }
        Ok(())
    }

    fn add_globals(&mut self, records: &[Record<'_>]) -> Result<(), TarError> {
        for r in records {
            // These make no sense for every member and readers disagree on
            // them (libarchive ignores global headers): refused.
            if matches!(r.key, b"path" | b"linkpath" | b"size")
                || r.key.starts_with(b"GNU.sparse.")
            {
                return Err(self.err(TarErrorKind::Pax(format!(
                    "global header sets {:?}",
                    lossy(r.key)
                ))));
            }
            let old = if r.value.is_empty() {
                self.globals.remove(r.key)
            } else {
                self.globals.insert(r.key.to_vec(), r.value.to_vec())
            };
            if let Some(v) = old {
                self.global_bytes -= (r.key.len() + v.len()) as u64;
            }
            if !r.value.is_empty() {
                self.global_bytes += (r.key.len() + r.value.len()) as u64;
            }
        }
        if self.global_bytes > self.limits.max_pax_bytes {
            return Err(self.err(TarErrorKind::Limit {
                what: "global PAX header bytes",
                limit: self.limits.max_pax_bytes,
            }));
        }
        Ok(())
    }

    /// After [`Reader::next`] returned `None`: reads the rest of the
    /// stream, so a decompressor beneath reaches its end and checks its
    /// trailer, and returns the stream. See [`Reader::read_rest`].
    pub fn finish(mut self) -> Result<R, TarError> {
        self.read_rest()?;
        Ok(self.inner)
    }

    /// After [`Reader::next`] returned `None`: reads the rest of the
    /// stream to its end, counting it against the total limit (a bomb
    /// hidden after the end marker is still refused), so a decompressor
    /// beneath checks its trailer.
    ///
    /// Zeros there are tar's padding. Anything else is noted as a quirk
    /// and not read as members: GNU tar and bsdtar stop at the first end
    /// marker too (a Maven-built tarball ends with a stray byte, `cat
    /// a.tar b.tar` makes an archive whose second half only `tar -i`
    /// reads). Reading on past an end marker would make an archive mean
    /// something other than what GNU tar extracts from it, so it is not
    /// done; the quirk names the second archive's first member.
    pub fn read_rest(&mut self) -> Result<(), TarError> {
        if !self.done {
            return Err(self.err(TarErrorKind::Malformed(
                "the rest read before the end of the archive".into(),
            )));
        }
        self.member.clear();
        // Whole blocks, so that a header after the marker is seen whole.
        let mut buf = vec![0u8; 128 * BLOCK];
        let start = self.position();
        let mut first_data: Option<u64> = None;
        let mut next_member = None;
        loop {
            let at = self.position();
            let n = self.fill(&mut buf)?;
            if n == 0 {
                break;
            }
            self.count(n as u64)?;
            if first_data.is_some() {
                continue;
            }
            let Some(i) = buf[..n].iter().position(|&b| b != 0) else {
                continue;
            };
            first_data = Some(at + i as u64);
            // A header at a block boundary: another archive.
            let block_start = i - i % BLOCK;
            if let Ok(block) = <[u8; BLOCK]>::try_from(
                &buf[block_start..][..BLOCK.min(n - block_start)],
            ) && header::check_sum(&block).is_ok()
            {
                first_data = Some(at + block_start as u64);
                next_member = Some(lossy(header::cstr(&block[..100])));
            }
        }
        if let Some(off) = first_data {
            self.header_offset = off;
            let kind = match next_member {
                Some(next_member) => {
                    QuirkKind::ConcatenatedArchive { next_member }
                }
                None => QuirkKind::TrailingData {
                    bytes: self.position() - start,
                },
            };
            self.quirk(kind);
        }
        Ok(())
    }
}
