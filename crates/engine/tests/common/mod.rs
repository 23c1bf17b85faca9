//! Shared test fixtures: a tree holding every kind of entry and attribute
//! a root filesystem can have, and loop-mounted filesystems.

#![allow(dead_code)]

use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_engine::{Plan, Report, Tunables};
use zinstall_sys::fs::at;
use zinstall_verify::{self as verify, CompareOptions};

pub use zinstall_testkit::{is_root, pseudo_random};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(r: std::io::Result<()>, what: &str, p: &Path) {
    if let Err(e) = r {
        panic!("{what} {}: {e}", p.display());
    }
}

/// Sets access and modification times without following symlinks.
pub fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let t = zinstall_sys::fs::Times { atime, mtime };
    check(at::set_times(libc::AT_FDCWD, &cstr(p), &t), "utimensat", p);
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let (c, n) = (cstr(p), CString::new(name).unwrap());
    let t = zinstall_sys::fs::XattrTarget::Path(&c);
    check(zinstall_sys::fs::set_xattr(&t, &n, value), "lsetxattr", p);
}

/// A special file (`kind`: `S_IFIFO`, `S_IFCHR`, `S_IFBLK`) at `p`.
fn mknod(p: &Path, kind: u32, mode: u32, rdev: u64) {
    let r = at::mknod(libc::AT_FDCWD, &cstr(p), kind | mode, rdev);
    check(r, "mknod", p);
}

