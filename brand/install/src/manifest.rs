//! What an install laid out: `ZONEPATH/.zinstall.manifest`, recorded
//! beside the state marker when an install (or an update) completes, and
//! read by the next update to tell what the new source changed and what
//! the zone itself changed since.
//!
//! One entry per path in the root: its type, mode, owner, modification
//! time, size, symlink target, device number, hard-link group, a digest
//! of its extended attributes, and for a regular file an XXH3-128 hash of
//! its content. XXH3 is not a cryptographic hash: it tells a file the
//! zone edited from the one installed (as dpkg tells a changed conffile),
//! and the zone's root could only make its own edit look unchanged,
//! which keeps its own file, never writes one of the host's. It hashes
//! several times faster than SHA-256, so recording costs about a read of
//! the root from the page cache it was just written through.
//!
//! Each entry also holds the inode number and change time the file had
//! when it was recorded: when both still match, the content is the one
//! hashed and an update need not read it again (no write, `chmod`,
//! `chown` or link leaves the change time as it was).
//!
//! The file is zstd-compressed JSON lines: a header, then the entries
//! sorted by path. Written beside and renamed over, synced, as the
//! marker is; read back with every length bounded ([`MAX_FILE`],
//! [`MAX_LINE`], [`MAX_ENTRIES`]) before it sizes anything.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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
/// The format's version, in the header.
const VERSION: u32 = 1;

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
    /// The path's bytes.
    pub fn path(&self) -> Vec<u8> {
        match (&self.p, &self.px) {
            (Some(p), _) => p.as_bytes().to_vec(),
            (None, Some(x)) => unhex(x).unwrap_or_default(),
            (None, None) => Vec::new(),
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
    /// As given on the command line.
    pub arg: String,
    /// `sha256:...` of the archive's bytes, or of an OCI image's
    /// manifest.
    pub digest: String,
}

/// The header line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The format's version.
    pub version: u32,
    /// The root directory's inode number: a manifest describes the
    /// `root` whose inode this is (how a switch interrupted between the
    /// root's rename and the manifest's is told apart).
    pub root_ino: u64,
    /// The profile's trees, as recorded.
    pub trees: Vec<String>,
    /// The images applied, in order.
    pub images: Vec<ImageRecord>,
    /// How many entries follow.
    pub entries: u64,
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
    pub fn by_path(&self) -> HashMap<Vec<u8>, &Entry> {
        self.entries.iter().map(|e| (e.path(), e)).collect()
    }
}

/// Why a manifest could not be read, recorded or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A system call on `path` failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
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

fn io_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> ManifestError {
    let path = path.to_path_buf();
    move |source| ManifestError::Io { op, path, source }
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

/// XXH3-128 of everything `r` reads, hex.
pub fn hash_reader(r: impl Read) -> io::Result<String> {
    hash_copy(r, &mut io::sink()).map(|(_, h)| h)
}

/// Copies everything `r` reads into `out`, hashing it as it goes (the
/// manifest's hash without a second read); the bytes and the hash.
pub fn hash_copy(
    mut r: impl Read,
    out: &mut impl Write,
) -> io::Result<(u64, String)> {
    let mut h = twox_hash::XxHash3_128::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.write(&buf[..n]);
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok((total, format!("{:032x}", h.finish_128())))
}

/// XXH3-128 of the file at `path` (never through a symlink).
pub fn hash_file(path: &Path) -> io::Result<String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    hash_reader(f)
}

/// The digest of the extended attributes of `path` (not followed), or
/// `None` when it has none (or the platform lists none).
pub fn xattrs_digest(path: &Path) -> io::Result<Option<String>> {
    #[cfg(target_os = "linux")]
    {
        let mut pairs = xattrs(path)?;
        if pairs.is_empty() {
            return Ok(None);
        }
        pairs.sort();
        let mut h = twox_hash::XxHash3_128::new();
        for (n, v) in &pairs {
            h.write(&(n.len() as u64).to_le_bytes());
            h.write(n);
            h.write(&(v.len() as u64).to_le_bytes());
            h.write(v);
        }
        Ok(Some(format!("{:032x}", h.finish_128())))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(None)
    }
}

