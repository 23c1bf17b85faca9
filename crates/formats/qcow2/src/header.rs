//! The qcow2 header and its extensions.

use std::path::Path;

use super::error::{Error, Problem, Result};
use super::layout::{be32, be64};

/// Incompatible feature bits.
pub(crate) const INCOMPAT_DIRTY: u64 = 1 << 0;
pub(crate) const INCOMPAT_CORRUPT: u64 = 1 << 1;
pub(crate) const INCOMPAT_EXTERNAL_DATA: u64 = 1 << 2;
pub(crate) const INCOMPAT_COMPRESSION: u64 = 1 << 3;
pub(crate) const INCOMPAT_EXTENDED_L2: u64 = 1 << 4;
const INCOMPAT_KNOWN: u64 = 0x1f;

const EXT_END: u32 = 0;
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
const EXT_DATA_FILE: u32 = 0x4441_5441;

/// Autoclear bit 1: the external data file is a valid raw image too.
pub(crate) const AUTOCLEAR_DATA_FILE_RAW: u64 = 1 << 1;

/// The fields of a qcow2 header this crate uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// 2 or 3.
    pub version: u32,
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// Virtual disk size in bytes.
    pub size: u64,
    /// 0 for none.
    pub crypt_method: u32,
    /// Entries in the L1 table.
    pub l1_size: u32,
    /// Where the L1 table is.
    pub l1_table_offset: u64,
    /// Where the refcount table is.
    pub refcount_table_offset: u64,
    /// Clusters of refcount table.
    pub refcount_table_clusters: u32,
    /// Internal snapshots.
    pub nb_snapshots: u32,
    /// Incompatible feature bits.
    pub incompatible: u64,
    /// Autoclear feature bits.
    pub autoclear: u64,
    /// log2 of refcount bits.
    pub refcount_order: u32,
    /// 0 deflate, 1 zstd.
    pub compression_type: u8,
    /// The backing file's name, if any.
    pub backing_file: Option<String>,
    /// The backing file's format, if recorded.
    pub backing_format: Option<String>,
    /// The external data file's name, if recorded.
    pub data_file: Option<String>,
}

impl Header {
    /// Whether L2 entries are extended (128 bits, with subclusters).
    pub fn extended_l2(&self) -> bool {
        self.incompatible & INCOMPAT_EXTENDED_L2 != 0
    }

    /// Whether the data is in an external file.
    pub fn external_data(&self) -> bool {
        self.incompatible & INCOMPAT_EXTERNAL_DATA != 0
    }

