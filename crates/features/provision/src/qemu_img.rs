//! Running `qemu-img`: for overlays instead of the native writer, when
//! asked, to convert the disk formats zinstall does not read itself, and
//! when asked (`--qemu-img`), qcow2 images the native reader refuses for
//! a feature it lacks (not for being corrupt or hostile).
//!
//! A conversion reads an image from elsewhere with `qemu-img`'s parsers,
//! so it is fenced in:
//! - `qemu-img` is given the image as a descriptor of zinstall's own
//!   private copy (the bytes that were hashed: the cache key says what
//!   was converted) and the output as a descriptor too; it names no
//!   path of the host;
//! - run as root, it runs as the unprivileged [`SANDBOX_ID`], which owns
//!   just those two files for the conversion: a flaw in a parser cannot
//!   read or write anything of the host's that user cannot;
//! - `qemu-img info` is asked first, and an image that would have it
//!   open other files (a backing file, a VMDK extent outside the file),
//!   is encrypted, or is larger than a guest can be is refused;
//! - its environment is empty, its output bounded, and a cancel kills
//!   it;
//! - an encrypted qcow2 image is converted only with a key the caller
//!   names (`--secret-file`): the file is opened by zinstall and given
//!   as a descriptor too, read by `qemu-img` as a `secret` object.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use zinstall_engine::Op;

use crate::detect::ForeignFormat;
use crate::error::{ImageProblem, ProvisionError as Error, Result};
use crate::options::OVERLAY_MODE;
use crate::sys;

/// The user and group a conversion runs as when zinstall is root
/// (`nobody` on Linux).
pub(crate) const SANDBOX_ID: u32 = 65534;

/// Where a descriptor given to `qemu-img` is opened from.
#[cfg(target_os = "linux")]
const FD_DIR: &str = "/proc/self/fd";
#[cfg(not(target_os = "linux"))]
const FD_DIR: &str = "/dev/fd";

/// The descriptors the image, the output and the key have in
/// `qemu-img`.
const IMAGE_FD: RawFd = 3;
const OUTPUT_FD: RawFd = 4;
const SECRET_FD: RawFd = 5;

/// Most of `qemu-img info`'s JSON read, and of its standard error kept.
const MAX_OUTPUT: u64 = 1 << 20;