/// The extended attributes of `path` (not followed), names and values.
#[cfg(target_os = "linux")]
pub fn xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use rustix::fs::{lgetxattr, llistxattr};
    let mut names = vec![0u8; 64 << 10];
    let n = match llistxattr(path, &mut names[..]) {
        Ok(n) => n,
        Err(e) if e == rustix::io::Errno::NOTSUP => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    names.truncate(n);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        let mut v = vec![0u8; 64 << 10];
        let n = lgetxattr(path, cname.as_c_str(), &mut v[..])?;
        v.truncate(n);
        out.push((name.to_vec(), v));
    }
    Ok(out)
}

/// The entry for `rel` (bytes) as `md` says, without the content hash.
pub fn entry_of(
    rel: &[u8],
    full: &Path,
    md: &fs::Metadata,
    origin: Option<String>,
) -> io::Result<Entry> {
    let ft = md.file_type();
    use std::os::unix::fs::FileTypeExt;
    let k = if ft.is_dir() {
        'd'
    } else if ft.is_file() {
        'f'
    } else if ft.is_symlink() {
        'l'
    } else if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else if ft.is_fifo() {
        'p'
    } else {
        's'
    };
    let mut e = Entry {
        p: None,
        px: None,
        k,
        m: md.mode() & 0o7777,
        u: md.uid(),
        g: md.gid(),
        t: (md.mtime(), md.mtime_nsec()),
        s: if k == 'f' { md.size() } else { 0 },
        h: None,
        l: None,
        r: matches!(k, 'c' | 'b').then(|| md.rdev()),
        n: None,
        x: xattrs_digest(full)?,
        o: origin,
        i: None,
        z: false,
    };
    e.set_path(rel);
    if k == 'l' {
        e.l = Some(hex(fs::read_link(full)?.as_os_str().as_bytes()));
    }
    Ok(e)
}

/// The tree of `trees` that `rel` is in.
pub fn origin_of(rel: &[u8], trees: &[String]) -> Option<String> {
    trees
        .iter()
        .find(|t| {
            let t = t.as_bytes();
            rel == t || (rel.starts_with(t) && rel.get(t.len()) == Some(&b'/'))
        })
        .cloned()
}

/// Walks `root` (never following a symlink, never leaving its
/// filesystem) and records every entry; files are hashed in parallel.
pub fn record(
    root: &Path,
    trees: &[String],
    images: Vec<ImageRecord>,
) -> Result<Manifest, ManifestError> {
    use rayon::prelude::*;
    let top = fs::symlink_metadata(root).map_err(io_err("stat", root))?;
    let mut entries = Vec::new();
    let mut inodes: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .same_file_system(true)
        .min_depth(1)
        .sort_by_file_name();
    // The walk lists; the attributes and contents are read in parallel.
    let mut listed = Vec::new();
    for item in walk {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(root).to_path_buf();
            ManifestError::Io {
                op: "walk",
                path,
                source: e
                    .into_io_error()
                    .unwrap_or_else(|| io::Error::other("loop")),
            }
        })?;
        let md = item.metadata().map_err(|e| ManifestError::Io {
            op: "stat",
            path: item.path().to_path_buf(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| io::Error::other("stat")),
        })?;
        listed.push((item.into_path(), md));
    }
    let read: Vec<Result<Entry, ManifestError>> = listed
        .par_iter()
        .map(|(full, md)| {
            let rel = full
                .strip_prefix(root)
                .map(|r| r.as_os_str().as_bytes().to_vec())
                .unwrap_or_default();
            let origin = origin_of(&rel, trees);
            let mut e = entry_of(&rel, full, md, origin)
                .map_err(io_err("read attributes of", full))?;
            e.i = Some((md.ino(), md.ctime(), md.ctime_nsec()));
            if e.k == 'f' {
                e.h = Some(hash_file(full).map_err(io_err("hash", full))?);
            }
            Ok(e)
        })
        .collect();
    for (r, (_, md)) in read.into_iter().zip(&listed) {
        let e = r?;
        if !md.is_dir() && md.nlink() > 1 {
            inodes
                .entry((md.dev(), md.ino()))
                .or_default()
                .push(entries.len());
        }
        entries.push(e);
    }
    let mut groups: Vec<Vec<usize>> =
        inodes.into_values().filter(|v| v.len() > 1).collect();
    groups.sort();
    for (n, g) in groups.iter().enumerate() {
        for &i in g {
            entries[i].n = Some(n as u64);
        }
    }
    Ok(Manifest {
        header: Header {
            version: VERSION,
            root_ino: top.ino(),
            trees: trees.to_vec(),
            images,
            entries: entries.len() as u64,
        },
        entries,
    })
}

