//! The archive file: opened, its compression told (one zinstall does not
//! read refused up front), the reader's bounds, and a corrupt stream
//! blamed over the tar reader's complaint; with the peek at a zinstall
//! archive's kind, which needs nothing else.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use zinstall_archive::compress::{self, Compression, decompress};
use zinstall_archive::names;
use zinstall_archive::tar;
use zinstall_archive::{ArchiveKind, ArchiveRefusal};

use super::members::first_member;
use super::options::UnpackOptions;
use crate::error::{Error, Op, Result};

/// The error for `archive`, whose tar reader found it corrupt or
/// truncated (`e`): when `archive` is compressed and its stream is
/// itself corrupt or truncated (read again to its end, at most `limit`
/// bytes, as many as the unpack itself may read), the stream's fault at
/// the same member, since a stream decoded before its checksum is
/// reached gives the tar reader damaged headers; `e` otherwise.
pub(super) fn blame_stream(e: Error, archive: &Path, limit: u64) -> Error {
    // Only what damaged data gives: a name or size refusal stands, and a
    // bomb refused on its sizes is not decoded again.
    let Error::Archive {
        entry,
        reason: ArchiveRefusal::Corrupt(_) | ArchiveRefusal::Truncated { .. },
        ..
    } = &e
    else {
        return e;
    };
    let Ok((f, c)) = open_archive(archive) else {
        return e;
    };
    if c == Compression::None {
        return e;
    }
    let checked = decompress(f, c)
        .and_then(|d| io::copy(&mut d.take(limit), &mut io::sink()));
    let reason = match checked {
        Err(fault) if fault.kind() == io::ErrorKind::UnexpectedEof => {
            ArchiveRefusal::Truncated {
                what: format!("compressed stream ({fault})"),
            }
        }
        Err(fault) if fault.raw_os_error().is_none() => {
            ArchiveRefusal::Corrupt(fault.to_string())
        }
        _ => return e,
    };
    Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.clone(),
        reason,
    }
}

/// Opens `archive` and tells its compression; one zinstall does not read
/// is refused, naming the command that converts it, before anything is
/// read as tar.
pub(super) fn open_archive(archive: &Path) -> Result<(File, Compression)> {
    // A regular file, or refused naming what it is: a FIFO or a device
    // is never read as an archive.
    let mut f = zinstall_core::foreign::open(
        archive,
        zinstall_core::foreign::Follow::Yes,
    )
    .map_err(|e| Error::io(Op::Open, archive, e.into()))?;
    crate::sys::advise_sequential(&f);
    let compression = compress::detect(&mut f)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    if let Some(reason) = compression.refusal(archive) {
        return Err(Error::Archive {
            archive: archive.to_path_buf(),
            entry: String::new(),
            reason,
        });
    }
    Ok((f, compression))
}

/// The reader's bounds for `opts`: declared sizes count against
/// `max_bytes` before anything is written.
pub(super) fn limits(opts: &UnpackOptions) -> tar::Limits {
    tar::Limits {
        max_total_bytes: opts.max_bytes,
        ..tar::Limits::default()
    }
}

/// What a zinstall archive says it is, from its first member, reading
/// nothing more; `None` if the first member is not `zinstall.json`.
pub fn peek_kind(archive: &Path) -> Result<Option<ArchiveKind>> {
    peek(archive).map_err(|e| {
        blame_stream(e, archive, zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES)
    })
}

fn peek(archive: &Path) -> Result<Option<ArchiveKind>> {
    let (f, compression) = open_archive(archive)?;
    let mut reader = decompress(f, compression)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    // A file that is no tar at all (an HTML page saved as app.tar) is
    // named for what it is, not as an archive cut short; but a stream
    // that fails to decompress (a corrupt bzip2 block yields garbage
    // before its checksum) is named as such.
    let stream_fault = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => refuse(
            "",
            ArchiveRefusal::Truncated {
                what: format!("compressed stream ({e})"),
            },
        ),
        _ if e.raw_os_error().is_none() => {
            refuse("", ArchiveRefusal::Corrupt(e.to_string()))
        }
        _ => Error::io(Op::Read, archive, e),
    };
    let mut head = vec![0u8; tar::BLOCK];
    let n =
        compress::read_up_to(&mut reader, &mut head).map_err(stream_fault)?;
    head.truncate(n);
    if let Some(reason) = tar::not_tar(&head) {
        if compression != Compression::None {
            let limit = tar::DEFAULT_MAX_TOTAL_BYTES;
            io::copy(&mut (&mut reader).take(limit), &mut io::sink())
                .map_err(stream_fault)?;
        }
        return Err(refuse("", reason));
    }
    let reader = io::Read::chain(io::Cursor::new(head), reader);
    let mut rd = tar::Reader::new(reader, tar::Limits::default());
    let Some(m) = rd.next().map_err(|e| Error::tar(archive, e))? else {
        // No members (Docker's empty layer is 1,024 zero bytes): a plain
        // tarball, which unpacks to nothing, as GNU tar extracts it.
        return Ok(None);
    };
    let (raw, _) = names::strip_leading_slashes(&m.name);
    let name =
        names::check(raw).map_err(|r| refuse(&names::show(&m.name), r))?;
    Ok(first_member(&mut rd, &m, &name, None, archive)?.map(|m| m.kind))
}
