//! An entry's metadata applied: owner (or a notice when it cannot be),
//! xattrs, mode and times, through a descriptor or by name; directories'
//! at the end, deepest first.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use zinstall_archive::names::Name;

use super::ctx::Ctx;
use super::job::Meta;
use crate::beneath::Chain;
use crate::error::{Error, Op, Result};
use crate::stats::NoticeKind;
use crate::sys::posix::{at, egid, euid};
use crate::sys::{self, XattrTarget};

impl Ctx<'_> {
    /// Owner (or a notice), xattrs, mode and times through a descriptor.
    pub(super) fn finish_fd(
        &self,
        f: &File,
        m: &Meta,
        shown: &Path,
    ) -> Result<()> {
        self.owner(m, shown, || at::fchown(f, m.uid, m.gid))?;
        self.set_xattrs(&XattrTarget::Fd(f.as_fd()), m, shown)?;
        at::fchmod(f, m.mode & 0o7777)
            .map_err(|e| Error::io(Op::Chmod, shown, e))?;
        at::futimens(f, &m.times).map_err(|e| Error::io(Op::SetTimes, shown, e))
    }

    /// The same for an entry named in a directory we hold (a symlink, a
    /// FIFO, a device), never following it.
    pub(super) fn finish_at(
        &self,
        dir: RawFd,
        leaf: &CStr,
        m: &Meta,
        shown: &Path,
        symlink: bool,
    ) -> Result<()> {
        self.owner(m, shown, || at::lchown(dir, leaf, m.uid, m.gid))?;
        self.set_xattrs(&XattrTarget::At(dir, leaf), m, shown)?;
        if !symlink {
            sys::chmod_at(dir, leaf, m.mode & 0o7777)
                .map_err(|e| Error::io(Op::Chmod, shown, e))?;
        }
        at::set_times(dir, leaf, &m.times)
            .map_err(|e| Error::io(Op::SetTimes, shown, e))
    }

    /// The member's xattrs; those needing privilege we lack are noticed
    /// (not root) rather than failed.
    fn set_xattrs(
        &self,
        target: &XattrTarget<'_>,
        m: &Meta,
        shown: &Path,
    ) -> Result<()> {
        if !sys::XATTRS {
            if !m.xattrs.is_empty() {
                self.notice(NoticeKind::XattrsUnsupported, shown);
            }
            return Ok(());
        }
        for (name, value) in &m.xattrs {
            if let Err(e) = sys::set_xattr(target, name, value) {
                let denied = matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES)
                );
                if denied && !self.is_root {
                    self.notice(
                        NoticeKind::Xattr(name.to_string_lossy().into_owned()),
                        shown,
                    );
                } else {
                    return Err(Error::Attr {
                        op: Op::SetXattr,
                        path: shown.to_path_buf(),
                        name: name.to_string_lossy().into_owned(),
                        error: e,
                    });
                }
            }
        }
        Ok(())
    }

    fn owner(
        &self,
        m: &Meta,
        shown: &Path,
        chown: impl FnOnce() -> io::Result<()>,
    ) -> Result<()> {
        if !self.preserve_owner {
            if !self.is_root && (m.uid != euid() || m.gid != egid()) {
                self.notice(NoticeKind::Ownership, shown);
            }
            return Ok(());
        }
        match chown() {
            Err(e)
                if !self.is_root && e.raw_os_error() == Some(libc::EPERM) =>
            {
                self.notice(NoticeKind::Ownership, shown);
                Ok(())
            }
            r => r.map_err(|e| Error::io(Op::Chown, shown, e)),
        }
    }

    /// Applies `m` to the directory `parts` beneath the root `top`.
    pub(super) fn finish_dir(
        &self,
        top: &OwnedFd,
        chain: &mut Chain,
        parts: &[CString],
        m: &Meta,
    ) -> Result<()> {
        let entry = Name::joined(parts).to_string_lossy().into_owned();
        let Some((leaf, parent)) = parts.split_last() else {
            // The archive's entry for the root itself.
            let top = top
                .try_clone()
                .map_err(|e| Error::io(Op::Open, self.root, e))?;
            return self.finish_fd(&File::from(top), m, self.root);
        };
        let parent = self.open_dir(chain, parent, &entry, false)?;
        let shown = self.shown(parts);
        let fd = at::open_dir(parent.as_raw_fd(), leaf)
            .map_err(|e| Error::io(Op::Open, &shown, e))?;
        self.finish_fd(&File::from(fd), m, &shown)
    }
}