/// Writes `m` to `zonepath/name` atomically and durably.
pub fn write(
    zonepath: &Path,
    name: &str,
    m: &Manifest,
) -> Result<(), ManifestError> {
    let path = zonepath.join(name);
    let tmp = zonepath.join(format!("{name}.{}", std::process::id()));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_err("remove", &tmp)(e));
        }
        _ => {}
    }
    let written = (|| -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut z = zstd::stream::Encoder::new(io::BufWriter::new(f), 3)?;
        serde_json::to_writer(&mut z, &m.header)?;
        z.write_all(b"\n")?;
        for e in &m.entries {
            serde_json::to_writer(&mut z, e)?;
            z.write_all(b"\n")?;
        }
        let f = z.finish()?.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(zonepath)?.sync_all()
    })();
    if let Err(e) = written {
        let _already_failing = fs::remove_file(&tmp);
        return Err(io_err("write", &path)(e));
    }
    Ok(())
}

/// Reads `zonepath/name`: `None` if there is none.
pub fn read(
    zonepath: &Path,
    name: &str,
) -> Result<Option<Manifest>, ManifestError> {
    let path = zonepath.join(name);
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("open", &path)(e)),
    };
    let md = f.metadata().map_err(io_err("stat", &path))?;
    if !md.is_file() || md.len() > MAX_FILE {
        return Err(ManifestError::Invalid {
            path,
            why: format!("not a regular file of at most {MAX_FILE} bytes"),
        });
    }
    let z = zstd::stream::Decoder::new(f.take(MAX_FILE))
        .map_err(io_err("read", &path))?;
    let mut r = BufReader::new(z);
    let invalid = |why: String| ManifestError::Invalid {
        path: path.clone(),
        why,
    };
    let mut line = Vec::new();
    let next = |r: &mut BufReader<_>,
                line: &mut Vec<u8>|
     -> Result<bool, ManifestError> {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_LINE + 1)
            .read_until(b'\n', line)
            .map_err(io_err("read", &path))?;
        if n as u64 > MAX_LINE {
            return Err(ManifestError::Invalid {
                path: path.clone(),
                why: format!("a line longer than {MAX_LINE} bytes"),
            });
        }
        Ok(n > 0)
    };
    if !next(&mut r, &mut line)? {
        return Err(invalid("empty".into()));
    }
    let header: Header = serde_json::from_slice(&line)
        .map_err(|e| invalid(format!("header: {e}")))?;
    if header.version != VERSION {
        return Err(invalid(format!(
            "version {} (this zinstall reads {VERSION})",
            header.version
        )));
    }
    if header.entries > MAX_ENTRIES as u64 {
        return Err(invalid(format!(
            "{} entries, more than {MAX_ENTRIES}",
            header.entries
        )));
    }
    // Sized by the header only up to a bound: the entries themselves
    // decide the rest.
    let mut entries =
        Vec::with_capacity((header.entries as usize).min(1 << 20));
    let mut lineno = 1u64;
    while next(&mut r, &mut line)? {
        lineno += 1;
        if entries.len() >= MAX_ENTRIES {
            return Err(invalid(format!("more than {MAX_ENTRIES} entries")));
        }
        let e: Entry = serde_json::from_slice(&line)
            .map_err(|e| invalid(format!("line {lineno}: {e}")))?;
        entries.push(e);
    }
    if entries.len() as u64 != header.entries {
        return Err(invalid(format!(
            "{} entries, the header says {}",
            entries.len(),
            header.entries
        )));
    }
    Ok(Some(Manifest { header, entries }))
}

