//! OCI images as install and provision sources: an image layout
//! directory (`oci-layout`, `index.json`, `blobs/ALG/HEX`) or an
//! oci-archive (an uncompressed tar of one, as `skopeo copy ...
//! oci-archive:` writes it).
//!
//! Everything here reads; nothing is written. Where layers land, and how
//! their whiteouts are applied, is the engine's business
//! (`copier::oci`).
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
mod error;
mod image;
mod platform;
mod store;

use std::io::{self, Seek};
use std::path::{Path, PathBuf};

use zinstall_archive::compress::{
    Compression, compression_of, decompress, read_up_to,
};
use zinstall_archive::tar;
use zinstall_core::foreign::{self, Follow, What};

pub use digest::{Algorithm, Digest, Hasher, hex, sha256_hex};
pub use error::{Error, Mismatch, Result};
pub use image::{Image, Layer, MAX_JSON, REF_NAME, Select};
pub use platform::Platform;
pub use store::{BlobKind, BlobReader, DiffReader, Fetch};

/// What kind of OCI image a path holds, told by content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A directory with an `oci-layout` file.
    Layout,
    /// A plain tar whose members are `oci-layout`, `index.json` and
    /// `blobs/...`.
    Archive,
    /// A compressed tar that starts like an oci-archive: refused, since
    /// an oci-archive is read in place.
    CompressedArchive(Compression),
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
            return Ok(
                layout_member(&m.name).then_some(Form::CompressedArchive(c))
            );
        }
        return Ok(None);
    }
    if n < 512 || &head[257..262] != b"ustar" {
        return Ok(None);
    }
    let mut rd = tar::Reader::seekable(f, limits)?;
    let (mut layout, mut index) = (false, false);
    for _ in 0..SNIFF_MEMBERS {
        let Ok(Some(m)) = rd.next() else { break };
        if !layout_member(&m.name) {
            return Ok(None);
        }
        let name = m.name.strip_prefix(b"./").unwrap_or(&m.name);
        layout |= name == b"oci-layout";
        index |= name == b"index.json";
        if layout && index {
            return Ok(Some(Form::Archive));
        }
    }
    Ok(None)
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

/// Splits `IMAGE:REF`: a path that exists as given is the image itself;
/// else, if what is before the last `:` exists, that is the image and
/// the rest names the image in its index.
pub fn split_reference(arg: &Path) -> (PathBuf, Option<String>) {
    if std::fs::symlink_metadata(arg).is_ok() {
        return (arg.to_path_buf(), None);
    }
    let s = arg.to_string_lossy();
    if let Some((p, r)) = s.rsplit_once(':')
        && !r.is_empty()
        && !r.contains('/')
        && std::fs::symlink_metadata(p).is_ok()
    {
        return (PathBuf::from(p), Some(r.to_string()));
    }
    (arg.to_path_buf(), None)
}
