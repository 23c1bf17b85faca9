//! Deterministic trees: the same bytes for the same kind, scale and seed.
//!
//! * `usr`: shaped like an OS `/usr`: at scale 1 about 9,500 entries and
//!   120 MB; most files small, a long tail of large ones, a third of the
//!   entries symlinks (library version chains, alternatives), a few hard
//!   links.
//! * `store`: shaped like a large package store: at scale 1 about 278,000
//!   files and 5.3 GiB, as many small packages side by side (scale it down
//!   on small machines).
//! * `sparse`: one large sparse disk image: apparent size `1.6 GiB ×
//!   scale`, a few hundred MB of data.
//! * `huge`: a few huge directories: at scale 1 four directories of
//!   25,000 small files each (a mail spool, a cache, a flat object
//!   store), about 200 MB: a tree the walk cannot split, since one
//!   walker reads one directory.
//! * `empty`: the same tree with every file empty, which times the
//!   metadata alone (the floor under any copy of that tree).

use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::rng::Rng;

/// What a generator made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files (each name of a hard-linked file counts).
    pub files: u64,
    /// Directories, the top one included.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Later names of hard-linked files.
    pub hardlinks: u64,
    /// Bytes of file data (apparent).
    pub bytes: u64,
}

impl TreeStats {
    /// Entries of every kind.
    pub fn entries(&self) -> u64 {
        self.files + self.dirs + self.symlinks
    }
}

/// The trees the generators make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// An OS `/usr`.
    Usr,
    /// A package store.
    Store,
    /// A sparse disk image.
    Sparse,
    /// A few huge directories.
    Huge,
}

/// A tree name that is none of [`Shape`]'s.
#[derive(Debug, thiserror::Error)]
#[error("unknown tree {0:?} (usr, store, sparse, huge)")]
pub struct UnknownShape(pub String);

impl std::str::FromStr for Shape {
    type Err = UnknownShape;
    fn from_str(s: &str) -> Result<Self, UnknownShape> {
        match s {
            "usr" => Ok(Shape::Usr),
            "store" => Ok(Shape::Store),
            "sparse" => Ok(Shape::Sparse),
            "huge" => Ok(Shape::Huge),
            _ => Err(UnknownShape(s.into())),
        }
    }
}

/// Makes `shape` at `scale` under `root` (created; must not exist).
/// `empty` makes every file empty, for the metadata floor.
pub fn generate(
    shape: Shape,
    root: &Path,
    scale: f64,
    empty: bool,
) -> io::Result<TreeStats> {
    fs::create_dir_all(root.parent().unwrap_or(Path::new(".")))?;
    fs::create_dir(root)?;
    let mut stats = TreeStats {
        dirs: 1,
        ..TreeStats::default()
    };
    let mut g = Gen {
        rng: Rng::new(1),
        stats: &mut stats,
        empty,
        buf: Vec::new(),
    };
    match shape {
        Shape::Usr => {
            let files = (9_500.0 * scale).round().max(10.0) as usize;
            g.usr_like(root, files)?;
        }
        Shape::Store => {
            // 278k files in packages of ~60 entries each.
            let packages = (4_600.0 * scale).round().max(1.0) as usize;
            let store = root.join("store");
            g.mkdir(&store)?;
            for p in 0..packages {
                let name = format!("{:016x}-pkg{p}", g.rng.next_u64());
                let dir = store.join(name);
                g.mkdir(&dir)?;
                let n = g.rng.range(30, 90) as usize;
                g.usr_like(&dir, n)?;
            }
        }
        Shape::Sparse => {
            g.sparse(&root.join("disk.img"), scale)?;
        }
        Shape::Huge => {
            let files = (25_000.0 * scale).round().max(10.0) as usize;
            for d in 0..4 {
                let dir = root.join(format!("spool{d}"));
                g.mkdir(&dir)?;
                for f in 0..files {
                    let size = g.rng.range(100, 4096) as usize;
                    g.sized_file(&dir.join(format!("m{f:06}")), size)?;
                }
            }
        }
    }
    Ok(stats)
}

struct Gen<'s> {
    rng: Rng,
    stats: &'s mut TreeStats,
    empty: bool,
    buf: Vec<u8>,
}

