//! Adopting a file as an object: a tree written only to be stored (an
//! install's staging root on the store's filesystem) gives its regular
//! files to the store by a link, not a copy. Before the link the
//! file is made an object like any other: owned by the store's owner
//! (when run as root), mode 0644 and no extended attribute, so that a
//! setuid bit or a file capability never survives into the store; the
//! image keeps the file's real metadata, read before.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use zinstall_sys::fs::{at, remove_xattr_fd};

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::{OBJECT_MODE, Put, Store};

impl Store {
    /// Stores the file `name` in `dir`, open as `f` (read from its start;
    /// `shown` names it; `st` is its `fstat` and `xattrs` the names of
    /// its extended attributes, as the caller read them), moving it into
    /// the store when the store lacks it. The file is gone from `dir`
    /// afterwards, or left there when the store had it already. Across
    /// filesystems it is copied instead. `known` is its name and size
    /// when the caller took them as it wrote the file (it is then not
    /// read); it is read and hashed otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt_file(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        f: &File,
        shown: &Path,
        st: &libc::stat,
        xattrs: &[&[u8]],
        known: Option<(ObjectId, u64)>,
    ) -> Result<Put, Error> {
        let hint = st.st_size as u64;
        let (id, size) = match known {
            Some(k) => k,
            None => digest::of_reader(f, hint, |_| Ok(()))
                .map_err(|e| Error::io(shown, Op::Read, e))?,
        };
        let _writing = self.writing(&id);
        // Made an object first and moved in unless the name is taken:
        // the usual case (a new object) costs no look beforehand, and a
        // copy found there is checked as before.
        self.make_object(f, shown, st, xattrs)?;
        let obj = self.object_path(&id);
        self.seal_file(f, &id, &obj)?;
        let (dir_name, leaf) = self.names(&id)?;
        let obj_dir = self.object_dir(&dir_name, &obj)?;
        let (from, to) = (dir.as_raw_fd(), obj_dir.as_raw_fd());
        let mut replaced = false;
        // A link, then the staging name unlinked: a rename between two
        // directories takes the filesystem's rename lock, which every
        // worker's move would wait on in turn.
        // The staging name is the tree's to remove if unlinking fails.
        let mut moved = at::link(from, name, to, &leaf).map(|()| {
            let _left_to_the_tree = at::unlink(from, name, false);
        });
        if moved
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EEXIST))
        {
            match self.present(&id, size)? {
                crate::store::Present::Good => {
                    return Ok(Put::found(id, size));
                }
                // Not a regular file by that name any more, or one whose
                // contents do not match it: replaced.
                crate::store::Present::No | crate::store::Present::Bad => {
                    replaced = true;
                    moved = at::rename_between(from, name, to, &leaf);
                }
            }
        }
        match moved {
            Ok(()) => {
                self.mark_checked(&id);
                Ok(Put {
                    id,
                    size,
                    written: true,
                    replaced,
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                drop(_writing);
                io::Seek::seek(&mut &*f, io::SeekFrom::Start(0))
                    .map_err(|e| Error::io(shown, Op::Read, e))?;
                self.put_file(f, shown)
            }
            Err(e) => Err(Error::io(
                &obj,
                if replaced { Op::Rename } else { Op::Link },
                e,
            )),
        }
    }

    /// Makes the open file `f` (whose `fstat` is `st` and whose extended
    /// attributes are `xattrs`) what an object is: the store's owner (as
    /// root), mode 0644, no extended attribute.
    fn make_object(
        &self,
        f: &File,
        shown: &Path,
        st: &libc::stat,
        xattrs: &[&[u8]],
    ) -> Result<(), Error> {
        let (uid, gid) = self.owner();
        if (st.st_uid, st.st_gid) != (uid, gid) && self.is_root() {
            at::fchown(f, uid, gid)
                .map_err(|e| Error::io(shown, Op::Adopt, e))?;
        }
        // Read before any change: a setuid bit fchown cleared is still
        // in `st`, so the mode is set whenever it was not 0644.
        if st.st_mode & 0o7777 != OBJECT_MODE {
            at::fchmod(f, OBJECT_MODE)
                .map_err(|e| Error::io(shown, Op::Adopt, e))?;
        }
        for n in xattrs {
            let c = std::ffi::CString::new(*n)
                .map_err(|_| Error::new(shown, Op::Adopt, Problem::BadName))?;
            remove_xattr_fd(f, &c)
                .map_err(|e| Error::io(shown, Op::Adopt, e))?;
        }
        Ok(())
    }
}
