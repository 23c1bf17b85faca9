//! An image read once into a cache entry's payload: a rootfs archive
//! unpacked into a tree; a raw disk, plain or decompressed, written
//! sparsely; a qcow2 image converted natively to a sparse raw base, its
//! plain clusters reflinked or copied in the kernel from the image file
//! where the filesystem can; a foreign format converted by `qemu-img`
//! from a private copy. Every byte read feeds the cache key's digest.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use zinstall_engine::Op;
use zinstall_engine::fsutil::RangeCopier;
use zinstall_engine::unpack;
use zinstall_qcow2 as qcow2;

use crate::cache::HashingReader;
use crate::detect::{self, Compression, ImageKind, decompress};
use crate::error::{ImageProblem, ProvisionError, ProvisionError as Error};
use crate::options::ProvisionOptions;
use crate::sparse::write_sparse;

/// Conversion threads: the tunable, but no more than the machine has
/// cores (more only contend) and at most 8; one beside a shared pool,
/// whose workers are the budget (a cache entry is built once, while every
/// guest's copy runs on the pool).
fn convert_threads(opts: &ProvisionOptions) -> usize {
    if opts.pool.is_some() {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    opts.tunables.copy_threads.clamp(1, 8).min(cores)
}

/// A qcow2 image as [`open_qcow2`] found it.
pub(crate) enum Qcow2Input {
    /// Opened natively, with its chain.
    Native(Box<qcow2::Image>),
    /// Refused by the native reader for a feature it lacks, to be
    /// converted by this `qemu-img` (asked for with `--qemu-img`).
    QemuImg(PathBuf, qcow2::Error),
}

/// Opens the image file `image` names: its directory first, then the
/// image beneath that descriptor, a regular file or refused naming what
/// it is ([`qcow2::InDir`]). Every file the image names is found beneath
/// the same directory descriptor, never by its path again.
pub(crate) fn open_image(image: &Path) -> Result<qcow2::InDir, ProvisionError> {
    qcow2::InDir::open(image).map_err(ProvisionError::from)
}

/// Opens the qcow2 `image` with its backing chain and data file, before
/// its entry is obtained (the files it reads are part of its identity);
/// an image refused for a feature the native reader lacks goes to the
/// `qemu-img` the caller asked for, or is refused saying to ask for it.
pub(crate) fn open_qcow2(
    image: &Path,
    opened: qcow2::InDir,
    opts: &ProvisionOptions,
) -> Result<Qcow2Input, ProvisionError> {
    let chain = qcow2::ChainOptions {
        backing_dir: opts.backing_dir.clone(),
        ..Default::default()
    };
    match qcow2::Image::open_chain_in(opened, image, &chain) {
        Ok(img) => Ok(Qcow2Input::Native(Box::new(img))),
        Err(e) => {
            // Only the image itself: qemu-img is given the image alone.
            let problem = e.refusal().filter(|_| e.path == image);
            let encrypted =
                matches!(problem, Some(qcow2::Problem::Encrypted(_)));
            if encrypted {
                // Its key, given to qemu-img; without one, refused saying
                // how to give it.
                if opts.secret_file.is_none() {
                    return Err(Error::Image {
                        path: image.to_path_buf(),
                        problem: ImageProblem::Unsupported(format!(
                            "{}; or pass --secret-file KEYFILE (the \
                             passphrase, exactly) to have qemu-img decrypt it",
                            e.refusal()
                                .map_or(String::new(), |p| p.to_string())
                        )),
                    });
                }
                let q = crate::qemu_img::converter(opts.qemu_img.as_deref())
                    .ok_or_else(|| Error::Image {
                        path: image.to_path_buf(),
                        problem: ImageProblem::Unsupported(
                            "encrypted, and there is no qemu-img on PATH to \
                             decrypt it (install it, or name it with \
                             --qemu-img)"
                                .into(),
                        ),
                    })?;
                return Ok(Qcow2Input::QemuImg(q, e));
            }
            let fallback = problem.is_some_and(|p| p.is_unsupported());
            match (&opts.qemu_img, fallback) {
                (Some(q), true) => Ok(Qcow2Input::QemuImg(q.clone(), e)),
                (None, true) => Err(Error::Image {
                    path: image.to_path_buf(),
                    problem: ImageProblem::Unsupported(format!(
                        "{}; pass --qemu-img to have qemu-img convert it",
                        e.refusal().map_or(String::new(), |p| p.to_string())
                    )),
                }),
                _ => Err(e.into()),
            }
        }
    }
}

/// Builds a cache entry's payload from the image, reading it once: through
/// the hashing reader, or for a plain qcow2 image natively, feeding the
/// digest as it goes (with its data file and backing chain after it).
/// `qcow` is the qcow2 image already opened ([`open_qcow2`]; opened here
/// if `None`). What was noticed and accepted goes to `notices`.
pub(crate) fn build(
    image: &Path,
    kind: ImageKind,
    qcow: Option<Qcow2Input>,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(), ProvisionError> {
    reader.meter(opts.progress.clone());
    match kind {
        ImageKind::Tree(c) => build_tree(image, c, reader, payload, opts),
        ImageKind::Raw(c) => build_raw(image, c, reader, payload, opts),
        ImageKind::Qcow2 => {
            build_qcow2(image, qcow, reader, payload, opts, notices)
        }
        ImageKind::CompressedQcow2(c) => {
            build_compressed_qcow2(image, c, reader, payload, opts, notices)
        }
        ImageKind::Foreign(..) => {
            build_foreign(image, kind, reader, payload, opts)
        }
        // Built layer by layer (the oci module), never from one stream.
        ImageKind::Oci => Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::Unsupported(
                "an OCI image is not one stream".into(),
            ),
        }),
    }
}