/// Top directories of a `/usr` and how files spread over them.
const USR_DIRS: &[&str] = &[
    "bin",
    "sbin",
    "lib",
    "lib/x86_64-linux-gnu",
    "libexec",
    "include",
    "share/doc",
    "share/man/man1",
    "share/man/man3",
    "share/locale",
    "share/zoneinfo",
    "share/icons",
];

impl Gen<'_> {
    /// Creates `p` and any missing parents, counting each one made.
    fn mkdir(&mut self, p: &Path) -> io::Result<()> {
        if p.exists() {
            return Ok(());
        }
        if let Some(parent) = p.parent() {
            self.mkdir(parent)?;
        }
        fs::create_dir(p)?;
        self.stats.dirs += 1;
        Ok(())
    }

    /// File size: many small files and a long tail, mean near 19 KB.
    fn size(&mut self) -> usize {
        let roll = self.rng.range(0, 1000);
        let (lo, hi) = match roll {
            0 => (1 << 20, 6 << 20),
            1..=20 => (64 << 10, 512 << 10),
            21..=220 => (8 << 10, 64 << 10),
            _ => (100, 8 << 10),
        };
        self.rng.range(lo, hi) as usize
    }

    fn file(&mut self, p: &Path) -> io::Result<()> {
        // The size is drawn even for empty trees, and contents come from
        // a generator of their own, so the empty twin has the same shape.
        let size = self.size();
        self.sized_file(p, size)
    }

    /// A file of `size` bytes (none in an empty tree).
    fn sized_file(&mut self, p: &Path, size: usize) -> io::Result<()> {
        let n = if self.empty { 0 } else { size };
        self.buf.resize(n, 0);
        Rng::new(self.stats.files ^ 0x5eed).fill(&mut self.buf);
        File::create(p)?.write_all(&self.buf)?;
        self.stats.files += 1;
        self.stats.bytes += n as u64;
        Ok(())
    }

    /// `files` entries spread over a `/usr`-like layout under `root`.
    fn usr_like(&mut self, root: &Path, files: usize) -> io::Result<()> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for d in USR_DIRS {
            let p = root.join(d);
            self.mkdir(&p)?;
            dirs.push(p);
        }
        // Nested package directories, about one per 25 files.
        for i in 0..files / 25 {
            let parent =
                dirs[self.rng.range(0, dirs.len() as u64) as usize].clone();
            let p = parent.join(format!("d{i}"));
            self.mkdir(&p)?;
            dirs.push(p);
        }
        let mut regular: Vec<PathBuf> = Vec::new();
        for i in 0..files {
            let dir =
                dirs[self.rng.range(0, dirs.len() as u64) as usize].clone();
            let roll = self.rng.range(0, 100);
            if roll < 33 && !regular.is_empty() {
                // A symlink to a file in the same directory, or a chain
                // step like libfoo.so -> libfoo.so.1.
                let target =
                    &regular[self.rng.range(0, regular.len() as u64) as usize];
                let name = dir.join(format!("l{i}.so"));
                symlink(relative(&dir, target, root), &name)?;
                self.stats.symlinks += 1;
            } else if roll == 33 && !regular.is_empty() {
                let target = regular
                    [self.rng.range(0, regular.len() as u64) as usize]
                    .clone();
                let name = dir.join(format!("h{i}"));
                fs::hard_link(&target, &name)?;
                self.stats.files += 1;
                self.stats.bytes += fs::metadata(&name)?.len();
                self.stats.hardlinks += 1;
            } else {
                let name = dir.join(format!("f{i}"));
                self.file(&name)?;
                regular.push(name);
            }
        }
        Ok(())
    }

    /// A sparse disk: 1.6 GiB × scale apparent, 1 MiB data extents
    /// making up about a fifth of it.
    fn sparse(&mut self, p: &Path, scale: f64) -> io::Result<()> {
        let size = (1.6 * scale * (1u64 << 30) as f64) as u64 & !0xfff;
        let mut f = File::create(p)?;
        let mut data = vec![0u8; 1 << 20];
        let mut off = 0u64;
        while off + (1 << 20) <= size {
            if self.rng.chance(0.2) {
                self.rng.fill(&mut data);
                f.seek(SeekFrom::Start(off))?;
                f.write_all(&data)?;
                self.stats.bytes += 1 << 20;
            }
            off += 1 << 20;
        }
        f.set_len(size)?;
        self.stats.files += 1;
        Ok(())
    }
}