/// Checks that `qemu_img` can be run: a regular file with an execute
/// bit. Called before anything is extracted, so that a wrong path is
/// named at once rather than after a long build.
// A program to run, as named: only its type and mode are asked.
#[allow(clippy::disallowed_methods)]
pub(crate) fn check(qemu_img: &Path, target: &Path) -> Result<()> {
    let md = fs::metadata(qemu_img).map_err(|e| Error::Program {
        program: qemu_img.to_path_buf(),
        target: target.to_path_buf(),
        source: e,
    })?;
    if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
        return Err(Error::Program {
            program: qemu_img.to_path_buf(),
            target: target.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
    }
    Ok(())
}

/// The `qemu-img` that converts foreign formats: `given` (`--qemu-img`),
/// else the first `qemu-img` on `PATH` that can be run; `None` if there
/// is none.
pub(crate) fn converter(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(q) = given {
        return Some(q.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("qemu-img"))
        .find(|q| check(q, Path::new("")).is_ok())
}

/// `qemu-img create -q -f qcow2 -o compat=1.1 -F raw -b BASE OVERLAY
/// [SIZE]`, run by the path given with an empty environment; the overlay
/// then gets [`OVERLAY_MODE`], like a native one. A failure names the
/// program and carries its exit status and standard error.
pub(crate) fn create_overlay(
    qemu_img: &Path,
    overlay: &Path,
    base: &Path,
    size: Option<u64>,
) -> Result<()> {
    let mut cmd = Command::new(qemu_img);
    cmd.env_clear()
        .args([
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=1.1",
            "-F",
            "raw",
            "-b",
        ])
        .arg(base)
        .arg(overlay);
    if let Some(s) = size {
        cmd.arg(s.to_string());
    }
    let out = cmd.output().map_err(|e| Error::Program {
        program: qemu_img.to_path_buf(),
        target: overlay.to_path_buf(),
        source: e,
    })?;
    if !out.status.success() {
        return Err(Error::ProgramFailed {
            program: qemu_img.to_path_buf(),
            target: overlay.to_path_buf(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    fs::set_permissions(overlay, fs::Permissions::from_mode(OVERLAY_MODE))
        .map_err(|e| Error::io(zinstall_engine::Op::Chmod, overlay, e))
}

/// What `qemu-img` converts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Format {
    /// A format zinstall does not read.
    Foreign(ForeignFormat),
    /// A qcow2 image the native reader refused for a feature it lacks.
    Qcow2,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Foreign(f) => f.name(),
            Format::Qcow2 => "qcow2",
        }
    }

    fn qemu_name(self) -> &'static str {
        match self {
            Format::Foreign(f) => f.qemu_name(),
            Format::Qcow2 => "qcow2",
        }
    }
}

/// What converting a foreign image is given.
pub(crate) struct Conversion<'a> {
    /// The `qemu-img` to run.
    pub qemu_img: &'a Path,
    /// The image's format.
    pub format: Format,
    /// The image as the caller named it, for messages.
    pub shown: &'a Path,
    /// zinstall's private copy of its (decompressed) bytes.
    pub copy: &'a Path,
    /// The raw disk to make (must not exist).
    pub payload: &'a Path,
    /// Kills the conversion when raised.
    pub cancel: Option<&'a zinstall_engine::Cancel>,
    /// The key of an encrypted qcow2 image: a file whose bytes are the
    /// passphrase.
    pub secret: Option<&'a Path>,
}

/// Converts the private copy into the sparse raw payload (see the module
/// documentation); returns the disk's size.
pub(crate) fn convert_to_raw(c: &Conversion<'_>) -> Result<u64> {
    // The private copy this conversion made.
    #[allow(clippy::disallowed_methods)]
    let image =
        File::open(c.copy).map_err(|e| Error::io(Op::Open, c.copy, e))?;
    let out = File::create_new(c.payload)
        .map_err(|e| Error::io(Op::Create, c.payload, e))?;
    // Opened here, as the caller: the sandbox user need not be able to.
    let secret = match c.secret {
        // A secret file: a regular file or refused (a FIFO never holds
        // the conversion).
        Some(p) => {
            zinstall_core::foreign::open(p, zinstall_core::foreign::Follow::Yes)
                .map_err(|e| Error::io(Op::Open, p, e.into()))?
        }
        // No secret: the null device, on purpose.
        None => {
            #[allow(clippy::disallowed_methods)]
            let null = File::open("/dev/null");
            null.map_err(|e| Error::io(Op::Open, Path::new("/dev/null"), e))?
        }
    };
    let root = sys::effective_ids().0 == 0;
    if root {
        for (f, p) in [(&image, c.copy), (&out, c.payload)] {
            std::os::unix::fs::fchown(f, Some(SANDBOX_ID), Some(SANDBOX_ID))
                .map_err(|e| Error::io(Op::Chown, p, e))?;
        }
    }
    let r = info_and_convert(c, [&image, &out, &secret], root);
    if root {
        // The payload is root's again before it is published.
        std::os::unix::fs::fchown(&out, Some(0), Some(0))
            .map_err(|e| Error::io(Op::Chown, c.payload, e))?;
    }
    r
}

fn info_and_convert(
    c: &Conversion<'_>,
    fds: [&File; 3],
    root: bool,
) -> Result<u64> {
    let [_, out, _] = fds;
    let src = format!("{FD_DIR}/{IMAGE_FD}");
    let dst = format!("{FD_DIR}/{OUTPUT_FD}");
    let fmt = c.format.qemu_name();
    // With a key: the image named by options, its key a secret object
    // read from the key's descriptor.
    let object = format!("secret,id=sec0,file={FD_DIR}/{SECRET_FD}");
    let opts = format!(
        "driver={fmt},file.driver=file,file.filename={src},\
         encrypt.key-secret=sec0"
    );
    let source: Vec<&str> = match c.secret {
        Some(_) => vec!["--object", &object, "--image-opts", &opts],
        None => vec!["-f", fmt, &src],
    };
    let mut args = vec!["info", "--output=json"];
    args.extend(&source);
    let info = run(c, &args, fds, root)?;
    let size = checked_size(c, &info, &src)?;
    // qemu-img writes into the disk made at its size (-n): only the
    // data; holes stay holes (--target-is-zero).
    out.set_len(size)
        .map_err(|e| Error::io(Op::Truncate, c.payload, e))?;
    let mut args = vec!["convert", "-q", "-n", "--target-is-zero"];
    args.extend(&source);
    args.extend(["-O", "raw", &dst]);
    run(c, &args, fds, root)?;
    let len = out
        .metadata()
        .map_err(|e| Error::io(Op::Stat, c.payload, e))?
        .len();
    if len != size {
        return Err(refused(
            c,
            format!("qemu-img left a disk of {len} bytes, not {size}"),
        ));
    }
    Ok(size)
}

fn refused(c: &Conversion<'_>, why: String) -> Error {
    Error::Image {
        path: c.shown.to_path_buf(),
        problem: ImageProblem::Unsupported(format!(
            "a {} disk image: {why}",
            c.format.name()
        )),
    }
}

/// The disk's size from `qemu-img info`'s JSON, once it shows that
/// reading the image opens no file but the image: no backing file, no
/// extent elsewhere, no encryption.
fn checked_size(c: &Conversion<'_>, info: &[u8], src: &str) -> Result<u64> {
    let v: serde_json::Value = serde_json::from_slice(info).map_err(|e| {
        refused(c, format!("qemu-img info printed no JSON object: {e}"))
    })?;
    if let Some(b) = v
        .get("backing-filename")
        .or_else(|| v.get("full-backing-filename"))
    {
        return Err(refused(
            c,
            format!(
                "it has a backing file ({b}); guests are made only from \
                 images that stand alone"
            ),
        ));
    }
    if v.get("encrypted").and_then(|e| e.as_bool()) == Some(true)
        && c.secret.is_none()
    {
        return Err(refused(c, "it is encrypted".into()));
    }
    let data = v.get("format-specific").and_then(|f| f.get("data"));
    if let Some(extents) = data.and_then(|d| d.get("extents")) {
        let elsewhere = extents
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.get("filename").and_then(|f| f.as_str()))
            .find(|f| *f != src);
        if let Some(f) = elsewhere {
            return Err(refused(
                c,
                format!(
                    "its data is in another file ({f}); guests are made \
                     only from one file"
                ),
            ));
        }
    }
    if let Some(d) = data.and_then(|d| d.get("data-file")) {
        return Err(refused(c, format!("it has an external data file ({d})")));
    }
    let size =
        v.get("virtual-size")
            .and_then(|s| s.as_u64())
            .ok_or_else(|| {
                refused(c, "qemu-img info gave no virtual size".into())
            })?;
    if size > zinstall_qcow2::MAX_OVERLAY_SIZE {
        return Err(refused(
            c,
            format!(
                "its virtual size {size} is larger than a guest can be \
                 ({} bytes)",
                zinstall_qcow2::MAX_OVERLAY_SIZE
            ),
        ));
    }
    Ok(size)
}

