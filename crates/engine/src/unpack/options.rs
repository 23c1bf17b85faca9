//! What an unpack is asked ([`UnpackOptions`], [`Whiteouts`]) and what
//! it answers ([`UnpackReport`], [`Change`]): the public vocabulary, a
//! leaf that every other room of the unpack may name.

use std::path::PathBuf;
use std::sync::Arc;

use zinstall_archive::{ArchiveKind, ArchiveMeta};
use zinstall_core::Cancel;

use crate::stats::{Notice, Stats};
use crate::tunables::Tunables;

/// How to unpack.
#[derive(Clone, Debug)]
pub struct UnpackOptions {
    /// Workers (`copy_threads`; 1 unpacks serially in the reader) and
    /// batch size.
    pub tunables: Tunables,
    /// `Some(kind)`: the first member must be `zinstall.json` saying so.
    /// `None`: metadata is optional. With metadata, only members under
    /// `root/` are unpacked; without, everything.
    pub expect: Option<ArchiveKind>,
    /// Make device nodes (refused otherwise).
    pub allow_devices: bool,
    /// Refuse an archive whose entries add up to more bytes than this.
    pub max_bytes: u64,
    /// Set owners from the archive (default: when running as root).
    pub preserve_owner: Option<bool>,
    /// Stop at the next member when raised.
    pub cancel: Option<Cancel>,
    /// Write files on this shared pool's workers instead of starting
    /// `copy_threads` of the unpack's own (the reader stays in the calling
    /// thread).
    pub pool: Option<crate::Pool>,
    /// Hears of each member as it is unpacked (`tar -v`).
    pub listener: Option<Arc<dyn crate::Listener>>,
    /// OCI whiteouts: ignored (zinstall layers, plain tarballs), applied
    /// to the root, or recorded (see the `layered` module).
    pub whiteouts: Whiteouts,
    /// Told how far through the archive file (or OCI blob) the unpack is,
    /// its length first ([`crate::Progress::begin`]).
    pub progress: Option<Arc<dyn crate::Progress>>,
    /// The caller flushes the root's filesystem once the unpack is done
    /// (an install, the provision cache): with `COPY_WRITEBACK=sync`
    /// ([`crate::Writeback`]) each file's data then starts back to the
    /// disk as soon as it is written, so that the flush waits only for
    /// the last files.
    pub durable: bool,
    /// Records each regular file's content hash as it is written, by its
    /// path in the root ([`crate::contents`]).
    pub contents: Option<Arc<crate::contents::Contents>>,
    /// Takes the archive file's SHA-256 while it is unpacked
    /// ([`UnpackReport::sha256`]): the file read once more, beside the
    /// unpack rather than after it.
    pub digest: bool,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            tunables: Tunables::default(),
            expect: None,
            allow_devices: false,
            max_bytes: zinstall_archive::tar::DEFAULT_MAX_TOTAL_BYTES,
            preserve_owner: None,
            cancel: None,
            pool: None,
            listener: None,
            whiteouts: Whiteouts::Off,
            progress: None,
            durable: false,
            contents: None,
            digest: false,
        }
    }
}

/// What an unpack did.
#[derive(Clone, Debug, Default)]
pub struct UnpackReport {
    /// Entries made and bytes written; `skipped` counts members outside
    /// `root/`.
    pub stats: Stats,
    /// The archive's metadata, if it had any.
    pub meta: Option<ArchiveMeta>,
    /// What could not be kept (owners when not root).
    pub notices: Vec<Notice>,
    /// Recording whiteouts ([`Whiteouts::Record`]): what the layer
    /// changes besides its tree, in the archive's order, then the
    /// directories it has no entry for.
    pub changes: Vec<Change>,
    /// The archive file's digest (`sha256:...`), when asked for
    /// ([`UnpackOptions::digest`]).
    pub sha256: Option<String>,
}

/// How an unpack treats OCI whiteouts (`.wh.` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Whiteouts {
    /// As ordinary names: zinstall's own layers and plain rootfs
    /// tarballs.
    #[default]
    Off,
    /// Applied to what lower layers left in the root: an OCI layer
    /// unpacked onto a root.
    Apply,
    /// Recorded, not applied: an OCI layer unpacked alone into an empty
    /// directory; the report's `changes` say what to apply.
    Record,
}

/// What a layer changes that its tree alone does not show: paths are
/// relative to the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Remove this path, with everything beneath it, left by lower
    /// layers (`.wh.NAME`).
    Remove(PathBuf),
    /// Remove everything lower layers left in this directory
    /// (`.wh..wh..opq`).
    Opaque(PathBuf),
    /// A directory the layer holds entries in but has no entry for: a
    /// lower layer's directory there keeps its metadata.
    Implicit(PathBuf),
    /// A hard link `path` of this layer to `target`, a file this layer
    /// does not hold (a lower layer's, as `install` links it): made when
    /// the layer is applied onto a root, before its tree is copied there,
    /// so that it shares the lower layer's file even if this layer
    /// replaces that file later in its archive.
    Link {
        /// The link's path.
        path: PathBuf,
        /// The file it links to.
        target: PathBuf,
    },
}
