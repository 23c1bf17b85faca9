//! `zinstall install --format composefs` and the uninstall of such a
//! root (Linux). The install runs exactly as a plain one, into a staging
//! root in the cache's composefs store (`STORE/staging/<unique>`, 0700,
//! on the store's filesystem); then the staging tree's regular files are
//! moved into the store as objects, its metadata written as an EROFS
//! image, the store synced, a ref added, and last `composefs.json`
//! written into the zonepath beside an empty `root/` to mount it on.
//! A failure at any step leaves no ref or record naming the image, and
//! removes the staging tree; one a kill left is removed by `cache gc`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use zinstall_composefs::{
    BodyHasher, Image, Known, RECORD, ROOT_DIR, Record, ScanOptions, Store,
    UPPER_DIR, WORK_DIR, from_bytes, hex, install_ref, write_image_with,
};
use zinstall_install as install;

use crate::exit::Exit;
use crate::output;

/// What `zinstall install` asks of a composefs install.
pub struct Request<'a> {
    /// The zonepath, as given.
    pub zonepath: &'a Path,
    /// The cache whose `composefs` store takes the root.
    pub cache: &'a Path,
    /// The outcome as JSON.
    pub json: bool,
    /// Threads that store contents.
    pub workers: usize,
}

/// The fs-verity digest as the unpacker's workers take it of each body
/// they write ([`install::Install::objects`]).
struct VerityBody(BodyHasher);

impl copier::contents::ObjectHash for VerityBody {
    fn write(&mut self, b: &[u8]) {
        self.0.write(b);
    }

    fn finish(self: Box<Self>) -> copier::contents::ObjectDigest {
        self.0.finish()
    }
}

/// What the staging install hashes each file's body with, beside
/// writing it: its object name.
pub fn object_hasher() -> copier::contents::ObjectHasher {
    std::sync::Arc::new(|| Box::new(VerityBody(BodyHasher::new())))
}

/// The plain install into a staging zonepath (the caller's, with the
/// profile, images and tunables it was given).
pub type Stage<'s> =
    dyn FnMut(&Path) -> Result<install::Summary, install::InstallError> + 's;

/// The staging trees' directory in the store.
const STAGING: &str = "staging";

/// Why a composefs install or uninstall failed: each names the path
/// and the step.
#[derive(Debug)]
enum Failure {
    /// The store, the image, a ref or the record.
    Store(zinstall_composefs::Error),
    /// The install into the staging tree (or preparing the zonepath).
    Install(Box<install::InstallError>),
    /// A directory of the zonepath, beneath it.
    Beneath(copier::Error),
    /// A system call on `path`, in `op`.
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    /// The zonepath has a composefs root already.
    Installed { record: PathBuf, zonepath: PathBuf },
    /// The root is mounted: it cannot be removed.
    Mounted { root: PathBuf, zonepath: PathBuf },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Store(e) => write!(f, "{e}"),
            Failure::Install(e) => write!(f, "{e}"),
            Failure::Beneath(e) => write!(f, "{e}"),
            Failure::Io { path, op, source } => {
                write!(f, "{}: {op}: {source}", path.display())
            }
            Failure::Installed { record, zonepath } => write!(
                f,
                "{}: a composefs root is installed here already; run \
                 `zinstall uninstall --zonepath {}` first",
                record.display(),
                zonepath.display()
            ),
            Failure::Mounted { root, zonepath } => write!(
                f,
                "{}: is a mount point: unmount it first (`zinstall unmount \
                 --zonepath {}`)",
                root.display(),
                zonepath.display()
            ),
        }
    }
}

impl From<zinstall_composefs::Error> for Failure {
    fn from(e: zinstall_composefs::Error) -> Failure {
        Failure::Store(e)
    }
}

impl From<install::InstallError> for Failure {
    fn from(e: install::InstallError) -> Failure {
        Failure::Install(Box::new(e))
    }
}

impl From<copier::Error> for Failure {
    fn from(e: copier::Error) -> Failure {
        Failure::Beneath(e)
    }
}

