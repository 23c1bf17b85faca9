//! Reading a qcow2 image: cluster mapping through L1 and cached L2
//! tables, plain, zero and compressed clusters.
//!
//! The L1 table is read whole at open. L2 tables (one cluster each) are
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
use super::{Error, OFFSET_MASK, Problem, Result, be64};

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
        if let Some(i) = self.order.iter().position(|&x| x == k) {
            self.order.remove(i);
        }
        self.order.push_back(k);
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

/// An open qcow2 image, readable from several threads at once.
pub struct Image {
    path: PathBuf,
    file: File,
    file_len: u64,
    header: Header,
    l1: Vec<u64>,
    l2_cache: Mutex<Lru<Vec<u64>>>,
    inflated: Mutex<Lru<Vec<u8>>>,
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
        let mut head = vec![0u8; 512.min(file_len as usize)];
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
        let cs = header.cluster_size();
        let l1_bytes = u64::from(header.l1_size) * 8;
        let l2_entries = cs / 8;
        let needed = header.size.div_ceil(cs * l2_entries);
        if u64::from(header.l1_size) < needed {
            return Err(Error::problem(
                path,
                Problem::Corrupt(format!(
                    "L1 has {} entries, size needs {needed}",
                    header.l1_size
                )),
            ));
        }
        if header.l1_size > 0 && header.l1_table_offset + l1_bytes > file_len {
            return Err(Error::problem(
                path,
                Problem::Corrupt("L1 table past the end of the file".into()),
            ));
        }
        let mut raw = vec![0u8; l1_bytes as usize];
        file.read_exact_at(&mut raw, header.l1_table_offset)
            .map_err(|e| Error::io(path, "read L1 table", e))?;
        let l1 = (0..header.l1_size as usize)
            .map(|i| be64(&raw, i * 8))
            .collect();
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

    fn corrupt(&self, why: String) -> Error {
        Error::problem(&self.path, Problem::Corrupt(why))
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
        if !offset.is_multiple_of(cs) || offset + cs > self.file_len {
            return Err(self
                .corrupt(format!("L2 table at {offset:#x} outside the file")));
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
        let bits = self.header.cluster_bits;
        let per_l2 = 1u64 << (bits - 3);
        let Some(&l1e) = self.l1.get((n / per_l2) as usize) else {
            return Ok(Mapping::Unallocated);
        };
        let l2_off = l1e & OFFSET_MASK;
        if l2_off == 0 {
            return Ok(Mapping::Unallocated);
        }
        let l2 = self.l2_table(l2_off)?;
        let e = l2[(n % per_l2) as usize];
        if e & (1 << 62) != 0 {
            // Compressed: offset in the low x bits, then the count of
            // additional 512-byte sectors.
            let x = 62 - (bits - 8);
            let off = e & ((1u64 << x) - 1);
            let sectors = (e >> x) & ((1u64 << (bits - 8)) - 1);
            let len = (sectors + 1) * 512 - (off % 512);
            if off >= self.file_len {
                return Err(self.corrupt(format!(
                    "compressed cluster at {off:#x} outside the file"
                )));
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
        if host >= self.file_len {
            return Err(self.corrupt(format!(
                "data cluster at {host:#x} outside the file"
            )));
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
    ) -> Result<Arc<Vec<u8>>> {
        if let Some(c) = self
            .inflated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(n)
        {
            return Ok(c);
        }
        let cs = self.cluster_size() as usize;
        let len = len.min(self.file_len - off) as usize;
        let mut packed = vec![0u8; len];
        self.file
            .read_exact_at(&mut packed, off)
            .map_err(|e| Error::io(&self.path, "read compressed cluster", e))?;
        let mut out = vec![0u8; cs];
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
            d.read_exact(&mut out)
                .map_err(|e| fail(format!("zstd: {e}")))?;
        } else {
            // Raw deflate, no zlib header.
            let mut d = flate2::Decompress::new(false);
            match d.decompress(
                &packed,
                &mut out,
                flate2::FlushDecompress::Finish,
            ) {
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
        let out = Arc::new(out);
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
            let pos = offset + done as u64;
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
                        out.copy_from_slice(&c[within..within + take]);
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
