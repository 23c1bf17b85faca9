//! What an image is, told by its content, never by its name.
//!
//! The caller reads the first [`HEAD`] bytes of an image; if they are a
//! compression zinstall decodes (gzip, zstd, xz, bzip2, lz4: see
//! [`zinstall_archive::compress`], the one table of magic numbers; the
//! others it knows are refused naming the command that converts them),
//! it reads the first
//! [`HEAD`] bytes of the decompressed stream too, and [`classify`] says
//! what is inside:
//!
//! | inside | kind |
//! |---|---|
//! | a tar header (`ustar`) | [`ImageKind::Tree`]: directory guests |
//! | qcow2 (`QFI\xfb`), plain | [`ImageKind::Qcow2`]: read natively |
//! | qcow2, compressed | [`ImageKind::CompressedQcow2`]: decompressed once, then read natively |
//! | VMDK (one file), VDI, dynamic VHD, VHDX, QED, Parallels, Bochs, cloop | [`ImageKind::Foreign`]: converted by `qemu-img`, or refused naming the format |
//! | LUKS, a VMDK descriptor whose data is in other files | refused, saying why |
//! | zip, 7z, a second compression layer | refused, naming the format |
//! | anything else (an MBR or GPT disk, a filesystem, an ISO 9660 image) | [`ImageKind::Raw`] |
//!
//! An OCI image (a layout directory or a tar of one) is told by the
//! caller from the directory or the archive's members, and a raw disk's
//! tail by [`vhd_footer`]: a fixed-size VHD is a raw disk and a footer to
//! cut off.
//!
//! A container's bytes are never presented as a disk: a compressed qcow2
//! taken for a compressed raw disk gave guests whose disk started with
//! `QFI\xfb`, and a VMDK taken for raw gave guests starting with `KDMV`.
//!
//! Everything here reads bytes it is given, from images nobody vouches
//! for: no I/O, no unsafe code, no index that is not checked.
//!
//! ```
//! use zinstall_image::{classify, Compression, ImageKind};
//!
//! let mut head = [0u8; 512];
//! head[257..262].copy_from_slice(b"ustar");
//! assert_eq!(classify(&head, Compression::Zstd), Ok(ImageKind::Tree(Compression::Zstd)));
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;

pub use zinstall_archive::compress::{Compression, compression_of};

/// Bytes to read from the head of an image (and of its decompressed
/// stream) to tell what it is: the VDI signature is at 64, a tar
/// header's magic at 257.
pub const HEAD: usize = 1024;

const QCOW2: &[u8] = b"QFI\xfb";

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
    /// A disk image in a format zinstall does not read itself, plain or
    /// compressed: converted to raw once by `qemu-img`, then overlays.
    Foreign(ForeignFormat, Compression),
}

impl ImageKind {
    /// A short name for messages: `tar.zst`, `raw.gz`, `qcow2.xz`,
    /// `vmdk.zst`.
    pub fn describe(self) -> String {
        let (what, c) = match self {
            ImageKind::Tree(c) => ("tar", c),
            ImageKind::Raw(c) => ("raw", c),
            ImageKind::Qcow2 => ("qcow2", Compression::None),
            ImageKind::CompressedQcow2(c) => ("qcow2", c),
            ImageKind::Oci => ("oci", Compression::None),
            ImageKind::Foreign(f, c) => (f.qemu_name(), c),
        };
        format!("{what}{}", c.suffix())
    }
}

/// A disk image format read through `qemu-img convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForeignFormat {
    /// VMware's, as one file (monolithic sparse or stream-optimized).
    Vmdk,
    /// VirtualBox's.
    Vdi,
    /// Hyper-V's.
    Vhdx,
    /// A dynamic (sparse) VHD, Virtual PC's.
    VhdDynamic,
    /// QEMU's enhanced disk.
    Qed,
    /// Parallels'.
    Parallels,
    /// Bochs'.
    Bochs,
    /// A compressed loop image.
    Cloop,
}

