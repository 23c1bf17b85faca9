//! What an image is, told by its content, never by its name.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use copier::Op;
use zinstall_archive::compress::read_up_to;
pub use zinstall_archive::compress::{Compression, compression_of};

use crate::error::{ProvisionError as Error, Result};

/// The kinds of image a guest can be made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// A rootfs tar archive: each guest gets a directory tree.
    Tree(Compression),
    /// A raw disk image: each guest gets a qcow2 overlay.
    Raw(Compression),
    /// A qcow2 disk image: converted to raw once, then overlays.
    Qcow2,
}

impl ImageKind {
    /// A short name for messages: `tar.zst`, `raw.gz`, `qcow2`.
    pub fn describe(self) -> &'static str {
        match self {
            ImageKind::Tree(Compression::None) => "tar",
            ImageKind::Tree(Compression::Gzip) => "tar.gz",
            ImageKind::Tree(Compression::Zstd) => "tar.zst",
            ImageKind::Tree(Compression::Xz) => "tar.xz",
            ImageKind::Raw(Compression::None) => "raw",
            ImageKind::Raw(Compression::Gzip) => "raw.gz",
            ImageKind::Raw(Compression::Zstd) => "raw.zst",
            ImageKind::Raw(Compression::Xz) => "raw.xz",
            ImageKind::Qcow2 => "qcow2",
        }
    }
}

const QCOW2: &[u8] = b"QFI\xfb";

/// A decompressing reader over `r` (see [`zinstall_archive::compress`]).
pub fn decompress<'a>(
    r: impl Read + 'a,
    c: Compression,
) -> io::Result<Box<dyn Read + 'a>> {
    Ok(Box::new(zinstall_archive::compress::decompress(r, c)?))
}

/// True if a 512-byte tar header block says `ustar` (POSIX and GNU).
fn is_tar(block: &[u8]) -> bool {
    block.len() >= 262 && &block[257..262] == b"ustar"
}

/// Reads what `path` is: the first bytes for compression and qcow2, and
/// for tar the first header after decompression. A truncated or corrupt
/// compressed head is an error naming the image.
pub fn detect(path: &Path) -> Result<ImageKind> {
    let mut f = File::open(path).map_err(|e| Error::io(Op::Open, path, e))?;
    let mut head = [0u8; 512];
    let n = read_up_to(&mut f, &mut head)
        .map_err(|e| Error::io(Op::Read, path, e))?;
    let head = &head[..n];
    if head.starts_with(QCOW2) {
        return Ok(ImageKind::Qcow2);
    }
    let c = compression_of(head);
    if c == Compression::None {
        return Ok(if is_tar(head) {
            ImageKind::Tree(c)
        } else {
            ImageKind::Raw(c)
        });
    }
    let f = File::open(path).map_err(|e| Error::io(Op::Open, path, e))?;
    let mut inner =
        decompress(f, c).map_err(|e| Error::io(Op::Read, path, e))?;
    let mut block = [0u8; 512];
    let n = read_up_to(&mut inner, &mut block)
        .map_err(|e| Error::io(Op::Read, path, e))?;
    Ok(if is_tar(&block[..n]) {
        ImageKind::Tree(c)
    } else {
        ImageKind::Raw(c)
    })
}
