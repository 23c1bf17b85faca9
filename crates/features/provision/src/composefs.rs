//! Guests in composefs form: the cache entry's tree made once into an
//! EROFS image in the cache's composefs store (its files' contents there
//! too, each once), kept by the ref `entry-<entry name>`; each guest a
//! directory holding `composefs.json`, an empty `root/` to mount the
//! image on, and its own `upper/` and `work/`. A guest's identity and
//! customisation are applied through its mounted overlay, so that what
//! they write is copied up by the kernel into its `upper/`; the store and
//! the image are never written through a guest.
//!
//! composefs is Linux's: elsewhere composefs guests are refused.

use crate::customize::Customized;
use crate::identity::GuestIdentity;

#[cfg(target_os = "linux")]
pub(crate) use linux::{EntryImage, entry_image, make_guest, unmount_guest};
#[cfg(not(target_os = "linux"))]
pub(crate) use other::{EntryImage, entry_image, make_guest, unmount_guest};
/// What making one composefs guest gave.
pub(crate) struct Made {
    /// Its identity, as tree guests report it.
    pub identity: GuestIdentity,
    /// What its customisation made.
    pub customized: Customized,
    /// True if it was left mounted (`--mount`).
    pub mounted: bool,
}

// The same names where composefs guests are refused.
#[cfg(not(target_os = "linux"))]
mod other {
    use std::path::Path;

    use super::Made;
    use crate::cache::{Cache, Entry};
    use crate::customize::Customization;
    use crate::error::ProvisionError;
    use crate::options::ProvisionOptions;

    /// Composefs guests asked for where there is no composefs (refused
    /// before, by the request's check).
    fn not_here(out: &Path) -> ProvisionError {
        ProvisionError::Composefs {
            path: out.to_path_buf(),
            why: "composefs is Linux's: no composefs guests here".into(),
        }
    }

    // The types the guests module names on every system.
    pub(crate) struct EntryImage {
        pub hex: String,
    }

    pub(crate) fn entry_image(
        _cache: &Cache,
        _entry: &Entry,
        opts: &ProvisionOptions,
    ) -> Result<EntryImage, ProvisionError> {
        Err(not_here(&opts.out))
    }

    pub(crate) fn make_guest(
        _path: &Path,
        _image: &EntryImage,
        _entry: &Entry,
        _n: usize,
        opts: &ProvisionOptions,
        _custom: Option<&Customization>,
    ) -> Result<Made, ProvisionError> {
        Err(not_here(&opts.out))
    }

    pub(crate) fn unmount_guest(_path: &Path, _made_now: bool) {}
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::CString;
    use std::fs;
    use std::os::fd::{AsFd, AsRawFd, OwnedFd};
    use std::path::{Path, PathBuf};

    use zinstall_composefs::{
        Backing, Layers, MountVerity, Mounting, ObjectId, ROOT_DIR, Record,
        Store, Top, UPPER_DIR, WORK_DIR, hex, match_upper, mount_root, unmount,
        write_image,
    };
    use zinstall_sys::fs::at;

    use super::Made;
    use crate::cache::{Cache, Entry};
    use crate::customize::{self, Customization, Customized};
    use crate::error::ProvisionError;
    use crate::identity;
    use crate::options::ProvisionOptions;

    /// composefs's error as the provision's: its path, its message
    /// (which names the operation and what to do).
    pub(crate) fn error(e: zinstall_composefs::Error) -> ProvisionError {
        ProvisionError::Composefs {
            path: e.path.clone(),
            why: e.to_string(),
        }
    }

    fn io(path: &Path, what: &str, e: std::io::Error) -> ProvisionError {
        ProvisionError::Composefs {
            path: path.to_path_buf(),
            why: format!("{}: {what}: {e}", path.display()),
        }
    }

    /// A cache entry's composefs image, in the cache's store.
    pub(crate) struct EntryImage {
        /// The store (`<cache>/composefs`).
        pub store: Store,
        /// The image's ID.
        pub id: ObjectId,
        /// The same, hex.
        pub hex: String,
        /// The ref that keeps it.
        pub ref_name: String,
    }

    /// The composefs image of `entry`'s tree: the one its ref names when
    /// the store has it whole (the image object is checked against its
    /// name: it is small), else written now and the ref pointed at it.
    pub(crate) fn entry_image(
        cache: &Cache,
        entry: &Entry,
        _opts: &ProvisionOptions,
    ) -> Result<EntryImage, ProvisionError> {
        let store = Store::open(&cache.composefs_store()).map_err(error)?;
        let ref_name = entry.composefs_ref();
        // Held from the ref read to the ref written: a `cache gc` sweep
        // of the store waits, and never takes objects an image being
        // written or reused here needs.
        let _hold = store.lock_shared().map_err(error)?;
        let found = match store.read_ref(&ref_name).map_err(error)? {
            Some(id) if store.contains(&id).map_err(error)? => {
                store.verify(&id).is_ok().then_some(id)
            }
            _ => None,
        };
        let id = match found {
            Some(id) => id,
            None => {
                let image =
                    write_image(&entry.payload(), &store).map_err(error)?;
                // write_image syncs the store: the objects and the image
                // are durable before the ref names them, and the ref
                // before any guest's record.
                store.add_ref(&ref_name, &image.id).map_err(error)?;
                image.id
            }
        };
        Ok(EntryImage {
            hex: hex(&id),
            store,
            id,
            ref_name,
        })
    }

