//! What the reader makes of a member before placing it: its name made
//! relative, a quirk turned into a notice, the first member read as a
//! zinstall archive's metadata, and its kind as listings name it. Shared
//! by the unpack, its dry run and the peek at an archive's kind.

use std::io::Read;
use std::path::{Path, PathBuf};

use zinstall_archive::meta;
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar::{self, TarError};
use zinstall_archive::{ArchiveKind, ArchiveMeta, ArchiveRefusal};

use crate::error::{Error, Result};
use crate::stats::NoticeKind;

/// A reader's quirk as a notice: what was done, and the member (or, for
/// the archive as a whole, the archive and the offset).
pub(super) fn quirk_notice(
    archive: &Path,
    q: tar::Quirk,
) -> (NoticeKind, PathBuf) {
    if q.member.is_empty() {
        (
            NoticeKind::ArchiveQuirk(format!(
                "at offset {}: {}",
                q.offset, q.kind
            )),
            archive.to_path_buf(),
        )
    } else {
        (
            NoticeKind::ArchiveQuirk(q.kind.to_string()),
            PathBuf::from(q.member),
        )
    }
}

/// A member name without its leading slashes (noticed, once counted per
/// member, as GNU tar warns once per archive): beneath the root, as GNU
/// tar extracts it. `what` is `member names` or `hard link targets`.
pub(super) fn relative<'a>(
    raw: &'a [u8],
    what: &str,
    notice: impl FnOnce(NoticeKind, &Path),
) -> &'a [u8] {
    let (rest, stripped) = names::strip_leading_slashes(raw);
    if stripped {
        notice(
            NoticeKind::ArchiveQuirk(format!(
                "leading `/' removed from {what}"
            )),
            Path::new(&names::show(raw)),
        );
    }
    rest
}

/// What an archive with no member at all does: GNU tar extracts nothing
/// and succeeds, and so does the unpack, saying so. A zinstall archive
/// must carry its `zinstall.json`.
pub(super) const NO_MEMBERS: &str = "archive has no members: nothing unpacked";

/// The most `zinstall.json` may hold.
const MAX_META: u64 = 64 << 10;

/// The first member's part: `Some(metadata)` when it is `zinstall.json`
/// (read, parsed, and checked against `expect`); `None` when it is not,
/// which `expect` refuses.
pub(super) fn first_member<R: Read>(
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
    name: &Name,
    expect: Option<ArchiveKind>,
    archive: &Path,
) -> Result<Option<ArchiveMeta>> {
    let refuse = |entry: &str, reason| Error::Archive {
        archive: archive.to_path_buf(),
        entry: entry.to_string(),
        reason,
    };
    if name.parts.len() != 1
        || name.parts[0].as_bytes() != meta::NAME.as_bytes()
    {
        return match expect {
            Some(_) => Err(refuse("", ArchiveRefusal::MissingMetadata)),
            None => Ok(None),
        };
    }
    let shown = m.name_lossy();
    let body = read_meta(rd, m)
        .map_err(|e| Error::tar(archive, e))?
        .map_err(|why| {
            refuse(&shown, ArchiveRefusal::BadMetadata(why.to_string()))
        })?;
    let found = meta::parse(&body).map_err(|why| {
        refuse(&shown, ArchiveRefusal::BadMetadata(why.to_string()))
    })?;
    if let Some(want) = expect
        && want != found.kind
    {
        return Err(refuse(
            "",
            ArchiveRefusal::WrongArchiveType {
                expected: want.as_str().into(),
                found: found.kind.as_str().into(),
            },
        ));
    }
    Ok(Some(found))
}

/// Why a `zinstall.json` member is not metadata, before it is parsed.
#[derive(Debug)]
enum NotMeta {
    /// It is not a plain regular file.
    NotAFile,
    /// It holds this many bytes, more than [`MAX_META`].
    TooLarge(u64),
}

impl std::fmt::Display for NotMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotMeta::NotAFile => f.write_str("not a regular file"),
            NotMeta::TooLarge(size) => {
                write!(f, "{size} bytes, more than the {MAX_META} it may hold")
            }
        }
    }
}

/// The body of `zinstall.json`, bounded; the inner error says why it is
/// not metadata.
fn read_meta<R: Read>(
    rd: &mut tar::Reader<R>,
    m: &tar::Member,
) -> std::result::Result<std::result::Result<Vec<u8>, NotMeta>, TarError> {
    if m.kind != tar::Kind::File || m.sparse.is_some() {
        return Ok(Err(NotMeta::NotAFile));
    }
    if m.size > MAX_META {
        return Ok(Err(NotMeta::TooLarge(m.size)));
    }
    let mut body = Vec::with_capacity(m.size as usize);
    rd.body()
        .read_to_end(&mut body)
        .map_err(TarError::from_io)?;
    Ok(Ok(body))
}

/// A member's kind as listings name it.
pub(super) fn listed_kind(k: tar::Kind) -> crate::EntryKind {
    use crate::EntryKind;
    match k {
        tar::Kind::Directory => EntryKind::Dir,
        tar::Kind::HardLink => EntryKind::HardLink,
        tar::Kind::Symlink => EntryKind::Symlink,
        tar::Kind::CharDevice | tar::Kind::BlockDevice | tar::Kind::Fifo => {
            EntryKind::Special
        }
        tar::Kind::File | tar::Kind::Other(_) => EntryKind::File,
    }
}
