//! Reading a qcow2 image: cluster mapping through L1 and cached L2
//! tables, plain, zero and compressed clusters.
//!
//! The L1 table is read at open, as much of it as the virtual size
//! maps, in bounded pieces. L2 tables (one cluster each) are
//! read on first use and kept in a cache bounded in bytes: at the default
//! 1 MiB, 16 tables of a 64 KiB-cluster image map 8 GiB, so a sequential
//! read touches each table once instead of once per cluster. The last few
//! inflated compressed clusters are kept too, so partial reads of one
//! cluster do not inflate it again.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::header::{Header, INCOMPAT_COMPRESSION};
use super::{Error, OFFSET_MASK, Problem, Result, be64, l1_entries_for};

/// Where a guest cluster's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Never written: zeros (this reader refuses backing files).
    Unallocated,
    /// Written as zeros.
    Zero,
    /// Stored at this host offset.
    Data(u64),
    /// Compressed: host offset and length of the compressed bytes.
    Compressed(u64, u64),
}

/// A small cache with least-recently-used eviction.
struct Lru<V> {
    map: HashMap<u64, Arc<V>>,
    order: VecDeque<u64>,
    cap: usize,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn get(&mut self, k: u64) -> Option<Arc<V>> {
        let v = self.map.get(&k).cloned()?;
        // Sequential reads ask for the same table cluster after cluster:
        // the most recent needs no reordering, and no scan.
        if self.order.back() != Some(&k) {
            if let Some(i) = self.order.iter().position(|&x| x == k) {
                self.order.remove(i);
            }
            self.order.push_back(k);
        }
        Some(v)
    }

    fn put(&mut self, k: u64, v: Arc<V>) {
        if self.map.insert(k, v).is_none() {
            self.order.push_back(k);
        }
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

/// An inflated cluster, in a page-aligned buffer.
pub(crate) struct Cluster {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl Cluster {
    /// The cluster's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }
}

/// Where an image's bytes are: a file, or memory (images built in tests
/// and fed by the fuzzer).
enum Source {
    File(File),
    Bytes(Vec<u8>),
}

impl Source {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Source::File(f) => f.read_exact_at(buf, offset),
            Source::Bytes(b) => {
                let src = usize::try_from(offset)
                    .ok()
                    .and_then(|at| b.get(at..at.checked_add(buf.len())?))
                    .ok_or(io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// Tables are read at most this much at a time, so that what a read
/// allocates never depends on a field alone.
const TABLE_PIECE: usize = 64 << 10;

/// An open qcow2 image, readable from several threads at once.
pub struct Image {
    path: PathBuf,
    file: Source,
    file_len: u64,
    header: Header,
    l1: Vec<u64>,
    l2_cache: Mutex<Lru<Vec<u64>>>,
    inflated: Mutex<Lru<Cluster>>,
}

impl Image {
    /// Opens `path` with a 1 MiB L2 cache.
    pub fn open(path: &Path) -> Result<Image> {
        Self::open_with_cache(path, 1 << 20)
    }

    /// Opens `path` with an L2 cache of `l2_cache_bytes`.
    pub fn open_with_cache(path: &Path, l2_cache_bytes: u64) -> Result<Image> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::io(path, "stat", e))?
            .len();
        Self::from_source(path, Source::File(file), file_len, l2_cache_bytes)
    }

    /// Opens an image held in memory; `name` stands for it in errors.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<Image> {
        let len = bytes.len() as u64;
        Self::from_source(name, Source::Bytes(bytes), len, 1 << 20)
    }

    fn from_source(
        path: &Path,
        file: Source,
        file_len: u64,
        l2_cache_bytes: u64,
    ) -> Result<Image> {
        let mut head = vec![0u8; 512.min(file_len) as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(path, "read header", e))?;
        // The header names the cluster size; its extensions may fill the
        // rest of cluster 0, so that is what gets parsed.
        if head.len() < 24 || &head[..4] != b"QFI\xfb" {
            return Err(Error::problem(path, Problem::BadMagic));
        }
        let bits = super::be32(&head, 20);
        if !(9..=21).contains(&bits) {
            return Err(Error::problem(path, Problem::ClusterBits(bits)));
        }
        let c0 = (1u64 << bits).min(file_len) as usize;
        head.resize(c0, 0);
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(path, "read header", e))?;
        let header = Header::parse(path, &head)?;
        header.check_readable(path)?;
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
        })
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Virtual size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.header.size
    }

    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u64 {
        self.header.cluster_size()
    }