/// A tree image: unpacked into `payload`, read ahead of the tar reader.
fn build_tree(
    image: &Path,
    c: Compression,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    fs::create_dir(payload).map_err(|e| Error::io(Op::Mkdir, payload, e))?;
    // Unbuffered: the decoder buffers what it reads.
    let stream =
        decompress(reader, c).map_err(|e| Error::io(Op::Read, image, e))?;
    // Read, summed and decompressed ahead of the tar reader, on a
    // thread of its own.
    std::thread::scope(|s| {
        let (ahead, _stream) = zinstall_archive::ahead::read_ahead(
            s,
            unpack::DECOMPRESS_THREAD,
            stream,
        )
        .map_err(|e| Error::io(Op::Read, image, e))?;
        unpack::unpack_from(ahead, image, payload, &opts.unpack())
            .map_err(Error::from)
    })?;
    Ok(())
}

/// A raw disk image: decompressed into `payload`, a fixed VHD's footer
/// cut off.
fn build_raw(
    image: &Path,
    c: Compression,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let out = File::create_new(payload)
        .map_err(|e| Error::io(Op::Create, payload, e))?;
    let mut stream =
        decompress(reader, c).map_err(|e| Error::io(Op::Read, image, e))?;
    // Compressed, the stream may say anything: bounded. A plain
    // file's bytes are its size.
    let limit = match c {
        Compression::None => u64::MAX,
        _ => opts.max_archive_bytes,
    };
    decompress_into(image, &mut stream, &out, payload, limit, opts)?;
    // A fixed VHD is the disk and a footer, which the guest must
    // not see; compressed, only the stream shows it.
    let len = out
        .metadata()
        .map_err(|e| Error::io(Op::Stat, payload, e))?
        .len();
    if let Some(disk) = detect::fixed_vhd_disk_len(&out, len, image)? {
        out.set_len(disk)
            .map_err(|e| Error::io(Op::Truncate, payload, e))?;
    }
    Ok(())
}

