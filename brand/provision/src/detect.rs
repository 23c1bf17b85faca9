//! What an image is, told by its content, never by its name.
//!
//! The first bytes are read; if they are a compression zinstall decodes
//! (gzip, zstd, xz), the first bytes of the decompressed stream are read
//! and told again. What is inside decides the kind:
//!
//! | inside | kind |
//! |---|---|
//! | a directory with `oci-layout`, or a tar of one (`oci-layout`, `index.json`, `blobs/`) | [`ImageKind::Oci`]: directory guests, layers cached once each |
//! | a tar header (`ustar`) | [`ImageKind::Tree`]: directory guests |
//! | qcow2 (`QFI\xfb`), plain | [`ImageKind::Qcow2`]: read natively |
//! | qcow2, compressed | [`ImageKind::CompressedQcow2`]: decompressed once, then read natively |
//! | VMDK, VDI, VHD, VHDX, QED, LUKS, Parallels, Bochs, DMG | refused, naming the format and the `qemu-img convert` that turns it into qcow2 |
//! | bzip2, lz4, lzip, zip, a second compression layer | refused, naming the format |
//! | anything else (an MBR or GPT disk, a filesystem, an ISO 9660 image) | [`ImageKind::Raw`] |
//!
//! A container's bytes are never presented as a disk: a compressed qcow2
//! taken for a compressed raw disk gave guests whose disk started with
//! `QFI\xfb`, and a VMDK taken for raw gave guests starting with `KDMV`.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use copier::Op;
use zinstall_archive::compress::read_up_to;
pub use zinstall_archive::compress::{Compression, compression_of};

use crate::error::{ImageProblem, ProvisionError as Error, Result};

/// The kinds of image a guest can be made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// A rootfs tar archive: each guest gets a directory tree.
    Tree(Compression),
    /// A raw disk image: each guest gets a qcow2 overlay.
    Raw(Compression),
    /// A qcow2 disk image: converted to raw once, then overlays.
    Qcow2,
    /// A compressed qcow2 disk image: decompressed once, then read as
    /// qcow2.
    CompressedQcow2(Compression),
    /// An OCI image (layout directory or oci-archive): directory guests,
    /// its layers cached each once.
    Oci,
}

impl ImageKind {
    /// A short name for messages: `tar.zst`, `raw.gz`, `qcow2.xz`.
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
            ImageKind::Qcow2
            | ImageKind::CompressedQcow2(Compression::None) => "qcow2",
            ImageKind::CompressedQcow2(Compression::Gzip) => "qcow2.gz",
            ImageKind::CompressedQcow2(Compression::Zstd) => "qcow2.zst",
            ImageKind::CompressedQcow2(Compression::Xz) => "qcow2.xz",
            ImageKind::Oci => "oci",
        }
    }
}

const QCOW2: &[u8] = b"QFI\xfb";

/// Bytes read from the head of an image (and of its decompressed
/// stream) to tell what it is: the VDI signature is at 64, a tar
/// header's magic at 257.
const HEAD: usize = 1024;

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

/// A disk image format zinstall does not read: its name, and the name
/// `qemu-img` knows it by (for `-f`).
fn foreign_disk(head: &[u8]) -> Option<(&'static str, &'static str)> {
    let at = |off: usize, magic: &[u8]| {
        head.get(off..off + magic.len()) == Some(magic)
    };
    if at(0, b"KDMV") || at(0, b"# Disk DescriptorFile") || at(0, b"COWD") {
        Some(("VMDK", "vmdk"))
    } else if at(64, &[0x7f, 0x10, 0xda, 0xbe]) {
        Some(("VDI (VirtualBox)", "vdi"))
    } else if at(0, b"vhdxfile") {
        Some(("VHDX", "vhdx"))
    } else if at(0, b"conectix") {
        Some(("VHD (dynamic)", "vpc"))
    } else if at(0, b"QED\0") {
        Some(("QED", "qed"))
    } else if at(0, b"LUKS\xba\xbe") {
        Some(("LUKS (encrypted)", "luks"))
    } else if at(0, b"WithoutFreeSpace") || at(0, b"WithouFreSpacExt") {
        Some(("Parallels", "parallels"))
    } else if at(0, b"Bochs Virtual HD Image") {
        Some(("Bochs", "bochs"))
    } else if at(0, b"#!/bin/sh\n#V2.0 Format") {
        Some(("cloop", "cloop"))
    } else {
        None
    }
}

/// A compression or archive zinstall does not decode.
fn foreign_container(head: &[u8]) -> Option<&'static str> {
    if head.len() >= 10
        && head.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&head[3])
        && head[4..10] == [0x31, 0x41, 0x59, 0x26, 0x53, 0x59]
    {
        Some("bzip2")
    } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some("lz4")
    } else if head.starts_with(b"LZIP") {
        Some("lzip")
    } else if head.starts_with(b"PK\x03\x04") {
        Some("zip")
    } else if head.starts_with(b"7z\xbc\xaf\x27\x1c") {
        Some("7z")
    } else {
        None
    }
}