    /// The most bytes of data a conversion can write: the guest clusters
    /// that hold data, plain or compressed, times the cluster size (at
    /// most the virtual size). Unallocated and zero clusters stay holes.
    /// Found from the L1 and L2 tables alone, before any data is read, so
    /// an image whose tables point many clusters at the same few host
    /// bytes (a small file expanding to a huge disk) can be refused before
    /// anything is written.
    pub fn data_bytes(&self) -> Result<u64> {
        let cs = self.cluster_size();
        let per_l2 = 1u64 << (self.header.cluster_bits - 3);
        let clusters = self.virtual_size().div_ceil(cs);
        let mut mapped = 0u64;
        for (i, &l1e) in self.l1.iter().enumerate() {
            let l2_off = l1e & OFFSET_MASK;
            if l2_off == 0 {
                continue;
            }
            let first = i as u64 * per_l2;
            let n = clusters.saturating_sub(first).min(per_l2) as usize;
            let l2 = self.l2_table(l2_off)?;
            mapped += l2[..n.min(l2.len())]
                .iter()
                .filter(|&&e| {
                    e & (1 << 62) != 0 || (e & 1 == 0 && e & OFFSET_MASK != 0)
                })
                .count() as u64;
        }
        Ok(mapped.saturating_mul(cs).min(self.virtual_size()))
    }

    /// The backing file name and format, if the image has one.
    pub fn backing_file(&self) -> Option<(&str, Option<&str>)> {
        self.header
            .backing_file
            .as_deref()
            .map(|b| (b, self.header.backing_format.as_deref()))
    }

    /// Refuses an image that depends on a backing file.
    pub fn require_standalone(&self) -> Result<()> {
        match &self.header.backing_file {
            Some(b) => {
                Err(Error::problem(&self.path, Problem::HasBacking(b.clone())))
            }
            None => Ok(()),
        }
    }

    fn problem(&self, p: Problem) -> Error {
        Error::problem(&self.path, p)
    }

    /// If the L2 table that would map guest cluster `n` is unallocated,
    /// the first cluster past the range it would map: every cluster up
    /// to there reads as zeros, and a walk can skip them in one step.
    pub(crate) fn unmapped_until(&self, n: u64) -> Option<u64> {
        let per_l2 = 1u64 << (self.header.cluster_bits - 3);
        let i = n / per_l2;
        let unmapped = self
            .l1
            .get(usize::try_from(i).ok()?)
            .is_none_or(|e| e & OFFSET_MASK == 0);
        unmapped.then(|| (i + 1).saturating_mul(per_l2))
    }

    fn l2_table(&self, offset: u64) -> Result<Arc<Vec<u64>>> {
        if let Some(t) = self
            .l2_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(offset)
        {
            return Ok(t);
        }
        let cs = self.cluster_size();
        if !offset.is_multiple_of(cs) {
            return Err(self.problem(Problem::Unaligned {
                what: "L2 table",
                offset,
                align: cs,
            }));
        }
        if offset.checked_add(cs).is_none_or(|end| end > self.file_len) {
            return Err(self.problem(Problem::OutsideFile {
                what: "L2 table",
                offset,
                len: cs,
                file_len: self.file_len,
            }));
        }
        let mut raw = vec![0u8; cs as usize];
        self.file
            .read_exact_at(&mut raw, offset)
            .map_err(|e| Error::io(&self.path, "read L2 table", e))?;
        let t: Arc<Vec<u64>> =
            Arc::new((0..cs as usize / 8).map(|i| be64(&raw, i * 8)).collect());
        self.l2_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(offset, Arc::clone(&t));
        Ok(t)
    }

    /// Where guest cluster `n` lives.
    pub(crate) fn map(&self, n: u64) -> Result<Mapping> {
        self.map_with(n, &mut None)
    }

    /// [`Self::map`], keeping the last L2 table used in `last`: a walk
    /// over consecutive clusters then takes the shared cache's lock once
    /// per table instead of once per cluster.
    pub(crate) fn map_with(
        &self,
        n: u64,
        last: &mut Option<(u64, Arc<Vec<u64>>)>,
    ) -> Result<Mapping> {
        let bits = self.header.cluster_bits;
        let per_l2 = 1u64 << (bits - 3);
        let Some(&l1e) = usize::try_from(n / per_l2)
            .ok()
            .and_then(|i| self.l1.get(i))
        else {
            return Ok(Mapping::Unallocated);
        };
        let l2_off = l1e & OFFSET_MASK;
        if l2_off == 0 {
            return Ok(Mapping::Unallocated);
        }
        let l2 = match last {
            Some((off, t)) if *off == l2_off => t,
            _ => &mut last.insert((l2_off, self.l2_table(l2_off)?)).1,
        };
        let e = l2[(n % per_l2) as usize];
        if e & (1 << 62) != 0 {
            // Compressed: offset in the low x bits, then the count of
            // additional 512-byte sectors.
            let x = 62 - (bits - 8);
            let off = e & ((1u64 << x) - 1);
            let sectors = (e >> x) & ((1u64 << (bits - 8)) - 1);
            let len = (sectors + 1) * 512 - (off % 512);
            if off >= self.file_len {
                return Err(self.problem(Problem::OutsideFile {
                    what: "compressed cluster",
                    offset: off,
                    len,
                    file_len: self.file_len,
                }));
            }
            return Ok(Mapping::Compressed(off, len));
        }
        if e & 1 != 0 {
            return Ok(Mapping::Zero);
        }
        let host = e & OFFSET_MASK;
        if host == 0 {
            return Ok(Mapping::Unallocated);
        }
        if !host.is_multiple_of(self.cluster_size()) {
            return Err(self.problem(Problem::Unaligned {
                what: "data cluster",
                offset: host,
                align: self.cluster_size(),
            }));
        }
        // The last cluster may end past EOF (qemu-img does not pad the
        // file); it must start inside it.
        if host >= self.file_len {
            return Err(self.problem(Problem::OutsideFile {
                what: "data cluster",
                offset: host,
                len: self.cluster_size(),
                file_len: self.file_len,
            }));
        }
        Ok(Mapping::Data(host))
    }

