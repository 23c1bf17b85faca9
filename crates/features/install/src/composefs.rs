//! An install in composefs form (Linux), and its uninstall. An install of
//! archives alone, as root, is built in memory
//! ([`crate::Install::run_in_memory`]): its members become a tree in
//! memory, each body goes straight into the store, and no tree is written
//! to be read back. Otherwise (or for a member only the kernel can decide,
//! which the build in memory names in a note) the install
//! runs exactly as a plain one, into a staging root in the store
//! (`STORE/staging/<unique>`, 0700, on the store's filesystem), its
//! workers naming each file's contents as they write it
//! ([`object_hasher`]); then the staging tree's regular files are moved
//! into the store as objects, its metadata written as an EROFS image,
//! the store synced, a ref added, and last `composefs.json` written into
//! the zonepath beside an empty `root/` to mount it on. A failure at any
//! step leaves no ref or record naming the image, and removes the
//! staging tree; one a kill left is removed by `cache gc`. The CLI and
//! zinstalld both install this way.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use zinstall_composefs::{
    Image, Known, RECORD, ROOT_DIR, Record, ScanOptions, Scanned, Store, Top,
    UPPER_DIR, WORK_DIR, from_bytes, install_ref, match_upper, scan_with,
    write_scanned,
};

use zinstall_engine::unpack::{MemTree, ObjectSink};

pub use crate::composefs_build::object_hasher;
use crate::{Built, InstallError, Summary, Zonepath};

/// What a composefs install is asked.
pub struct Request<'a> {
    /// The zonepath, as given.
    pub zonepath: &'a Path,
    /// The store that takes the root (a cache's `composefs`, absolute:
    /// the record names it).
    pub store: &'a Path,
    /// Threads that store contents.
    pub workers: usize,
}

/// The plain install into a staging zonepath, with the profile, images
/// and tunables the caller was given, its workers hashing each body with
/// [`object_hasher`] ([`crate::Install::objects`]).
pub type Stage<'s> = dyn FnMut(&Path) -> Result<Summary, InstallError> + 's;

/// The install built in memory instead ([`crate::Install::run_in_memory`]):
/// its archives unpacked into the tree given, bodies into the store.
pub type BuildInMemory<'s> = dyn FnMut(&mut MemTree, &dyn ObjectSink) -> Result<Built, InstallError>
    + 's;

/// The staging trees' directory in the store.
const STAGING: &str = "staging";

/// Why a composefs install or uninstall failed: each names the path
/// and the step. The cause is in the message.
#[derive(Debug)]
pub enum ComposefsError {
    /// The store, the image, a ref or the record.
    Store(zinstall_composefs::Error),
    /// The install into the staging tree (or preparing the zonepath).
    Install(Box<InstallError>),
    /// A directory of the zonepath, beneath it.
    Beneath(zinstall_engine::Error),
    /// A system call on `path`, in `op`.
    Io {
        /// Where.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The system's error.
        error: std::io::Error,
    },
    /// The zonepath has a composefs root already.
    Installed {
        /// Its record.
        record: PathBuf,
        /// The zonepath.
        zonepath: PathBuf,
    },
    /// The root is mounted: it cannot be removed.
    Mounted {
        /// The mount point.
        root: PathBuf,
        /// The zonepath.
        zonepath: PathBuf,
    },
}

impl std::fmt::Display for ComposefsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComposefsError::Store(e) => write!(f, "{e}"),
            ComposefsError::Install(e) => write!(f, "{e}"),
            ComposefsError::Beneath(e) => write!(f, "{e}"),
            ComposefsError::Io { path, op, error } => {
                write!(f, "{}: {op}: {error}", path.display())
            }
            ComposefsError::Installed { record, zonepath } => write!(
                f,
                "{}: a composefs root is installed here already; run \
                 `zinstall uninstall --zonepath {}` first",
                record.display(),
                zonepath.display()
            ),
            ComposefsError::Mounted { root, zonepath } => write!(
                f,
                "{}: is a mount point: unmount it first (`zinstall unmount \
                 --zonepath {}`)",
                root.display(),
                zonepath.display()
            ),
        }
    }
}

impl std::error::Error for ComposefsError {}

impl ComposefsError {
    /// The staging install's error, if that is what failed.
    pub fn install_error(&self) -> Option<&InstallError> {
        match self {
            ComposefsError::Install(e) => Some(e),
            _ => None,
        }
    }
}

