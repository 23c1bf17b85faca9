//! Collecting and checking a store. [`Store::sweep`] keeps what a ref
//! names (the images, and every object those images point to) and
//! removes the rest: other objects, `images/<hex>` links no ref keeps,
//! and staging trees and temporary files an interrupted run left (older
//! than an hour). It holds `<store>/lock` exclusively; writers hold it
//! shared ([`Store::lock_shared`]) from their first object until their
//! ref is added, so a sweep never takes an object an image being
//! written is about to name. [`Store::verify_all`] re-hashes every
//! object and lists those whose contents do not match their names.

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, SystemTime};

use zinstall_core::Flock;
use zinstall_core::foreign::{self, Kind};
use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::Store;

/// The largest image a sweep reads to find its objects.
pub const IMAGE_MAX: u64 = 1 << 30;

/// Staging trees and temporary files younger than this are another
/// run's, still going: left alone.
const LEFTOVER_AGE: Duration = Duration::from_secs(3600);

/// The store's lock file.
const LOCK: &str = "lock";

/// What a sweep kept and removed (or, dry, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Images a ref names.
    pub images_kept: u64,
    /// Objects kept (the images included).
    pub objects_kept: u64,
    /// Objects removed.
    pub objects_removed: u64,
    /// Their bytes.
    pub bytes_removed: u64,
    /// `images/<hex>` links removed.
    pub links_removed: u64,
    /// Staging trees and temporary files of interrupted runs removed.
    pub leftovers_removed: u64,
}

/// What [`Store::verify_all`] found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Objects checked.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Each object that failed: its contents do not match its name
    /// ([`Error::is_mismatch`]), or it could not be read.
    pub bad: Vec<Error>,
}

/// A lock on the store, held until dropped.
pub struct StoreLock {
    _file: File,
}

/// `(name, lstat)` of each entry of `dir`.
fn entries(
    dir: &OwnedFd,
    shown: &Path,
) -> Result<Vec<(CString, libc::stat)>, Error> {
    let names =
        at::read_names(dir).map_err(|e| Error::io(shown, Op::ReadDir, e))?;
    let mut out = Vec::new();
    for n in names {
        let p = shown.join(n.to_string_lossy().as_ref());
        if let Some(st) = at::lstat(dir.as_raw_fd(), &n)
            .map_err(|e| Error::io(&p, Op::Stat, e))?
        {
            out.push((n, st));
        }
    }
    Ok(out)
}

/// True if `st` was last changed more than an hour ago.
fn old(st: &libc::stat) -> bool {
    let t = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(st.st_mtime).unwrap_or(0));
    SystemTime::now()
        .duration_since(t)
        .is_ok_and(|age| age > LEFTOVER_AGE)
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

