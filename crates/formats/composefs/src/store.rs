//! The object store: a directory whose `objects/XX/<62 hex>` files are
//! named by the fs-verity digest of their contents, as composefs-rs's
//! repository lays them out. Each object is written once, to a temporary
//! file beside its final name, then renamed into place; an object
//! already present is not written again.
//!
//! Durability is one [`Store::sync`] (`syncfs`) after a whole image's
//! objects are written, not an `fsync` per object (which made a tree of
//! small files 25 times slower to store than to copy). A crash before
//! that sync can leave a name whose contents are incomplete, so an object
//! found present is checked on first use: re-hashed (its size first)
//! the first time a [`Store`] value meets it, and replaced by a fresh
//! write if it does not match its name.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use zinstall_core::foreign::{self, Follow};
use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};

/// Mode of every object: readable by all, as composefs's are, so that an
/// overlay mounted for anyone can read through to them.
pub(crate) const OBJECT_MODE: u32 = 0o644;

/// An object store open at a directory.
pub struct Store {
    path: PathBuf,
    objects: OwnedFd,
    /// The owner of `objects/` (uid, gid): adopted files are given it.
    owner: (u32, u32),
    /// Whether this process is root, asked once.
    root: bool,
    /// Tells this store's temporary files apart.
    seq: AtomicU64,
    /// Objects this value wrote or re-hashed: known to match their names.
    checked: Mutex<HashSet<ObjectId>>,
    /// Held, by the first byte of an object's name, from the check that
    /// it is absent until it is in place: two threads storing the same
    /// contents write it once, and the second finds it.
    writing: [Mutex<()>; WRITE_STRIPES],
    /// Whether objects get fs-verity here, once a write has found out
    /// (0 not yet; the values are fs-verity's module's).
    verity: AtomicU8,
    /// `objects/XX`, by `XX`, once opened: a tree of 50,000 files would
    /// otherwise open (and try to make) its object's directory two or
    /// three times a file. The store never removes them.
    dirs: Box<[OnceLock<OwnedFd>]>,
    /// Whether a file this process creates has an object's mode, and its
    /// owner, without a change: asked once.
    pub(crate) new_files: OnceLock<(bool, bool)>,
}

/// Locks that order writes of the same object (stripes, not one per
/// object: different objects rarely share one).
const WRITE_STRIPES: usize = 64;

/// One object stored (or found already there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// Its name.
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// False when the object was already present and nothing was written.
    pub written: bool,
    /// True when an object by that name was present but its contents did
    /// not match it (a crash before [`Store::sync`], a corruption), and
    /// it was written afresh.
    pub replaced: bool,
}

/// What a put found under the object's name.
pub(crate) enum Present {
    /// Nothing: write it.
    No,
    /// The object, and its contents match the name.
    Good,
    /// Something whose size or contents do not match: write it afresh.
    Bad,
}

fn cname(path: &Path, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::new(path, Op::Open, Problem::BadName))
}

/// Makes the directory `name` in `dir` (if it is not there) and opens
/// it, never through a symlink.
fn make_dir(
    dir: &OwnedFd,
    name: &CStr,
    shown: &Path,
) -> Result<OwnedFd, Error> {
    match at::mkdir(dir.as_raw_fd(), name, 0o755) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(Error::io(shown, Op::Create, e));
        }
        _ => {}
    }
    at::open_dir(dir.as_raw_fd(), name)
        .map_err(|e| Error::io(shown, Op::Open, e))
}

impl Put {
    /// An object found present and good: nothing written.
    pub(crate) fn found(id: ObjectId, size: u64) -> Put {
        Put {
            id,
            size,
            written: false,
            replaced: false,
        }
    }
}

