//! fs-verity on objects where the store's filesystem has it: enabled on
//! each object before it is renamed into place, and measured against its
//! name, so that the kernel checks its contents on every read. Where the
//! filesystem has none (ext4 without `-O verity`, tmpfs), the first
//! refusal is remembered for the store's run and no object is tried
//! again: the digests are still the objects' names, checked on first use
//! and by `verify`, but contents are not verified on read.

use std::ffi::CStr;
use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::Ordering;

use composefs::fsverity::{
    EnableVerityError, enable_verity_with_retry, measure_verity,
};
use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::Store;

/// Whether the store's objects have fs-verity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verity {
    /// Enabled on every object written: the kernel verifies reads.
    Enabled,
    /// The store's filesystem has no fs-verity: contents are checked
    /// only against their names (first use, `cache verify`).
    Unsupported,
}

impl fmt::Display for Verity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verity::Enabled => "enabled",
            Verity::Unsupported => "unsupported",
        })
    }
}

// What a store has learnt of its filesystem's fs-verity this run.
const UNKNOWN: u8 = 0;
const ENABLED: u8 = 1;
const UNSUPPORTED: u8 = 2;

/// True if the refusal means "no fs-verity here", not a failure.
fn unsupported(e: &EnableVerityError) -> bool {
    match e {
        EnableVerityError::FilesystemNotSupported => true,
        EnableVerityError::Io(e) => matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL)
        ),
        _ => false,
    }
}

impl Store {
    /// False once the store's filesystem was found to have no fs-verity.
    pub(crate) fn may_have_verity(&self) -> bool {
        self.verity_state().load(Ordering::Relaxed) != UNSUPPORTED
    }

    /// Enables fs-verity on the finished temporary file `name` in `dir`
    /// (no writable descriptor of it may be open) and checks the kernel's
    /// digest is `id`; nothing where the filesystem has no fs-verity.
    pub(crate) fn seal(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        id: &ObjectId,
        shown: &Path,
    ) -> Result<(), Error> {
        if self.verity_state().load(Ordering::Relaxed) == UNSUPPORTED {
            return Ok(());
        }
        let f = at::open_read(dir.as_raw_fd(), name)
            .map_err(|e| Error::io(shown, Op::Open, e))?;
        self.seal_file(&f, id, shown)
    }

    /// [`Store::seal`] of an open file (read-only, no writer left).
    pub(crate) fn seal_file(
        &self,
        f: &std::fs::File,
        id: &ObjectId,
        shown: &Path,
    ) -> Result<(), Error> {
        let state = self.verity_state();
        if state.load(Ordering::Relaxed) == UNSUPPORTED {
            return Ok(());
        }
        match enable_verity_with_retry::<ObjectId>(f) {
            Ok(()) | Err(EnableVerityError::AlreadyEnabled) => {}
            Err(e) if unsupported(&e) => {
                state.store(UNSUPPORTED, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) => {
                return Err(Error::new(
                    shown,
                    Op::Verity,
                    Problem::Format(e.to_string()),
                ));
            }
        }
        let found = measure_verity::<ObjectId>(f).map_err(|e| {
            Error::new(shown, Op::Verity, Problem::Format(e.to_string()))
        })?;
        if &found != id {
            return Err(Error::new(
                shown,
                Op::Verity,
                Problem::Mismatch {
                    found: digest::hex(&found),
                },
            ));
        }
        state.store(ENABLED, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this store's objects get fs-verity: what writing them
    /// found, or, before any was written this run, what a small probe
    /// file in `objects/` finds.
    pub fn verity(&self) -> Result<Verity, Error> {
        let state = self.verity_state();
        if state.load(Ordering::Relaxed) == UNKNOWN {
            self.probe_verity()?;
        }
        Ok(match state.load(Ordering::Relaxed) {
            ENABLED => Verity::Enabled,
            _ => Verity::Unsupported,
        })
    }

    fn probe_verity(&self) -> Result<(), Error> {
        let dir = at::open_dir(self.objects_dir().as_raw_fd(), c".").map_err(
            |e| Error::io(&self.path().join("objects"), Op::Open, e),
        )?;
        let shown = self.path().join("objects");
        let (mut f, name) = self.temporary(dir.as_fd(), &shown)?;
        let tmp_shown = shown.join(name.to_string_lossy().as_ref());
        let data = b"fs-verity probe";
        let done = f
            .write_all(data)
            .map_err(|e| Error::io(&tmp_shown, Op::Write, e));
        drop(f);
        let done = done.and_then(|()| {
            self.seal(dir.as_fd(), &name, &digest::of_bytes(data), &tmp_shown)
        });
        let _ = at::unlink(dir.as_raw_fd(), &name, false);
        done
    }
}
