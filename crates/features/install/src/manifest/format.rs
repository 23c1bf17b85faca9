//! The manifest's format: its names in the zonepath, its bounds, the
//! entry, header and image records as they are written, and its error.
//! A leaf: the walk, the file and the update all speak it.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's name in the zonepath.
pub const MANIFEST: &str = ".zinstall.manifest";
/// The previous root's manifest (kept with `root.prev` for rollback).
pub const MANIFEST_PREV: &str = ".zinstall.manifest.prev";
/// The manifest of a root an update is building (`root.new`).
pub const MANIFEST_NEW: &str = ".zinstall.manifest.new";

/// The largest manifest file read back (compressed).
pub const MAX_FILE: u64 = 1 << 30;
/// The longest line (one entry) read back, decompressed.
pub const MAX_LINE: u64 = 64 << 10;
/// The most entries read back.
pub const MAX_ENTRIES: usize = 50_000_000;
/// The deepest a recorded (or updated) root goes: each level of the walk
/// holds a descriptor and a stack frame, so a deeper root is not recorded
/// (an update of it then needs `--force`, and is refused past this depth).
pub const MAX_DEPTH: usize = 128;
/// The format's version, in the header: 2 records the root's recipe
/// ([`Recipe`]); 1 is still read (its recipe is told from its trees and
/// images, [`Header::recipe`]).
pub(crate) const VERSION: u32 = 2;
/// The oldest version read back.
pub(crate) const OLDEST: u32 = 1;

/// What one path of the root was when it was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative to the root, `/`-separated: text when the name is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<String>,
    /// The path's bytes in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub px: Option<String>,
    /// `d` directory, `f` file, `l` symlink, `c`/`b` device, `p` FIFO,
    /// `s` socket.
    pub k: char,
    /// Permission and special bits.
    pub m: u32,
    /// Owner.
    pub u: u32,
    /// Group.
    pub g: u32,
    /// Modification time: seconds, nanoseconds.
    pub t: (i64, i64),
    /// Size in bytes (regular files).
    #[serde(default)]
    pub s: u64,
    /// XXH3-128 of a regular file's content, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h: Option<String>,
    /// A symlink's target, hex of its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l: Option<String>,
    /// A device's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<u64>,
    /// Hard-link group: every entry with the same number is one inode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// XXH3-128 of the extended attributes (sorted names and values),
    /// hex; none when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// The profile tree the entry came from; none for everything else
    /// (layout, baseline, images, host files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o: Option<String>,
    /// Inode number and change time when recorded: both unchanged means
    /// the content is the one hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub i: Option<(u64, i64, i64)>,
    /// The zone's own edit of the entry was kept by an update: the entry
    /// records the source's version, the root holds the zone's (until an
    /// update with `--force`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub z: bool,
}

impl Entry {
    /// The path's bytes (borrowed unless the path is stored in hex).
    pub fn path(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        match (&self.p, &self.px) {
            (Some(p), _) => Cow::Borrowed(p.as_bytes()),
            (None, Some(x)) => Cow::Owned(unhex(x).unwrap_or_default()),
            (None, None) => Cow::Borrowed(&[]),
        }
    }

    /// Sets the path from its bytes.
    pub fn set_path(&mut self, path: &[u8]) {
        match std::str::from_utf8(path) {
            Ok(s) => (self.p, self.px) = (Some(s.to_string()), None),
            Err(_) => (self.p, self.px) = (None, Some(hex(path))),
        }
    }

    /// A symlink's target bytes.
    pub fn target(&self) -> Option<Vec<u8>> {
        self.l.as_deref().and_then(unhex)
    }
}

/// An image the install applied, and its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// As given on the command line: an absolute path (`IMAGE` or
    /// `IMAGE:REF`) or a registry reference; an update with no image
    /// named opens it again.
    pub arg: String,
    /// `sha256:...` of an OCI image's manifest, or of a tarball's bytes.
    /// (Version 1 recorded `file:SIZE:MTIME` or `ref:ARG` here.)
    pub digest: String,
    /// `oci` or `tarball`; empty in a version 1 manifest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// An OCI image's layers by diff_id, lowest first: an update to an
    /// image whose layers begin with these reads only the layers after
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
}

/// An archive of the recipe other than an image (the baseline).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRecord {
    /// Where it was found.
    pub path: String,
    /// `sha256:...` of its bytes.
    pub digest: String,
}

