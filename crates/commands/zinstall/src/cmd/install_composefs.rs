//! `zinstall install --format composefs` and the uninstall of such a
//! root (Linux): the install library's ([`install::composefs`]), with
//! the outcome printed.

use std::path::Path;

use zinstall_composefs::{RECORD, ROOT_DIR, UPPER_DIR, WORK_DIR};
use zinstall_daemon::protocol::ComposefsInstall;
use zinstall_install as install;
use zinstall_install::composefs::{BuildInMemory, Installed, Stage};

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

/// Installs in composefs form; exit 0, or 1 with the error.
pub fn install(
    args: &Request<'_>,
    stage: &mut Stage<'_>,
    memory: Option<&mut BuildInMemory<'_>>,
) -> Exit {
    // The record names the store by an absolute path.
    let cache =
        std::path::absolute(args.cache).unwrap_or(args.cache.to_path_buf());
    let store_path = zinstall_provision::composefs_store_of(&cache);
    let req = install::composefs::Request {
        zonepath: args.zonepath,
        store: &store_path,
        workers: args.workers,
    };
    let made = install::composefs::install(&req, stage, memory, &mut |n| {
        output::note(n)
    });
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

/// Prints the outcome: the image, and how to mount it.
fn report(args: &Request<'_>, m: &Installed) {
    let c = ComposefsInstall::of(m);
    if args.json {
        crate::json::result(serde_json::json!({
            "zonepath": crate::json::path(args.zonepath),
            "dry_run": false,
            "format": "composefs",
            "image": c.image,
            "image_path": c.image_path,
            "store": c.store,
            "ref": c.ref_name,
            "verity": c.verity,
            "objects": c.objects,
            "objects_written": c.objects_written,
            "bytes_written": c.bytes_written,
            "inline": c.inline,
            "objects_named_by_unpacker": c.objects_named_by_unpacker,
            "stats": crate::json::stats(&m.summary.stats),
            "notices": crate::json::notices(&m.summary.notices),
        }));
        return;
    }
    print_installed(args.zonepath, &c);
}

/// The lines that say what a composefs install made and how to mount
/// it (here or through zinstalld).
pub fn print_installed(zp: &Path, c: &ComposefsInstall) {
    let root = zp.join(ROOT_DIR);
    let lower = zp.join("lower");
    let store = Path::new(&c.store);
    output::out(format_args!(
        "installed {} as composefs image {} ({} objects, {} written, {}; \
         fs-verity {})",
        output::show(zp),
        c.image,
        c.objects,
        c.objects_written,
        output::human_bytes(c.bytes_written),
        c.verity,
    ));
    output::out(format_args!(
        "mount it: zinstall mount --zonepath {}",
        output::show(zp)
    ));
    output::out(format_args!(
        "or: mount -t erofs -o ro {} {}",
        output::show(Path::new(&c.image_path)),
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
        install::composefs::ref_for(args.zonepath),
        output::show(&args.zonepath.join(RECORD)),
        output::show(&args.zonepath.join(ROOT_DIR))
    ));
}

/// Uninstalls a composefs root: `None` when the zonepath holds no
/// record (a plain root: the caller uninstalls it).
pub fn uninstall(zonepath: &Path) -> Option<Exit> {
    match install::composefs::uninstall(zonepath)? {
        Ok(rec) => {
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