fn write(p: &Path, data: &[u8]) {
    fs::write(p, data).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

fn mode(p: &Path, m: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What [`build_fidelity_tree`] made.
#[derive(Debug, Default)]
pub struct FixtureInfo {
    /// Owners, devices, a capability, ACLs and trusted xattrs were made.
    pub root_parts: bool,
    pub setuid_file: PathBuf,
    pub big_file: PathBuf,
    pub sparse_file: PathBuf,
    pub symlink: PathBuf,
    pub xattr_file: PathBuf,
    pub hardlinks: Vec<PathBuf>,
    pub fifo: PathBuf,
    pub cap_file: Option<PathBuf>,
    pub owned_file: Option<PathBuf>,
    pub char_dev: Option<PathBuf>,
}

/// Builds under `root` every kind of entry and attribute a root can hold.
pub fn build_fidelity_tree(root: &Path) -> FixtureInfo {
    let mut info = FixtureInfo::default();
    let deep = root.join("a/b/c/d/e/f/g");
    fs::create_dir_all(&deep).unwrap();
    write(&deep.join("deep-file"), b"deep");
    // Regular files: empty, one byte, multi-MiB.
    write(&root.join("empty"), b"");
    write(&root.join("one"), b"1");
    info.big_file = root.join("a/big");
    write(&info.big_file, &pseudo_random(3 << 20, 7));
    // A sparse file: 64 MiB apparent, three data chunks, trailing hole.
    info.sparse_file = root.join("a/b/sparse.img");
    let mut f = File::create(&info.sparse_file).unwrap();
    for (i, off) in [4097u64, 10 << 20, (33 << 20) + 123].iter().enumerate() {
        f.seek(SeekFrom::Start(*off)).unwrap();
        f.write_all(&pseudo_random(100_000, i as u64 + 1)).unwrap();
    }
    f.set_len(64 << 20).unwrap();
    drop(f);
    // Names: spaces, a newline, bytes that are not UTF-8, 255 bytes.
    let names = root.join("names");
    fs::create_dir(&names).unwrap();
    write(&names.join("with space"), b"s");
    write(&names.join("new\nline"), b"n");
    write(&names.join(OsStr::from_bytes(b"bad\xff\xfe")), b"b");
    write(&names.join("x".repeat(255)), b"long");
    // Symlinks: relative, absolute, dangling, to a directory.
    info.symlink = root.join("links/rel");
    fs::create_dir(root.join("links")).unwrap();
    symlink("../one", &info.symlink).unwrap();
    symlink("/etc/hostname", root.join("links/abs")).unwrap();
    symlink("nowhere/at/all", root.join("links/dangling")).unwrap();
    symlink("../a/b", root.join("links/dir")).unwrap();
    symlink(OsStr::from_bytes(b"target\xff"), root.join("links/bytes"))
        .unwrap();
    // Hard links across directories, and a hard-linked symlink.
    let h0 = root.join("a/h0");
    write(&h0, b"linked");
    let h1 = root.join("a/b/c/h1");
    let h2 = root.join("names/h2");
    fs::hard_link(&h0, &h1).unwrap();
    fs::hard_link(&h0, &h2).unwrap();
    info.hardlinks = vec![h0, h1, h2];
    let sl2 = root.join("a/linked-symlink");
    // The symlink itself is linked, not followed.
    let r = at::link(
        libc::AT_FDCWD,
        &cstr(&info.symlink),
        libc::AT_FDCWD,
        &cstr(&sl2),
    );
    check(r, "linkat", &sl2);
    // A FIFO.
    info.fifo = root.join("fifo");
    mknod(&info.fifo, libc::S_IFIFO, 0o640, 0);
    // Special mode bits.
    info.setuid_file = root.join("a/setuid");
    write(&info.setuid_file, b"#!/bin/sh\n");
    mode(&info.setuid_file, 0o4755);
    let sgid = root.join("a/setgid");
    write(&sgid, b"g");
    mode(&sgid, 0o2755);
    let sticky = root.join("tmp");
    fs::create_dir(&sticky).unwrap();
    mode(&sticky, 0o1777);
    // user.* xattrs with binary values.
    info.xattr_file = root.join("one");
    set_xattr(&info.xattr_file, "user.binary", b"\x00\x01\xff\x00");
    set_xattr(&root.join("a"), "user.dir", b"dir value");
    if is_root() {
        info.root_parts = true;
        let owned = root.join("a/owned");
        write(&owned, b"o");
        std::os::unix::fs::lchown(&owned, Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(
            root.join("links/abs"),
            Some(65534),
            Some(65534),
        )
        .unwrap();
        std::os::unix::fs::lchown(root.join("tmp"), Some(1234), Some(65534))
            .unwrap();
        info.owned_file = Some(owned);
        let dev = root.join("dev");
        fs::create_dir(&dev).unwrap();
        let null = dev.join("null");
        mknod(&null, libc::S_IFCHR, 0o666, zinstall_sys::fs::makedev(1, 3));
        let loop7 = dev.join("loop200");
        mknod(
            &loop7,
            libc::S_IFBLK,
            0o660,
            zinstall_sys::fs::makedev(7, 200),
        );
        info.char_dev = Some(null);
        let ping = root.join("a/ping");
        write(&ping, b"\x7fELF not really");
        mode(&ping, 0o755);
        run(zinstall_testkit::tool("setcap")
            .arg("cap_net_raw+ep")
            .arg(&ping));
        info.cap_file = Some(ping);
        run(zinstall_testkit::tool("setfacl")
            .args(["-m", "u:1234:r--"])
            .arg(root.join("a/big")));
        run(zinstall_testkit::tool("setfacl")
            .args(["-d", "-m", "g:5678:rwx"])
            .arg(root.join("a/b")));
        set_xattr(&root.join("empty"), "trusted.zinstall", b"t");
    }
    // Restrictive directories, filled before they become restrictive.
    let ro = root.join("ro");
    fs::create_dir(&ro).unwrap();
    write(&ro.join("inside"), b"ro");
    mode(&ro, 0o555);
    if is_root() {
        // Only root can read a 0000 directory to copy it.
        let closed = root.join("closed");
        fs::create_dir(&closed).unwrap();
        write(&closed.join("secret"), b"closed");
        mode(&closed, 0o000);
    } else {
        zinstall_testkit::unmet(
            "root, for a 0000 directory only root can copy",
        );
    }
    // Times with nanoseconds, some before 1970, directories last and
    // bottom-up since creating entries changes a directory's mtime.
    let mut all: Vec<PathBuf> = Vec::new();
    collect(root, &mut all);
    for (i, p) in all.iter().enumerate() {
        let is_dir = fs::symlink_metadata(p).unwrap().is_dir();
        if is_dir {
            continue;
        }
        let base = if i % 5 == 0 {
            -123_456_789
        } else {
            1_600_000_000 + i as i64
        };
        set_times(p, (base + 17, 987_654_321), (base, 123_456_789 + i as i64));
    }
    all.reverse();
    for p in all
        .iter()
        .filter(|p| fs::symlink_metadata(p).unwrap().is_dir())
    {
        set_times(p, (1_500_000_000, 5), (1_400_000_000, 999_999_999));
    }
    set_times(root, (1_500_000_000, 5), (-1, 1));
    info
}

/// Every path under `root` (root included), parents before children.
/// Walks into 0000 directories only as root.
fn collect(root: &Path, out: &mut Vec<PathBuf>) {
    out.push(root.to_path_buf());
    let md = fs::symlink_metadata(root).unwrap();
    if !md.is_dir() {
        return;
    }
    let Ok(rd) = fs::read_dir(root) else { return };
    let mut children: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
    children.sort();
    for c in children {
        collect(&c, out);
    }
}

/// Copies `src` to `dst` with the engine.
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    threads: usize,
    batch: usize,
) -> Report {
    Plan::new(src, dst)
        .tunables(Tunables {
            copy_threads: threads,
            copy_batch: batch,
            ..Tunables::default()
        })
        .run()
        .unwrap_or_else(|f| {
            panic!("copy {} -> {}:\n{f}", src.display(), dst.display())
        })
}

/// Panics listing every difference between the trees.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let opts = CompareOptions {
        sparse: true,
        ..CompareOptions::default()
    };
    let c = verify::compare(a, b, &opts).unwrap();
    assert!(
        c.is_identical(),
        "{} and {} differ:\n{c}",
        a.display(),
        b.display()
    );
    assert!(c.entries_compared > 0);
}
