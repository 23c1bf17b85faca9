//! A cache's layout and locks: the entry kinds and the names they give
//! their directories and payloads, what `meta.json` and a guest record
//! hold, opening and creating a cache, and the `flock(2)` locks on files
//! beside the entries and in the index (see the module documentation of
//! [`crate::cache`] for the tree).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{
    DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use zinstall_engine::Op;
use zinstall_engine::fsutil::Flock;

use crate::error::{ProvisionError as Error, Result};

/// The cache root's mode unless configured: only its owner enters.
pub(crate) const DEFAULT_ROOT_MODE: u32 = 0o700;

/// `meta.json` of an entry: what it was made from, when, its stamp.
#[derive(Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) kind: String,
    pub(super) sha256: String,
    pub(super) source: String,
    pub(super) image_bytes: u64,
    pub(super) created: u64,
    pub(super) build_ms: u64,
    /// The payload's stamp when published (see the module docs).
    #[serde(default)]
    pub(super) stamp: Option<String>,
    /// Whether the payload carries the immutable flag.
    #[serde(default)]
    pub(super) immutable: bool,
    /// The layer entries an OCI image's tree was built from, lowest
    /// first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) layers: Vec<String>,
    /// The payload holds device nodes (built with devices allowed):
    /// reused only by a provision that allows them too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) devices: bool,
}

/// One guest as recorded in `<name>.users`; or, with `released`, the
/// end of the records before it of the guest with that device and inode
/// (zinstall removed it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct UserRecord {
    pub(super) path: PathBuf,
    #[serde(default)]
    pub(super) dev: u64,
    #[serde(default)]
    pub(super) ino: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) released: bool,
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// An extracted directory tree (`tree/`).
    Tree,
    /// A raw disk image (`base.raw`).
    Raw,
    /// An OCI layer alone (`layer/`: `tree/` and `changes`).
    Layer,
}

impl EntryKind {
    /// `tree` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "raw",
            EntryKind::Layer => "layer",
        }
    }

    pub(super) fn payload(self) -> &'static str {
        match self {
            EntryKind::Tree => "tree",
            EntryKind::Raw => "base.raw",
            EntryKind::Layer => "layer",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Self> {
        match s {
            "tree" => Some(EntryKind::Tree),
            "raw" => Some(EntryKind::Raw),
            "layer" => Some(EntryKind::Layer),
            _ => None,
        }
    }
}

/// A finished entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry's directory; never moves.
    pub dir: PathBuf,
    /// What it holds.
    pub kind: EntryKind,
    /// SHA-256 of the image it was made from, hex.
    pub sha256: String,
    /// 0 for the first build of this content; one more for each rebuild
    /// after an earlier generation was found altered.
    pub generation: u32,
}

impl Entry {
    /// The extracted tree or the raw disk.
    pub fn payload(&self) -> PathBuf {
        self.dir.join(self.kind.payload())
    }

    /// The entry's name: `kind-sha256`, then `.N` from the second
    /// generation on.
    pub fn name(&self) -> String {
        match self.generation {
            0 => self.content_name(),
            g => format!("{}.{g}", self.content_name()),
        }
    }

    /// The ref that keeps this entry's composefs image in the cache's
    /// composefs store, while the entry stays.
    pub fn composefs_ref(&self) -> String {
        format!("entry-{}", self.name())
    }

    /// `kind-sha256`: what every generation of this content shares.
    pub(super) fn content_name(&self) -> String {
        format!("{}-{}", self.kind.as_str(), self.sha256)
    }
}

/// The cache under one root directory.
#[derive(Clone, Debug)]
pub struct Cache {
    pub(super) root: PathBuf,
}

