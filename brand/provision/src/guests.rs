//! Many guests from one image: extract once into the cache, then give
//! every guest a thin copy.

use std::fmt;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use copier::unpack::{self, UnpackOptions};
use copier::{Op, Plan, Tunables};
use zinstall_qcow2 as qcow2;

use crate::cache::{Cache, Entry, EntryKind, Obtained};
use crate::detect::{ImageKind, decompress, detect};
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::sparse::write_sparse;

/// How to provision.
#[derive(Clone, Debug)]
pub struct ProvisionOptions {
    /// Guests to make.
    pub count: usize,
    /// Where the guests go.
    pub out: PathBuf,
    /// Guests are named `NAME-0` ... `NAME-(count-1)`.
    pub name: String,
    /// Virtual size of disk guests; never below the base's.
    pub size: Option<u64>,
    /// The cache's root directory.
    pub cache: PathBuf,
    /// The image's expected SHA-256 (hex), if known.
    pub sha256: Option<String>,
    /// Make overlays with this `qemu-img` instead of natively.
    pub qemu_img: Option<PathBuf>,
    /// Workers for extraction, conversion and copies.
    pub tunables: Tunables,
    /// Bound on what an archive may unpack to.
    pub max_archive_bytes: u64,
    /// Stops extraction, conversion and copies at their next entry when
    /// raised.
    pub cancel: Option<copier::Cancel>,
}

/// What one guest is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestKind {
    /// A directory tree, cloned by reflink or copied.
    Tree {
        /// True if every file was cloned (shares extents with the cache).
        reflinked: bool,
    },
    /// A qcow2 overlay over the cached raw base.
    Disk {
        /// Its virtual size.
        virtual_size: u64,
    },
}

/// One guest made.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Its directory or overlay file.
    pub path: PathBuf,
    /// What it is.
    pub kind: GuestKind,
    /// How long it took.
    pub took: Duration,
}

impl fmt::Display for Guest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            GuestKind::Tree { reflinked: true } => {
                write!(f, "{}: tree, reflink clone", self.path.display())?
            }
            GuestKind::Tree { reflinked: false } => {
                write!(f, "{}: tree, parallel copy", self.path.display())?
            }
            GuestKind::Disk { virtual_size } => write!(
                f,
                "{}: qcow2 overlay, {virtual_size} bytes",
                self.path.display()
            )?,
        }
        write!(f, ", {} ms", self.took.as_millis())
    }
}

/// What a provisioning did.
#[derive(Clone, Debug)]
pub struct ProvisionReport {
    /// The image's kind.
    pub image: ImageKind,
    /// The cache entry the guests come from.
    pub entry: Entry,
    /// Whether the entry was built now or found.
    pub obtained: Obtained,
    /// The guests, in order.
    pub guests: Vec<Guest>,
}

impl ProvisionOptions {
    /// The most guests one provisioning makes. Each is a file or a tree
    /// and a cache user record; far more than any host runs, and small
    /// enough that bookkeeping per guest stays small.
    pub const MAX_GUESTS: usize = 65536;
}

/// Provisions `opts.count` guests from `image`; `on_guest` hears of each
/// as it is made.
pub fn provision(
    image: &Path,
    opts: &ProvisionOptions,
    on_guest: &mut dyn FnMut(&Guest),
) -> Result<ProvisionReport, ProvisionError> {
    // Before anything is extracted: the count sizes the guest list, the
    // size every overlay.
    if opts.count > ProvisionOptions::MAX_GUESTS {
        return Err(ProvisionError::TooManyGuests(opts.count));
    }
    if let Some(s) = opts.size
        && s > qcow2::MAX_OVERLAY_SIZE
    {
        return Err(ProvisionError::SizeTooLarge(s));
    }
    // Set directly by a caller rather than read from a file, the
    // tunables may never have been checked; a buffer is sized from them.
    opts.tunables.validate()?;
    let kind = detect(image)?;
    fs::create_dir_all(&opts.cache)
        .map_err(|e| Error::io(Op::Mkdir, &opts.cache, e))?;
    // Overlays name their base by absolute path.
    let root = fs::canonicalize(&opts.cache)
        .map_err(|e| Error::io(Op::Stat, &opts.cache, e))?;
    let cache = Cache::new(root)?;
    let entry_kind = match kind {
        ImageKind::Tree(_) => EntryKind::Tree,
        ImageKind::Raw(_) | ImageKind::Qcow2 => EntryKind::Raw,
    };
    let (lease, obtained) = cache.obtain(
        image,
        entry_kind,
        opts.sha256.as_deref(),
        |reader, payload| build(image, kind, reader, payload, opts),
    )?;
    fs::create_dir_all(&opts.out)
        .map_err(|e| Error::io(Op::Mkdir, &opts.out, e))?;
    let mut guests = Vec::with_capacity(opts.count);
    let result = (|| -> Result<(), ProvisionError> {
        for i in 0..opts.count {
            let t0 = Instant::now();
            let g = match entry_kind {
                EntryKind::Tree => {
                    let path = opts.out.join(format!("{}-{i}", opts.name));
                    if fs::symlink_metadata(&path).is_ok() {
                        return Err(ProvisionError::GuestExists(path));
                    }
                    let mut plan = Plan::new(lease.entry.payload(), &path)
                        .tunables(opts.tunables);
                    if let Some(c) = &opts.cancel {
                        plan = plan.cancel(c.clone());
                    }
                    let r = plan.run()?;
                    let s = &r.stats;
                    let reflinked = s.files > 0 && s.reflinked == s.files;
                    Guest {
                        path,
                        kind: GuestKind::Tree { reflinked },
                        took: t0.elapsed(),
                    }
                }
                EntryKind::Raw => {
                    let path =
                        opts.out.join(format!("{}-{i}.qcow2", opts.name));
                    if fs::symlink_metadata(&path).is_ok() {
                        return Err(ProvisionError::GuestExists(path));
                    }
                    let base = lease.entry.payload();
                    let base_size = fs::metadata(&base)
                        .map_err(|e| Error::io(Op::Stat, &base, e))?
                        .len();
                    // Grow only: a guest disk is never smaller than its base.
                    let size = opts.size.unwrap_or(0).max(base_size);
                    if size > qcow2::MAX_OVERLAY_SIZE {
                        return Err(ProvisionError::SizeTooLarge(size));
                    }
                    let virtual_size = match &opts.qemu_img {
                        Some(q) => {
                            crate::qemu_img::create_overlay(
                                q,
                                &path,
                                &base,
                                Some(size),
                            )?;
                            // Bounded above: cannot wrap.
                            size.next_multiple_of(512)
                        }
                        None => {
                            qcow2::create_overlay(&path, &base, "raw", size)?
                        }
                    };
                    Guest {
                        path,
                        kind: GuestKind::Disk { virtual_size },
                        took: t0.elapsed(),
                    }
                }
            };
            let abs =
                fs::canonicalize(&g.path).unwrap_or_else(|_| g.path.clone());
            cache.add_user(&lease.entry, &abs)?;
            on_guest(&g);
            guests.push(g);
        }
        Ok(())
    })();
    let entry = lease.entry.clone();
    lease.release();
    result?;
    Ok(ProvisionReport {
        image: kind,
        entry,
        obtained,
        guests,
    })
}