/// Tells what the decompressed (or plain) bytes starting with `head`
/// are, `c` being the compression around them.
fn tell(path: &Path, head: &[u8], c: Compression) -> Result<ImageKind> {
    let refuse = |problem| {
        Err(Error::Image {
            path: path.to_path_buf(),
            problem,
        })
    };
    if head.starts_with(QCOW2) {
        return Ok(match c {
            Compression::None => ImageKind::Qcow2,
            c => ImageKind::CompressedQcow2(c),
        });
    }
    if is_tar(head) {
        return Ok(ImageKind::Tree(c));
    }
    if let Some((format, qemu)) = foreign_disk(head) {
        return refuse(ImageProblem::ForeignDisk {
            format: format.to_string(),
            qemu_format: qemu.to_string(),
            compression: (c != Compression::None).then(|| c.name().into()),
        });
    }
    let inner = compression_of(head);
    if inner != Compression::None {
        return refuse(ImageProblem::Unsupported(format!(
            "{} inside {}: compressed twice; decompress the outer layer \
             first",
            inner.name(),
            c.name()
        )));
    }
    if let Some(what) = foreign_container(head) {
        let inside = if c == Compression::None {
            String::new()
        } else {
            format!(" inside {}", c.name())
        };
        return refuse(ImageProblem::Unsupported(format!(
            "{what}{inside}: zinstall decompresses gzip, zstd and xz; \
             decompress it first"
        )));
    }
    Ok(ImageKind::Raw(c))
}

/// Reads what `path` is (see the module documentation). A truncated or
/// corrupt compressed head is an error naming the image; so is a format
/// zinstall does not read.
pub fn detect(path: &Path) -> Result<ImageKind> {
    // `REGISTRY/REPO:TAG` or `@sha256:...`: pulled, then read as a layout.
    if let Some(r) = zinstall_registry::reference_of(path) {
        r?;
        return Ok(ImageKind::Oci);
    }
    // A layout directory, or a tar of one; `IMAGE:REF` names one in it.
    let (oci, _) = copier::oci::split_reference(path);
    if let Ok(Some(_)) = copier::oci::sniff(&oci) {
        return Ok(ImageKind::Oci);
    }
    let f = File::open(path).map_err(|e| Error::io(Op::Open, path, e))?;
    let mut head = [0u8; HEAD];
    let n = read_up_to(&mut &f, &mut head)
        .map_err(|e| Error::io(Op::Read, path, e))?;
    let head = &head[..n];
    let c = compression_of(head);
    if c == Compression::None && foreign_disk(head).is_none() {
        let len = f
            .metadata()
            .map_err(|e| Error::io(Op::Stat, path, e))?
            .len();
        let fixed_vhd = ends_in_vhd_footer(&f, len)
            .map_err(|e| Error::io(Op::Read, path, e))?;
        if fixed_vhd {
            return Err(fixed_vhd_refused(path, c));
        }
        return tell(path, head, c);
    }
    let f = File::open(path).map_err(|e| Error::io(Op::Open, path, e))?;
    let mut inner =
        decompress(f, c).map_err(|e| Error::io(Op::Read, path, e))?;
    let mut block = [0u8; HEAD];
    let n = read_up_to(&mut inner, &mut block).map_err(|e| {
        if e.raw_os_error().is_some() {
            Error::io(Op::Read, path, e)
        } else {
            Error::Image {
                path: path.to_path_buf(),
                problem: ImageProblem::Corrupt(e.to_string()),
            }
        }
    })?;
    tell(path, &block[..n], c)
}

/// Whether the file of `len` bytes ends in a VHD footer: a fixed-size
/// VHD is a raw disk followed by one (512 bytes; 511 from old Virtual
/// PC). Taken as raw, the guest would see the footer as disk. A dynamic
/// VHD has the footer too, and a copy at its head that [`tell`] finds.
pub(crate) fn ends_in_vhd_footer(f: &File, len: u64) -> io::Result<bool> {
    let mut foot = [0u8; 8];
    for back in [512u64, 511] {
        if len >= back + 512 {
            f.read_exact_at(&mut foot, len - back)?;
            if &foot == b"conectix" {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The refusal of a fixed-size VHD found in `path` (inside `c`).
pub(crate) fn fixed_vhd_refused(path: &Path, c: Compression) -> Error {
    Error::Image {
        path: path.to_path_buf(),
        problem: ImageProblem::ForeignDisk {
            format: "VHD (fixed)".into(),
            qemu_format: "vpc".into(),
            compression: (c != Compression::None).then(|| c.name().into()),
        },
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn kind(head: &[u8]) -> Result<ImageKind> {
        tell(Path::new("img"), head, Compression::None)
    }

    #[test]
    fn containers_are_never_raw_disks() {
        let mut vdi = vec![0u8; 512];
        vdi[..4].copy_from_slice(b"<<< ");
        vdi[64..68].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        let mut bz = b"BZh91AY&SY".to_vec();
        bz.resize(64, 0);
        for (head, want) in [
            (&b"KDMV\x01\0\0\0"[..], "VMDK"),
            (&vdi[..], "VDI"),
            (b"vhdxfile", "VHDX"),
            (b"conectix", "VHD"),
            (b"QED\0", "QED"),
            (b"LUKS\xba\xbe\0\x02", "LUKS"),
            (&bz[..], "bzip2"),
            (b"PK\x03\x04", "zip"),
        ] {
            let e = kind(head).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        assert_eq!(kind(b"QFI\xfb\0\0\0\x03").unwrap(), ImageKind::Qcow2);
        assert_eq!(
            tell(Path::new("i"), b"QFI\xfb", Compression::Xz).unwrap(),
            ImageKind::CompressedQcow2(Compression::Xz)
        );
        let e = tell(Path::new("i"), b"KDMV", Compression::Zstd)
            .unwrap_err()
            .to_string();
        assert!(e.contains("VMDK") && e.contains("zstd"), "{e}");
        assert_eq!(
            kind(&[0u8; 512]).unwrap(),
            ImageKind::Raw(Compression::None)
        );
    }
}