impl Cache {
    /// Opens (creating if needed, mode 0700) the cache
    /// at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        Self::with_mode(root, None)
    }

    /// Opens the cache at `root`, creating it with `mode` (default
    /// [`DEFAULT_ROOT_MODE`]); an explicit `mode` is also applied to an
    /// existing root.
    pub(crate) fn with_mode(
        root: impl Into<PathBuf>,
        mode: Option<u32>,
    ) -> Result<Self> {
        let root = root.into();
        let want = mode.unwrap_or(DEFAULT_ROOT_MODE) & 0o7777;
        let created = match fs::symlink_metadata(&root) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) =
                    root.parent().filter(|p| !p.as_os_str().is_empty())
                {
                    fs::create_dir_all(parent)
                        .map_err(|e| Error::io(Op::Mkdir, parent, e))?;
                }
                match DirBuilder::new().mode(want).create(&root) {
                    Ok(()) => true,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                    Err(e) => return Err(Error::io(Op::Mkdir, &root, e)),
                }
            }
            Err(e) => return Err(Error::io(Op::Stat, &root, e)),
        };
        if created || mode.is_some() {
            // Exactly this mode, whatever the umask.
            fs::set_permissions(&root, fs::Permissions::from_mode(want))
                .map_err(|e| Error::io(Op::Chmod, &root, e))?;
        }
        for (sub, m) in
            [("entries", 0o755), ("index", 0o700), ("scratch", 0o700)]
        {
            let p = root.join(sub);
            match DirBuilder::new().mode(m).create(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(Op::Mkdir, &p, e)),
            }
        }
        Ok(Cache { root })
    }

    /// Opens the cache at `root` to read it or collect it: it must be
    /// there (a cache named by a typo is an error naming it, not a new
    /// empty cache), and nothing is made.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        // The cache as its administrator named it (a link to it allowed):
        // only whether it is a directory is asked here.
        #[allow(clippy::disallowed_methods)]
        let md =
            fs::metadata(&root).map_err(|e| Error::io(Op::Open, &root, e))?;
        if !md.is_dir() {
            return Err(Error::io(
                Op::Open,
                &root,
                io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        for sub in ["entries", "index", "scratch"] {
            if !root.join(sub).is_dir() {
                return Err(Error::io(
                    Op::Open,
                    &root,
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("not a zinstall cache (no {sub}/ in it)"),
                    ),
                ));
            }
        }
        Ok(Cache { root })
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The composefs object store and images (`composefs/`).
    pub fn composefs_store(&self) -> PathBuf {
        composefs_store_of(&self.root)
    }

    pub(super) fn entries_dir(&self) -> PathBuf {
        self.root.join("entries")
    }

    /// Every generation of `kind-sha` present, lowest first.
    pub(super) fn generations(
        &self,
        kind: EntryKind,
        sha: &str,
    ) -> Result<Vec<Entry>> {
        let dir = self.entries_dir();
        let base = format!("{}-{sha}", kind.as_str());
        let mut out = Vec::new();
        for e in
            fs::read_dir(&dir).map_err(|e| Error::io(Op::ReadDir, &dir, e))?
        {
            let e = e.map_err(|e| Error::io(Op::ReadDir, &dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&base)
                && let Some(entry) = self.entry_named(&name)
            {
                out.push(entry);
            }
        }
        out.sort_by_key(|e| e.generation);
        Ok(out)
    }

    pub(super) fn entry_named(&self, name: &str) -> Option<Entry> {
        let (kind, rest) = name.split_once('-')?;
        let kind = EntryKind::parse(kind)?;
        let (sha, generation) = match rest.split_once('.') {
            None => (rest, 0),
            Some((sha, g)) => {
                // One spelling per generation: no sign, no leading zero.
                if !g.bytes().all(|b| b.is_ascii_digit()) || g.starts_with('0')
                {
                    return None;
                }
                (sha, g.parse::<u32>().ok()?)
            }
        };
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let dir = self.entries_dir().join(name);
        dir.is_dir().then(|| Entry {
            dir,
            kind,
            sha256: sha.to_string(),
            generation,
        })
    }

    fn lock_path(&self, dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.lock"))
    }

    /// Opens and locks `dir/name.lock` (shared or exclusive), waiting if
    /// needed; retries if the file was removed meanwhile (by gc), so
    /// that the lock held is on the file the name now names.
    pub(super) fn lock_file(
        &self,
        dir: &Path,
        name: &str,
        shared: bool,
    ) -> Result<File> {
        let path = self.lock_path(dir, name);
        loop {
            let f = open_lock(&path)?;
            let r = if shared {
                f.flock_shared()
            } else {
                f.flock_exclusive()
            };
            r.map_err(|e| Error::io(Op::Lock, &path, e))?;
            if same_file(&f, &path) {
                return Ok(f);
            }
            let _unlocked = f.flock_unlock();
        }
    }

    /// Like [`Self::lock_file`], exclusive, without waiting: `None` if
    /// someone holds it.
    pub(super) fn try_lock_file(
        &self,
        dir: &Path,
        name: &str,
    ) -> Result<Option<File>> {
        let path = self.lock_path(dir, name);
        loop {
            let f = open_lock(&path)?;
            match f.try_flock_exclusive() {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => return Err(Error::io(Op::Lock, &path, e)),
            }
            if same_file(&f, &path) {
                return Ok(Some(f));
            }
            let _unlocked = f.flock_unlock();
        }
    }
}

// Whether the lock file opened is still the one at its name.
#[allow(clippy::disallowed_methods)]
fn same_file(f: &File, path: &Path) -> bool {
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

// The cache's own lock files, records and directories, written here.
#[allow(clippy::disallowed_methods)]
fn open_lock(path: &Path) -> Result<File> {
    // Opened for append and never written: the file only carries locks.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(Op::Lock, path, e))
}

/// Writes `data` to `path` atomically: beside it, then renamed over it.
pub(super) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "tmp.{}.{}",
        std::process::id(),
        thread_number()
    ));
    fs::write(&tmp, data).map_err(|e| Error::io(Op::Record, &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| {
        let _already_failing = fs::remove_file(&tmp);
        Error::io2(Op::Rename, &tmp, path, e)
    })
}

/// Appends one short line; `O_APPEND` makes concurrent appends whole.
#[allow(clippy::disallowed_methods)]
pub(super) fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(Op::Record, path, e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| Error::io(Op::Record, path, e))
}

#[allow(clippy::disallowed_methods)]
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(Op::Sync, dir, e))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn thread_number() -> String {
    // `ThreadId(7)` → `7`: unique among this process's live threads.
    format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}

/// Where a cache at `cache_root` keeps its composefs object store and
/// images (install and provision share it).
pub(crate) fn composefs_store_of(cache_root: &Path) -> PathBuf {
    cache_root.join("composefs")
}

/// Where a cache at `cache_root` keeps the images it pulls from
/// registries (an OCI layout; install pulls into the same one).
pub(crate) fn store_of(cache_root: &Path) -> PathBuf {
    cache_root.join("oci")
}
