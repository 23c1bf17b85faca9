//! A composefs root mounted: the EROFS image (opened through the store,
//! never by a path someone could swap) under an overlay whose data-only
//! lower layer is the store's `objects/`, with the root's own `upper/`
//! and `work/` when it is writable. Everything is passed to the kernel by
//! descriptor (composefs-rs's `composefs_fsmount`: the overlay's layers
//! as the `/proc/self/fd` links of descriptors held here, which kernels
//! before 6.15 need), so only the mount point itself is named, and it is
//! resolved beneath its parent without following a symlink.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use composefs::fsverity::measure_verity_opt;
use composefs::mount::{
    MountOptions, VerityRequirement, composefs_fsmount, mount_at,
};
use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::record::{RECORD, ROOT_DIR, Record, UPPER_DIR, WORK_DIR};
use crate::store::Store;

/// Whether the overlay checks each file's fs-verity digest against the
/// one the image records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountVerity {
    /// Always: a mount of an image without fs-verity is refused.
    Require,
    /// When the image object has fs-verity (its store's filesystem
    /// supports it and the store enabled it); off otherwise.
    IfPresent,
    /// Never.
    Off,
}

/// The overlay's layers above the image.
#[derive(Debug, Clone, Copy)]
pub enum Layers<'a> {
    /// Writable: changes go to `upper`, `work` is the overlay's scratch.
    Overlay {
        /// The upper layer.
        upper: BorrowedFd<'a>,
        /// The work directory (on `upper`'s filesystem).
        work: BorrowedFd<'a>,
    },
    /// Read-only: the image alone.
    ReadOnly,
}

/// How the EROFS image reaches the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// The image file itself where the kernel mounts EROFS from a file
    /// (Linux 6.12 with `EROFS_FS_BACKED_BY_FILE`), else a read-only loop
    /// device over it.
    Auto,
    /// A read-only loop device over the image file, always.
    Loop,
}

/// How a root is mounted besides its image and place.
#[derive(Debug, Clone, Copy)]
pub struct Mounting<'a> {
    /// The overlay's layers above the image.
    pub layers: Layers<'a>,
    /// Whether file contents are checked against fs-verity digests.
    pub verity: MountVerity,
    /// How the image reaches the kernel.
    pub backing: Backing,
}

/// Mounts the image `id` of `store` on the directory `name` in `parent`
/// (`shown` names that mount point in errors), as `how` says.
pub fn mount_root(
    store: &Store,
    id: &ObjectId,
    parent: BorrowedFd<'_>,
    name: &str,
    shown: &Path,
    how: Mounting<'_>,
) -> Result<(), Error> {
    let Mounting {
        layers,
        verity,
        backing,
    } = how;
    let leaf = mount_point(parent, name, shown)?;
    let image = store.open_object(id).map_err(|e| {
        Error::new(shown, Op::Mount, Problem::MissingImage(Box::new(e)))
    })?;
    let verity = verity_requirement(store, id, &image, verity)?;
    let mut options = MountOptions::default();
    if let Layers::Overlay { upper, work } = layers {
        let dup = |fd: BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .map_err(|e| Error::io(shown, Op::Mount, e))
        };
        options.set_overlay(dup(upper)?, dup(work)?);
        options.set_read_write(true);
    }
    let name_tag = digest::hex(id);
    let image = OwnedFd::from(image);
    let fsmount = |source: OwnedFd| {
        composefs_fsmount(
            source,
            &name_tag,
            &[store.objects_dir()],
            verity,
            &options,
        )
    };
    let on_loop = |image: &OwnedFd| {
        let dev =
            loop_device(image).map_err(|e| Error::io(shown, Op::Mount, e))?;
        fsmount(dev).map_err(|e| kernel_error(shown, e))
    };
    let fs = match backing {
        Backing::Loop => on_loop(&image)?,
        Backing::Auto => {
            let dup = image
                .try_clone()
                .map_err(|e| Error::io(shown, Op::Mount, e))?;
            match fsmount(dup) {
                Ok(fs) => fs,
                // A kernel that mounts EROFS from block devices alone:
                // the image through a loop device.
                Err(e) if file_backing_refused(&e) => {
                    on_loop(&image).map_err(|_| kernel_error(shown, e))?
                }
                Err(e) => return Err(kernel_error(shown, e)),
            }
        }
    };
    mount_at(&fs, parent, leaf.as_c_str())
        .map_err(|e| Error::io(shown, Op::Mount, io::Error::from(e)))
}