/// `target` as seen from directory `from`, both under `root`: relative,
/// so that a copy of the tree points into itself.
fn relative(from: &Path, target: &Path, root: &Path) -> PathBuf {
    let from = from.strip_prefix(root).unwrap_or(from);
    let target = target.strip_prefix(root).unwrap_or(target);
    let mut out = PathBuf::new();
    for _ in from.components() {
        out.push("..");
    }
    out.push(target);
    out
}

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;

    fn count(root: &Path) -> TreeStats {
        let mut s = TreeStats::default();
        for e in walk(root) {
            let md = fs::symlink_metadata(&e).unwrap();
            if md.is_dir() {
                s.dirs += 1;
            } else if md.file_type().is_symlink() {
                s.symlinks += 1;
            } else {
                s.files += 1;
                s.bytes += md.len();
            }
        }
        s
    }

    fn walk(root: &Path) -> Vec<PathBuf> {
        let mut out = vec![root.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            let p = out[i].clone();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                for e in fs::read_dir(&p).unwrap() {
                    out.push(e.unwrap().path());
                }
            }
            i += 1;
        }
        out
    }

    #[test]
    fn usr_at_scale_one_has_its_shape() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("usr");
        let s = generate(Shape::Usr, &root, 1.0, false).unwrap();
        let c = count(&root);
        assert_eq!(
            (c.files, c.dirs, c.symlinks, c.bytes),
            (s.files, s.dirs, s.symlinks, s.bytes)
        );
        let entries = s.entries();
        assert!((9_000..11_000).contains(&entries), "{s:?}");
        assert!((80 << 20..170 << 20).contains(&s.bytes), "{s:?}");
        let share = s.symlinks as f64 / entries as f64;
        assert!((0.25..0.4).contains(&share), "symlink share {share}");
        assert!(s.hardlinks > 10, "{s:?}");
    }

    #[test]
    fn generation_is_deterministic_and_empty_twin_matches() {
        let d = tempfile::tempdir().unwrap();
        let a =
            generate(Shape::Store, &d.path().join("a"), 0.01, false).unwrap();
        let b =
            generate(Shape::Store, &d.path().join("b"), 0.01, false).unwrap();
        assert_eq!(a, b);
        let opts = zinstall_verify::CompareOptions {
            mtime: false,
            atime: false,
            ..Default::default()
        };
        let c = zinstall_verify::compare(
            &d.path().join("a"),
            &d.path().join("b"),
            &opts,
        )
        .unwrap();
        assert!(c.is_identical(), "{c}");
        let e =
            generate(Shape::Store, &d.path().join("e"), 0.01, true).unwrap();
        assert_eq!(
            (e.files, e.dirs, e.symlinks),
            (a.files, a.dirs, a.symlinks)
        );
        assert_eq!(e.bytes, 0);
        assert!(a.files > 1000, "{a:?}");
    }

    #[test]
    fn huge_is_a_few_huge_directories() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("h");
        let s = generate(Shape::Huge, &root, 0.02, false).unwrap();
        let c = count(&root);
        assert_eq!((c.files, c.dirs, c.bytes), (s.files, s.dirs, s.bytes));
        assert_eq!((s.dirs, s.files), (5, 2000));
        assert_eq!(fs::read_dir(root.join("spool3")).unwrap().count(), 500);
    }

    #[test]
    fn sparse_image_is_mostly_holes() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let s =
            generate(Shape::Sparse, &d.path().join("s"), 0.05, false).unwrap();
        let md = fs::metadata(d.path().join("s/disk.img")).unwrap();
        assert_eq!(
            md.len(),
            (0.05 * 1.6 * (1u64 << 30) as f64) as u64 & !0xfff
        );
        assert!(md.blocks() * 512 <= s.bytes + (1 << 20));
        assert!(s.bytes > 0 && s.bytes < md.len() / 2);
    }
}
