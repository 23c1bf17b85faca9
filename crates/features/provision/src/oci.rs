//! OCI images as provision sources: each layer cached once, by diff_id,
//! then the image's tree built from the cached layers (see the cache
//! module's documentation for the layout and why).

use std::fs;
use std::path::Path;

use zinstall_engine::oci::{self, Image, Select};
use zinstall_engine::unpack::{UnpackOptions, Whiteouts};
use zinstall_engine::{Op, Plan};

use crate::cache::{Cache, EntryKind, Lease, Obtained, WouldObtain, store_of};
use crate::error::{ImageProblem, ProvisionError as Error, Result};
use crate::options::ProvisionOptions;
use zinstall_registry::Registry;

/// A layer entry's record of what it changes (whiteouts, opaque
/// directories): one line per change, far below this.
const CHANGES: zinstall_core::foreign::Kind =
    zinstall_core::foreign::Kind::Other {
        what: "a layer's record of changes",
        cap: 1 << 30,
    };

/// Opens and checks the OCI image `arg` (`IMAGE`, `IMAGE:REF`, or a
/// registry reference, pulled into `store`).
fn open(arg: &Path, store: &Path, opts: &ProvisionOptions) -> Result<Image> {
    let platform = opts.platform.clone().unwrap_or_else(oci::Platform::host);
    let image = if let Some(r) = zinstall_registry::reference_of(arg) {
        let select = Select {
            reference: None,
            platform,
        };
        // A pulled blob is bounded as an archive is, and stops with the
        // provision.
        let pull = zinstall_registry::PullOptions {
            cancel: opts.pull.cancel.clone().or_else(|| opts.cancel.clone()),
            max_blob_size: (opts.max_archive_bytes > 0)
                .then_some(opts.max_archive_bytes),
            ..opts.pull.clone()
        };
        Registry::new(store).with(&pull).open(&r?, &select)?
    } else {
        let (path, reference) = oci::split_reference(arg);
        let select = Select {
            reference,
            platform,
        };
        Image::open(&path, &select).map_err(zinstall_engine::Error::Oci)?
    };
    if let Some(want) = &opts.sha256
        && !want.eq_ignore_ascii_case(&image.manifest_sha256)
    {
        return Err(Error::Image {
            path: image.path.clone(),
            problem: ImageProblem::ChecksumMismatch {
                expected: want.to_ascii_lowercase(),
                found: image.manifest_sha256.clone(),
            },
        });
    }
    Ok(image)
}

/// What [`obtain`] would do with the image's tree entry. A pulled image's
/// manifest and config are fetched into a store of its own, removed
/// after: a dry run writes nothing into the cache.
pub(crate) fn peek(
    root: &Path,
    arg: &Path,
    opts: &ProvisionOptions,
) -> Result<WouldObtain> {
    let scratch = zinstall_registry::reference_of(arg).map(|_| {
        std::env::temp_dir().join(format!(
            "zinstall-peek.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ))
    });
    let r = (|| {
        let image = open(arg, scratch.as_deref().unwrap_or(root), opts)?;
        Cache::peek_keyed(root, EntryKind::Tree, &image.manifest_sha256)
    })();
    if let Some(s) = scratch {
        let _best_effort = fs::remove_dir_all(s);
    }
    r
}

/// The tree entry of the OCI image `arg` (`IMAGE` or `IMAGE:REF`):
/// found, or built from its layers, each of which is found or unpacked
/// alone into its own entry first.
pub(crate) fn obtain(
    cache: &Cache,
    arg: &Path,
    opts: &ProvisionOptions,
) -> Result<(Lease, Obtained)> {
    let store = store_of(cache.root());
    let image = open(arg, &store, opts)?;
    let pulled = image.location == store;
    let path = image.path.clone();
    // The file whose read permissions the entries take: a pulled image's
    // manifest blob (owner only), else the layout or archive.
    let readable_like = if pulled {
        store.join(image.manifest_digest.blob_path())
    } else {
        image.location.clone()
    };
    let bytes = image.layers.iter().map(|l| l.size).sum();
    // Held until the image's entry is published, so that gc leaves the
    // layers alone while they are copied.
    let mut leases: Vec<Lease> = Vec::new();
    let r = cache.obtain_keyed(
        EntryKind::Tree,
        &image.manifest_sha256,
        &path,
        &readable_like,
        bytes,
        |payload| {
            for i in 0..image.layers.len() {
                let l = &image.layers[i];
                let (lease, _) = cache.obtain_keyed(
                    EntryKind::Layer,
                    &l.diff_id.sha256_key(),
                    &path,
                    &readable_like,
                    l.size,
                    |p| build_layer(&image, i, p, opts).map(|()| Vec::new()),
                )?;
                // Unpacked into its entry, the pulled blob is a second
                // copy; a rebuild fetches it again.
                if pulled {
                    zinstall_registry::forget_blob(&store, &l.digest)?;
                }
                leases.push(lease);
            }
            let names: Vec<std::path::PathBuf> = (0..image.layers.len())
                .map(|i| image.layer_path(i))
                .collect();
            build_tree(&leases, &names, payload, opts)?;
            Ok::<_, Error>(leases.iter().map(|l| l.entry.name()).collect())
        },
    );
    for l in leases {
        l.release();
    }
    r
}

/// Unpacks layer `i` alone into `payload/tree`, its changes recorded in
/// `payload/changes`.
fn build_layer(
    image: &Image,
    i: usize,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<()> {
    let tree = payload.join("tree");
    for d in [payload, &tree] {
        fs::create_dir(d).map_err(|e| Error::io(Op::Mkdir, d, e))?;
    }
    let uo = UnpackOptions {
        whiteouts: Whiteouts::Record,
        ..opts.unpack()
    };
    let r = oci::unpack_layer(image, i, &tree, &uo)?;
    let changes = payload.join("changes");
    fs::write(&changes, oci::encode_changes(&r.changes))
        .map_err(|e| Error::io(Op::Write, &changes, e))
}

/// The image's tree at `payload`: each layer's changes applied, then its
/// tree copied over (reflink where the filesystem can), lowest first;
/// `names` name the layers in refusals.
fn build_tree(
    layers: &[Lease],
    names: &[std::path::PathBuf],
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<()> {
    fs::create_dir(payload).map_err(|e| Error::io(Op::Mkdir, payload, e))?;
    for (lease, name) in layers.iter().zip(names) {
        let dir = lease.entry.payload();
        let tree = dir.join("tree");
        let path = dir.join("changes");
        let bytes = zinstall_core::foreign::read(
            &path,
            zinstall_core::foreign::Follow::No,
            CHANGES,
        )
        .map_err(|e| Error::io(Op::Read, &path, e.into()))?;
        let changes =
            oci::decode_changes(&bytes).map_err(|why| Error::Image {
                path: path.clone(),
                problem: ImageProblem::Corrupt(why.to_string()),
            })?;
        let kept = oci::prepare_layer(payload, &tree, name, &changes)?;
        let mut plan = Plan::new(&tree, payload)
            .within(payload)
            .layered(true)
            .tunables(opts.tunables);
        if let Some(c) = &opts.cancel {
            plan = plan.cancel(c.clone());
        }
        if let Some(pool) = &opts.pool {
            plan = plan.pool(pool.clone());
        }
        plan.run()?;
        kept.restore()?;
    }
    Ok(())
}
