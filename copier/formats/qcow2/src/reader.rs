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
//!
//! [`Image::open_chain`] also opens the files an image names: its
//! external data file, and its backing file (qcow2 or raw), and that
//! one's, up to [`MAX_CHAIN`] images. Those names are the image's to
//! choose, so they are untrusted: each is opened beneath the naming
//! image's directory, one component at a time with `O_NOFOLLOW`, and
//! refused if absolute, if it has `..`, or if it passes a symlink --
//! unless it leads (lexically) beneath the directory the caller allows
//! for them ([`ChainOptions::backing_dir`]), where it is opened the same
//! way from that directory's descriptor. A cluster the top image does
//! not allocate reads from its backing file (zeros past that one's end);
//! a zero cluster or subcluster reads zeros and does not fall through.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::header::{
    AUTOCLEAR_DATA_FILE_RAW, Header, INCOMPAT_COMPRESSION, INCOMPAT_CORRUPT,
    INCOMPAT_DIRTY,
};
use super::{Error, OFFSET_MASK, Problem, Result, be64, l1_entries_for};

/// Where a guest cluster's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Never written: the backing file's bytes, or zeros.
    Unallocated,
    /// Written as zeros.
    Zero,
    /// Stored at this host offset.
    Data(u64),
    /// Compressed: host offset and length of the compressed bytes.
    Compressed(u64, u64),
    /// Extended L2, subclusters of different kinds: the host cluster,
    /// the allocated and the zero subclusters (bit n for subcluster n);
    /// the rest read from the backing file.
    Sub {
        /// The host cluster (of the allocated subclusters).
        host: u64,
        /// Allocated subclusters.
        alloc: u32,
        /// Subclusters that read as zeros.
        zero: u32,
    },
}

/// Images in a backing chain at most, the top one included.
pub const MAX_CHAIN: usize = 16;

/// How [`Image::open_chain`] finds the files an image names.
#[derive(Clone, Debug, Default)]
pub struct ChainOptions {
    /// A directory beneath which backing and data file names may also
    /// lead: absolute names, and names with `..`, that fall (lexically)
    /// beneath it. Without it only names beside the naming image
    /// (relative, without `..`) are followed. Symlinks are never
    /// followed.
    pub backing_dir: Option<PathBuf>,
    /// Each image's L2 cache, bytes (0: 1 MiB).
    pub l2_cache_bytes: u64,
}

/// The image under another, read where the top one allocates nothing.
enum Backing {
    Qcow2(Box<Image>),
    Raw { path: PathBuf, file: File, len: u64 },
}

/// An external data file: where host offsets point.
struct DataFile {
    path: PathBuf,
    file: File,
    len: u64,
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
    backing: Option<Backing>,
    data: Option<DataFile>,
    notices: Vec<String>,
}

/// What opening a chain carries from image to image.
struct Walk<'a> {
    opts: &'a ChainOptions,
    /// The allowed directory, canonical, and its descriptor.
    backing_dir: Option<(PathBuf, File)>,
    /// The images opened so far and their (device, inode).
    chain: Vec<(PathBuf, (u64, u64))>,
}

impl Image {
    /// Opens `path` alone, with a 1 MiB L2 cache: a backing file is not
    /// opened (see [`Self::require_standalone`]), an external data file
    /// is refused.
    pub fn open(path: &Path) -> Result<Image> {
        Self::open_with_cache(path, 1 << 20)
    }