impl From<zinstall_composefs::Error> for ComposefsError {
    fn from(e: zinstall_composefs::Error) -> ComposefsError {
        ComposefsError::Store(e)
    }
}

impl From<InstallError> for ComposefsError {
    fn from(e: InstallError) -> ComposefsError {
        ComposefsError::Install(Box::new(e))
    }
}

impl From<zinstall_engine::Error> for ComposefsError {
    fn from(e: zinstall_engine::Error) -> ComposefsError {
        ComposefsError::Beneath(e)
    }
}

fn io(
    path: &Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> ComposefsError {
    let path = path.to_path_buf();
    move |error| ComposefsError::Io { path, op, error }
}

/// What a composefs install made.
pub struct Installed {
    /// The image, and what storing the tree counted.
    pub image: Image,
    /// The store that holds it.
    pub store: Store,
    /// The ref that keeps it from `cache gc`.
    pub ref_name: String,
    /// What the staging install did.
    pub summary: Summary,
}

/// The ref an install of `zonepath` keeps its image by.
pub fn ref_for(zonepath: &Path) -> String {
    install_ref(&std::path::absolute(zonepath).unwrap_or_default())
}

/// Installs in composefs form: built in memory where `memory` is given
/// and the install allows (its archives alone, every member modelled),
/// else through a staging tree; then the image, the ref and the record.
/// `notes` hears why a build went through staging, and what a failure
/// undid.
pub fn install(
    req: &Request<'_>,
    stage: &mut Stage<'_>,
    memory: Option<&mut BuildInMemory<'_>>,
    notes: &mut dyn FnMut(String),
) -> Result<Installed, ComposefsError> {
    let zonepath = std::path::absolute(req.zonepath)
        .map_err(io(req.zonepath, "resolve"))?;
    // The store's parent (the cache) is the project's own: made if
    // missing.
    if let Some(cache) = req.store.parent() {
        std::fs::create_dir_all(cache).map_err(io(cache, "create"))?;
    }
    let store = Store::open(req.store)?;
    // A composefs root here already: said before the zonepath checks,
    // which would only call it unknown.
    if let Ok(c) = zinstall_sys::cstr(&zonepath)
        && let Ok(dir) = zinstall_sys::fs::at::open_dir(libc::AT_FDCWD, &c)
        && Record::read(&dir, &zonepath)?.is_some()
    {
        return Err(ComposefsError::Installed {
            record: zonepath.join(RECORD),
            zonepath,
        });
    }
    let zp = crate::prepare_zonepath(&zonepath)?;
    let zp_fd = owned(&zp.dir, &zonepath)?;
    // Held until the ref names the image: no sweep takes its objects.
    let _held = match store.lock_shared() {
        Ok(g) => g,
        Err(e) => {
            if let Some(said) = undo(zp, zp_fd) {
                notes(said);
            }
            return Err(e.into());
        }
    };
    let at = Zp {
        zp: &zp,
        fd: &zp_fd,
        path: &zonepath,
    };
    let done = match memory {
        Some(build) => match build_in_memory(&store, &zonepath, build) {
            Ok(Ok((scanned, summary))) => {
                Some(finish(&at, &store, scanned, summary, &at.root()))
            }
            Ok(Err(why)) => {
                notes(format!("built through a staging tree: {why}"));
                None
            }
            Err(e) => Some(Err(e)),
        },
        None => None,
    };
    let done = match done {
        Some(d) => d,
        None => through_staging(req, &store, &at, stage, notes),
    };
    let (image, summary, ref_name) = match done {
        Ok(d) => d,
        Err(e) => {
            if let Some(said) = undo(zp, zp_fd) {
                notes(said);
            }
            return Err(e);
        }
    };
    Ok(Installed {
        image,
        store,
        ref_name,
        summary,
    })
}

/// The zonepath being installed: its state, descriptor and path.
struct Zp<'a> {
    zp: &'a Zonepath,
    fd: &'a OwnedFd,
    path: &'a Path,
}

impl Zp<'_> {
    /// Where the root is mounted, as messages name it.
    fn root(&self) -> PathBuf {
        self.path.join(ROOT_DIR)
    }
}