impl ForeignFormat {
    /// Its name for people: `VMDK`, `VHD (dynamic)`.
    pub fn name(self) -> &'static str {
        match self {
            ForeignFormat::Vmdk => "VMDK",
            ForeignFormat::Vdi => "VDI (VirtualBox)",
            ForeignFormat::Vhdx => "VHDX",
            ForeignFormat::VhdDynamic => "VHD (dynamic)",
            ForeignFormat::Qed => "QED",
            ForeignFormat::Parallels => "Parallels",
            ForeignFormat::Bochs => "Bochs",
            ForeignFormat::Cloop => "cloop",
        }
    }

    /// Its name for `qemu-img -f`.
    pub fn qemu_name(self) -> &'static str {
        match self {
            ForeignFormat::Vmdk => "vmdk",
            ForeignFormat::Vdi => "vdi",
            ForeignFormat::Vhdx => "vhdx",
            ForeignFormat::VhdDynamic => "vpc",
            ForeignFormat::Qed => "qed",
            ForeignFormat::Parallels => "parallels",
            ForeignFormat::Bochs => "bochs",
            ForeignFormat::Cloop => "cloop",
        }
    }
}

/// An image zinstall does not take, and why, in words for its user (with
/// the command that makes it one zinstall takes, where there is one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

/// True if a 512-byte tar header block says `ustar` (POSIX and GNU).
fn is_tar(block: &[u8]) -> bool {
    block.len() >= 262 && &block[257..262] == b"ustar"
}

/// What the head of a disk image in a format zinstall does not read
/// itself says it is.
enum Foreign {
    /// One `qemu-img` converts.
    Disk(ForeignFormat),
    /// One refused whatever is installed: why.
    Refused(&'static str),
}

fn foreign_disk(head: &[u8]) -> Option<Foreign> {
    let at = |off: usize, magic: &[u8]| {
        head.get(off..off + magic.len()) == Some(magic)
    };
    let disk = |f| Some(Foreign::Disk(f));
    if at(0, b"KDMV") || at(0, b"COWD") {
        disk(ForeignFormat::Vmdk)
    } else if at(0, b"# Disk DescriptorFile") {
        // Its extents are other files, named by path: nothing a
        // provisioning given one file can take, nor should follow.
        Some(Foreign::Refused(
            "a VMDK descriptor file, whose data is in other files; make \
             it one file first: qemu-img convert -f vmdk -O qcow2 IMAGE \
             IMAGE.qcow2",
        ))
    } else if at(64, &[0x7f, 0x10, 0xda, 0xbe]) {
        disk(ForeignFormat::Vdi)
    } else if at(0, b"vhdxfile") {
        disk(ForeignFormat::Vhdx)
    } else if at(0, b"conectix") {
        disk(ForeignFormat::VhdDynamic)
    } else if at(0, b"QED\0") {
        disk(ForeignFormat::Qed)
    } else if at(0, b"LUKS\xba\xbe") {
        Some(Foreign::Refused(
            "a LUKS-encrypted disk image; zinstall does not decrypt \
             images: decrypt it first (cryptsetup, or qemu-img convert \
             with its key)",
        ))
    } else if at(0, b"WithoutFreeSpace") || at(0, b"WithouFreSpacExt") {
        disk(ForeignFormat::Parallels)
    } else if at(0, b"Bochs Virtual HD Image") {
        disk(ForeignFormat::Bochs)
    } else if at(0, b"#!/bin/sh\n#V2.0 Format") {
        disk(ForeignFormat::Cloop)
    } else {
        None
    }
}

/// An archive format that is not a compressed stream; compressions are
/// told by [`compression_of`].
fn foreign_container(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"PK\x03\x04") {
        Some("zip")
    } else if head.starts_with(b"7z\xbc\xaf\x27\x1c") {
        Some("7z")
    } else {
        None
    }
}