impl Store {
    /// Opens the store at `path`, making it and its `objects/` directory
    /// if they are not there. The last component of `path` is not
    /// followed if it is a symlink.
    pub fn open(path: &Path) -> Result<Store, Error> {
        match zinstall_sys::fs::mkdir(path, 0o755) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(Error::io(path, Op::Create, e));
            }
            _ => {}
        }
        let c = zinstall_sys::cstr(path)
            .map_err(|e| Error::io(path, Op::Open, e))?;
        let root = at::open_dir(libc::AT_FDCWD, &c)
            .map_err(|e| Error::io(path, Op::Open, e))?;
        let objects = make_dir(&root, c"objects", &path.join("objects"))?;
        let st = at::fstat(&objects)
            .map_err(|e| Error::io(&path.join("objects"), Op::Stat, e))?;
        Ok(Store {
            path: path.to_path_buf(),
            objects,
            owner: (st.st_uid, st.st_gid),
            root: zinstall_sys::ident::euid() == 0,
            seq: AtomicU64::new(0),
            checked: Mutex::new(HashSet::new()),
            writing: std::array::from_fn(|_| Mutex::new(())),
            verity: AtomicU8::new(0),
            dirs: (0..256).map(|_| OnceLock::new()).collect(),
            new_files: OnceLock::new(),
        })
    }

    /// True if this process runs as root (may give files away).
    pub(crate) fn is_root(&self) -> bool {
        self.root
    }

    /// The owner (uid, gid) of the store's `objects/`.
    pub(crate) fn owner(&self) -> (u32, u32) {
        self.owner
    }

    /// `objects/XX` (`dir_name`), opened once and kept, made if `make`
    /// and it is not there; `None` if it is not there and not made.
    /// `shown` names an object in it.
    fn cached_dir(
        &self,
        dir_name: &CStr,
        shown: &Path,
        make: bool,
    ) -> Result<Option<BorrowedFd<'_>>, Error> {
        let dir_shown = shown.parent().unwrap_or(shown);
        let slot = dir_name
            .to_str()
            .ok()
            .and_then(|x| u8::from_str_radix(x, 16).ok())
            .and_then(|i| self.dirs.get(usize::from(i)))
            .ok_or_else(|| Error::new(dir_shown, Op::Open, Problem::BadName))?;
        if let Some(fd) = slot.get() {
            return Ok(Some(fd.as_fd()));
        }
        let fd = if make {
            make_dir(&self.objects, dir_name, dir_shown)?
        } else {
            match at::open_dir(self.objects.as_raw_fd(), dir_name) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(e) => return Err(Error::io(dir_shown, Op::Open, e)),
            }
        };
        // Another thread may have opened it meanwhile: either is the
        // same directory.
        Ok(Some(slot.get_or_init(|| fd).as_fd()))
    }

    /// `objects/XX` (made if needed), `shown` naming an object in it.
    pub(crate) fn object_dir(
        &self,
        dir_name: &CStr,
        shown: &Path,
    ) -> Result<BorrowedFd<'_>, Error> {
        self.cached_dir(dir_name, shown, true)?
            .ok_or_else(|| Error::new(shown, Op::Open, Problem::BadName))
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `objects/` directory, open: the data-only lower layer a
    /// mount of one of its images reads through.
    pub fn objects_dir(&self) -> std::os::fd::BorrowedFd<'_> {
        self.objects.as_fd()
    }

    pub(crate) fn verity_state(&self) -> &AtomicU8 {
        &self.verity
    }

    /// A number no other temporary name of this store has taken.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Opens (making if needed) the directories `parts` below the store,
    /// never through a symlink.
    pub(crate) fn subdir(&self, parts: &[&str]) -> Result<OwnedFd, Error> {
        let c = zinstall_sys::cstr(&self.path)
            .map_err(|e| Error::io(&self.path, Op::Open, e))?;
        let mut dir = at::open_dir(libc::AT_FDCWD, &c)
            .map_err(|e| Error::io(&self.path, Op::Open, e))?;
        let mut shown = self.path.clone();
        for p in parts {
            shown.push(p);
            dir = make_dir(&dir, &cname(&shown, p)?, &shown)?;
        }
        Ok(dir)
    }

    /// Opens the directories `parts` below the store if they are all
    /// there (never through a symlink); `None` if one is missing.
    pub(crate) fn existing(
        &self,
        parts: &[&str],
    ) -> Result<Option<OwnedFd>, Error> {
        let c = zinstall_sys::cstr(&self.path)
            .map_err(|e| Error::io(&self.path, Op::Open, e))?;
        let mut dir = at::open_dir(libc::AT_FDCWD, &c)
            .map_err(|e| Error::io(&self.path, Op::Open, e))?;
        let mut shown = self.path.clone();
        for p in parts {
            shown.push(p);
            dir = match at::open_dir(dir.as_raw_fd(), &cname(&shown, p)?) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(e) => return Err(Error::io(&shown, Op::Open, e)),
            };
        }
        Ok(Some(dir))
    }

    /// `fsync` of the directory `dir` (`shown` names it).
    pub(crate) fn sync_dir(
        &self,
        dir: OwnedFd,
        shown: &Path,
    ) -> Result<(), Error> {
        File::from(dir)
            .sync_all()
            .map_err(|e| Error::io(shown, Op::Sync, e))
    }

    /// Where the object `id` is (for messages and mounts: the store is
    /// read through its descriptor).
    pub fn object_path(&self, id: &ObjectId) -> PathBuf {
        self.path.join("objects").join(digest::object_path(id))
    }

    /// `XX` and the rest of `id`'s name, as C strings.
    pub(crate) fn names(
        &self,
        id: &ObjectId,
    ) -> Result<(CString, CString), Error> {
        let shown = self.object_path(id);
        let p = digest::object_path(id);
        let (dir, leaf) = p.split_at(2);
        Ok((cname(&shown, dir)?, cname(&shown, &leaf[1..])?))
    }

    /// True if the object `id` is present (a regular file by that name;
    /// its contents are checked by [`Store::verify`], not here).
    pub fn contains(&self, id: &ObjectId) -> Result<bool, Error> {
        Ok(self.stat_object(id)?.is_some())
    }

    /// The object `id`'s `lstat`, if a regular file has its name.
    fn stat_object(&self, id: &ObjectId) -> Result<Option<libc::stat>, Error> {
        let shown = self.object_path(id);
        let (dir, leaf) = self.names(id)?;
        let Some(d) = self.cached_dir(&dir, &shown, false)? else {
            return Ok(None);
        };
        match at::lstat(d.as_raw_fd(), &leaf) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
                Ok(Some(st))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(Error::io(&shown, Op::Stat, e)),
        }
    }

    /// Stores `data` as an object.
    pub fn put_bytes(&self, data: &[u8]) -> Result<Put, Error> {
        let id = digest::of_bytes(data);
        let size = data.len() as u64;
        let _writing = self.writing(&id);
        let replaced = match self.present(&id, size)? {
            Present::Good => return Ok(Put::found(id, size)),
            Present::No => false,
            Present::Bad => true,
        };
        self.write(&id, |tmp, shown| {
            tmp.write_all(data)
                .map_err(|e| Error::io(shown, Op::Write, e))
        })?;
        Ok(Put {
            id,
            size,
            written: true,
            replaced,
        })
    }

    /// Stores the contents of `src` (read from its start; `shown` names
    /// it in errors) as an object. The file is read once to name it, and
    /// once more to copy it only if the store does not have it; contents
    /// that change between the two are refused.
    pub fn put_file(&self, src: &File, shown: &Path) -> Result<Put, Error> {
        let mut r = src;
        let hint = at::fstat(src).map_or(0, |st| st.st_size as u64);
        let (id, size) = digest::of_reader(r, hint, |_| Ok(()))
            .map_err(|e| Error::io(shown, Op::Read, e))?;
        let _writing = self.writing(&id);
        let replaced = match self.present(&id, size)? {
            Present::Good => return Ok(Put::found(id, size)),
            Present::No => false,
            Present::Bad => true,
        };
        r.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(shown, Op::Read, e))?;
        self.write(&id, |tmp, tmp_shown| {
            let mut write_failed = false;
            let (again, n) = digest::of_reader(r, size, |chunk| {
                tmp.write_all(chunk).inspect_err(|_| write_failed = true)
            })
            .map_err(|e| {
                if write_failed {
                    Error::io(tmp_shown, Op::Write, e)
                } else {
                    Error::io(shown, Op::Read, e)
                }
            })?;
            if again != id || n != size {
                return Err(Error::new(
                    shown,
                    Op::Read,
                    Problem::Changed("contents"),
                ));
            }
            Ok(())
        })?;
        Ok(Put {
            id,
            size,
            written: true,
            replaced,
        })
    }

    /// Whether the object `id` of `size` bytes is present and matches
    /// its name: checked (size, then digest) the first time this value
    /// meets it, remembered after.
    pub(crate) fn present(
        &self,
        id: &ObjectId,
        size: u64,
    ) -> Result<Present, Error> {
        let Some(st) = self.stat_object(id)? else {
            return Ok(Present::No);
        };
        if self.is_checked(id) {
            return Ok(Present::Good);
        }
        if st.st_size as u64 != size {
            return Ok(Present::Bad);
        }
        match self.verify(id) {
            Ok(()) => {
                self.mark_checked(id);
                Ok(Present::Good)
            }
            Err(e) if e.is_mismatch() => Ok(Present::Bad),
            Err(e) => Err(e),
        }
    }

    /// The lock that orders writes of `id`.
    pub(crate) fn writing(
        &self,
        id: &ObjectId,
    ) -> std::sync::MutexGuard<'_, ()> {
        let h = digest::hex(id);
        let first = usize::from_str_radix(&h[..2], 16).unwrap_or(0);
        self.writing[first % WRITE_STRIPES]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn is_checked(&self, id: &ObjectId) -> bool {
        self.checked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id)
    }

    pub(crate) fn mark_checked(&self, id: &ObjectId) {
        self.checked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
    }

    /// Flushes everything written into the store's filesystem
    /// (`syncfs`): run once after an image and its objects are written,
    /// before a ref or a record names the image.
    pub fn sync(&self) -> Result<(), Error> {
        let dir = self
            .objects
            .try_clone()
            .map_err(|e| Error::io(&self.path, Op::Sync, e))?;
        zinstall_sys::fs::sync_fs(&File::from(dir))
            .map_err(|e| Error::io(&self.path, Op::Sync, e))
    }

    /// Writes the object `id` through `fill` into a temporary file in its
    /// directory and renames it into place (over a bad object of that
    /// name, if there is one). Not synced: [`Store::sync`] is, once for
    /// many objects. The temporary file is removed if any step fails.
    fn write(
        &self,
        id: &ObjectId,
        fill: impl FnOnce(&mut File, &Path) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let (dir_name, leaf) = self.names(id)?;
        let shown = self.object_path(id);
        let dir_shown = shown.parent().unwrap_or(&shown).to_path_buf();
        let dir = self.object_dir(&dir_name, &shown)?;
        let (mut tmp, tmp_name) = self.temporary(dir, &dir_shown)?;
        let tmp_shown = dir_shown.join(tmp_name.to_string_lossy().as_ref());
        let filled = fill(&mut tmp, &tmp_shown).and_then(|()| {
            at::fchmod(&tmp, OBJECT_MODE)
                .map_err(|e| Error::io(&tmp_shown, Op::Write, e))
        });
        // fs-verity needs the file with no writer left.
        drop(tmp);
        let done = filled
            .and_then(|()| self.seal(dir, &tmp_name, id, &tmp_shown))
            .and_then(|()| {
                at::rename(dir.as_raw_fd(), &tmp_name, &leaf)
                    .map_err(|e| Error::io(&shown, Op::Rename, e))
            });
        if let Err(e) = done {
            let _ = at::unlink(dir.as_raw_fd(), &tmp_name, false);
            return Err(e);
        }
        self.mark_checked(id);
        Ok(())
    }

    /// A new temporary file in `dir`, and its name.
    pub(crate) fn temporary(
        &self,
        dir: BorrowedFd<'_>,
        shown: &Path,
    ) -> Result<(File, CString), Error> {
        loop {
            let n = self.seq.fetch_add(1, Ordering::Relaxed);
            let name = format!(".tmp-{}-{n}", std::process::id());
            let c = cname(shown, &name)?;
            match at::create_file(dir.as_raw_fd(), &c) {
                Ok(f) => return Ok((f, c)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(Error::io(&shown.join(&name), Op::Create, e));
                }
            }
        }
    }

    /// Opens the object `id` for reading, through the foreign-file seam
    /// (a regular file, never through a symlink).
    pub fn open_object(&self, id: &ObjectId) -> Result<File, Error> {
        let shown = self.object_path(id);
        let rel = digest::object_path(id);
        foreign::open_at(
            self.objects.as_fd(),
            Path::new(&rel),
            &shown,
            Follow::No,
        )
        .map_err(|e| Error::new(&shown, Op::Open, Problem::Foreign(e)))
    }

    /// Recomputes the digest of the object `id` and compares it with its
    /// name: an error with [`Problem::Mismatch`] if they differ.
    pub fn verify(&self, id: &ObjectId) -> Result<(), Error> {
        let shown = self.object_path(id);
        let f = self.open_object(id)?;
        let hint = at::fstat(&f).map_or(0, |st| st.st_size as u64);
        let (found, _) = digest::of_reader(&f, hint, |_| Ok(()))
            .map_err(|e| Error::io(&shown, Op::Read, e))?;
        if &found != id {
            return Err(Error::new(
                &shown,
                Op::Verify,
                Problem::Mismatch {
                    found: digest::hex(&found),
                },
            ));
        }
        Ok(())
    }
}