    /// log2 of the entries in one L2 table.
    pub fn l2_bits(&self) -> u32 {
        self.cluster_bits - 3 - u32::from(self.extended_l2())
    }

    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Parses the start of an image (`head` holds cluster 0, or the whole
    /// file if shorter).
    pub fn parse(path: &Path, head: &[u8]) -> Result<Header> {
        let bad = |p| Err(Error::problem(path, p));
        if head.len() < 72 || &head[..4] != b"QFI\xfb" {
            return bad(Problem::BadMagic);
        }
        let version = be32(head, 4);
        if version != 2 && version != 3 {
            return bad(Problem::Version(version));
        }
        let cluster_bits = be32(head, 20);
        if !(9..=21).contains(&cluster_bits) {
            return bad(Problem::ClusterBits(cluster_bits));
        }
        let v3 = if version == 3 {
            V3::parse(path, head, 1usize << cluster_bits)?
        } else {
            V3::default()
        };
        let backing_file = backing_file(path, head)?;
        let (backing_format, data_file) = if version == 3 {
            extensions(path, head, v3.header_length)?
        } else {
            (None, None)
        };
        Ok(Header {
            version,
            cluster_bits,
            size: be64(head, 24),
            crypt_method: be32(head, 32),
            l1_size: be32(head, 36),
            l1_table_offset: be64(head, 40),
            refcount_table_offset: be64(head, 48),
            refcount_table_clusters: be32(head, 56),
            nb_snapshots: be32(head, 60),
            incompatible: v3.incompatible,
            autoclear: v3.autoclear,
            refcount_order: v3.refcount_order,
            compression_type: v3.compression_type,
            backing_file,
            backing_format,
            data_file,
        })
    }

    /// Refuses what this reader must not read: unknown incompatible
    /// features, encryption, unknown compression. A dirty or
    /// corrupt-marked image is read as it is (refcounts are not needed to
    /// read, and every table is checked anyway), as `qemu-img convert`
    /// does; `Image::notices` says so.
    pub fn check_readable(&self, path: &Path) -> Result<()> {
        let refuse = |p| Err(Error::problem(path, p));
        let unknown = self.incompatible & !INCOMPAT_KNOWN;
        if unknown != 0 {
            return refuse(Problem::UnknownFeatures(unknown));
        }
        if self.crypt_method != 0 {
            return refuse(Problem::Encrypted(self.crypt_method));
        }
        if self.extended_l2() && self.cluster_bits < 14 {
            return refuse(Problem::Corrupt(format!(
                "extended L2 entries with {}-byte clusters (at least 16 KiB)",
                self.cluster_size()
            )));
        }
        let zstd = self.incompatible & INCOMPAT_COMPRESSION != 0;
        if (zstd && self.compression_type != 1)
            || (!zstd && self.compression_type != 0)
        {
            return refuse(Problem::Corrupt(format!(
                "compression type {} with feature bit {}",
                self.compression_type, zstd
            )));
        }
        Ok(())
    }
}
/// The v3 fields (defaults for v2: no features, 16-bit refcounts, a
/// 72-byte header).
struct V3 {
    incompatible: u64,
    autoclear: u64,
    refcount_order: u32,
    header_length: usize,
    compression_type: u8,
}

impl Default for V3 {
    fn default() -> V3 {
        V3 {
            incompatible: 0,
            autoclear: 0,
            refcount_order: 4,
            header_length: 72,
            compression_type: 0,
        }
    }
}

impl V3 {
    /// The v3 fields of `head`, whose clusters are `cluster` bytes.
    fn parse(path: &Path, head: &[u8], cluster: usize) -> Result<V3> {
        let corrupt =
            |why: String| Err(Error::problem(path, Problem::Corrupt(why)));
        if head.len() < 104 {
            return corrupt("v3 header truncated".into());
        }
        let header_length = be32(head, 100) as usize;
        // QEMU's bounds: the v3 fields, and no more than cluster 0.
        if header_length < 104 || header_length > cluster {
            return corrupt(format!(
                "header_length {header_length} outside 104..={cluster}"
            ));
        }
        Ok(V3 {
            incompatible: be64(head, 72),
            autoclear: be64(head, 88),
            refcount_order: be32(head, 96),
            header_length,
            compression_type: if header_length > 104 && head.len() > 104 {
                head[104]
            } else {
                0
            },
        })
    }
}

/// The backing file's name, which must lie in cluster 0.
fn backing_file(path: &Path, head: &[u8]) -> Result<Option<String>> {
    let corrupt =
        |why: String| Err(Error::problem(path, Problem::Corrupt(why)));
    let backing_file_offset = be64(head, 8);
    let backing_file_size = be32(head, 16);
    if backing_file_offset == 0 {
        return Ok(None);
    }
    // The spec's limit; QEMU refuses longer names too.
    if backing_file_size > 1023 {
        return corrupt(format!(
            "backing file name of {backing_file_size} bytes (at \
             most 1023)"
        ));
    }
    let name = usize::try_from(backing_file_offset).ok().and_then(|at| {
        head.get(at..at.checked_add(backing_file_size as usize)?)
    });
    let Some(name) = name else {
        return corrupt(format!(
            "backing file name at {backing_file_offset:#x} \
             ({backing_file_size} bytes) outside cluster 0"
        ));
    };
    Ok(Some(String::from_utf8_lossy(name).into_owned()))
}

/// A v3 image's backing format and data file, from the header
/// extensions after `header_length`.
fn extensions(
    path: &Path,
    head: &[u8],
    header_length: usize,
) -> Result<(Option<String>, Option<String>)> {
    let corrupt =
        |why: String| Err(Error::problem(path, Problem::Corrupt(why)));
    // Header extensions: type, length, data padded to 8 bytes. Each
    // takes at least 8 bytes of cluster 0, so the loop is bounded.
    let mut backing_format = None;
    let mut data_file = None;
    let mut at = header_length.max(72);
    while at.saturating_add(8) <= head.len() {
        let (kind, len) = (be32(head, at), be32(head, at + 4) as usize);
        if kind == EXT_END {
            break;
        }
        let data = head.get(at + 8..).and_then(|d| d.get(..len));
        let Some(data) = data else {
            return corrupt(format!(
                "header extension {kind:#x} at {at:#x} ({len} bytes) \
                 runs past cluster 0"
            ));
        };
        if kind == EXT_BACKING_FORMAT {
            backing_format = Some(String::from_utf8_lossy(data).into_owned());
        } else if kind == EXT_DATA_FILE {
            data_file = Some(String::from_utf8_lossy(data).into_owned());
        }
        at = at + 8 + len.next_multiple_of(8);
    }
    Ok((backing_format, data_file))
}