/// A plain qcow2 image: converted natively as it is read, or by
/// qemu-img where it must be.
fn build_qcow2(
    image: &Path,
    qcow: Option<Qcow2Input>,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(), ProvisionError> {
    let qcow = match qcow {
        Some(q) => q,
        None => open_qcow2(image, open_image(image)?, opts)?,
    };
    match qcow {
        Qcow2Input::Native(img) => {
            notices.extend(img.notices());
            // One sequential read of the file feeds the digest;
            // plain clusters are reflinked or copied in the kernel
            // from the image file, or written from the same
            // buffers.
            convert_streaming(
                &img,
                image,
                reader,
                payload,
                opts,
                &Placer::new(),
            )?;
        }
        Qcow2Input::QemuImg(qemu_img, why) => {
            let copy = payload.with_file_name("image.foreign");
            scratch_copy(
                image,
                reader,
                Compression::None,
                &copy,
                u64::MAX,
                opts,
            )?;
            let r =
                crate::qemu_img::convert_to_raw(&crate::qemu_img::Conversion {
                    qemu_img: &qemu_img,
                    format: crate::qemu_img::Format::Qcow2,
                    shown: image,
                    copy: &copy,
                    payload,
                    cancel: opts.cancel.as_ref(),
                    secret: match why.refusal() {
                        Some(qcow2::Problem::Encrypted(_)) => {
                            opts.secret_file.as_deref()
                        }
                        _ => None,
                    },
                });
            let _scratch = fs::remove_file(&copy);
            r?;
            notices.push(format!(
                "{}: not read natively ({}); converted by {}",
                image.display(),
                why.refusal().map_or(String::new(), |p| p.to_string()),
                qemu_img.display()
            ));
        }
    }
    Ok(())
}

/// A compressed qcow2 image: decompressed once beside the payload (the
/// scratch directory, removed with it on failure), read natively, then
/// dropped.
fn build_compressed_qcow2(
    image: &Path,
    c: Compression,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(), ProvisionError> {
    // Decompressed once beside the payload (the scratch directory,
    // removed with it on failure), read natively, then dropped.
    let inner = payload.with_file_name("image.qcow2");
    scratch_copy(image, reader, c, &inner, opts.max_archive_bytes, opts)?;
    // Its problems are the image's: the scratch copy is gone.
    let r =
        convert_qcow2(&inner, image, payload, opts, notices).map_err(
            |e| match e {
                ProvisionError::Qcow2(mut q) if q.path == inner => {
                    q.path = image.to_path_buf();
                    ProvisionError::Qcow2(q)
                }
                e => e,
            },
        );
    let _scratch = fs::remove_file(&inner);
    r?;
    Ok(())
}

/// A foreign image (VHD, VMDK, ...): copied (decompressed) into the
/// scratch directory first, what qemu-img reads being what was hashed;
/// it is given nothing of the host's (see crate::qemu_img).
fn build_foreign(
    image: &Path,
    kind: ImageKind,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let ImageKind::Foreign(format, c) = kind else {
        unreachable!("only foreign images are built here");
    };
    // Copied (decompressed) into the scratch directory first: what
    // qemu-img reads is what was hashed, and it is given nothing
    // of the host's (see crate::qemu_img).
    let qemu_img = converter(opts, image, kind)?;
    let copy = payload.with_file_name("image.foreign");
    let limit = match c {
        Compression::None => u64::MAX,
        _ => opts.max_archive_bytes,
    };
    scratch_copy(image, reader, c, &copy, limit, opts)?;
    let r = crate::qemu_img::convert_to_raw(&crate::qemu_img::Conversion {
        qemu_img: &qemu_img,
        format: crate::qemu_img::Format::Foreign(format),
        shown: image,
        copy: &copy,
        payload,
        cancel: opts.cancel.as_ref(),
        secret: None,
    });
    let _scratch = fs::remove_file(&copy);
    r?;
    Ok(())
}

/// The `qemu-img` that converts the foreign `image` (see
/// [`crate::qemu_img::converter`]); without one, the image is refused
/// naming its format and the conversion to do by hand.
pub(crate) fn converter(
    opts: &ProvisionOptions,
    image: &Path,
    kind: ImageKind,
) -> Result<PathBuf, ProvisionError> {
    let ImageKind::Foreign(format, c) = kind else {
        unreachable!("only foreign images are converted");
    };
    crate::qemu_img::converter(opts.qemu_img.as_deref()).ok_or_else(|| {
        Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::ForeignDisk {
                format: format.name().into(),
                qemu_format: format.qemu_name().into(),
                compression: (c != Compression::None).then(|| c.name().into()),
            },
        }
    })
}

/// A qcow2 image's plain clusters placed by reflink or in-kernel copy
/// (the copy engine's [`RangeCopier`]).
struct Placer(RangeCopier);

impl Placer {
    fn new() -> Self {
        Placer(RangeCopier::new())
    }
}

impl qcow2::KernelCopy for Placer {
    fn copy(
        &self,
        src: &File,
        src_off: u64,
        dst: &File,
        dst_off: u64,
        len: u64,
    ) -> std::io::Result<u64> {
        self.0.copy(src, src_off, dst, dst_off, len)
    }

    fn finished(&self, dst: &File, off: u64, len: u64) {
        // The base is flushed before it is published: writing it back
        // while the conversion goes on leaves the flush less to do. A
        // failed writeback is reported by that flush.
        let _hint = zinstall_engine::fsutil::start_writeback(dst, off, len);
    }
}

/// Converts the qcow2 `image` into the sparse raw `payload`, feeding
/// every byte of the file read to `reader`'s digest once, with plain
/// clusters placed by `placer`.
fn convert_streaming(
    img: &qcow2::Image,
    image: &Path,
    reader: &mut HashingReader,
    payload: &Path,
    opts: &ProvisionOptions,
    placer: &Placer,
) -> Result<qcow2::ConvertStats, ProvisionError> {
    check_data(img, image, opts.max_archive_bytes)?;
    let out = File::create_new(payload)
        .map_err(|e| Error::io(Op::Create, payload, e))?;
    let co = qcow2::ConvertOptions {
        threads: convert_threads(opts),
    };
    reader.feed(|sink| {
        qcow2::convert_to_raw_streaming_with(img, &out, &co, sink, placer)
            .map_err(ProvisionError::from)
    })
}

/// Reads a decompressed qcow2 image at `qcow` (the image `shown`) into a
/// sparse raw `payload`. Its copy is in scratch, away from the files it
/// may name: it must stand alone.
fn convert_qcow2(
    qcow: &Path,
    shown: &Path,
    payload: &Path,
    opts: &ProvisionOptions,
    notices: &mut Vec<String>,
) -> Result<(), ProvisionError> {
    let img = qcow2::Image::open(qcow)?;
    img.require_standalone()?;
    notices.extend(img.notices());
    check_data(&img, shown, opts.max_archive_bytes)?;
    let out = File::create_new(payload)
        .map_err(|e| Error::io(Op::Create, payload, e))?;
    let co = qcow2::ConvertOptions {
        threads: convert_threads(opts),
    };
    qcow2::convert_to_raw(&img, &out, &co, &|_| {})?;
    Ok(())
}

/// Refuses a qcow2 image whose tables map more data than `limit`, before
/// anything is written: its clusters may point at the same few bytes of
/// the file over and over, so a small image could write a huge base.
fn check_data(
    img: &qcow2::Image,
    path: &Path,
    limit: u64,
) -> Result<(), ProvisionError> {
    let data = img.data_bytes()?;
    if data > limit {
        return Err(Error::Image {
            path: path.to_path_buf(),
            problem: ImageProblem::DataTooLarge { data, limit },
        });
    }
    Ok(())
}

/// Writes the image read through `reader`, decompressed (`c`), sparsely
/// into the new file `dst` beside the payload (in the scratch directory,
/// removed with it on failure), refusing more than `limit` bytes.
fn scratch_copy(
    image: &Path,
    reader: &mut HashingReader,
    c: Compression,
    dst: &Path,
    limit: u64,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let out =
        File::create_new(dst).map_err(|e| Error::io(Op::Create, dst, e))?;
    let mut stream =
        decompress(reader, c).map_err(|e| Error::io(Op::Read, image, e))?;
    decompress_into(image, &mut stream, &out, dst, limit, opts)
}

/// Writes a decompressed stream sparsely into `out`, refusing more than
/// `limit` bytes.
fn decompress_into(
    image: &Path,
    stream: &mut dyn std::io::Read,
    out: &File,
    out_path: &Path,
    limit: u64,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    // Page-aligned: the kernel copies into the page cache several times
    // faster from an aligned buffer.
    let len = opts.tunables.copy_bufsize.max(1 << 20);
    let mut raw = vec![0u8; len + 4096];
    let at = raw.as_ptr().align_offset(4096).min(4096);
    let buf = &mut raw[at..at + len];
    let mut bounded = std::io::Read::take(stream, limit.saturating_add(1));
    let (n, _) = write_sparse(&mut bounded, out, buf, |_| {}).map_err(|e| {
        // A system call's error is the destination's (a full disk);
        // anything else is the decoder finding the image corrupt or cut
        // short.
        if e.raw_os_error().is_some() {
            Error::io(Op::Write, out_path, e)
        } else {
            Error::Image {
                path: image.to_path_buf(),
                problem: ImageProblem::Corrupt(e.to_string()),
            }
        }
    })?;
    if n > limit {
        return Err(Error::Image {
            path: image.to_path_buf(),
            problem: ImageProblem::TooLarge { limit },
        });
    }
    Ok(())
}

/// A qcow2 image's plain clusters reach the cached base without passing
/// through user space: reflinked on XFS, copied in the kernel on ext4,
/// and written from the read buffers where neither can (another
/// filesystem, or asked). Every base compares equal with `qemu-img
/// compare`, its holes kept, its digest that of the image file.
#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod qcow2_placement {
    use std::os::unix::fs::MetadataExt;
    use std::process::Command;

    use sha2::{Digest, Sha256};
    use zinstall_testkit::{Kind, LoopFs, Tmp, shares_extents, tool};

    use super::*;
    use crate::cache::{Cache, Entry, EntryKind};
    use crate::options::ProvisionRequest;

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    fn run(cmd: &mut Command) {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The virtual size: 64 MiB and 12 KiB, so the last cluster is
    /// partial.
    const SIZE: u64 = (64 << 20) + (12 << 10);
    /// Bytes of the disk that are not zeros.
    const NONZERO: u64 = (4 << 20) + (12 << 10);
    /// Of those, in compressed clusters (when asked for).
    const COMPRESSED: u64 = 128 << 10;

    /// A qcow2 image in `dir`: plain data, a plain MiB of zeros (data on
    /// the image, a hole in the base), a zero-flagged MiB, the partial
    /// last cluster, and with `compressed` two compressed clusters.
    fn image(dir: &Path, compressed: bool) -> PathBuf {
        let img = dir.join("disk.qcow2");
        run(tool("qemu-img").args([
            "create",
            "-q",
            "-f",
            "qcow2",
            s(&img),
            &SIZE.to_string(),
        ]));
        let mut cmds = vec![
            "write -P 0x5a 0 2M".to_string(),
            "write -P 0x11 10M 1M".into(),
            "write -P 0 20M 1M".into(),
            "write -P 0x22 30M 1M".into(),
            "write -z 30M 1M".into(),
            "write -P 0x77 64M 12K".into(),
        ];
        if compressed {
            cmds.push("write -c -P 0x33 40M 128K".into());
            cmds.push("write -P 0x44 50M 896K".into());
        } else {
            cmds.push("write -P 0x44 50M 1M".into());
        }
        let mut c = tool("qemu-io");
        c.args(["-f", "qcow2"]);
        for cmd in &cmds {
            c.args(["-c", cmd]);
        }
        run(c.arg(&img));
        img
    }

    /// `qemu-img compare` of the image with the base.
    fn compare(img: &Path, base: &Path) {
        run(tool("qemu-img").args([
            "compare",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "raw",
            s(img),
            s(base),
        ]));
    }

    /// What converting a qcow2 image made: the converter's counts, and
    /// of the bytes it placed, how many were reflinked and how many
    /// copied in the kernel.
    #[derive(Debug)]
    struct Placed {
        stats: qcow2::ConvertStats,
        cloned: u64,
        copied: u64,
    }

    /// Builds a raw cache entry for the qcow2 `image` in `cache` as
    /// provisioning does, its plain clusters placed in the kernel
    /// (reflink, else `copy_file_range`) or, with `user_space_only`, all
    /// written from the buffers that read them; says how each byte got
    /// there.
    fn build_entry(
        image: &Path,
        cache: &Cache,
        user_space_only: bool,
    ) -> (Entry, Placed) {
        let request = ProvisionRequest {
            max_archive_bytes: Some(u64::MAX),
            keep_identity: true,
            ..Default::default()
        };
        let opts = ProvisionOptions::new(request, cache.root());
        let placer = match user_space_only {
            true => Placer(RangeCopier::user_space_only()),
            false => Placer::new(),
        };
        let mut stats = None;
        let (lease, _) = cache
            .obtain(image, EntryKind::Raw, None, |reader, payload| {
                let img = qcow2::Image::open(image)?;
                stats = Some(convert_streaming(
                    &img, image, reader, payload, &opts, &placer,
                )?);
                Ok::<_, ProvisionError>(())
            })
            .unwrap();
        let entry = lease.entry.clone();
        lease.release();
        let placed = Placed {
            stats: stats.expect("a new cache builds the entry"),
            cloned: placer.0.cloned(),
            copied: placer.0.copied(),
        };
        (entry, placed)
    }

    /// Builds the entry and checks what every path must give: the digest
    /// of the file, a base equal to the image, holes where the disk has
    /// zeros.
    fn build(img: &Path, cache: &Path, user_space_only: bool) -> Placed {
        let cache = Cache::new(cache).unwrap();
        let (entry, b) = build_entry(img, &cache, user_space_only);
        let want = Sha256::digest(fs::read(img).unwrap());
        let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(entry.sha256, hex, "digest of the image file");
        let base = entry.payload();
        compare(img, &base);
        assert_eq!(fs::metadata(&base).unwrap().len(), SIZE);
        assert_eq!(b.stats.written, NONZERO, "{b:?}");
        let allocated = fs::metadata(&base).unwrap().blocks() * 512;
        assert!(
            (NONZERO..=NONZERO + (256 << 10)).contains(&allocated),
            "{allocated} bytes allocated for {NONZERO} of data: {b:?}"
        );
        b
    }

    /// Free bytes of the filesystem at `p` (free blocks times the
    /// fundamental block size, as statvfs(3) gives them).
    fn free_bytes(p: &Path) -> u64 {
        let out = tool("stat")
            .args(["-f", "-c", "%f %S"])
            .arg(p)
            .output()
            .unwrap();
        assert!(out.status.success(), "stat -f {}", s(p));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut n = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
        n.next().unwrap() * n.next().unwrap()
    }

    fn mount(kind: Kind) -> Option<LoopFs> {
        LoopFs::require(kind, 2 << 30)
    }

    #[test]
    fn qcow2_base_shares_extents_with_the_image_on_xfs() {
        let Some(fs) = mount(Kind::Xfs) else {
            return;
        };
        let img = image(fs.path(), false);
        run(&mut Command::new("sync"));
        let before = free_bytes(fs.path());
        let b = build(&img, &fs.path().join("cache"), false);
        assert_eq!(b.cloned, NONZERO, "every data block reflinked: {b:?}");
        assert_eq!(b.copied, 0, "{b:?}");
        assert_eq!(b.stats.placed, NONZERO, "{b:?}");
        let entry = fs::read_dir(fs.path().join("cache/entries"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        let base = entry.join("base.raw");
        assert!(shares_extents(&base), "{} shares no extents", s(&base));
        // Shared, not copied: the base took far less space than its data.
        run(&mut Command::new("sync"));
        let used = before.saturating_sub(free_bytes(fs.path()));
        assert!(used < NONZERO / 2, "{used} bytes used for a reflinked base");
    }

    #[test]
    fn qcow2_base_is_copied_in_the_kernel_on_ext4() {
        let Some(fs) = mount(Kind::Ext4) else {
            return;
        };
        let img = image(fs.path(), true);
        let b = build(&img, &fs.path().join("cache"), false);
        assert_eq!(b.cloned, 0, "ext4 has no reflinks: {b:?}");
        assert_eq!(b.copied, NONZERO - COMPRESSED, "{b:?}");
        assert_eq!(b.stats.placed, b.copied, "{b:?}");
        assert_eq!(b.stats.compressed_clusters, 2, "{b:?}");
    }

    /// The cache on another filesystem than the image: neither reflink
    /// nor in-kernel copy crosses (EXDEV), so the base is written from
    /// the buffers that were read, and is the same.
    #[test]
    fn qcow2_base_on_another_filesystem_is_written_from_user_space() {
        let Some(fs) = mount(Kind::Xfs) else {
            return;
        };
        let d = Tmp::new();
        let img = image(d.path(), true);
        let b = build(&img, &fs.path().join("cache"), false);
        assert_eq!((b.cloned, b.copied, b.stats.placed), (0, 0, 0), "{b:?}");
    }

    /// The portable path, asked for: the same base from the same bytes.
    #[test]
    fn qcow2_base_written_from_user_space_when_asked() {
        zinstall_testkit::need("qemu-img");
        let d = Tmp::new();
        let img = image(d.path(), true);
        let b = build(&img, &d.path().join("cache"), true);
        assert_eq!((b.cloned, b.copied, b.stats.placed), (0, 0, 0), "{b:?}");
    }
}
