//! Asking the kernel: an ACL is kept in step with the mode by the kernel
//! (`chmod` rewrites its mask, an ACL no richer than the mode is not
//! stored at all), so an unpack into memory does not guess what a tree
//! would hold. It makes an entry of its own in the store's scratch
//! directory, gives it the member's metadata exactly as the tree unpack
//! gives it ([`Ctx::finish_fd`]), reads back what the kernel left, and
//! removes it.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use super::ctx::Ctx;
use super::job::Meta;
use super::memory::Attrs;
use crate::error::{Error, Op, Result};
use crate::sys::posix::at;
use crate::sys::{self, XattrTarget};

/// An extended attribute the kernel keeps by rules of its own.
pub(super) fn is_acl(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
}

/// The attributes the kernel leaves when `meta` is given to a new file,
/// or (with `dir_before`) to a directory whose attributes were
/// `dir_before`; `shown` is where the member would be, for messages (a
/// refusal the kernel makes is the tree unpack's, at the same path).
pub(super) fn kernel_attrs(
    ctx: &Ctx<'_>,
    shown: &Path,
    meta: &Meta,
    dir_before: Option<&Attrs>,
) -> Result<Attrs> {
    let Some(to) = &ctx.objects else {
        return Err(Error::io(
            Op::Open,
            shown,
            std::io::Error::other("no store to ask the kernel in"),
        ));
    };
    let scratch = to
        .sink
        .scratch()
        .map_err(|e| Error::io(Op::Open, ctx.root, e))?;
    let d = scratch.as_raw_fd();
    let name = ctx.temp_name();
    let f = match dir_before {
        None => at::create_file(d, &name)
            .map_err(|e| Error::io(Op::Create, shown, e))?,
        Some(_) => {
            at::mkdir(d, &name, 0o700)
                .map_err(|e| Error::io(Op::Mkdir, shown, e))?;
            File::from(
                at::open_dir(d, &name)
                    .map_err(|e| Error::io(Op::Open, shown, e))?,
            )
        }
    };
    let asked = ask(ctx, &f, meta, dir_before, shown);
    drop(f);
    let _scratch_entry = at::unlink(d, &name, dir_before.is_some());
    asked
}

/// Gives `f` the directory's attributes before (its extended attributes,
/// then its mode, as the kernel keeps them in step), then `meta`, and
/// reads back what is left.
fn ask(
    ctx: &Ctx<'_>,
    f: &File,
    meta: &Meta,
    dir_before: Option<&Attrs>,
    shown: &std::path::Path,
) -> Result<Attrs> {
    let target = XattrTarget::Fd(f.as_fd());
    if let Some(before) = dir_before {
        for (n, v) in &before.xattrs {
            let c = CString::new(n.clone()).map_err(|_| {
                Error::io(
                    Op::SetXattr,
                    shown,
                    std::io::Error::from(std::io::ErrorKind::InvalidInput),
                )
            })?;
            sys::set_xattr(&target, &c, v)
                .map_err(|e| Error::io(Op::SetXattr, shown, e))?;
        }
        at::fchmod(f, before.mode)
            .map_err(|e| Error::io(Op::Chmod, shown, e))?;
    }
    ctx.finish_fd(f, meta, shown)?;
    let st = at::fstat(f).map_err(|e| Error::io(Op::Stat, shown, e))?;
    let mut xattrs = BTreeMap::new();
    let names = sys::list_xattrs(&target)
        .map_err(|e| Error::io(Op::ListXattr, shown, e))?;
    for n in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(c) = CString::new(n) else { continue };
        if let Some(v) = sys::get_xattr(&target, &c)
            .map_err(|e| Error::io(Op::GetXattr, shown, e))?
        {
            xattrs.insert(n.to_vec(), v);
        }
    }
    Ok(Attrs {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
        xattrs,
    })
}