/// The tree built in memory: `Ok(Err(why))` when the install must go
/// through a staging tree instead.
fn build_in_memory(
    store: &Store,
    zonepath: &Path,
    build: &mut BuildInMemory<'_>,
) -> Result<Result<(Scanned, Summary), String>, ComposefsError> {
    let Some(umask) = zinstall_sys::ident::umask() else {
        return Ok(Err("the kernel does not report the umask".into()));
    };
    let mut tree = MemTree::new(umask);
    let sink = crate::composefs_build::StoreSink::new(store);
    match build(&mut tree, &sink)? {
        Built::Unmodeled(why) => Ok(Err(why)),
        Built::Memory(summary) => {
            match crate::composefs_build::scanned(&tree, &sink) {
                Some(s) => Ok(Ok((s, *summary))),
                None => Err(ComposefsError::Io {
                    path: zonepath.join(ROOT_DIR),
                    op: "build the image",
                    error: std::io::Error::other(
                        "a file's body was not stored",
                    ),
                }),
            }
        }
    }
}

/// The install into a staging tree, its files moved into the store, then
/// the image; the staging tree removed meanwhile.
fn through_staging(
    req: &Request<'_>,
    store: &Store,
    at: &Zp<'_>,
    stage: &mut Stage<'_>,
    notes: &mut dyn FnMut(String),
) -> Result<(Image, Summary, String), ComposefsError> {
    let staging = make_staging(store, at.path)?;
    let scanned = stage_and_scan(req, store, &staging, stage);
    // Once scanned, the staging tree is not read again: it is removed
    // while the image is written and the store synced.
    let (done, removed) = std::thread::scope(|sc| {
        let removing =
            sc.spawn(|| zinstall_engine::fsutil::remove_tree(&staging));
        let done = scanned.and_then(|(scanned, summary)| {
            finish(at, store, scanned, summary, &staging.join("root"))
        });
        let removed = removing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (done, removed)
    });
    if let Err(e) = removed {
        notes(format!(
            "the staging tree was left ({e}): `zinstall cache gc` removes it"
        ));
    }
    done
}

/// The image of `scanned` (`src` names its tree), its ref, and last the
/// record; the ref removed again if the record cannot be written.
fn finish(
    at: &Zp<'_>,
    store: &Store,
    scanned: Scanned,
    summary: Summary,
    src: &Path,
) -> Result<(Image, Summary, String), ComposefsError> {
    let top = Top::of_stat(&scanned.fs.root.stat);
    let image = write_scanned(scanned, store, src)?;
    let ref_name = install_ref(at.path);
    store.add_ref(&ref_name, &image.id)?;
    let made = Made {
        image: &image,
        top: &top,
        ref_name: &ref_name,
    };
    if let Err(e) = record(at.zp, at.fd, at.path, store, &made) {
        // No record names the image: no ref keeps it either.
        let _ = store.remove_ref(&ref_name);
        return Err(e);
    }
    Ok((image, summary, ref_name))
}

/// After a failure: the empty `root/`, `upper/` and `work/` the record
/// step made go, and the zonepath is left as it was found: removed if
/// this install made it (and it is empty), its mode back otherwise.
/// Returns a line saying what was undone.
fn undo(zp: Zonepath, zp_fd: OwnedFd) -> Option<String> {
    for name in [c"root", c"upper", c"work"] {
        // Only empty directories: rmdir refuses anything else.
        let _ = zinstall_sys::fs::at::unlink(zp_fd.as_raw_fd(), name, true);
    }
    drop(zp_fd);
    if zp.made {
        let path = zp.dir.path().to_path_buf();
        drop(zp.dir);
        return crate::discard_zonepath(&path).ok().map(|()| {
            format!("removed {}, which this install made", path.display())
        });
    }
    let was = zp.mode? & 0o7777;
    (was != 0o700 && zp.dir.set_mode(was).is_ok()).then(|| {
        format!("set {} back to mode {was:04o}", zp.dir.path().display())
    })
}

/// The zonepath's directory as an owned descriptor.
fn owned(dir: &impl AsFd, shown: &Path) -> Result<OwnedFd, ComposefsError> {
    dir.as_fd().try_clone_to_owned().map_err(io(shown, "open"))
}