    /// Reads a data cluster's bytes at `host + within` into `buf`; bytes
    /// past the end of the file (qemu-img does not pad) read as zeros.
    pub(crate) fn read_host(&self, buf: &mut [u8], host: u64) -> Result<()> {
        let avail =
            self.file_len.saturating_sub(host).min(buf.len() as u64) as usize;
        let (data, tail) = buf.split_at_mut(avail);
        self.file
            .read_exact_at(data, host)
            .map_err(|e| Error::io(&self.path, "read data cluster", e))?;
        tail.fill(0);
        Ok(())
    }

    /// The inflated bytes of compressed guest cluster `n`.
    pub(crate) fn inflate(
        &self,
        n: u64,
        off: u64,
        len: u64,
    ) -> Result<Arc<Cluster>> {
        if let Some(c) = self
            .inflated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(n)
        {
            return Ok(c);
        }
        let cs = self.cluster_size() as usize;
        let len = len.min(self.file_len.saturating_sub(off)) as usize;
        let mut packed = vec![0u8; len];
        self.file
            .read_exact_at(&mut packed, off)
            .map_err(|e| Error::io(&self.path, "read compressed cluster", e))?;
        let (mut raw, at) = crate::buf::aligned(cs);
        let out = &mut raw[at..at + cs];
        let fail = |why: String| {
            Error::problem(
                &self.path,
                Problem::Decompress {
                    guest_offset: n * cs as u64,
                    why,
                },
            )
        };
        if self.header.incompatible & INCOMPAT_COMPRESSION != 0 {
            // zstd: one or more frames until a whole cluster is out.
            let mut d = zstd::stream::read::Decoder::with_buffer(&packed[..])
                .map_err(|e| fail(format!("zstd: {e}")))?;
            // A frame may declare a window of up to 2 GiB, which the
            // decoder would allocate; one cluster never needs more than
            // its own size (QEMU compresses each cluster alone).
            d.window_log_max(self.header.cluster_bits.max(10) + 2)
                .map_err(|e| fail(format!("zstd: {e}")))?;
            d.read_exact(out).map_err(|e| fail(format!("zstd: {e}")))?;
        } else {
            // Raw deflate, no zlib header.
            let mut d = flate2::Decompress::new(false);
            match d.decompress(&packed, out, flate2::FlushDecompress::Finish) {
                Ok(_) if d.total_out() as usize == cs => {}
                Ok(_) => {
                    return Err(fail(format!(
                        "deflate gave {} of {cs} bytes",
                        d.total_out()
                    )));
                }
                Err(e) => return Err(fail(format!("deflate: {e}"))),
            }
        }
        let out = Arc::new(Cluster { raw, at, len: cs });
        self.inflated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(n, Arc::clone(&out));
        Ok(out)
    }

    /// Fills `buf` with the guest's bytes at `offset`; past the virtual
    /// size reads as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let cs = self.cluster_size();
        let mut done = 0usize;
        while done < buf.len() {
            // Past u64::MAX is past any virtual size: zeros.
            let pos = offset.saturating_add(done as u64);
            let n = pos / cs;
            let within = (pos % cs) as usize;
            let take = (cs as usize - within).min(buf.len() - done);
            let out = &mut buf[done..done + take];
            if pos >= self.header.size {
                out.fill(0);
            } else {
                match self.map(n)? {
                    Mapping::Unallocated | Mapping::Zero => out.fill(0),
                    Mapping::Data(host) => {
                        self.read_host(out, host + within as u64)?
                    }
                    Mapping::Compressed(off, len) => {
                        let c = self.inflate(n, off, len)?;
                        out.copy_from_slice(&c.bytes()[within..within + take]);
                    }
                }
            }
            done += take;
        }
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The image file, unless the image is held in memory.
    pub(crate) fn file(&self) -> Option<&File> {
        match &self.file {
            Source::File(f) => Some(f),
            Source::Bytes(_) => None,
        }
    }

    /// The image file's length when opened.
    pub(crate) fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Reads `buf.len()` bytes of the image file at `offset` (not guest
    /// data: the file itself), short only at its end; returns the count.
    pub(crate) fn read_file_at(
        &self,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<usize> {
        let n =
            self.file_len.saturating_sub(offset).min(buf.len() as u64) as usize;
        self.file
            .read_exact_at(&mut buf[..n], offset)
            .map_err(|e| Error::io(&self.path, "read", e))?;
        Ok(n)
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
    let Some(needed) = l1_entries_for(header.size, header.cluster_bits) else {
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

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::other(e)
    }
}
