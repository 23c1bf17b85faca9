//! Opening one image: its header read and checked, its L1 table read in
//! bounded pieces, its caches made.

use std::path::Path;
use std::sync::Mutex;

use super::cache::Lru;
use super::image::{Image, Source};
use crate::error::{Error, Problem, Result};
use crate::header::{Header, INCOMPAT_CORRUPT, INCOMPAT_DIRTY};
use crate::layout::{be32, be64, l1_entries_for};

/// Tables are read at most this much at a time, so that what a read
/// allocates never depends on a field alone.
const TABLE_PIECE: usize = 64 << 10;

impl Image {
    /// Opens `path` alone, with a 1 MiB L2 cache: a backing file is not
    /// opened (see [`Self::require_standalone`]), an external data file
    /// is refused.
    pub fn open(path: &Path) -> Result<Image> {
        Self::open_with_cache(path, 1 << 20)
    }

    /// Opens `path` with an L2 cache of `l2_cache_bytes`.
    pub fn open_with_cache(path: &Path, l2_cache_bytes: u64) -> Result<Image> {
        // A regular file, or refused naming what it is (a FIFO never
        // holds the open).
        let file = zinstall_core::foreign::open(
            path,
            zinstall_core::foreign::Follow::Yes,
        )
        .map_err(|e| Error::io(path, "open", e.into()))?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::io(path, "stat", e))?
            .len();
        Self::from_source(
            path,
            Source::File(file),
            file_len,
            l2_cache_bytes,
            false,
        )
    }

    /// Opens an image held in memory; `name` stands for it in errors.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<Image> {
        let len = bytes.len() as u64;
        Self::from_source(name, Source::Bytes(bytes), len, 1 << 20, false)
    }

    /// Opens an image from `file`; with `chain`, its external data file
    /// is the caller's to open.
    pub(super) fn from_source(
        path: &Path,
        file: Source,
        file_len: u64,
        l2_cache_bytes: u64,
        chain: bool,
    ) -> Result<Image> {
        let mut head = vec![0u8; 512.min(file_len) as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(path, "read header", e))?;
        // The header names the cluster size; its extensions may fill the
        // rest of cluster 0, so that is what gets parsed.
        if head.len() < 24 || &head[..4] != b"QFI\xfb" {
            return Err(Error::problem(path, Problem::BadMagic));
        }
        let bits = be32(&head, 20);
        if !(9..=21).contains(&bits) {
            return Err(Error::problem(path, Problem::ClusterBits(bits)));
        }
        let c0 = (1u64 << bits).min(file_len) as usize;
        head.resize(c0, 0);
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(path, "read header", e))?;
        let header = Header::parse(path, &head)?;
        header.check_readable(path)?;
        if header.external_data() && !chain {
            return Err(Error::problem(path, Problem::ExternalData));
        }
        let mut notices = Vec::new();
        if header.incompatible & INCOMPAT_DIRTY != 0 {
            notices.push(format!(
                "{}: refcounts left dirty (lazy refcounts, not closed \
                 cleanly); read as it is, the image unchanged (refcounts \
                 are not needed to read)",
                path.display()
            ));
        }
        if header.incompatible & INCOMPAT_CORRUPT != 0 {
            notices.push(format!(
                "{}: marked corrupt by QEMU; read as it is, every table \
                 checked, as qemu-img convert reads it",
                path.display()
            ));
        }
        let l1 = read_l1(path, &file, file_len, &header)?;
        let cs = header.cluster_size();
        let tables = (l2_cache_bytes / cs).max(1) as usize;
        Ok(Image {
            path: path.to_path_buf(),
            file,
            file_len,
            header,
            l1,
            l2_cache: Mutex::new(Lru::new(tables)),
            inflated: Mutex::new(Lru::new(4)),
            backing: None,
            data: None,
            notices,
        })
    }
}

/// Reads the part of the L1 table the virtual size maps. `l1_size` may
/// declare more entries (an image shrunk, or a hostile one declaring
/// four billion over a small file); they could only map guest clusters
/// past the end of the disk, so they are neither checked nor read.
fn read_l1(
    path: &Path,
    file: &Source,
    file_len: u64,
    header: &Header,
) -> Result<Vec<u64>> {
    let bad = |p| Err(Error::problem(path, p));
    let cs = header.cluster_size();
    let Some(needed) =
        l1_entries_for(header.size, header.cluster_bits, header.l2_bits())
    else {
        return bad(Problem::TooLarge {
            size: header.size,
            cluster_size: cs,
        });
    };
    if u64::from(header.l1_size) < needed {
        return bad(Problem::Corrupt(format!(
            "L1 has {} entries, the virtual size {} needs {needed}",
            header.l1_size, header.size
        )));
    }
    if needed == 0 {
        return Ok(Vec::new());
    }
    let offset = header.l1_table_offset;
    let bytes = needed * 8;
    if offset == 0 {
        return bad(Problem::Corrupt(
            "L1 table at offset 0, over the header".into(),
        ));
    }
    if !offset.is_multiple_of(cs) {
        return bad(Problem::Unaligned {
            what: "L1 table",
            offset,
            align: cs,
        });
    }
    if offset.checked_add(bytes).is_none_or(|end| end > file_len) {
        return bad(Problem::OutsideFile {
            what: "L1 table",
            offset,
            len: bytes,
            file_len,
        });
    }
    // Within the file and at most MAX_L1_ENTRIES: the allocation is
    // bounded by both.
    let mut l1 = Vec::with_capacity(needed as usize);
    let mut piece = vec![0u8; TABLE_PIECE.min(bytes as usize)];
    let mut at = 0u64;
    while at < bytes {
        let n = piece.len().min((bytes - at) as usize);
        let buf = &mut piece[..n];
        file.read_exact_at(buf, offset + at)
            .map_err(|e| Error::io(path, "read L1 table", e))?;
        l1.extend(buf.chunks_exact(8).map(|c| be64(c, 0)));
        at += n as u64;
    }
    Ok(l1)
}