    fn cname(path: &Path, s: &str) -> Result<CString, ProvisionError> {
        CString::new(s).map_err(|_| {
            io(
                path,
                "name",
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            )
        })
    }

    fn open_dir(
        dir: &OwnedFd,
        name: &str,
        shown: &Path,
    ) -> Result<OwnedFd, ProvisionError> {
        at::open_dir(dir.as_raw_fd(), &cname(shown, name)?)
            .map_err(|e| io(&shown.join(name), "open", e))
    }

    /// Mounts the guest at `path` (its directory open as `guest`) on
    /// `root/`, writable.
    fn mount(
        image: &EntryImage,
        guest: &OwnedFd,
        path: &Path,
    ) -> Result<(), ProvisionError> {
        let upper = open_dir(guest, UPPER_DIR, path)?;
        let work = open_dir(guest, WORK_DIR, path)?;
        let how = Mounting {
            layers: Layers::Overlay {
                upper: upper.as_fd(),
                work: work.as_fd(),
            },
            verity: MountVerity::IfPresent,
            backing: Backing::Auto,
        };
        mount_root(
            &image.store,
            &image.id,
            guest.as_fd(),
            ROOT_DIR,
            &path.join(ROOT_DIR),
            how,
        )
        .map_err(error)
    }

    /// A guest's root mounted, unmounted when dropped (on a failure);
    /// [`Mounted::unmount`] says whether the unmount itself failed.
    struct Mounted(Option<PathBuf>);

    impl Mounted {
        fn unmount(mut self) -> Result<(), ProvisionError> {
            match self.0.take() {
                Some(at) => unmount(&at).map_err(error),
                None => Ok(()),
            }
        }
    }

    impl Drop for Mounted {
        fn drop(&mut self) {
            if let Some(at) = self.0.take() {
                // A failure is being reported; the run's undo tries again.
                let _ = unmount(&at);
            }
        }
    }

    /// Makes the composefs guest `n` at `path` (which does not exist)
    /// of `image`: its directories, its identity and customisation
    /// through its mounted root when it needs any (no mount otherwise),
    /// then its record, last; mounted again for `--mount`.
    pub(crate) fn make_guest(
        path: &Path,
        image: &EntryImage,
        entry: &Entry,
        n: usize,
        opts: &ProvisionOptions,
        custom: Option<&Customization>,
    ) -> Result<Made, ProvisionError> {
        let top = fs::symlink_metadata(entry.payload())
            .map_err(|e| io(&entry.payload(), "stat", e))?;
        fs::create_dir(path).map_err(|e| io(path, "mkdir", e))?;
        let c = zinstall_sys::cstr(path).map_err(|e| io(path, "open", e))?;
        let guest = at::open_dir(libc::AT_FDCWD, &c)
            .map_err(|e| io(path, "open", e))?;
        for (name, mode) in
            [(ROOT_DIR, 0o755), (UPPER_DIR, 0o755), (WORK_DIR, 0o700)]
        {
            at::mkdir(guest.as_raw_fd(), &cname(path, name)?, mode)
                .map_err(|e| io(&path.join(name), "mkdir", e))?;
        }
        match_upper(&guest, path, &Top::of_metadata(&top)).map_err(error)?;
        let mut identity = identity::GuestIdentity::default();
        let mut customized = Customized::default();
        if opts.identity.changes_anything() || custom.is_some() {
            let root = path.join(ROOT_DIR);
            mount(image, &guest, path)?;
            let mounted = Mounted(Some(root.clone()));
            identity = identity::apply(
                &root,
                n,
                &format!("{}-{n}", opts.name),
                &opts.identity,
            )?;
            if let Some(c) = custom {
                customized = customize::apply(
                    c,
                    &root,
                    n,
                    opts.tunables,
                    opts.cancel.as_ref(),
                )?;
            }
            mounted.unmount()?;
            // Copying a directory up touched upper/ itself.
            match_upper(&guest, path, &Top::of_metadata(&top))
                .map_err(error)?;
        }
        Record::new(image.store.path(), &image.id, &image.ref_name)
            .write(&guest, path)
            .map_err(error)?;
        if opts.mount {
            mount(image, &guest, path)?;
        }
        Ok(Made {
            identity,
            customized,
            mounted: opts.mount,
        })
    }

    /// Unmounts the guest at `path` if its root is mounted (before it is
    /// removed: a failed run's, or one `--force` replaces). Nothing
    /// mounted, or no such guest, is not an error.
    /// `made_now`: this run made it, and it may have no record yet; a
    /// guest found there (for `--force`) is one only with its record (a
    /// tree guest's `root/` is its root user's home).
    pub(crate) fn unmount_guest(path: &Path, made_now: bool) {
        let root = path.join(ROOT_DIR);
        let ours = made_now
            || fs::symlink_metadata(path.join(zinstall_composefs::RECORD))
                .is_ok();
        if ours && fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
            let _ = unmount(&root);
        }
    }
}