/// Tells what the decompressed (or plain) bytes starting with `head` are,
/// `c` being the compression around them (see the crate documentation).
pub fn classify(head: &[u8], c: Compression) -> Result<ImageKind, Unsupported> {
    if head.starts_with(QCOW2) {
        return Ok(match c {
            Compression::None => ImageKind::Qcow2,
            c => ImageKind::CompressedQcow2(c),
        });
    }
    if is_tar(head) {
        return Ok(ImageKind::Tree(c));
    }
    match foreign_disk(head) {
        Some(Foreign::Disk(f)) => return Ok(ImageKind::Foreign(f, c)),
        Some(Foreign::Refused(why)) => {
            let inside = match c {
                Compression::None => String::new(),
                c => format!(" (inside {})", c.name()),
            };
            return Err(Unsupported(format!("{why}{inside}")));
        }
        None => {}
    }
    let inner = compression_of(head);
    if inner != Compression::None && c == Compression::None {
        // The caller decompresses what is read before classifying: this
        // is one that is not.
        return Err(Unsupported(format!(
            "compressed with {}; decompress it first",
            inner.name()
        )));
    }
    if inner != Compression::None {
        return Err(Unsupported(format!(
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
        return Err(Unsupported(format!(
            "{what}{inside}: an archive, not a disk image or a tar: \
             unpack it and make a tar of it first"
        )));
    }
    Ok(ImageKind::Raw(c))
}

/// What is wrong with a VHD footer ([`vhd_footer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadVhdFooter {
    /// Its checksum does not match its bytes.
    Checksum,
    /// A dynamic or differencing disk's footer (the type it gives).
    DiskType(u32),
    /// The size it gives is not the file's.
    Size {
        /// The size the footer gives the disk.
        size: u64,
        /// The bytes of the file before the footer.
        file: u64,
    },
}

impl fmt::Display for BadVhdFooter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadVhdFooter::Checksum => f.write_str("its checksum is wrong"),
            BadVhdFooter::DiskType(kind) => write!(
                f,
                "disk type {kind}, not a fixed disk (2), with no header at \
                 the start of the file"
            ),
            BadVhdFooter::Size { size, file } => {
                write!(
                    f,
                    "it gives the disk {size} bytes; the file holds {file}"
                )
            }
        }
    }
}

impl std::error::Error for BadVhdFooter {}

/// Reads a fixed-size VHD's footer: `foot` is the last 512 bytes of a
/// file (or the last 511, as old Virtual PC wrote it) and `at` where
/// they start, which is the disk's length if they are a footer. `Ok(None)`
/// if they are not one (no `conectix` cookie); `Ok(Some(at))` for a
/// footer whose checksum, type and size agree; an error saying what is
/// wrong otherwise: taken as raw, a bad footer's bytes would be the
/// guest's.
pub fn vhd_footer(foot: &[u8], at: u64) -> Result<Option<u64>, BadVhdFooter> {
    if foot.len() < 68 || &foot[..8] != b"conectix" {
        return Ok(None);
    }
    let be32 = |i: usize| {
        u32::from_be_bytes([foot[i], foot[i + 1], foot[i + 2], foot[i + 3]])
    };
    // One's complement of the sum of every byte but the checksum's.
    let sum = foot
        .iter()
        .enumerate()
        .filter(|(i, _)| !(64..68).contains(i))
        .fold(0u32, |s, (_, b)| s.wrapping_add(u32::from(*b)));
    if !sum != be32(64) {
        return Err(BadVhdFooter::Checksum);
    }
    let kind = be32(60);
    if kind != 2 {
        return Err(BadVhdFooter::DiskType(kind));
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&foot[48..56]);
    let size = u64::from_be_bytes(size);
    if size != at {
        return Err(BadVhdFooter::Size { size, file: at });
    }
    Ok(Some(at))
}

#[cfg(test)]
mod test {
    use super::*;

    fn kind(head: &[u8]) -> Result<ImageKind, Unsupported> {
        classify(head, Compression::None)
    }