fn io(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Failure {
    let path = path.to_path_buf();
    move |source| Failure::Io { path, op, source }
}

/// What a composefs install made.
struct Made {
    image: Image,
    store: Store,
    ref_name: String,
    summary: install::Summary,
}

/// Installs in composefs form; exit 0, or 1 with the error.
pub fn install(args: &Request<'_>, stage: &mut Stage<'_>) -> Exit {
    // The record names the store by an absolute path.
    let cache =
        std::path::absolute(args.cache).unwrap_or(args.cache.to_path_buf());
    let store_path = zinstall_provision::composefs_store_of(&cache);
    let made = run(args, &store_path, stage);
    let made = match made {
        Ok(m) => m,
        Err(e) => {
            crate::json::fail(
                args.json,
                &e,
                serde_json::json!({
                    "zonepath": crate::json::path(args.zonepath),
                    "format": "composefs",
                    "store": crate::json::path(&store_path),
                }),
            );
            return crate::interrupt::reason()
                .map_or(Exit::Failed, Exit::Interrupted);
        }
    };
    report(args, &made);
    Exit::Ok
}

/// The install into staging, then the image, the ref and the record.
fn run(
    args: &Request<'_>,
    store_path: &Path,
    stage: &mut Stage<'_>,
) -> Result<Made, Failure> {
    let zonepath = std::path::absolute(args.zonepath)
        .map_err(io(args.zonepath, "resolve"))?;
    // The cache's directory is the project's own: made if missing.
    std::fs::create_dir_all(args.cache).map_err(io(args.cache, "create"))?;
    let store = Store::open(store_path)?;
    // A composefs root here already: said before the zonepath checks,
    // which would only call it unknown.
    if let Ok(c) = zinstall_sys::cstr(&zonepath)
        && let Ok(dir) = zinstall_sys::fs::at::open_dir(libc::AT_FDCWD, &c)
        && Record::read(&dir, &zonepath)?.is_some()
    {
        return Err(Failure::Installed {
            record: zonepath.join(RECORD),
            zonepath,
        });
    }
    let zp = install::prepare_zonepath(&zonepath)?;
    let zp_fd = owned(&zp.dir, &zonepath)?;
    // Held until the ref names the image (the guard in `held` lives to
    // the end of this function): no sweep takes its objects.
    let held = store.lock_shared();
    let staging = match held {
        Ok(_) => make_staging(&store, &zonepath),
        Err(e) => Err(e.into()),
    };
    let staging = match staging {
        Ok(s) => s,
        Err(e) => {
            if let Some(said) = undo(zp, zp_fd) {
                output::note(said);
            }
            return Err(e);
        }
    };
    let done = stage_and_store(args, &store, &staging, stage).and_then(
        |(image, summary)| {
            let ref_name = install_ref(&zonepath);
            store.add_ref(&ref_name, &image.id)?;
            let recorded =
                record(&zp, &zp_fd, &zonepath, &store, &image, &ref_name);
            if let Err(e) = recorded {
                // No record names the image: no ref keeps it either.
                let _ = store.remove_ref(&ref_name);
                return Err(e);
            }
            Ok((image, summary, ref_name))
        },
    );
    let removed = copier::fsutil::remove_tree(&staging);
    if done.is_err()
        && let Some(said) = undo(zp, zp_fd)
    {
        output::note(said);
    }
    let (image, summary, ref_name) = done?;
    if let Err(e) = removed {
        output::note(format_args!(
            "the staging tree was left ({e}): `zinstall cache gc` removes it"
        ));
    }
    Ok(Made {
        image,
        store,
        ref_name,
        summary,
    })
}

/// After a failure: the empty `root/`, `upper/` and `work/` the record
/// step made go, and the zonepath is left as it was found: removed if
/// this install made it (and it is empty), its mode back otherwise.
/// Returns a line saying what was undone.
fn undo(zp: install::Zonepath, zp_fd: OwnedFd) -> Option<String> {
    use std::os::fd::AsRawFd;
    for name in [c"root", c"upper", c"work"] {
        // Only empty directories: rmdir refuses anything else.
        let _ = zinstall_sys::fs::at::unlink(zp_fd.as_raw_fd(), name, true);
    }
    drop(zp_fd);
    if zp.made {
        let path = zp.dir.path().to_path_buf();
        drop(zp.dir);
        return install::discard_zonepath(&path).ok().map(|()| {
            format!("removed {}, which this install made", path.display())
        });
    }
    let was = zp.mode? & 0o7777;
    (was != 0o700 && zp.dir.set_mode(was).is_ok()).then(|| {
        format!("set {} back to mode {was:04o}", zp.dir.path().display())
    })
}

/// The zonepath's directory as an owned descriptor.
fn owned(dir: &impl AsFd, shown: &Path) -> Result<OwnedFd, Failure> {
    dir.as_fd().try_clone_to_owned().map_err(io(shown, "open"))
}

/// Makes `STORE/staging/<unique>` (0700): the install's zonepath.
fn make_staging(store: &Store, zonepath: &Path) -> Result<PathBuf, Failure> {
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

/// The plain install into `staging`, then its root into the store as
/// an image (files moved, not copied), synced.
fn stage_and_store(
    args: &Request<'_>,
    store: &Store,
    staging: &Path,
    stage: &mut Stage<'_>,
) -> Result<(Image, install::Summary), Failure> {
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
        workers: args.workers,
        adopt: true,
        known,
    };
    let image = write_image_with(&staging.join("root"), store, &opts)?;
    Ok((image, summary))
}

/// Makes `root/`, `upper/` and `work/` in the zonepath and writes the
/// record, last.
fn record(
    zp: &install::Zonepath,
    zp_fd: &OwnedFd,
    zonepath: &Path,
    store: &Store,
    image: &Image,
    ref_name: &str,
) -> Result<(), Failure> {
    for (name, mode) in
        [(ROOT_DIR, 0o755), (UPPER_DIR, 0o755), (WORK_DIR, 0o700)]
    {
        zp.dir.dir(Path::new(name), Some(mode))?;
    }
    Ok(
        Record::new(store.path(), &image.id, ref_name)
            .write(zp_fd, zonepath)?,
    )
}

/// Prints the outcome: the image, and how to mount it.
fn report(args: &Request<'_>, m: &Made) {
    let id = hex(&m.image.id);
    let store = m.store.path();
    let image_path = m.store.object_path(&m.image.id);
    let verity = m
        .store
        .verity()
        .map_or_else(|_| "unsupported".to_string(), |v| v.to_string());
    let c = m.image.counts;
    if args.json {
        crate::json::result(serde_json::json!({
            "zonepath": crate::json::path(args.zonepath),
            "dry_run": false,
            "format": "composefs",
            "image": id,
            "image_path": crate::json::path(&image_path),
            "store": crate::json::path(store),
            "ref": m.ref_name,
            "verity": verity,
            "objects": c.objects,
            "objects_written": c.written,
            "bytes_written": c.bytes_written,
            "inline": c.inline,
            "objects_named_by_unpacker": c.named_by_writer,
            "stats": crate::json::stats(&m.summary.stats),
            "notices": crate::json::notices(&m.summary.notices),
        }));
        return;
    }
    let zp = args.zonepath;
    let root = zp.join(ROOT_DIR);
    let lower = zp.join("lower");
    output::out(format_args!(
        "installed {} as composefs image {id} ({} objects, {} written, {}; \
         fs-verity {verity})",
        output::show(zp),
        c.objects,
        c.written,
        output::human_bytes(c.bytes_written),
    ));
    output::out(format_args!(
        "mount it: zinstall mount --zonepath {}",
        output::show(zp)
    ));
    output::out(format_args!(
        "or: mount -t erofs -o ro {} {}",
        output::show(&image_path),
        output::show(&lower)
    ));
    output::out(format_args!(
        "    mount -t overlay overlay -o ro,lowerdir={}::{},redirect_dir=on,\
         metacopy=on {}",
        output::show(&lower),
        output::show(&store.join("objects")),
        output::show(&root)
    ));
    output::out(format_args!(
        "    (writable: -o lowerdir=...,upperdir={},workdir={} instead of ro)",
        output::show(&zp.join(UPPER_DIR)),
        output::show(&zp.join(WORK_DIR))
    ));
}

/// `--dry-run --format composefs`: the plain dry run, then what the
/// composefs steps would do.
pub fn dry_run_note(args: &Request<'_>) {
    if args.json {
        return;
    }
    let store = zinstall_provision::composefs_store_of(args.cache);
    output::out(format_args!(
        "would store it in composefs form in {} (objects and an EROFS \
         image, ref {}), and record it in {} with {} as its mount point",
        output::show(&store),
        install_ref(&std::path::absolute(args.zonepath).unwrap_or_default()),
        output::show(&args.zonepath.join(RECORD)),
        output::show(&args.zonepath.join(ROOT_DIR))
    ));
}

/// Uninstalls a composefs root: `None` when the zonepath holds no
/// record (a plain root: the caller uninstalls it).
pub fn uninstall(zonepath: &Path) -> Option<Exit> {
    let c = zinstall_sys::cstr(zonepath).ok()?;
    let dir = zinstall_sys::fs::at::open_dir(libc::AT_FDCWD, &c).ok()?;
    let rec = match Record::read(&dir, zonepath) {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => {
            output::error(e);
            return Some(Exit::Failed);
        }
    };
    match remove(&dir, zonepath, &rec) {
        Ok(()) => {
            output::note(format_args!(
                "removed the composefs root at {} (ref {}; `zinstall cache \
                 gc` removes its objects once nothing else uses them)",
                output::show(zonepath),
                rec.ref_name
            ));
            Some(Exit::Ok)
        }
        Err(e) => {
            output::error(e);
            Some(Exit::Failed)
        }
    }
}

/// Removes the ref, the record, `upper/`, `work/` and `root/`; refuses
/// while `root/` is a mount point.
fn remove(dir: &OwnedFd, zonepath: &Path, rec: &Record) -> Result<(), Failure> {
    use zinstall_sys::fs::at;
    let top = at::fstat(dir).map_err(io(zonepath, "stat"))?;
    let root = zonepath.join(ROOT_DIR);
    if let Some(st) =
        at::lstat(dir.as_raw_fd(), c"root").map_err(io(&root, "stat"))?
        && st.st_dev != top.st_dev
    {
        return Err(Failure::Mounted {
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
            copier::fsutil::remove_tree(&p)?;
        }
    }
    Ok(())
}
