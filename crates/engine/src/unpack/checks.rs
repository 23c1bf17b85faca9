//! What the reader checks about a member before anything is made of it:
//! the same checks whether the member is then made beneath the root or
//! only recorded by a dry run.

use std::ffi::CString;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::names::{self, Name};
use zinstall_archive::tar;

use super::ctx::Ctx;
use super::members::relative;
use crate::error::{Error, Result};

/// A symlink's target: present, and without a NUL.
pub(super) fn symlink_target(
    ctx: &Ctx<'_>,
    m: &tar::Member,
    entry: &str,
) -> Result<CString> {
    let target = m.link.clone().unwrap_or_default();
    let target = CString::new(target).map_err(|_| {
        ctx.refuse(
            entry,
            ArchiveRefusal::Corrupt("NUL in symlink target".into()),
        )
    })?;
    if target.as_bytes().is_empty() {
        return Err(ctx.refuse(
            entry,
            ArchiveRefusal::Corrupt("symlink without target".into()),
        ));
    }
    Ok(target)
}

/// A hard link's target, checked as a member's name is and beneath the
/// root (in a zinstall layer, beneath its `root/`), with its leaf.
pub(super) fn link_target(
    ctx: &Ctx<'_>,
    m: &tar::Member,
    entry: &str,
    subtree: bool,
) -> Result<(Name, CString)> {
    let outside = || ctx.refuse(entry, ArchiveRefusal::HardLinkOutside);
    let raw = m.link.as_deref().ok_or_else(outside)?;
    let raw = relative(raw, "hard link targets", |k, p| ctx.notice(k, p));
    let mut target = names::check(raw).map_err(|_| outside())?;
    if subtree {
        if target.parts.first().map(|p| p.as_bytes()) != Some(b"root") {
            return Err(outside());
        }
        target.parts.remove(0);
    }
    let Some(leaf) = target.leaf().cloned() else {
        return Err(outside());
    };
    Ok((target, leaf))
}

/// A special file's type for `mknod`, and whether it is a device: a
/// device node only when the options allow them.
pub(super) fn special_type(
    ctx: &Ctx<'_>,
    m: &tar::Member,
    entry: &str,
) -> Result<libc::mode_t> {
    let (typ, dev) = match m.kind {
        tar::Kind::CharDevice => (libc::S_IFCHR, true),
        tar::Kind::BlockDevice => (libc::S_IFBLK, true),
        _ => (libc::S_IFIFO, false),
    };
    if dev && !ctx.opts.allow_devices {
        return Err(ctx.refuse(entry, ArchiveRefusal::DeviceNotAllowed));
    }
    Ok(typ)
}

/// The refusal of a member of a type no tar writes for a file.
pub(super) fn unsupported(ctx: &Ctx<'_>, entry: &str, typeflag: u8) -> Error {
    ctx.refuse(
        entry,
        ArchiveRefusal::UnsupportedEntryType(format!(
            "typeflag {:?}",
            typeflag as char
        )),
    )
}