impl Store {
    fn lock(&self, exclusive: bool) -> Result<StoreLock, Error> {
        let shown = self.path().join(LOCK);
        let root = self.subdir(&[])?;
        let c = CString::new(LOCK)
            .map_err(|_| Error::new(&shown, Op::Open, Problem::BadName))?;
        let f = match at::create_file(root.as_raw_fd(), &c) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                foreign::open_at(
                    &root,
                    Path::new(LOCK),
                    &shown,
                    foreign::Follow::No,
                )
                .map_err(|e| {
                    Error::new(&shown, Op::Open, Problem::Foreign(e))
                })?
            }
            Err(e) => return Err(Error::io(&shown, Op::Create, e)),
        };
        if exclusive {
            f.flock_exclusive()
        } else {
            f.flock_shared()
        }
        .map_err(|e| Error::io(&shown, Op::Lock, e))?;
        Ok(StoreLock { _file: f })
    }

    /// Takes `<store>/lock` shared, waiting while a sweep runs: held by
    /// every writer (an install, a provision) from before its first
    /// object until its ref is added, so that no sweep removes objects
    /// an image being written names.
    pub fn lock_shared(&self) -> Result<StoreLock, Error> {
        self.lock(false)
    }

    /// The objects the image `id` points to, read from the image (an
    /// object of at most [`IMAGE_MAX`] bytes).
    pub fn image_objects(
        &self,
        id: &ObjectId,
    ) -> Result<HashSet<ObjectId>, Error> {
        let shown = self.object_path(id);
        let f = self.open_object(id)?;
        let kind = Kind::Other {
            what: "a composefs image",
            cap: IMAGE_MAX,
        };
        let bytes = foreign::read_file(&f, &shown, kind)
            .map_err(|e| Error::new(&shown, Op::Read, Problem::Foreign(e)))?;
        composefs::erofs::reader::collect_objects::<ObjectId>(&bytes).map_err(
            |e| Error::new(&shown, Op::Read, Problem::Format(e.to_string())),
        )
    }

    /// Removes what no ref keeps (with `dry_run`, only counts it), under
    /// the store's lock held exclusively.
    pub fn sweep(&self, dry_run: bool) -> Result<SweepReport, Error> {
        let _lock = self.lock(true)?;
        let mut r = SweepReport::default();
        let mut live_images = HashSet::new();
        let mut live = HashSet::new();
        for (_, id) in self.refs()? {
            if live_images.insert(id.clone()) {
                live.extend(self.image_objects(&id)?);
                live.insert(id);
            }
        }
        r.images_kept = live_images.len() as u64;
        self.sweep_objects(&live, dry_run, &mut r)?;
        self.sweep_links(&live_images, dry_run, &mut r)?;
        self.sweep_staging(dry_run, &mut r)?;
        Ok(r)
    }

    fn sweep_objects(
        &self,
        live: &HashSet<ObjectId>,
        dry_run: bool,
        r: &mut SweepReport,
    ) -> Result<(), Error> {
        let top = self.path().join("objects");
        let objects = self.subdir(&["objects"])?;
        for (xx, st) in entries(&objects, &top)? {
            let xx_s = xx.to_string_lossy().into_owned();
            if !is_dir(&st) {
                continue;
            }
            let shown = top.join(&xx_s);
            let dir = at::open_dir(objects.as_raw_fd(), &xx)
                .map_err(|e| Error::io(&shown, Op::Open, e))?;
            for (name, st) in entries(&dir, &shown)? {
                let n = name.to_string_lossy();
                let p = shown.join(n.as_ref());
                let keep = if n.starts_with(".tmp-") {
                    !old(&st)
                } else {
                    digest::parse_hex(&format!("{xx_s}{n}"))
                        .is_some_and(|id| live.contains(&id))
                };
                if keep {
                    r.objects_kept += 1;
                    continue;
                }
                r.objects_removed += 1;
                r.bytes_removed += st.st_size as u64;
                if !dry_run {
                    at::unlink(dir.as_raw_fd(), &name, is_dir(&st))
                        .map_err(|e| Error::io(&p, Op::Remove, e))?;
                }
            }
        }
        Ok(())
    }

    fn sweep_links(
        &self,
        live: &HashSet<ObjectId>,
        dry_run: bool,
        r: &mut SweepReport,
    ) -> Result<(), Error> {
        let top = self.path().join("images");
        let images = self.subdir(&["images"])?;
        for (name, st) in entries(&images, &top)? {
            let n = name.to_string_lossy();
            if n == "refs" {
                continue;
            }
            let gone = if n.starts_with(".tmp-") {
                old(&st)
            } else {
                digest::parse_hex(&n).is_none_or(|id| !live.contains(&id))
            };
            if gone && !is_dir(&st) {
                r.links_removed += 1;
                if !dry_run {
                    at::unlink(images.as_raw_fd(), &name, false).map_err(
                        |e| Error::io(&top.join(n.as_ref()), Op::Remove, e),
                    )?;
                }
            }
        }
        Ok(())
    }

    fn sweep_staging(
        &self,
        dry_run: bool,
        r: &mut SweepReport,
    ) -> Result<(), Error> {
        let top = self.path().join("staging");
        let staging = match self.existing(&["staging"])? {
            Some(d) => d,
            None => return Ok(()),
        };
        for (name, st) in entries(&staging, &top)? {
            if !old(&st) {
                continue;
            }
            let p = top.join(name.to_string_lossy().as_ref());
            r.leftovers_removed += 1;
            if !dry_run {
                remove_all(&p)?;
            }
        }
        Ok(())
    }

    /// Re-hashes every object; the report lists each bad one.
    pub fn verify_all(&self) -> Result<VerifyReport, Error> {
        let mut r = VerifyReport::default();
        let top = self.path().join("objects");
        let objects = self.subdir(&["objects"])?;
        for (xx, st) in entries(&objects, &top)? {
            if !is_dir(&st) {
                continue;
            }
            let xx_s = xx.to_string_lossy().into_owned();
            let shown = top.join(&xx_s);
            let dir = at::open_dir(objects.as_raw_fd(), &xx)
                .map_err(|e| Error::io(&shown, Op::Open, e))?;
            for (name, st) in entries(&dir, &shown)? {
                let n = name.to_string_lossy();
                if n.starts_with(".tmp-") {
                    continue;
                }
                let Some(id) = digest::parse_hex(&format!("{xx_s}{n}")) else {
                    r.bad.push(Error::new(
                        &shown.join(n.as_ref()),
                        Op::Verify,
                        Problem::BadName,
                    ));
                    continue;
                };
                r.objects += 1;
                r.bytes += st.st_size as u64;
                if let Err(e) = self.verify(&id) {
                    r.bad.push(e);
                }
            }
        }
        Ok(r)
    }
}

/// Removes the tree at `p` (a staging tree of the store's own making),
/// never following a symlink in it.
fn remove_all(p: &Path) -> Result<(), Error> {
    std::fs::remove_dir_all(p).map_err(|e| Error::io(p, Op::Remove, e))
}
