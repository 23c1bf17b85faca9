//! Many guests from one image: extract once into the cache, then give
//! every guest a thin copy.
//!
//! A provision is all or nothing: if any guest fails (or the run is
//! cancelled), every guest this run made is removed, and the output
//! directory too if this run created it, so that the same command can
//! simply be run again. Guests that were there before are never touched.
//!
//! Here: the run ([`provision`]) and its cache entry; what it reports is
//! `report`'s, the checks of what it is asked and the guests' names
//! `request`'s, the making (and unmaking) of each guest `make`'s. How an
//! image becomes a cache entry is the build module's, how a run is asked
//! for the options module's.

mod make;
mod report;
pub(crate) mod request;

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use zinstall_engine::Op;
use zinstall_qcow2 as qcow2;

use self::make::{Source, file_id, make_guests, undo};
pub use self::report::{Guest, GuestKind, ProvisionReport};
use self::request::{check_request, entry_kind, is_disk};
use crate::asked;
use crate::build::build;
use crate::cache::{Cache, EntryKind, Lease, Obtained};
use crate::composefs;
use crate::customize;
use crate::detect::ImageKind;
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::options::{GuestFormat, ProvisionOptions};

/// Provisions `opts.count` guests from `image`; `on_guest` hears of each
/// as it is made. On failure nothing this run made is left (see the
/// module documentation).
pub fn provision(
    image: &Path,
    opts: &ProvisionOptions,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<ProvisionReport, ProvisionError> {
    provision_in(image, opts, None, on_guest)
}

/// [`provision`], creating the cache root with `cache_mode` (and applying
/// it to an existing root) instead of the default 0700.
pub fn provision_in(
    image: &Path,
    opts: &ProvisionOptions,
    cache_mode: Option<u32>,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<ProvisionReport, ProvisionError> {
    let kind = check_request(image, opts)?;
    let seed = asked::prepare_seed(kind, is_disk(kind), opts)?;
    let custom = asked::prepare_customize(is_disk(kind), opts)?;
    let cache = open_cache(opts, cache_mode)?;
    let entry_kind = entry_kind(kind);
    let mut notices = Vec::new();
    let (mut lease, obtained) =
        lease_entry(&cache, image, kind, entry_kind, opts, &mut notices)?;
    // The image's own users and zoneinfo, in the cache entry (read, never
    // written), before the first guest.
    if let Some(c) = &custom
        && let Err(e) = customize::check_tree(c, &lease.entry.payload())
    {
        lease.release();
        return Err(e);
    }
    // Composefs guests: the entry's image, made once in the cache's store.
    let image = match opts.format {
        GuestFormat::Composefs => {
            match composefs::entry_image(&cache, &lease.entry, opts) {
                Ok(i) => Some(i),
                Err(e) => {
                    lease.release();
                    return Err(e);
                }
            }
        }
        GuestFormat::Tree => None,
    };
    let replaced = lease.replaced.take();
    let out_existed = fs::symlink_metadata(&opts.out).is_ok();
    let mut made: Vec<PathBuf> = Vec::new();
    let mut guests = Vec::with_capacity(opts.count);
    let from = Source {
        entry: &lease.entry,
        kind: entry_kind,
        custom: custom.as_ref(),
        seed: seed.as_ref(),
        image: image.as_ref(),
    };
    let result =
        make_guests(&cache, &from, opts, &mut made, &mut guests, on_guest);
    let entry = lease.entry.clone();
    lease.release();
    if let Err(e) = result {
        let ids: Vec<_> = guests
            .iter()
            .filter_map(|g| Some((&g.path, file_id(&g.path)?)))
            .collect();
        if image.is_some() {
            for p in &made {
                composefs::unmount_guest(p, true);
            }
        }
        let e = undo(e, &made, (!out_existed).then_some(&opts.out));
        // The guests this run made and removed hold their base no more.
        // A record that cannot be ended keeps the base: a leak, never a
        // lost base, and the provision's own error is the one to report.
        for (path, id) in ids {
            if fs::symlink_metadata(path).is_err() {
                let _kept = cache.release_guest(path, id);
            }
        }
        return Err(e);
    }
    Ok(ProvisionReport {
        image: kind,
        entry,
        obtained,
        replaced,
        guests,
        notices,
    })
}

/// The cache at `opts.cache`, made with `cache_mode` if missing, named
/// by its canonical path: overlays name their base by absolute path.
fn open_cache(
    opts: &ProvisionOptions,
    cache_mode: Option<u32>,
) -> Result<Cache, ProvisionError> {
    let cache = Cache::with_mode(&opts.cache, cache_mode)?;
    let root = fs::canonicalize(&opts.cache)
        .map_err(|e| Error::io(Op::Stat, &opts.cache, e))?;
    if root == cache.root() {
        Ok(cache)
    } else {
        Cache::new(root)
    }
}

/// An image opened for the cache: its file, opened once beneath its
/// directory's descriptor; a qcow2's chain, opened beneath that same
/// descriptor (the build reads the very files opened); and the files
/// besides it that its entry depends on ([`chain_files`]).
pub(crate) struct ForCache {
    pub(crate) file: File,
    pub(crate) qcow: Option<crate::build::Qcow2Input>,
    pub(crate) also: Vec<File>,
}

/// Opens `image`, of `kind`, for the cache ([`ForCache`]).
pub(crate) fn open_for_cache(
    image: &Path,
    kind: ImageKind,
    opts: &ProvisionOptions,
) -> Result<ForCache, ProvisionError> {
    let opened = crate::build::open_image(image)?;
    let file = opened
        .file
        .try_clone()
        .map_err(|e| Error::io(Op::Open, image, e))?;
    let qcow = match kind {
        ImageKind::Qcow2 => {
            Some(crate::build::open_qcow2(image, opened, opts)?)
        }
        _ => None,
    };
    let also = chain_files(qcow.as_ref(), opts)?;
    Ok(ForCache { file, qcow, also })
}

/// The files besides a qcow2 image that its entry depends on: its data
/// file and backing chain as opened, or an encrypted image's key file.
pub(crate) fn chain_files(
    qcow: Option<&crate::build::Qcow2Input>,
    opts: &ProvisionOptions,
) -> Result<Vec<File>, ProvisionError> {
    Ok(match qcow {
        Some(crate::build::Qcow2Input::Native(img)) => img
            .files()
            .iter()
            .skip(1)
            .map(|(p, f)| f.try_clone().map_err(|e| Error::io(Op::Open, p, e)))
            .collect::<Result<_, _>>()?,
        // An encrypted image's entry is found again only with the
        // same key file, unchanged: another key is tried by qemu-img.
        Some(crate::build::Qcow2Input::QemuImg(_, e))
            if matches!(e.refusal(), Some(qcow2::Problem::Encrypted(_))) =>
        {
            match &opts.secret_file {
                Some(k) => vec![
                    zinstall_core::foreign::open(
                        k,
                        zinstall_core::foreign::Follow::Yes,
                    )
                    .map_err(|e| Error::io(Op::Open, k, e.into()))?,
                ],
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    })
}

/// The cache entry the guests of `image` (of `kind`) come from, found
/// or built, leased for as long as they are made.
fn lease_entry(
    cache: &Cache,
    image: &Path,
    kind: ImageKind,
    entry_kind: EntryKind,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(Lease, Obtained), ProvisionError> {
    let (lease, obtained) = if kind == ImageKind::Oci {
        crate::oci::obtain(cache, image, opts)?
    } else {
        // A qcow2 image's files are part of its identity.
        let ForCache { file, qcow, also } = open_for_cache(image, kind, opts)?;
        let also: Vec<&File> = also.iter().collect();
        cache.obtain_with(
            image,
            &file,
            &also,
            entry_kind,
            opts.sha256.as_deref(),
            |reader, payload| {
                build(image, kind, qcow, reader, payload, opts, notices)
            },
        )?
    };
    // An entry built with device nodes allowed serves only provisions
    // that allow them too.
    if !opts.allow_devices
        && entry_kind == EntryKind::Tree
        && cache.holds_devices(&lease.entry)
    {
        let entry = lease.entry.name();
        lease.release();
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::Devices { entry },
        });
    }
    Ok((lease, obtained))
}

// Shared with the integration tests: a temporary directory removed even
// with immutable cache entries in it.
#[cfg(test)]
mod test {
    use zinstall_testkit::Tmp;

    use super::*;
    use crate::options::ProvisionRequest;

    fn opts(dir: &Path) -> ProvisionOptions {
        let request = ProvisionRequest {
            count: 1,
            out: dir.join("out"),
            name: "g".into(),
            max_archive_bytes: Some(1 << 30),
            keep_identity: true,
            ..Default::default()
        };
        ProvisionOptions::new(request, dir.join("cache"))
    }

    /// Absurd counts and sizes are refused before anything is read,
    /// extracted or allocated.
    #[test]
    fn counts_and_sizes_are_bounded_before_any_work() {
        let d = Tmp::new();
        let image = d.path().join("absent.raw");
        let mut o = opts(d.path());
        o.count = 99_999_999_999;
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ProvisionError::TooManyGuests(99_999_999_999)));
        assert!(e.to_string().contains("at most 65536"), "{e}");
        let mut o = opts(d.path());
        o.size = Some(u64::MAX);
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ProvisionError::SizeTooLarge(u64::MAX)), "{e}");
        assert!(e.to_string().contains("2 PiB"), "{e}");
        let mut o = opts(d.path());
        o.tunables.copy_bufsize = usize::MAX;
        let e = provision(&image, &o, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("COPY_BUFSIZE"), "{e}");
        assert!(!d.path().join("cache").exists());
    }

    /// The largest size is made, as a qcow2 overlay of exactly that size.
    #[test]
    fn the_largest_size_is_made() {
        let d = Tmp::new();
        let image = d.path().join("disk.raw");
        fs::write(&image, vec![7u8; 1 << 20]).unwrap();
        let mut o = opts(d.path());
        o.count = 2;
        o.size = Some(qcow2::MAX_OVERLAY_SIZE);
        let r = provision(&image, &o, &mut |_| {}).unwrap();
        assert_eq!(r.guests.len(), 2);
        for g in &r.guests {
            assert_eq!(
                g.kind,
                GuestKind::Disk {
                    virtual_size: qcow2::MAX_OVERLAY_SIZE
                }
            );
        }
    }
}
