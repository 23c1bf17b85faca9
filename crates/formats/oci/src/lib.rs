//! OCI images as install and provision sources: an image layout
//! directory (`oci-layout`, `index.json`, `blobs/ALG/HEX`) or an
//! oci-archive (an uncompressed tar of one, as `skopeo copy ...
//! oci-archive:` writes it), or a docker-archive (the tar `docker save`
//! writes: `manifest.json`, a config and a tar per layer), named as a
//! path or with the transports of containers-transports(5)
//! ([`transport_name`]).
//!
//! Everything here reads; nothing is written. Where layers land, and how
//! their whiteouts are applied, is the engine's business
//! (`zinstall_engine::oci`).
//!
//! What is checked, and when:
//!
//! * Blob paths are built only from digests parsed as `sha256:` + 64 or
//!   `sha512:` + 128 lowercase hex digits ([`Digest`]): a digest string
//!   cannot steer a path. Blobs and layout files are opened without
//!   following a symlink and must be regular files.
//! * `oci-layout` must say version 1.x. `index.json`, and every index,
//!   manifest and config blob, is at most [`MAX_JSON`] bytes — a larger
//!   size in a descriptor is refused before anything is read — and is
//!   read whole and checked against its descriptor's size and digest
//!   before it is parsed.
//! * The manifest is chosen ([`Select`]): by `IMAGE:REF`, the index entry
//!   whose `org.opencontainers.image.ref.name` is REF; else the index's
//!   only entry; else the one entry whose platform is the one asked for
//!   (the host's by default). Nested indexes are followed the same way,
//!   up to four deep. Anything ambiguous is refused, naming the refs and
//!   platforms there are.
//! * The config's os/architecture (and variant, when one is asked for)
//!   must be the platform asked for.
//! * Layers must be tar, tar+gzip or tar+zstd (the Docker gzip type is
//!   the same format); anything else — non-distributable, encrypted,
//!   foreign — is refused naming its media type. A blob whose first
//!   bytes are not the compression its media type says (bzip2 or xz
//!   included, which no layer media type names) is refused naming both
//!   ([`Error::LayerCompression`]). There must be one
//!   `rootfs.diff_ids` entry per layer.
//! * A layer blob's size is checked when it is opened; its digest as it
//!   is read ([`BlobReader`]), and its uncompressed stream's against its
//!   diff_id ([`DiffReader`]). A layer counts as applied only once both
//!   matched; the callers throw away what a failed layer wrote (install
//!   removes the partial root; provision its scratch directory).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod digest;
mod docker;
mod error;
mod image;
mod open;
mod platform;
mod store;

use std::io::{self, Seek};
use std::path::{Path, PathBuf};

use zinstall_archive::compress::{
    Compression, compression_of, decompress, read_up_to,
};
use zinstall_archive::tar;
use zinstall_core::foreign::{self, Follow, What};

pub use digest::{Algorithm, Digest, DigestError, Hasher, hex, sha256_hex};
pub use error::{Error, Mismatch, Result};
pub use image::{Image, Layer, MAX_JSON, REF_NAME, Select};
pub use platform::{NotPlatform, Platform};
pub use store::{BlobKind, BlobReader, DiffReader, Fetch};

/// What kind of OCI image a path holds, told by content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A directory with an `oci-layout` file.
    Layout,
    /// A plain tar whose members are `oci-layout`, `index.json` and
    /// `blobs/...`.
    Archive,
    /// A compressed tar that starts like an oci-archive or a
    /// docker-archive: refused, since an archive is read in place.
    CompressedArchive(Compression),
    /// A plain tar as `docker save` writes it: `manifest.json`, and
    /// configs and layers named by their hex digests.
    DockerArchive,
}

/// Members looked at to tell an oci-archive: one per blob, so enough
/// for any image of a few hundred layers; a rootfs tarball shows a name
/// no layout has within its first few.
const SNIFF_MEMBERS: usize = 1024;

/// Whether `path` is an OCI image, and which form; `None` for anything
/// else (a rootfs tarball, a disk image).
pub fn sniff(path: &Path) -> io::Result<Option<Form>> {
    // Opened once: a directory is a layout if it says so; anything but a
    // directory or a regular file is refused, never read.
    let mut f = match foreign::open(path, Follow::Yes) {
        Ok(f) => f,
        Err(e) if e.not_regular() == Some(What::Directory) => {
            let l = std::fs::symlink_metadata(path.join("oci-layout"));
            return Ok(l.is_ok_and(|m| m.is_file()).then_some(Form::Layout));
        }
        Err(e) => return Err(e.into()),
    };
    let mut head = [0u8; 512];
    let n = read_up_to(&mut f, &mut head)?;
    let c = compression_of(&head[..n]);
    f.rewind()?;
    let limits = tar::Limits::default();
    if c != Compression::None {
        // The first member past the top directory tells a layout from a
        // root, which would begin `./bin`, `./etc`.
        let mut rd = tar::Reader::new(decompress(f, c)?, limits);
        for _ in 0..4 {
            let Ok(Some(m)) = rd.next() else { break };
            let n = m.name.strip_prefix(b"./").unwrap_or(&m.name);
            if matches!(n, b"" | b".") {
                continue;
            }
            let image = layout_member(&m.name) || docker_member(&m.name);
            return Ok(image.then_some(Form::CompressedArchive(c)));
        }
        return Ok(None);
    }
    if n < 512 || &head[257..262] != b"ustar" {
        return Ok(None);
    }
    let mut rd = tar::Reader::seekable(f, limits)?;
    let (mut layout, mut index, mut docker) = (false, false, false);
    for _ in 0..SNIFF_MEMBERS {
        let Ok(Some(m)) = rd.next() else { break };
        if !layout_member(&m.name) && !docker_member(&m.name) {
            return Ok(None);
        }
        let name = m.name.strip_prefix(b"./").unwrap_or(&m.name);
        layout |= name == b"oci-layout";
        index |= name == b"index.json";
        // docker save writes `manifest.json` last: the whole archive's
        // headers are read (by seeking, no bodies) before it is seen.
        docker |= name == b"manifest.json";
        if layout && index {
            return Ok(Some(Form::Archive));
        }
    }
    Ok(docker.then_some(Form::DockerArchive))
}