/// Runs `qemu-img ARGS` with `fds` as its descriptors 3, 4 and 5, as the
/// sandbox user when `root`, its environment empty; kills it when the
/// conversion is cancelled. Returns its standard output (at most
/// [`MAX_OUTPUT`]); a failure carries its standard error.
fn run(
    c: &Conversion<'_>,
    args: &[&str],
    fds: [&File; 3],
    root: bool,
) -> Result<Vec<u8>> {
    let program = || c.qemu_img.to_path_buf();
    let mut cmd = Command::new(c.qemu_img);
    cmd.env_clear()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if root {
        // Also drops the supplementary groups (std does, for a root
        // parent).
        cmd.uid(SANDBOX_ID).gid(SANDBOX_ID);
    }
    sys::give_fds(
        &mut cmd,
        fds.map(|f| f.as_raw_fd()),
        [IMAGE_FD, OUTPUT_FD, SECRET_FD],
    );
    let mut child = cmd.spawn().map_err(|e| Error::Program {
        program: program(),
        target: c.payload.to_path_buf(),
        source: e,
    })?;
    let bounded = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let mut r = r.take(MAX_OUTPUT);
                let _cut = r.read_to_end(&mut buf);
                // Past the bound, drained so that the child never blocks.
                let _rest = io::copy(&mut r.into_inner(), &mut io::sink());
            }
            buf
        })
    };
    let stdout = bounded(child.stdout.take().map(|s| Box::new(s) as _));
    let stderr = bounded(child.stderr.take().map(|s| Box::new(s) as _));
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                return Err(Error::Program {
                    program: program(),
                    target: c.payload.to_path_buf(),
                    source: e,
                });
            }
        }
        if c.cancel.is_some_and(|x| x.is_cancelled()) {
            let _gone = child.kill();
            let _reaped = child.wait();
            return Err(Error::Fs(zinstall_engine::Error::Cancelled {
                path: c.payload.to_path_buf(),
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::ProgramFailed {
            program: program(),
            target: c.shown.to_path_buf(),
            status: format!("{} {}: {status}", args[0], c.format.qemu_name()),
            stderr: String::from_utf8_lossy(&err).trim().to_string(),
        });
    }
    Ok(out)
}
