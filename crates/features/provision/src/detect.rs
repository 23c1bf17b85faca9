//! What an image is, told by its content, never by its name: the bytes
//! are read here and told by [`zinstall_image::classify`] (whose
//! documentation has the table), after each decompression layer. An OCI
//! image is a layout directory, a tar of one or a registry reference; a
//! raw disk's tail is checked for a fixed-size VHD footer, cut off when
//! the base is built.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use zinstall_archive::compress::read_up_to;
use zinstall_engine::Op;
pub use zinstall_image::{Compression, ForeignFormat, ImageKind};
use zinstall_image::{HEAD, classify};

use crate::error::{ImageProblem, ProvisionError as Error, Result};

/// A decompressing reader over `r` (see [`zinstall_archive::compress`]).
pub fn decompress<'a>(
    r: impl Read + Send + 'a,
    c: Compression,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    Ok(Box::new(zinstall_archive::compress::decompress(r, c)?))
}

/// [`classify`]'s answer, a refusal naming the image.
fn tell(path: &Path, head: &[u8], c: Compression) -> Result<ImageKind> {
    classify(head, c).map_err(|why| Error::Image {
        path: path.to_path_buf(),
        problem: ImageProblem::Unsupported(why.0),
    })
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
    let (oci, _) = zinstall_engine::oci::split_reference(path);
    if zinstall_engine::oci::transport_name(path).is_some()
        || matches!(zinstall_engine::oci::sniff(&oci), Ok(Some(_)))
    {
        return Ok(ImageKind::Oci);
    }
    // A regular file, or refused naming what it is: a FIFO or a device
    // is never sniffed (nor waited on).
    let open = || {
        zinstall_core::foreign::open(path, zinstall_core::foreign::Follow::Yes)
            .map_err(|e| Error::io(Op::Open, path, e.into()))
    };
    let mut f = open()?;
    let c = zinstall_archive::compress::detect(&mut f)
        .map_err(|e| Error::io(Op::Read, path, e))?;
    if let Some(refusal) = c.refusal(path) {
        // Told by the same table as the unpacker's, refused the same way.
        return Err(Error::Image {
            path: path.to_path_buf(),
            problem: ImageProblem::Unsupported(refusal.to_string()),
        });
    }
    let mut head = [0u8; HEAD];
    let n = read_up_to(&mut &f, &mut head)
        .map_err(|e| Error::io(Op::Read, path, e))?;
    let head = &head[..n];
    if c == Compression::None {
        let kind = tell(path, head, c)?;
        if kind == ImageKind::Raw(c) {
            // A fixed VHD's footer, checked now so that a bad one is
            // named before anything is built; the build cuts it off.
            let len = f
                .metadata()
                .map_err(|e| Error::io(Op::Stat, path, e))?
                .len();
            fixed_vhd_disk_len(&f, len, path)?;
        }
        return Ok(kind);
    }
    let f = open()?;
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

/// The length of the disk in `f` (`len` bytes) if it is a fixed-size
/// VHD: a raw disk followed by a footer (512 bytes; 511 from old Virtual
/// PC) that zinstall cuts off, so that the guest never sees it as disk.
/// `None` for a file with no footer. A footer whose checksum, type or
/// size is wrong is refused, naming `image`: taken as raw, its bytes
/// would be the guest's.
pub(crate) fn fixed_vhd_disk_len(
    f: &File,
    len: u64,
    image: &Path,
) -> Result<Option<u64>> {
    let mut foot = [0u8; 512];
    for back in [512u64, 511] {
        if len < back + 512 {
            continue;
        }
        let foot = &mut foot[..back as usize];
        f.read_exact_at(foot, len - back)
            .map_err(|e| Error::io(Op::Read, image, e))?;
        let at = len - back;
        match zinstall_image::vhd_footer(foot, at) {
            Ok(None) => continue,
            Ok(found) => return Ok(found),
            Err(why) => {
                return Err(Error::Image {
                    path: image.to_path_buf(),
                    problem: ImageProblem::Corrupt(format!(
                        "a VHD footer at byte {at}: {why}"
                    )),
                });
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;

    /// A fixed VHD's footer, as Virtual PC and qemu-img write it.
    fn footer(size: u64, kind: u32) -> [u8; 512] {
        let mut f = [0u8; 512];
        f[..8].copy_from_slice(b"conectix");
        f[40..48].copy_from_slice(&size.to_be_bytes());
        f[48..56].copy_from_slice(&size.to_be_bytes());
        f[60..64].copy_from_slice(&kind.to_be_bytes());
        let sum = f.iter().fold(0u32, |s, b| s.wrapping_add(u32::from(*b)));
        f[64..68].copy_from_slice(&(!sum).to_be_bytes());
        f
    }

    fn disk_len(bytes: &[u8]) -> Result<Option<u64>> {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("disk");
        std::fs::write(&p, bytes).unwrap();
        let f = File::open(&p).unwrap();
        fixed_vhd_disk_len(&f, bytes.len() as u64, &p)
    }

    /// The footer is found at the end of a file, either length, and a
    /// bad one is refused naming the image and where the footer is.
    #[test]
    fn a_fixed_vhd_footer_is_found_and_cut_off() {
        let mut disk = vec![7u8; 4096];
        assert_eq!(disk_len(&disk).unwrap(), None);
        disk.extend_from_slice(&footer(4096, 2));
        assert_eq!(disk_len(&disk).unwrap(), Some(4096));
        let mut old = vec![7u8; 4096];
        old.extend_from_slice(&footer(4096, 2)[..511]);
        assert_eq!(disk_len(&old).unwrap(), Some(4096));
        let mut bad = vec![7u8; 4096];
        bad.extend_from_slice(&footer(4096, 3));
        let e = disk_len(&bad).unwrap_err().to_string();
        assert!(
            e.contains("VHD footer at byte 4096") && e.contains("disk type 3"),
            "{e}"
        );
        assert!(e.contains("/disk"), "{e}");
    }

    #[test]
    fn refusals_name_the_image() {
        let e =
            tell(Path::new("/images/x.zip"), b"PK\x03\x04", Compression::None)
                .unwrap_err()
                .to_string();
        assert!(e.contains("/images/x.zip") && e.contains("zip"), "{e}");
    }

    /// A compression that is not read is refused by the image's name
    /// with the command that converts it, before anything is built.
    #[test]
    fn unread_compressions_name_their_converter() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("root.tar.lz");
        std::fs::write(&p, b"LZIP\x01\x0c\0\0\0\0\0\0").unwrap();
        let e = detect(&p).unwrap_err().to_string();
        assert!(
            e.contains("lzip")
                && e.contains(&format!("lzip -dc {}", p.display())),
            "{e}"
        );
    }
}
