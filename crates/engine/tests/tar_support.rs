//! What the tar tests share: archives built byte by byte, a scratch
//! place, zinstall's, GNU tar's and bsdtar's extractions, and the trees
//! and notices compared.

// Linux only: ACLs and xattrs are compared as Linux stores them.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use zinstall_engine::NoticeKind;
use zinstall_engine::unpack::{self, UnpackOptions, UnpackReport};
use zinstall_testkit::tool;

pub(crate) const B: usize = 512;

/// A header block with a correct checksum: ustar magic, mode, ids 0,
/// a fixed mtime; `link` in the link field.
pub(crate) fn header(name: &[u8], typ: u8, size: u64, link: &[u8]) -> [u8; B] {
    let mut b = [0u8; B];
    b[..name.len()].copy_from_slice(name);
    let mode: u32 = if typ == b'5' { 0o755 } else { 0o644 };
    b[100..108].copy_from_slice(format!("{mode:07o}\0").as_bytes());
    b[108..116].copy_from_slice(b"0000000\0");
    b[116..124].copy_from_slice(b"0000000\0");
    b[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    b[136..148].copy_from_slice(format!("{:011o}\0", 1_700_000_000).as_bytes());
    b[156] = typ;
    b[157..157 + link.len()].copy_from_slice(link);
    b[257..265].copy_from_slice(b"ustar\x0000");
    sum(&mut b);
    b
}

pub(crate) fn sum(b: &mut [u8; B]) {
    b[148..156].copy_from_slice(b"        ");
    let s: u32 = b.iter().map(|&x| u32::from(x)).sum();
    b[148..156].copy_from_slice(format!("{s:06o}\0 ").as_bytes());
}

/// Archive bytes, member by member.
#[derive(Default)]
pub(crate) struct Ar(Vec<u8>);

impl Ar {
    /// A header and `data`, padded to a block.
    pub(crate) fn raw(&mut self, h: [u8; B], data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len().div_ceil(B) * B, 0);
        self
    }

    pub(crate) fn member(
        &mut self,
        name: &str,
        typ: u8,
        data: &[u8],
    ) -> &mut Self {
        let h = header(name.as_bytes(), typ, data.len() as u64, b"");
        self.raw(h, data)
    }

    pub(crate) fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.member(name, b'0', data)
    }

    /// A PAX extended header of `records` for the next member.
    pub(crate) fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut d = Vec::new();
        for (k, v) in records {
            let body = k.len() + v.len() + 3;
            let mut len = body + 1;
            while len != body + len.to_string().len() {
                len = body + len.to_string().len();
            }
            d.extend_from_slice(format!("{len} {k}=").as_bytes());
            d.extend_from_slice(v);
            d.push(b'\n');
        }
        self.member("PaxHeader", b'x', &d)
    }

    /// The end-of-archive marker.
    pub(crate) fn end(&mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0u8; 2 * B]);
        std::mem::take(&mut self.0)
    }
}

/// A scratch directory with the archive's place and two roots.
pub(crate) struct Scene {
    _d: tempfile::TempDir,
    pub(crate) dir: PathBuf,
}

impl Scene {
    pub(crate) fn new() -> Scene {
        let d = tempfile::tempdir().unwrap();
        Scene {
            dir: d.path().to_path_buf(),
            _d: d,
        }
    }

    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    /// A fresh, empty directory.
    pub(crate) fn root(&self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        let _ = fs::remove_dir_all(&p);
        fs::create_dir(&p).unwrap();
        p
    }
}

/// zinstall's unpack of `archive` into a fresh root, serially and with
/// workers alike; the report of the parallel one.
pub(crate) fn zinstall(s: &Scene, archive: &Path) -> (PathBuf, UnpackReport) {
    let mut last: Option<(PathBuf, UnpackReport)> = None;
    for threads in [1, 4] {
        let root = s.root(&format!("zinstall-{threads}"));
        let opts = UnpackOptions {
            tunables: zinstall_engine::Tunables {
                copy_threads: threads,
                ..zinstall_engine::Tunables::default()
            },
            ..UnpackOptions::default()
        };
        let r = unpack::unpack(archive, &root, &opts).unwrap_or_else(|e| {
            panic!("{} ({threads} threads): {e}", archive.display())
        });
        if let Some((prev, _)) = &last {
            assert_eq!(tree(prev), tree(&root), "serial and parallel differ");
        }
        last = Some((root, r));
    }
    last.unwrap()
}