    /// Opens `path` and the files it names: its external data file and
    /// its backing chain (see the module documentation).
    pub fn open_chain(path: &Path, opts: &ChainOptions) -> Result<Image> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = File::open(parent)
            .map_err(|e| Error::io(parent, "open directory", e))?;
        let dir_shown =
            std::fs::canonicalize(parent).unwrap_or_else(|_| parent.into());
        let backing_dir = match &opts.backing_dir {
            Some(d) => {
                let c = std::fs::canonicalize(d).map_err(|e| {
                    Error::io(d, "resolve backing directory", e)
                })?;
                let f = File::open(&c)
                    .map_err(|e| Error::io(d, "open backing directory", e))?;
                Some((c, f))
            }
            None => None,
        };
        let mut walk = Walk {
            opts,
            backing_dir,
            chain: Vec::new(),
        };
        Self::open_level(path.to_path_buf(), file, dir, &dir_shown, &mut walk)
    }

    /// Opens one image of a chain, `file` at `path` in the directory
    /// `dir` (shown as `dir_shown`), and what it names.
    fn open_level(
        path: PathBuf,
        file: File,
        dir: File,
        dir_shown: &Path,
        walk: &mut Walk<'_>,
    ) -> Result<Image> {
        let md = file.metadata().map_err(|e| Error::io(&path, "stat", e))?;
        walk.chain.push((path.clone(), (md.dev(), md.ino())));
        let cache = match walk.opts.l2_cache_bytes {
            0 => 1 << 20,
            n => n,
        };
        let mut img = Self::from_source(
            &path,
            Source::File(file),
            md.len(),
            cache,
            true,
        )?;
        if img.header.external_data() {
            let Some(name) = img.header.data_file.clone() else {
                return Err(img.problem(Problem::ExternalData));
            };
            let (file, shown, _, _) =
                resolve(&path, "data file", &dir, dir_shown, &name, walk)?;
            let len = file
                .metadata()
                .map_err(|e| Error::io(&shown, "stat", e))?
                .len();
            if img.header.autoclear & AUTOCLEAR_DATA_FILE_RAW != 0 {
                img.notices.push(format!(
                    "{}: data file {} is also a raw image; read through the \
                     image's tables",
                    path.display(),
                    shown.display()
                ));
            }
            img.data = Some(DataFile {
                path: shown,
                file,
                len,
            });
        }
        let Some(name) = img.header.backing_file.clone() else {
            return Ok(img);
        };
        let (file, shown, sub, sub_shown) =
            resolve(&path, "backing file", &dir, dir_shown, &name, walk)?;
        let md = file.metadata().map_err(|e| Error::io(&shown, "stat", e))?;
        let paths = |walk: &Walk<'_>, last: Option<&Path>| {
            let mut v: Vec<PathBuf> =
                walk.chain.iter().map(|(p, _)| p.clone()).collect();
            v.extend(last.map(Path::to_path_buf));
            v
        };
        if walk.chain.iter().any(|(_, id)| *id == (md.dev(), md.ino())) {
            return Err(img.problem(Problem::ChainLoop {
                chain: paths(walk, None),
                name,
            }));
        }
        if walk.chain.len() >= MAX_CHAIN {
            return Err(img.problem(Problem::ChainTooDeep {
                chain: paths(walk, Some(&shown)),
            }));
        }
        let qcow2 = match img.header.backing_format.as_deref() {
            Some("qcow2") => true,
            Some("raw") => false,
            Some(other) => {
                return Err(img.problem(Problem::BackingFormat(other.into())));
            }
            None => {
                // No recorded format: probed by its magic, as QEMU does.
                let mut magic = [0u8; 4];
                let n = file.read_at(&mut magic, 0).unwrap_or(0);
                let q = n == 4 && &magic == b"QFI\xfb";
                img.notices.push(format!(
                    "{}: backing file {} has no recorded format; probed as {}",
                    path.display(),
                    shown.display(),
                    if q { "qcow2" } else { "raw" }
                ));
                q
            }
        };
        img.backing = Some(if qcow2 {
            Backing::Qcow2(Box::new(Self::open_level(
                shown, file, sub, &sub_shown, walk,
            )?))
        } else {
            Backing::Raw {
                path: shown,
                file,
                len: md.len(),
            }
        });
        Ok(img)
    }

    /// Opens `path` with an L2 cache of `l2_cache_bytes`.
    pub fn open_with_cache(path: &Path, l2_cache_bytes: u64) -> Result<Image> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
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
    fn from_source(
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
        let per_l2 = 1u64 << self.header.l2_bits();
        let ext = self.header.extended_l2();
        let words = if ext { 2 } else { 1 };
        let external = self.header.external_data();
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
            mapped += l2[..(n * words).min(l2.len())]
                .chunks(words)
                .filter(|c| {
                    let e = c[0];
                    let host = e & OFFSET_MASK != 0
                        || (external && e & (1 << 63) != 0);
                    e & (1 << 62) != 0
                        || if ext {
                            c.get(1).is_some_and(|b| *b as u32 != 0)
                        } else {
                            e & 1 == 0 && host
                        }
                })
                .count() as u64;
        }
        let below = match &self.backing {
            None => 0,
            Some(Backing::Qcow2(b)) => b.data_bytes()?,
            Some(Backing::Raw { len, .. }) => *len,
        };
        Ok(mapped
            .saturating_mul(cs)
            .saturating_add(below)
            .min(self.virtual_size()))
    }

    /// What was noticed and accepted while opening the image and its
    /// chain (a dirty image read as it is, a backing format probed),
    /// each naming the file.
    pub fn notices(&self) -> Vec<String> {
        let mut v = self.notices.clone();
        if let Some(Backing::Qcow2(b)) = &self.backing {
            v.extend(b.notices());
        }
        v
    }

    /// Every file the image reads from, the image first, then its data
    /// file, then its backing chain in order (an image held in memory
    /// is not listed).
    pub fn files(&self) -> Vec<(&Path, &File)> {
        let mut v = Vec::new();
        if let Source::File(f) = &self.file {
            v.push((self.path.as_path(), f));
        }
        v.extend(self.other_files());
        v
    }

    /// The files read besides the image itself (see [`Self::files`]).
    pub(crate) fn other_files(&self) -> Vec<(&Path, &File)> {
        let mut v = Vec::new();
        if let Some(d) = &self.data {
            v.push((d.path.as_path(), &d.file));
        }
        match &self.backing {
            Some(Backing::Qcow2(b)) => v.extend(b.files()),
            Some(Backing::Raw { path, file, .. }) => {
                v.push((path.as_path(), file))
            }
            None => {}
        }
        v
    }

    /// Whether every byte comes from the image file's own plain,
    /// compressed or zero clusters: no backing file, no data file, no
    /// subclusters.
    pub(crate) fn is_plain(&self) -> bool {
        self.backing.is_none()
            && self.data.is_none()
            && !self.header.extended_l2()
    }

    /// Whether unallocated clusters read from a backing file.
    pub(crate) fn has_backing(&self) -> bool {
        self.backing.is_some()
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
        if self.backing.is_some() {
            return None;
        }
        let per_l2 = 1u64 << self.header.l2_bits();
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
        let per_l2 = 1u64 << self.header.l2_bits();
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
        let i = (n % per_l2) as usize;
        let ext = self.header.extended_l2();
        let (e, bitmap) = if ext {
            (l2[2 * i], l2[2 * i + 1])
        } else {
            (l2[i], 0)
        };
        let external = self.header.external_data();
        if e & (1 << 62) != 0 {
            if external {
                return Err(self.problem(Problem::Corrupt(format!(
                    "guest cluster {n}: compressed, in an image with an \
                     external data file"
                ))));
            }
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
        let host = e & OFFSET_MASK;
        // In an external data file, offset 0 is its first cluster: the
        // copied bit says it is allocated.
        let has_host = host != 0 || (external && e & (1 << 63) != 0);
        if !ext {
            if e & 1 != 0 {
                return Ok(Mapping::Zero);
            }
            if !has_host {
                return Ok(Mapping::Unallocated);
            }
            self.check_host(host)?;
            return Ok(Mapping::Data(host));
        }
        let (alloc, zero) = (bitmap as u32, (bitmap >> 32) as u32);
        if alloc & zero != 0 {
            return Err(self.problem(Problem::Corrupt(format!(
                "guest cluster {n}: subclusters {:#x} both allocated and zero",
                alloc & zero
            ))));
        }
        if alloc != 0 {
            if !has_host {
                return Err(self.problem(Problem::Corrupt(format!(
                    "guest cluster {n}: subclusters {alloc:#x} allocated \
                     without a host cluster"
                ))));
            }
            self.check_host(host)?;
        }
        Ok(match (alloc, zero) {
            (u32::MAX, _) => Mapping::Data(host),
            (0, u32::MAX) => Mapping::Zero,
            (0, 0) => Mapping::Unallocated,
            _ => Mapping::Sub { host, alloc, zero },
        })
    }

    /// Refuses a data cluster offset that is unaligned, or past the end
    /// of the image file (an external data file may be shorter than
    /// what it maps: past its end reads as zeros).
    fn check_host(&self, host: u64) -> Result<()> {
        if !host.is_multiple_of(self.cluster_size()) {
            return Err(self.problem(Problem::Unaligned {
                what: "data cluster",
                offset: host,
                align: self.cluster_size(),
            }));
        }
        // The last cluster may end past EOF (qemu-img does not pad the
        // file); it must start inside it.
        if self.data.is_none() && host >= self.file_len {
            return Err(self.problem(Problem::OutsideFile {
                what: "data cluster",
                offset: host,
                len: self.cluster_size(),
                file_len: self.file_len,
            }));
        }
        Ok(())
    }

    /// Fills `buf` with the backing file's bytes at guest offset `at`
    /// (zeros past its end, or without one).
    pub(crate) fn read_backing(&self, buf: &mut [u8], at: u64) -> Result<()> {
        match &self.backing {
            None => buf.fill(0),
            Some(Backing::Qcow2(b)) => b.read_at(buf, at)?,
            Some(Backing::Raw { path, file, len }) => {
                let avail =
                    len.saturating_sub(at).min(buf.len() as u64) as usize;
                let (data, tail) = buf.split_at_mut(avail);
                file.read_exact_at(data, at)
                    .map_err(|e| Error::io(path, "read backing file", e))?;
                tail.fill(0);
            }
        }
        Ok(())
    }

    /// Fills `out` with guest cluster `n`'s bytes from `within`, mapped
    /// as `m` (not compressed).
    pub(crate) fn read_mapped(
        &self,
        n: u64,
        m: Mapping,
        within: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let cs = self.cluster_size();
        match m {
            Mapping::Unallocated => self.read_backing(out, n * cs + within),
            Mapping::Zero => {
                out.fill(0);
                Ok(())
            }
            Mapping::Data(host) => self.read_host(out, host + within),
            Mapping::Compressed(off, len) => {
                let c = self.inflate(n, off, len)?;
                let w = within as usize;
                out.copy_from_slice(&c.bytes()[w..w + out.len()]);
                Ok(())
            }
            Mapping::Sub { host, alloc, zero } => {
                // 32 subclusters a cluster.
                let sc = cs / 32;
                let end = within + out.len() as u64;
                let mut at = within;
                while at < end {
                    let k = at / sc;
                    let stop = ((k + 1) * sc).min(end);
                    let piece = &mut out
                        [(at - within) as usize..(stop - within) as usize];
                    if alloc & (1 << k) != 0 {
                        self.read_host(piece, host + at)?;
                    } else if zero & (1 << k) != 0 {
                        piece.fill(0);
                    } else {
                        self.read_backing(piece, n * cs + at)?;
                    }
                    at = stop;
                }
                Ok(())
            }
        }
    }

    /// Reads a data cluster's bytes at `host + within` into `buf`; bytes
    /// past the end of the file (qemu-img does not pad) read as zeros.
    pub(crate) fn read_host(&self, buf: &mut [u8], host: u64) -> Result<()> {
        let len = self.data.as_ref().map_or(self.file_len, |d| d.len);
        let avail = len.saturating_sub(host).min(buf.len() as u64) as usize;
        let (data, tail) = buf.split_at_mut(avail);
        match &self.data {
            Some(d) => d
                .file
                .read_exact_at(data, host)
                .map_err(|e| Error::io(&d.path, "read data file", e))?,
            None => self
                .file
                .read_exact_at(data, host)
                .map_err(|e| Error::io(&self.path, "read data cluster", e))?,
        }
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
                self.read_mapped(n, self.map(n)?, within as u64, out)?;
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

/// Opens `name`, which the image at `image` records as its `what`,
/// beneath `dir` (the image's directory, shown as `dir_shown`) or the
/// allowed directory; see the module documentation. Returns the file,
/// its path, its directory and that one's path.
fn resolve(
    image: &Path,
    what: &'static str,
    dir: &File,
    dir_shown: &Path,
    name: &str,
    walk: &Walk<'_>,
) -> Result<(File, PathBuf, File, PathBuf)> {
    let refuse = |why: String| {
        Error::problem(
            image,
            Problem::NameRefused {
                what,
                name: name.to_string(),
                why,
            },
        )
    };
    if name.is_empty() || name.contains('\0') {
        return Err(refuse("empty, or holds a NUL byte".into()));
    }
    let p = Path::new(name);
    let beside = !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let (start, start_shown, rel): (&File, &Path, PathBuf) = if beside {
        (dir, dir_shown, p.components().collect())
    } else {
        let lexical = lexical(&dir_shown.join(p));
        let under = walk.backing_dir.as_ref().and_then(|(d, f)| {
            let rest = lexical.as_deref()?.strip_prefix(d).ok()?;
            Some((f, d.as_path(), rest.to_path_buf()))
        });
        match under {
            Some(u) => u,
            None => {
                let how = if p.is_absolute() {
                    "an absolute name"
                } else {
                    "a name with `..`"
                };
                return Err(refuse(format!(
                    "{how}; only names beside the image are followed, or \
                     names beneath a directory allowed for backing files{}",
                    match &walk.backing_dir {
                        Some((d, _)) =>
                            format!(" ({}), which it is not", d.display()),
                        None => " (none is)".into(),
                    }
                )));
            }
        }
    };
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(refuse("names a directory".into()));
    };
    let op = match what {
        "data file" => "open data file",
        _ => "open backing file",
    };
    let mut cur = start
        .try_clone()
        .map_err(|e| Error::io(start_shown, op, e))?;
    let mut shown = start_shown.to_path_buf();
    let step = |cur: &File, shown: &Path, part: &std::ffi::OsStr, flags| {
        rustix::fs::openat(cur, part, flags, Mode::empty()).map_err(|e| {
            // A symlink, whichever error the system gives for it.
            let link = rustix::fs::statat(cur, part, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| {
                    FileType::from_raw_mode(st.st_mode).is_symlink()
                });
            if link {
                refuse(format!(
                    "{} is a symlink, which is not followed",
                    shown.join(part).display()
                ))
            } else {
                Error::io(shown.join(part), op, e.into())
            }
        })
    };
    let base = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for part in dirs {
        let fd = step(&cur, &shown, part, base | OFlags::DIRECTORY)?;
        cur = File::from(fd);
        shown.push(part);
    }
    // Non-blocking: a FIFO planted there must not hang the open.
    let fd = step(&cur, &shown, last, base | OFlags::NONBLOCK)?;
    let file = File::from(fd);
    let path = shown.join(last);
    let md = file.metadata().map_err(|e| Error::io(&path, "stat", e))?;
    if !md.is_file() {
        return Err(refuse(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok((file, path, cur, shown))
}

/// `p` with `.` and `..` resolved lexically; `None` if `..` climbs above
/// the root.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
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
