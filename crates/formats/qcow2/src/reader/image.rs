//! The open image: where its bytes are, what it names below it, and what
//! it tells about itself. A leaf the opening, mapping and reading share.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::cache::{Cluster, Lru};
use crate::error::{Error, Problem, Result};
use crate::header::Header;

/// Where an image's bytes are: a file, or memory (images built in tests
/// and fed by the fuzzer).
pub(super) enum Source {
    File(File),
    Bytes(Vec<u8>),
}

impl Source {
    pub(super) fn read_exact_at(
        &self,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
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

/// The image under another, read where the top one allocates nothing.
pub(super) enum Backing {
    Qcow2(Box<Image>),
    Raw { path: PathBuf, file: File, len: u64 },
}

/// An external data file: where host offsets point.
pub(super) struct DataFile {
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) len: u64,
}

/// An open qcow2 image, readable from several threads at once.
pub struct Image {
    pub(super) path: PathBuf,
    pub(super) file: Source,
    pub(super) file_len: u64,
    pub(super) header: Header,
    pub(super) l1: Vec<u64>,
    pub(super) l2_cache: Mutex<Lru<Vec<u64>>>,
    pub(super) inflated: Mutex<Lru<Cluster>>,
    pub(super) backing: Option<Backing>,
    pub(super) data: Option<DataFile>,
    pub(super) notices: Vec<String>,
}

impl Image {
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

    pub(super) fn problem(&self, p: Problem) -> Error {
        Error::problem(&self.path, p)
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

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}