/// Builds a cache entry's payload from the image (read once, through the
/// hashing reader, except qcow2 which is read by cluster).
fn build(
    image: &Path,
    kind: ImageKind,
    reader: &mut crate::cache::HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    match kind {
        ImageKind::Tree(c) => {
            fs::create_dir(payload)
                .map_err(|e| Error::io(Op::Mkdir, payload, e))?;
            let stream = decompress(
                std::io::BufReader::with_capacity(1 << 20, reader),
                c,
            )
            .map_err(|e| Error::io(Op::Read, image, e))?;
            let uo = UnpackOptions {
                tunables: opts.tunables,
                expect: None,
                allow_devices: false,
                max_bytes: opts.max_archive_bytes,
                preserve_owner: None,
                cancel: opts.cancel.clone(),
            };
            unpack::unpack_from(stream, image, payload, &uo)?;
        }
        ImageKind::Raw(c) => {
            let out = File::create_new(payload)
                .map_err(|e| Error::io(Op::Create, payload, e))?;
            let mut stream = decompress(reader, c)
                .map_err(|e| Error::io(Op::Read, image, e))?;
            let mut buf = vec![0u8; opts.tunables.copy_bufsize.max(1 << 20)];
            write_sparse(&mut stream, &out, &mut buf, |_| {}).map_err(|e| {
                // A system call's error is the destination's (a full
                // disk); anything else is the decoder finding the image
                // corrupt or cut short.
                if e.raw_os_error().is_some() {
                    Error::io(Op::Write, payload, e)
                } else {
                    Error::Image {
                        path: image.to_path_buf(),
                        problem: ImageProblem::Corrupt(e.to_string()),
                    }
                }
            })?;
            finish_base(payload)?;
        }
        ImageKind::Qcow2 => {
            let img = qcow2::Image::open(image)?;
            img.require_standalone()?;
            let out = File::create_new(payload)
                .map_err(|e| Error::io(Op::Create, payload, e))?;
            let co = qcow2::ConvertOptions {
                threads: opts.tunables.copy_threads.clamp(1, 8),
            };
            qcow2::convert_to_raw(&img, &out, &co, &|_| {})?;
            finish_base(payload)?;
        }
    }
    Ok(())
}

/// A base is read-only for everyone: guests write to their overlays.
fn finish_base(payload: &Path) -> Result<(), Error> {
    fs::set_permissions(payload, fs::Permissions::from_mode(0o444))
        .map_err(|e| Error::io(Op::Chmod, payload, e))
}

#[cfg(test)]
mod test {
    use super::*;

    fn opts(dir: &Path) -> ProvisionOptions {
        ProvisionOptions {
            count: 1,
            out: dir.join("out"),
            name: "g".into(),
            size: None,
            cache: dir.join("cache"),
            sha256: None,
            qemu_img: None,
            tunables: Tunables::default(),
            max_archive_bytes: 1 << 30,
            cancel: None,
        }
    }

    /// Absurd counts and sizes are refused before anything is read,
    /// extracted or allocated.
    #[test]
    fn counts_and_sizes_are_bounded_before_any_work() {
        let d = tempfile::tempdir().unwrap();
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
        let d = tempfile::tempdir().unwrap();
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