/// The mount point `name` in `parent`, checked to be a directory.
fn mount_point(
    parent: BorrowedFd<'_>,
    name: &str,
    shown: &Path,
) -> Result<std::ffi::CString, Error> {
    let leaf = std::ffi::CString::new(name)
        .map_err(|_| Error::new(shown, Op::Mount, Problem::BadName))?;
    match at::lstat(parent.as_raw_fd(), &leaf) {
        Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Ok(leaf),
        Ok(Some(_)) => Err(Error::new(shown, Op::Mount, Problem::NotDirectory)),
        Ok(None) => Err(Error::io(
            shown,
            Op::Mount,
            io::Error::from(io::ErrorKind::NotFound),
        )),
        Err(e) => Err(Error::io(shown, Op::Stat, e)),
    }
}

/// What the overlay is told of fs-verity: required when the image object
/// has it (and `verity` asks), refused when `verity` requires it and the
/// object lacks it.
fn verity_requirement(
    store: &Store,
    id: &ObjectId,
    image: &std::fs::File,
    verity: MountVerity,
) -> Result<VerityRequirement, Error> {
    if verity == MountVerity::Off {
        return Ok(VerityRequirement::Disabled);
    }
    let has = measure_verity_opt::<ObjectId>(image.as_fd()).ok().flatten();
    match (has, verity) {
        (Some(d), _) if &d == id => Ok(VerityRequirement::Required),
        (_, MountVerity::Require) => Err(Error::new(
            &store.object_path(id),
            Op::Mount,
            Problem::NoVerity,
        )),
        _ => Ok(VerityRequirement::Disabled),
    }
}

/// What a kernel without file-backed EROFS answers when given a file.
fn file_backing_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTBLK | libc::EINVAL | libc::EOPNOTSUPP)
    )
}

/// A read-only loop device over `image`, detached by the kernel once
/// nothing holds it (the mount, when made, or this descriptor).
fn loop_device(image: &OwnedFd) -> io::Result<OwnedFd> {
    // Another process may configure the free device first: asked again.
    let mut tries = 0;
    loop {
        match composefs_ioctls::loop_device::loopify(image) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 8 => {
                tries += 1;
            }
            r => return r,
        }
    }
}

/// The kernel's refusal of a composefs mount, said as the kernel
/// requirement when it is what older kernels answer.
fn kernel_error(shown: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOTBLK | libc::ENOSYS | libc::ENODEV) => {
            Error::new(shown, Op::Mount, Problem::Kernel(e))
        }
        _ => Error::io(shown, Op::Mount, e),
    }
}

/// A composefs root's directory, its record read.
pub struct Root {
    /// The directory (a guest's, a zonepath).
    pub dir: PathBuf,
    /// Its descriptor.
    pub fd: OwnedFd,
    /// What `composefs.json` says.
    pub record: Record,
}

impl Root {
    /// Opens the directory `dir` and reads its record: an error saying
    /// so if it has none.
    pub fn open(dir: &Path) -> Result<Root, Error> {
        let c =
            zinstall_sys::cstr(dir).map_err(|e| Error::io(dir, Op::Open, e))?;
        let fd = at::open_dir(libc::AT_FDCWD, &c)
            .map_err(|e| Error::io(dir, Op::Open, e))?;
        let record = Record::read(&fd, dir)?.ok_or_else(|| {
            Error::new(&dir.join(RECORD), Op::Read, Problem::NotComposefs)
        })?;
        Ok(Root {
            dir: dir.to_path_buf(),
            fd,
            record,
        })
    }

    /// The mount point, `DIR/root`.
    pub fn mount_point(&self) -> PathBuf {
        self.dir.join(ROOT_DIR)
    }

    /// The record's store, opened only if it is there (a mount must not
    /// make an empty store where the record's was).
    fn store(&self) -> Result<Store, Error> {
        let shown = &self.record.store;
        match std::fs::symlink_metadata(shown) {
            Ok(m) if m.is_dir() => Store::open(shown),
            Ok(_) => Err(Error::new(shown, Op::Open, Problem::NotDirectory)),
            Err(e) => Err(Error::new(
                &self.dir.join(RECORD),
                Op::Mount,
                Problem::MissingImage(Box::new(Error::io(shown, Op::Open, e))),
            )),
        }
    }