    #[test]
    fn containers_are_never_raw_disks() {
        let mut vdi = vec![0u8; 512];
        vdi[..4].copy_from_slice(b"<<< ");
        vdi[64..68].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        for (head, want) in [
            (&b"KDMV\x01\0\0\0"[..], ForeignFormat::Vmdk),
            (&vdi[..], ForeignFormat::Vdi),
            (b"vhdxfile", ForeignFormat::Vhdx),
            (b"conectix", ForeignFormat::VhdDynamic),
            (b"QED\0", ForeignFormat::Qed),
        ] {
            assert_eq!(
                kind(head).unwrap(),
                ImageKind::Foreign(want, Compression::None)
            );
        }
        let mut bz = b"BZh91AY&SY".to_vec();
        bz.resize(64, 0);
        for (head, want) in [
            (&b"LUKS\xba\xbe\0\x02"[..], "LUKS"),
            (b"# Disk DescriptorFile\nversion=1", "other files"),
            (&bz[..], "compressed with bzip2"),
            (b"LZIP\x01\x0c", "lzip"),
            (b"PK\x03\x04", "zip"),
        ] {
            let e = kind(head).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        assert_eq!(kind(b"QFI\xfb\0\0\0\x03").unwrap(), ImageKind::Qcow2);
        assert_eq!(
            classify(b"QFI\xfb", Compression::Xz).unwrap(),
            ImageKind::CompressedQcow2(Compression::Xz)
        );
        let vmdk_zst = classify(b"KDMV", Compression::Zstd).unwrap();
        assert_eq!(
            vmdk_zst,
            ImageKind::Foreign(ForeignFormat::Vmdk, Compression::Zstd)
        );
        assert_eq!(vmdk_zst.describe(), "vmdk.zst");
        assert_eq!(ImageKind::Tree(Compression::Bzip2).describe(), "tar.bz2");
        assert_eq!(
            kind(&[0u8; 512]).unwrap(),
            ImageKind::Raw(Compression::None)
        );
        // A zstd frame inside gzip: compressed twice.
        let e = classify(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0], Compression::Gzip)
            .unwrap_err();
        assert!(e.0.contains("compressed twice"), "{e}");
    }

    /// A fixed VHD's footer, as Virtual PC and qemu-img write it.
    pub(crate) fn footer(size: u64, kind: u32) -> [u8; 512] {
        let mut f = [0u8; 512];
        f[..8].copy_from_slice(b"conectix");
        f[12..16].copy_from_slice(&0x0001_0000u32.to_be_bytes());
        f[16..24].copy_from_slice(&u64::MAX.to_be_bytes());
        f[40..48].copy_from_slice(&size.to_be_bytes());
        f[48..56].copy_from_slice(&size.to_be_bytes());
        f[60..64].copy_from_slice(&kind.to_be_bytes());
        let sum = f.iter().fold(0u32, |s, b| s.wrapping_add(u32::from(*b)));
        f[64..68].copy_from_slice(&(!sum).to_be_bytes());
        f
    }

    #[test]
    fn a_fixed_vhd_footer_is_checked() {
        assert_eq!(vhd_footer(&[7u8; 512], 4096), Ok(None));
        assert_eq!(vhd_footer(b"conectix", 4096), Ok(None));
        assert_eq!(vhd_footer(&footer(4096, 2), 4096), Ok(Some(4096)));
        // Old Virtual PC's 511-byte footer: its checksum was made over
        // 512 bytes whose last is zero.
        assert_eq!(vhd_footer(&footer(4096, 2)[..511], 4096), Ok(Some(4096)));
        let mut flipped = footer(4096, 2);
        flipped[100] ^= 1;
        for (bad, why) in [
            (footer(4096, 3), "disk type 3"),
            (footer(8192, 2), "8192 bytes"),
            (flipped, "checksum"),
        ] {
            let e = vhd_footer(&bad, 4096).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