/// Removes every manifest of the zonepath and their temporaries.
pub fn clear(zonepath: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(zonepath) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let name = e.file_name();
        if name.to_str().is_some_and(|n| n.starts_with(MANIFEST))
            && !e.file_type()?.is_dir()
        {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

/// The digest of an image argument as the install applied it.
pub fn file_digest(path: &Path) -> io::Result<String> {
    use sha2::Digest;
    let mut f = File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex(&h.finalize())))
}

/// What an image argument is recorded as, to tell at an update whether
/// it is the one installed: an archive by its size and modification
/// time (as rsync tells files apart; reading it through for a digest
/// cost an install of `/usr/share` as much as its unpack), an OCI
/// layout by the `sha256:` of its `index.json`, a registry reference as
/// given (`ref:` and the reference), which names a version when it has
/// a digest.
pub fn image_digest(arg: &Path) -> String {
    if arg.is_dir() {
        if let Ok(d) = file_digest(&arg.join("index.json")) {
            return d;
        }
    } else if let Ok(md) = fs::metadata(arg) {
        return format!(
            "file:{}:{}.{:09}",
            md.size(),
            md.mtime(),
            md.mtime_nsec()
        );
    }
    format!("ref:{}", arg.display())
}

impl crate::Install<'_> {
    /// Records what the install laid out, before it is marked complete.
    /// A failure is logged and the install goes on: the zone works, and
    /// an update of it says that it needs `--force`.
    pub(crate) fn record_manifest(&mut self, root: &Path) {
        let t0 = std::time::Instant::now();
        let trees: Vec<String> = self
            .profile
            .trees
            .iter()
            .map(|t| {
                String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned()
            })
            .collect();
        // The images' digests (each archive read through) beside the
        // walk of the root.
        let (images, recorded) = rayon::join(
            || {
                self.images
                    .iter()
                    .map(|i| ImageRecord {
                        arg: i.display().to_string(),
                        digest: image_digest(i),
                    })
                    .collect()
            },
            || record(root, &trees, Vec::new()),
        );
        match recorded.and_then(|mut m| {
            m.header.images = images;
            write(&self.zonepath, MANIFEST, &m).map(|()| m.entries.len())
        }) {
            Ok(n) => slog::info!(self.log, "manifest recorded"; "entries" => n,
                                 "ms" => t0.elapsed().as_millis() as u64),
            Err(e) => {
                slog::error!(self.log, "manifest not recorded; an update of this root needs --force";
                                   "error" => %e)
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn round_trips_and_refuses_long_lines() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/a"), "a").unwrap();
        fs::hard_link(root.join("usr/bin/a"), root.join("usr/bin/b")).unwrap();
        std::os::unix::fs::symlink("a", root.join("usr/bin/c")).unwrap();
        let m = record(&root, &["usr".into()], Vec::new()).unwrap();
        assert_eq!(m.entries.len(), 5);
        write(d.path(), MANIFEST, &m).unwrap();
        let back = read(d.path(), MANIFEST).unwrap().unwrap();
        assert_eq!(back.entries, m.entries);
        assert_eq!(back.header, m.header);
        let a = &back.entries[2];
        assert_eq!(a.n, back.entries[3].n);
        assert!(a.n.is_some());
        assert_eq!(back.entries[4].target().unwrap(), b"a");
        // A line past the bound is refused, not read into memory.
        let mut z = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        z.write_all(&vec![b'x'; (MAX_LINE + 10) as usize]).unwrap();
        fs::write(d.path().join(MANIFEST), z.finish().unwrap()).unwrap();
        let e = read(d.path(), MANIFEST).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        clear(d.path()).unwrap();
        assert!(read(d.path(), MANIFEST).unwrap().is_none());
    }
}