/// What a root was made from, in the order the install laid it out:
/// the profile's links and mount points, its trees, the baseline, the
/// images, the host files. An update makes the root from this again,
/// never from anything else: a root made from images alone is never
/// given the host's trees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    /// The directory the trees were copied from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_root: Option<String>,
    /// The trees, relative to `source_root`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trees: Vec<String>,
    /// Symlinks made before the trees: path, target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<(String, String)>,
    /// Empty directories (mount points) made before the trees: path,
    /// mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<(String, u32)>,
    /// The baseline archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<ArchiveRecord>,
    /// The images, in the order applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRecord>,
    /// The host files copied last, absolute.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_files: Vec<String>,
    /// The images were laid over the host's parts (the zone brand's
    /// way), not alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub images_over_host: bool,
}

impl Recipe {
    /// True if the root was made from images and nothing of the host.
    pub fn images_only(&self) -> bool {
        !self.images.is_empty() && !self.has_host_parts()
    }

    /// True if anything of the host went into the root.
    pub fn has_host_parts(&self) -> bool {
        !self.trees.is_empty()
            || !self.links.is_empty()
            || !self.dirs.is_empty()
            || self.baseline.is_some()
            || !self.host_files.is_empty()
    }

    /// The parts, as a user reads them (for messages).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.trees.is_empty() {
            let from = self.source_root.as_deref().unwrap_or("/");
            parts.push(format!(
                "the trees {} of {from}",
                self.trees
                    .iter()
                    .map(|t| format!("/{t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(b) = &self.baseline {
            parts.push(format!("the baseline {}", b.path));
        }
        if !self.images.is_empty() {
            let names: Vec<&str> =
                self.images.iter().map(|i| i.arg.as_str()).collect();
            let word = if names.len() == 1 { "image" } else { "images" };
            parts.push(format!("the {word} {}", names.join(", ")));
        }
        if !self.host_files.is_empty() {
            parts
                .push(format!("the host files {}", self.host_files.join(", ")));
        }
        if parts.is_empty() {
            return "nothing of the host and no image".into();
        }
        parts.join(", ")
    }
}

/// How the root a manifest describes came to be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    /// `install` or `update`.
    pub how: String,
    /// When, in seconds since the epoch.
    pub at: i64,
    /// 0 for the install, one more for each update since.
    pub generation: u64,
}

/// The header line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The format's version.
    pub version: u32,
    /// The root directory's inode number: a manifest describes the
    /// `root` whose inode this is (how a switch interrupted between the
    /// root's rename and the manifest's is told apart). `None` until the
    /// root it describes is in place; written as 0 then, as manifests
    /// always were.
    #[serde(with = "ino_or_zero")]
    pub root_ino: Option<u64>,
    /// Version 1: the profile's trees, as recorded (see `recipe`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trees: Vec<String>,
    /// Version 1: the images applied, in order (see `recipe`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRecord>,
    /// How many entries follow.
    pub entries: u64,
    /// What the root was made from (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<Recipe>,
    /// How the root came to be (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made: Option<Made>,
}

impl Header {
    /// What the root was made from: as recorded, or, for a version 1
    /// manifest, told from its trees and images (which it laid over the
    /// trees if it had both).
    pub fn recipe(&self) -> Recipe {
        if let Some(r) = &self.recipe {
            return r.clone();
        }
        Recipe {
            trees: self.trees.clone(),
            images: self.images.clone(),
            images_over_host: !self.trees.is_empty() && !self.images.is_empty(),
            ..Recipe::default()
        }
    }
}

/// A manifest read back or about to be written.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The header.
    pub header: Header,
    /// The entries, sorted by path.
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// The entries by path.
    pub fn by_path(&self) -> HashMap<std::borrow::Cow<'_, [u8]>, &Entry> {
        self.entries.iter().map(|e| (e.path(), e)).collect()
    }
}

/// Why a manifest could not be read, recorded or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A system call on `path` failed.
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        error: io::Error,
    },
    /// The root is deeper than [`MAX_DEPTH`] directories.
    #[error(
        "{}: more than {MAX_DEPTH} directories deep; not recorded (an \
         update of this root needs --force)",
        path.display()
    )]
    TooDeep {
        /// The first directory past the limit.
        path: PathBuf,
    },
    /// The file is not a manifest this version reads.
    #[error("{}: {why}", path.display())]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// What is wrong, and where.
        why: String,
    },
}

pub(crate) fn io_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> ManifestError {
    let path = path.to_path_buf();
    move |error| ManifestError::Io { op, path, error }
}

/// Hex of `b`.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _infallible = write!(s, "{x:02x}");
    }
    s
}

/// The bytes `s` is the hex of.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `Option<u64>` as the number manifests have always held: 0 for `None`,
/// since no directory has inode 0.
mod ino_or_zero {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        v: &Option<u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.unwrap_or(0))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<u64>, D::Error> {
        Ok(Some(u64::deserialize(d)?).filter(|&i| i != 0))
    }
}