/// GNU tar's extraction of `archive` into a fresh root (numeric owners,
/// xattrs and ACLs kept); its stderr. `status` is the exit code expected:
/// 2 where GNU tar says it met damage and went on.
pub(crate) fn gnu_tar(
    s: &Scene,
    archive: &Path,
    status: i32,
) -> (PathBuf, String) {
    let root = s.root("gnu");
    let out = tool("tar")
        .args([
            "--numeric-owner",
            "--xattrs",
            "--xattrs-include=*",
            "--acls",
            "-xpf",
        ])
        .arg(archive)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(status), "GNU tar: {err}");
    (root, err)
}

/// bsdtar's extraction (`-p`: modes, ACLs, xattrs).
pub(crate) fn bsdtar(s: &Scene, archive: &Path) -> PathBuf {
    let root = s.root("bsdtar");
    let out = tool("bsdtar")
        .args(["--numeric-owner", "-xpf"])
        .arg(archive)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bsdtar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    root
}

/// The xattrs of `p` (not following it), sorted, names as text.
pub(crate) fn xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    zinstall_testkit::xattrs(p)
        .into_iter()
        .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
        .collect()
}

/// Every entry beneath `root`: type, mode, owner, links, size, content,
/// link target, xattrs, and (but for directories, which both make
/// when a member needs one) the modification time.
pub(crate) fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, at: &Path, out: &mut Vec<String>) {
        let mut children: Vec<_> = fs::read_dir(at)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        children.sort();
        for p in children {
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let ft = m.file_type();
            let what = if ft.is_dir() {
                "dir".to_string()
            } else if ft.is_symlink() {
                format!("-> {}", fs::read_link(&p).unwrap().display())
            } else {
                format!(
                    "file {:?} mtime {}.{:09}",
                    String::from_utf8_lossy(&fs::read(&p).unwrap()),
                    m.mtime(),
                    m.mtime_nsec()
                )
            };
            let mode = if ft.is_symlink() {
                0
            } else {
                m.mode() & 0o7777
            };
            out.push(format!(
                "{rel}: {what} mode {mode:o} owner {}:{} links {} size {} xattrs {:?}",
                m.uid(),
                m.gid(),
                if ft.is_dir() { 0 } else { m.nlink() },
                if ft.is_dir() { 0 } else { m.size() },
                xattrs(&p)
            ));
            if ft.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// The archive quirks noticed: `(what, count, example)`.
pub(crate) fn quirks(r: &UnpackReport) -> Vec<(String, u64, String)> {
    r.notices
        .iter()
        .filter_map(|n| match &n.kind {
            NoticeKind::ArchiveQuirk(what) => {
                Some((what.clone(), n.count, n.example.display().to_string()))
            }
            _ => None,
        })
        .collect()
}

/// The notice whose text contains `what`, which must be there.
#[track_caller]
pub(crate) fn quirk(r: &UnpackReport, what: &str) -> (String, u64, String) {
    let q = quirks(r);
    q.iter()
        .find(|(w, _, _)| w.contains(what))
        .cloned()
        .unwrap_or_else(|| panic!("no notice saying {what:?} in {q:?}"))
}

#[track_caller]
pub(crate) fn same(a: &Path, b: &Path) {
    assert_eq!(
        tree(a),
        tree(b),
        "{} and {} differ",
        a.display(),
        b.display()
    );
}

/// A small tree GNU tar archives: two files in a directory.
pub(crate) fn gnu_archive(
    s: &Scene,
    name: &str,
    files: &[(&str, &str)],
) -> Vec<u8> {
    let src = s.root(&format!("src-{name}"));
    for (f, data) in files {
        let p = src.join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
    }
    let out = s.dir.join(format!("{name}.tar"));
    let st = tool("tar")
        .args(["--numeric-owner", "-C"])
        .arg(&src)
        .arg("-cf")
        .arg(&out)
        .args(files.iter().map(|(f, _)| *f))
        .status()
        .unwrap();
    assert!(st.success());
    fs::read(out).unwrap()
}

/// `path` compressed by gzip, beside it.
pub(crate) fn gzip(path: &Path) -> PathBuf {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    let out = tool("gzip").arg("-c").arg(path).output().unwrap();
    assert!(out.status.success());
    fs::write(&gz, out.stdout).unwrap();
    gz
}
