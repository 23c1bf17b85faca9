//! A dry run of an unpack: the archive read through as [`unpack`]
//! reads it, nothing written.
//!
//! [`unpack`]: super::unpack

use std::io::{self, Seek, SeekFrom};
use std::path::Path;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::compress::{
    self, compression_of, decompress, read_up_to,
};
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar::{self, TarError};

use super::members::{NO_MEMBERS, first_member, quirk_notice, relative};
use super::options::{UnpackOptions, UnpackReport, Whiteouts};
use super::source::limits;
use crate::error::{Error, Op, Result};
use crate::plan::EntryKind;
use crate::stats::{NoticeBoard, NoticeKind};

/// Reads `archive` to its end as [`unpack`](super::unpack) would into
/// `root`, writing nothing: every member's name, kind, size and the
/// archive's metadata are checked as the unpack checks them, the
/// [`Listener`](crate::Listener) of `opts` hears of each member, and the
/// report counts what would be made. What depends on the tree being
/// built (a member below a symlink an earlier member made, a file over a
/// directory) is found by the unpack alone.
pub fn dry_run(
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let mut f = zinstall_core::foreign::open(
        archive,
        zinstall_core::foreign::Follow::Yes,
    )
    .map_err(|e| Error::io(Op::Open, archive, e.into()))?;
    let mut head = [0u8; compress::MAGIC_LEN];
    let n = read_up_to(&mut f, &mut head)
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    let reader = decompress(f, compression_of(&head[..n]))
        .map_err(|e| Error::io(Op::Read, archive, e))?;
    dry_run_from(reader, archive, root, opts)
}

/// [`dry_run`] of a tar stream already decompressed (an OCI layer read
/// through its digest checks); `archive` names it in errors. With
/// `opts.whiteouts` other than `Off`, OCI whiteouts are removals, not
/// entries: they are checked and not counted.
pub fn dry_run_from(
    reader: impl io::Read,
    archive: &Path,
    root: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport> {
    let started = std::time::Instant::now();
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    let tar_err = |e: TarError| Error::tar(archive, e);
    let mut rd = tar::Reader::new(reader, limits(opts));
    let mut report = UnpackReport::default();
    let stats = &mut report.stats;
    let mut first = true;
    let mut subtree = false;
    let board = NoticeBoard::default();
    let notice = |k, p: &Path| board.add(k, p);
    let quirks = |rd: &mut tar::Reader<_>| {
        for q in rd.take_quirks() {
            let (k, p) = quirk_notice(archive, q);
            notice(k, &p);
        }
    };
    loop {
        let next = rd.next();
        quirks(&mut rd);
        let Some(m) = next.map_err(tar_err)? else {
            break;
        };
        if opts.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(Error::Cancelled {
                path: archive.to_path_buf(),
            });
        }
        let shown_entry = m.name_lossy();
        let raw = relative(&m.name, "member names", notice);
        let mut name =
            names::check(raw).map_err(|r| refuse(&shown_entry, r))?;
        if first {
            first = false;
            if let Some(meta) =
                first_member(&mut rd, &m, &name, opts.expect, archive)?
            {
                report.meta = Some(meta);
                subtree = true;
                continue;
            }
        }
        if subtree {
            if name.parts.first().map(|p| p.as_bytes()) != Some(b"root") {
                stats.skipped += 1;
                continue;
            }
            name.parts.remove(0);
        }
        if name.leaf().is_none() {
            // The root itself: its metadata, nothing made.
            continue;
        }
        if opts.whiteouts != Whiteouts::Off {
            match super::layered::classify(&name.parts).map_err(|why| {
                refuse(&shown_entry, ArchiveRefusal::Corrupt(why.to_string()))
            })? {
                super::layered::Class::Entry => {}
                super::layered::Class::Skip => {
                    stats.skipped += 1;
                    continue;
                }
                super::layered::Class::Opaque
                | super::layered::Class::Whiteout(_) => continue,
            }
        }
        let kind = match m.kind {
            tar::Kind::Directory => {
                stats.dirs += 1;
                EntryKind::Dir
            }
            tar::Kind::File => {
                stats.files += 1;
                stats.bytes += m.size;
                EntryKind::File
            }
            tar::Kind::Symlink => {
                stats.symlinks += 1;
                EntryKind::Symlink
            }
            tar::Kind::HardLink => {
                let target = m.link.as_deref().unwrap_or_default();
                let target = relative(target, "hard link targets", notice);
                names::check(target).map_err(|r| refuse(&shown_entry, r))?;
                stats.hardlinks += 1;
                EntryKind::HardLink
            }
            tar::Kind::CharDevice | tar::Kind::BlockDevice
                if !opts.allow_devices =>
            {
                return Err(refuse(
                    &shown_entry,
                    ArchiveRefusal::DeviceNotAllowed,
                ));
            }
            tar::Kind::CharDevice
            | tar::Kind::BlockDevice
            | tar::Kind::Fifo => {
                stats.specials += 1;
                EntryKind::Special
            }
            tar::Kind::Other(t) => {
                return Err(refuse(
                    &shown_entry,
                    ArchiveRefusal::UnsupportedEntryType(format!(
                        "typeflag {:?}",
                        t as char
                    )),
                ));
            }
        };
        if let Some(l) = &opts.listener {
            l.entry(Path::new(&shown_entry), &shown(root, &name), kind);
        }
    }
    if first {
        if opts.expect.is_some() {
            return Err(refuse("", ArchiveRefusal::MissingMetadata));
        }
        notice(NoticeKind::ArchiveQuirk(NO_MEMBERS.into()), archive);
    }
    let rest = rd.read_rest();
    quirks(&mut rd);
    rest.map_err(tar_err)?;
    report.notices = board.into_vec();
    report.stats.elapsed = started.elapsed();
    Ok(report)
}

/// Where a member lands: `root` joined with its checked name.
pub(super) fn shown(root: &Path, name: &Name) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut p = root.to_path_buf();
    for c in &name.parts {
        p.push(std::ffi::OsStr::from_bytes(c.as_bytes()));
    }
    p
}