    /// Mounts the record's image on `DIR/root`: writable through
    /// `DIR/upper` and `DIR/work`, or read-only.
    pub fn mount(
        &self,
        read_only: bool,
        verity: MountVerity,
    ) -> Result<(), Error> {
        let id = self.record.image_id(&self.dir.join(RECORD))?;
        let store = self.store()?;
        let shown = self.mount_point();
        let open = |name: &str| {
            let c = std::ffi::CString::new(name)
                .map_err(|_| Error::new(&shown, Op::Open, Problem::BadName))?;
            at::open_dir(self.fd.as_raw_fd(), &c)
                .map_err(|e| Error::io(&self.dir.join(name), Op::Open, e))
        };
        if read_only {
            let how = Mounting {
                layers: Layers::ReadOnly,
                verity,
                backing: Backing::Auto,
            };
            return mount_root(
                &store,
                &id,
                self.fd.as_fd(),
                ROOT_DIR,
                &shown,
                how,
            );
        }
        let (upper, work) = (open(UPPER_DIR)?, open(WORK_DIR)?);
        let how = Mounting {
            layers: Layers::Overlay {
                upper: upper.as_fd(),
                work: work.as_fd(),
            },
            verity,
            backing: Backing::Auto,
        };
        mount_root(&store, &id, self.fd.as_fd(), ROOT_DIR, &shown, how)
    }

    /// The commands (argument vectors: `mkdir`, then mount(8) for the
    /// image and for the overlay) that mount the same root, for fstab and
    /// systemd users: the image on a per-image directory under
    /// `lower_base`, shared by every root of it, then the overlay on
    /// `DIR/root`. Paths are made absolute (not resolved). The overlay
    /// requires fs-verity of every file read when the image object has
    /// it, as [`Root::mount`] does: the store is opened to see.
    pub fn mount_commands(
        &self,
        read_only: bool,
        lower_base: &Path,
    ) -> Result<Vec<Vec<String>>, Error> {
        let id = self.record.image_id(&self.dir.join(RECORD))?;
        let store = self.store()?;
        let image = store.open_object(&id).map_err(|e| {
            Error::new(
                &self.mount_point(),
                Op::Mount,
                Problem::MissingImage(Box::new(e)),
            )
        })?;
        let verity = matches!(
            verity_requirement(&store, &id, &image, MountVerity::IfPresent)?,
            VerityRequirement::Required
        );
        let abs = |p: &Path| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        };
        let dir = PathBuf::from(abs(&self.dir));
        let store = PathBuf::from(abs(&self.record.store));
        let image = store.join("objects").join(digest_path(&self.record.image));
        let lower = abs(&lower_base.join(&self.record.image));
        let layers = if read_only {
            "ro".to_string()
        } else {
            format!(
                "upperdir={},workdir={}",
                dir.join(UPPER_DIR).display(),
                dir.join(WORK_DIR).display()
            )
        };
        let overlay = format!(
            "{layers},lowerdir={lower}::{},redirect_dir=on,metacopy=on{}",
            store.join("objects").display(),
            if verity { ",verity=require" } else { "" }
        );
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        Ok(vec![
            v(&["mkdir", "-p", &lower]),
            v(&["mount", "-t", "erofs", "-o", "ro", &abs(&image), &lower]),
            v(&[
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                &overlay,
                &abs(&dir.join(ROOT_DIR)),
            ]),
        ])
    }

    /// Unmounts `DIR/root`: an error naming it if nothing is mounted
    /// there.
    pub fn unmount(&self) -> Result<(), Error> {
        unmount(&self.mount_point())
    }
}

/// `XX/<62 hex>` of an image's hex ID (checked by [`Record::read`]).
fn digest_path(hex: &str) -> String {
    let (a, b) = hex.split_at(2.min(hex.len()));
    format!("{a}/{b}")
}

/// Unmounts the root mounted at `at` (not through a symlink).
pub fn unmount(at: &Path) -> Result<(), Error> {
    zinstall_sys::fs::unmount(at).map_err(|e| {
        if e.raw_os_error() == Some(libc::EINVAL) {
            Error::new(at, Op::Unmount, Problem::NotMounted)
        } else {
            Error::io(at, Op::Unmount, e)
        }
    })
}