/// Makes `STORE/staging/<unique>` (0700): the install's zonepath.
fn make_staging(
    store: &Store,
    zonepath: &Path,
) -> Result<PathBuf, ComposefsError> {
    let dir = store.path().join(STAGING);
    match zinstall_sys::fs::mkdir(&dir, 0o700) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(io(&dir, "create")(e));
        }
        _ => {}
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = zonepath
        .file_name()
        .map_or_else(|| "root".into(), |n| n.to_string_lossy().into_owned());
    let unique = dir.join(format!("{name}-{}-{nanos}", std::process::id()));
    zinstall_sys::fs::mkdir(&unique, 0o700).map_err(io(&unique, "create"))?;
    Ok(unique)
}

/// The plain install into `staging`, then its root's files into the
/// store (moved, not copied) and its tree read for the image.
fn stage_and_scan(
    req: &Request<'_>,
    store: &Store,
    staging: &Path,
    stage: &mut Stage<'_>,
) -> Result<(Scanned, Summary), ComposefsError> {
    let summary = stage(staging)?;
    // The names the unpacker took as it wrote: those files are moved
    // into the store without being read again.
    let known = summary.contents.clone().map(|c| -> Known {
        std::sync::Arc::new(move |rel: &[u8]| {
            let r = c.get(rel)?;
            Some((r.size, from_bytes(&r.object?)))
        })
    });
    let opts = ScanOptions {
        workers: req.workers,
        adopt: true,
        known,
    };
    let scanned = scan_with(&staging.join("root"), store, &opts)?;
    Ok((scanned, summary))
}

/// The image an install made and what its record and `upper/` take of it.
struct Made<'a> {
    image: &'a Image,
    top: &'a Top,
    ref_name: &'a str,
}

/// Makes `root/`, `upper/` (with the image's top directory's owner, mode
/// and time, which a writable mount shows from it) and `work/` in the
/// zonepath and writes the record, last.
fn record(
    zp: &Zonepath,
    zp_fd: &OwnedFd,
    zonepath: &Path,
    store: &Store,
    made: &Made<'_>,
) -> Result<(), ComposefsError> {
    for (name, mode) in
        [(ROOT_DIR, 0o755), (UPPER_DIR, 0o755), (WORK_DIR, 0o700)]
    {
        zp.dir.dir(Path::new(name), Some(mode))?;
    }
    match_upper(zp_fd, zonepath, made.top)?;
    Ok(Record::new(store.path(), &made.image.id, made.ref_name)
        .write(zp_fd, zonepath)?)
}

/// Uninstalls a composefs root: `None` when the zonepath holds no
/// record (a plain root, for [`crate::uninstall`]); else the record of
/// what was removed, or why not.
pub fn uninstall(zonepath: &Path) -> Option<Result<Record, ComposefsError>> {
    let c = zinstall_sys::cstr(zonepath).ok()?;
    let dir = zinstall_sys::fs::at::open_dir(libc::AT_FDCWD, &c).ok()?;
    let rec = match Record::read(&dir, zonepath) {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => return Some(Err(e.into())),
    };
    Some(remove(&dir, zonepath, &rec).map(|()| rec))
}

/// Removes the ref, the record, `upper/`, `work/` and `root/`; refuses
/// while `root/` is a mount point.
fn remove(
    dir: &OwnedFd,
    zonepath: &Path,
    rec: &Record,
) -> Result<(), ComposefsError> {
    use zinstall_sys::fs::at;
    let top = at::fstat(dir).map_err(io(zonepath, "stat"))?;
    let root = zonepath.join(ROOT_DIR);
    if let Some(st) =
        at::lstat(dir.as_raw_fd(), c"root").map_err(io(&root, "stat"))?
        && st.st_dev != top.st_dev
    {
        return Err(ComposefsError::Mounted {
            root,
            zonepath: zonepath.to_path_buf(),
        });
    }
    let store = Store::open(&rec.store)?;
    store.remove_ref(&rec.ref_name)?;
    at::unlink(dir.as_raw_fd(), c"composefs.json", false)
        .map_err(io(&zonepath.join(RECORD), "remove"))?;
    for name in [UPPER_DIR, WORK_DIR, ROOT_DIR] {
        let p = zonepath.join(name);
        if p.symlink_metadata().is_ok() {
            zinstall_engine::fsutil::remove_tree(&p)?;
        }
    }
    Ok(())
}
