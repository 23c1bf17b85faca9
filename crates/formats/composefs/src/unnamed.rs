//! Objects written without a name first: an unpack into memory writes
//! each body into an unnamed file in `objects/` (`O_TMPFILE`), hashing
//! as it goes, and then names it by its digest with one link, the only
//! directory operation each object costs. A kill before the link leaves
//! nothing behind.

use std::fs::File;
use std::os::fd::AsRawFd;

use zinstall_sys::fs::{at, create_unnamed, link_unnamed, reopen_read_only};

use crate::digest::ObjectId;
use crate::error::{Error, Op};
use crate::store::{OBJECT_MODE, Present, Put, Store};

impl Store {
    /// `staging/`, made if missing: where the store's writers make
    /// entries of their own (staging trees; an unpack into memory asking
    /// the kernel what it makes of an ACL), on the store's filesystem.
    pub fn scratch_dir(&self) -> Result<std::os::fd::OwnedFd, Error> {
        self.subdir(&["staging"])
    }

    /// A new unnamed file in `objects/`, mode 0644 and the store's owner,
    /// to write one object's contents into; [`Store::name_unnamed`] names
    /// it.
    pub fn create_unnamed(&self) -> Result<File, Error> {
        let shown = self.path().join("objects");
        let f = create_unnamed(self.objects_dir().as_raw_fd(), OBJECT_MODE)
            .map_err(|e| Error::io(&shown, Op::Create, e))?;
        let st = at::fstat(&f).map_err(|e| Error::io(&shown, Op::Stat, e))?;
        // The umask may have taken bits from the mode.
        if st.st_mode & 0o7777 != OBJECT_MODE {
            at::fchmod(&f, OBJECT_MODE)
                .map_err(|e| Error::io(&shown, Op::Create, e))?;
        }
        let (uid, gid) = self.owner();
        if (st.st_uid, st.st_gid) != (uid, gid) && self.is_root() {
            at::fchown(&f, uid, gid)
                .map_err(|e| Error::io(&shown, Op::Create, e))?;
        }
        Ok(f)
    }

    /// Names `f` ([`Store::create_unnamed`]), `size` bytes written whole
    /// whose digest is `id`, as that object: its fs-verity enabled where
    /// the store's filesystem has it, then linked into `objects/XX`. An
    /// object of that name already there is kept when it matches its name
    /// (checked on first use), replaced when it does not.
    pub fn name_unnamed(
        &self,
        f: File,
        id: &ObjectId,
        size: u64,
    ) -> Result<Put, Error> {
        let obj = self.object_path(id);
        let _writing = self.writing(id);
        // fs-verity needs the file with no writer left.
        let f = if self.may_have_verity() {
            let r = reopen_read_only(&f)
                .map_err(|e| Error::io(&obj, Op::Open, e))?;
            drop(f);
            self.seal_file(&r, id, &obj)?;
            r
        } else {
            f
        };
        let (dir_name, leaf) = self.names(id)?;
        let dir = self.object_dir(&dir_name, &obj)?;
        let new = |replaced| Put {
            id: id.clone(),
            size,
            written: true,
            replaced,
        };
        match link_unnamed(&f, dir.as_raw_fd(), &leaf) {
            Ok(()) => {
                self.mark_checked(id);
                Ok(new(false))
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                if let Present::Good = self.present(id, size)? {
                    return Ok(Put::found(id.clone(), size));
                }
                // Not a regular file by that name any more, or one whose
                // contents do not match it: replaced by a rename.
                let d = dir.as_raw_fd();
                let tmp_name = loop {
                    let n = self.next_seq();
                    let name = format!(".tmp-{}-{n}", std::process::id());
                    let c = std::ffi::CString::new(name).map_err(|_| {
                        Error::new(
                            &obj,
                            Op::Link,
                            crate::error::Problem::BadName,
                        )
                    })?;
                    match link_unnamed(&f, d, &c) {
                        Ok(()) => break c,
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(Error::io(&obj, Op::Link, e)),
                    }
                };
                at::rename(d, &tmp_name, &leaf).map_err(|e| {
                    let _ = at::unlink(d, &tmp_name, false);
                    Error::io(&obj, Op::Rename, e)
                })?;
                self.mark_checked(id);
                Ok(new(true))
            }
            Err(e) => Err(Error::io(&obj, Op::Link, e)),
        }
    }
}

impl Store {
    /// Stores `data`, whose digest the caller took as `id`, under that
    /// name: created there and written once, with no other directory
    /// operation; or, when an object of that name is there, not written
    /// at all if it matches its name (checked on first use), written
    /// afresh over it if not. A write cut short (a kill, a full disk)
    /// can leave a name whose contents do not match it, as any write
    /// before [`Store::sync`] can: such an object is never used, as every
    /// writer checks an object on first use and the image is recorded
    /// only after the sync.
    pub fn put_known(&self, data: &[u8], id: &ObjectId) -> Result<Put, Error> {
        let size = data.len() as u64;
        let _writing = self.writing(id);
        let (dir_name, leaf) = self.names(id)?;
        let obj = self.object_path(id);
        let dir = self.object_dir(&dir_name, &obj)?;
        let d = dir.as_raw_fd();
        let f = match at::create_file_mode(d, &leaf, OBJECT_MODE) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                drop(_writing);
                return match self.present(id, size)? {
                    Present::Good => Ok(Put::found(id.clone(), size)),
                    Present::No | Present::Bad => self.put_bytes(data),
                };
            }
            Err(e) => return Err(Error::io(&obj, Op::Create, e)),
        };
        let written = std::io::Write::write_all(&mut &f, data)
            .map_err(|e| Error::io(&obj, Op::Write, e))
            .and_then(|()| self.settle_new(&f, &obj));
        drop(f);
        let sealed = written.and_then(|()| self.seal(dir, &leaf, id, &obj));
        if let Err(e) = sealed {
            let _ = at::unlink(d, &leaf, false);
            return Err(e);
        }
        self.mark_checked(id);
        Ok(Put {
            id: id.clone(),
            size,
            written: true,
            replaced: false,
        })
    }

    /// A new object's mode and owner, where the umask or the creator
    /// left them other than an object's.
    fn settle_new(
        &self,
        f: &File,
        shown: &std::path::Path,
    ) -> Result<(), Error> {
        let (uid, gid) = self.owner();
        let (mode_ok, owner_ok) = *self.new_files.get_or_init(|| {
            let umask = zinstall_sys::ident::umask();
            let ids =
                (zinstall_sys::ident::euid(), zinstall_sys::ident::egid());
            (
                umask.is_some_and(|m| m & OBJECT_MODE == 0),
                ids == (uid, gid) || !self.is_root(),
            )
        });
        if !mode_ok {
            at::fchmod(f, OBJECT_MODE)
                .map_err(|e| Error::io(shown, Op::Create, e))?;
        }
        if !owner_ok {
            at::fchown(f, uid, gid)
                .map_err(|e| Error::io(shown, Op::Create, e))?;
        }
        Ok(())
    }
}