/// A name `docker save` writes: `manifest.json`, `repositories`,
/// `HEX.json` and `HEX.tar` (skopeo), `HEX/` with `layer.tar`, `json`
/// and `VERSION` (docker), HEX being 64 lowercase hex digits. A rootfs
/// tarball's `bin/`, `etc/` are none of these.
fn docker_member(name: &[u8]) -> bool {
    let n = name.strip_prefix(b"./").unwrap_or(name);
    let hex64 = |s: &[u8]| {
        s.len() == 64
            && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if matches!(n, b"manifest.json" | b"repositories") {
        return true;
    }
    match n.iter().position(|&b| b == b'/') {
        None => [&b".json"[..], b".tar"]
            .iter()
            .any(|x| n.strip_suffix(*x).is_some_and(hex64)),
        Some(i) => {
            hex64(&n[..i])
                && matches!(
                    &n[i + 1..],
                    b"" | b"layer.tar" | b"json" | b"VERSION"
                )
        }
    }
}

/// The transports of containers-transports(5) that name an image on
/// this machine. `docker://` is the registry's, read elsewhere.
pub const TRANSPORTS: [&str; 3] = ["oci:", "oci-archive:", "docker-archive:"];

/// `oci:DIR[:REF]`, `oci-archive:FILE[:REF]`, `docker-archive:FILE[:REF]`
/// split as containers-transports(5) splits them: the path ends at the
/// first `:` after the transport, the rest (which may hold `:`, as in
/// `name:tag`) names the image in it. `None` if `arg` names no such
/// transport.
pub fn transport_name(arg: &Path) -> Option<(PathBuf, Option<String>)> {
    let s = arg.to_str()?;
    let rest = TRANSPORTS.iter().find_map(|t| s.strip_prefix(t))?;
    Some(match rest.split_once(':') {
        Some((p, r)) if !r.is_empty() => (PathBuf::from(p), Some(r.into())),
        Some((p, _)) => (PathBuf::from(p), None),
        None => (PathBuf::from(rest), None),
    })
}

/// A name an image layout's tar holds: `oci-layout`, `index.json`,
/// `blobs` and below, or the top directory.
fn layout_member(name: &[u8]) -> bool {
    let n = name.strip_prefix(b"./").unwrap_or(name);
    matches!(
        n,
        b"" | b"." | b"oci-layout" | b"index.json" | b"blobs" | b"blobs/"
    ) || n.starts_with(b"blobs/")
}

/// `arg` with its path made absolute (from this process's directory),
/// a transport and reference kept: how an image is recorded, so that it
/// is opened again from anywhere.
pub fn absolute_name(arg: &Path) -> PathBuf {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.into());
    let Some((path, reference)) = transport_name(arg) else {
        return abs(arg);
    };
    let s = arg.to_string_lossy();
    let transport = TRANSPORTS.iter().find(|t| s.starts_with(**t));
    let mut named = std::ffi::OsString::from(transport.copied().unwrap_or(""));
    named.push(abs(&path));
    if let Some(r) = reference {
        named.push(format!(":{r}"));
    }
    PathBuf::from(named)
}

/// Splits `IMAGE:REF`: a transport's name as [`transport_name`] splits
/// it; a path that exists as given is the image itself; else the longest
/// prefix before a `:` that exists is the image and the rest names the
/// image in it (a docker-archive's `name:tag` holds a `:` itself).
pub fn split_reference(arg: &Path) -> (PathBuf, Option<String>) {
    if let Some(named) = transport_name(arg) {
        return named;
    }
    if std::fs::symlink_metadata(arg).is_ok() {
        return (arg.to_path_buf(), None);
    }
    let s = arg.to_string_lossy();
    let mut at = s.len();
    while let Some(i) = s[..at].rfind(':') {
        let (p, r) = (&s[..i], &s[i + 1..]);
        if !r.is_empty()
            && !p.is_empty()
            && std::fs::symlink_metadata(p).is_ok()
        {
            return (PathBuf::from(p), Some(r.to_string()));
        }
        at = i;
    }
    (arg.to_path_buf(), None)
}
