//! A qcow2 image's plain clusters reach the cached base without passing
//! through user space: reflinked on XFS, copied in the kernel on ext4,
//! and written from the read buffers where neither can (another
//! filesystem, or asked). Every base compares equal with `qemu-img
//! compare`, its holes kept, its digest that of the image file.

#[path = "../../../copier/tests/common/tools.rs"]
mod tools;

#[path = "../../../copier/tests/common/loopfs.rs"]
#[allow(dead_code)]
mod loopfs;

#[path = "../../../copier/tests/common/tmp.rs"]
mod tmp;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use zinstall_provision::cache::Cache;
use zinstall_provision::{Qcow2Build, build_qcow2_entry};

use loopfs::{Kind, LoopFs};
use tmp::Tmp;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The virtual size: 64 MiB and 12 KiB, so the last cluster is partial.
const SIZE: u64 = (64 << 20) + (12 << 10);
/// Bytes of the disk that are not zeros.
const NONZERO: u64 = (4 << 20) + (12 << 10);
/// Of those, in compressed clusters (when asked for).
const COMPRESSED: u64 = 128 << 10;

/// A qcow2 image in `dir`: plain data, a plain MiB of zeros (data on
/// the image, a hole in the base), a zero-flagged MiB, the partial last
/// cluster, and with `compressed` two compressed clusters.
fn image(dir: &Path, compressed: bool) -> PathBuf {
    let img = dir.join("disk.qcow2");
    run(tools::tool("qemu-img").args([
        "create",
        "-q",
        "-f",
        "qcow2",
        s(&img),
        &SIZE.to_string(),
    ]));
    let mut cmds = vec![
        "write -P 0x5a 0 2M".to_string(),
        "write -P 0x11 10M 1M".into(),
        "write -P 0 20M 1M".into(),
        "write -P 0x22 30M 1M".into(),
        "write -z 30M 1M".into(),
        "write -P 0x77 64M 12K".into(),
    ];
    if compressed {
        cmds.push("write -c -P 0x33 40M 128K".into());
        cmds.push("write -P 0x44 50M 896K".into());
    } else {
        cmds.push("write -P 0x44 50M 1M".into());
    }
    let mut c = tools::tool("qemu-io");
    c.args(["-f", "qcow2"]);
    for cmd in &cmds {
        c.args(["-c", cmd]);
    }
    run(c.arg(&img));
    img
}

/// `qemu-img compare` of the image with the base.
fn compare(img: &Path, base: &Path) {
    run(tools::tool("qemu-img").args([
        "compare",
        "-q",
        "-f",
        "qcow2",
        "-F",
        "raw",
        s(img),
        s(base),
    ]));
}

/// Builds the entry and checks what every path must give: the digest of
/// the file, a base equal to the image, holes where the disk has zeros.
fn build(img: &Path, cache: &Path, user_space_only: bool) -> Qcow2Build {
    let cache = Cache::new(cache).unwrap();
    let (entry, b) = build_qcow2_entry(img, &cache, user_space_only).unwrap();
    let want = Sha256::digest(fs::read(img).unwrap());
    let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(entry.sha256, hex, "digest of the image file");
    let base = entry.payload();
    compare(img, &base);
    assert_eq!(fs::metadata(&base).unwrap().len(), SIZE);
    assert_eq!(b.stats.written, NONZERO, "{b:?}");
    let allocated = fs::metadata(&base).unwrap().blocks() * 512;
    assert!(
        (NONZERO..=NONZERO + (256 << 10)).contains(&allocated),
        "{allocated} bytes allocated for {NONZERO} of data: {b:?}"
    );
    b
}

fn free_bytes(p: &Path) -> u64 {
    let c = std::ffi::CString::new(s(p)).unwrap();
    // SAFETY: statvfs is plain data; c is NUL-terminated.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out pointer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut v) }, 0);
    v.f_bfree as u64 * v.f_frsize as u64
}

fn mount(kind: Kind) -> Option<LoopFs> {
    LoopFs::require(kind, 2 << 30)
}

#[test]
fn qcow2_base_shares_extents_with_the_image_on_xfs() {
    let Some(fs) = mount(Kind::Xfs) else {
        return;
    };
    let img = image(fs.path(), false);
    run(&mut Command::new("sync"));
    let before = free_bytes(fs.path());
    let b = build(&img, &fs.path().join("cache"), false);
    assert_eq!(b.cloned, NONZERO, "every data block reflinked: {b:?}");
    assert_eq!(b.copied, 0, "{b:?}");
    assert_eq!(b.stats.placed, NONZERO, "{b:?}");
    let entry = fs::read_dir(fs.path().join("cache/entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let base = entry.join("base.raw");
    assert!(
        loopfs::shares_extents(&base),
        "{} shares no extents",
        s(&base)
    );
    // Shared, not copied: the base took far less space than its data.
    run(&mut Command::new("sync"));
    let used = before.saturating_sub(free_bytes(fs.path()));
    assert!(used < NONZERO / 2, "{used} bytes used for a reflinked base");
}

#[test]
fn qcow2_base_is_copied_in_the_kernel_on_ext4() {
    let Some(fs) = mount(Kind::Ext4) else {
        return;
    };
    let img = image(fs.path(), true);
    let b = build(&img, &fs.path().join("cache"), false);
    assert_eq!(b.cloned, 0, "ext4 has no reflinks: {b:?}");
    assert_eq!(b.copied, NONZERO - COMPRESSED, "{b:?}");
    assert_eq!(b.stats.placed, b.copied, "{b:?}");
    assert_eq!(b.stats.compressed_clusters, 2, "{b:?}");
}

/// The cache on another filesystem than the image: neither reflink nor
/// in-kernel copy crosses (EXDEV), so the base is written from the
/// buffers that were read, and is the same.
#[test]
fn qcow2_base_on_another_filesystem_is_written_from_user_space() {
    let Some(fs) = mount(Kind::Xfs) else {
        return;
    };
    let d = Tmp::new();
    let img = image(d.path(), true);
    let b = build(&img, &fs.path().join("cache"), false);
    assert_eq!((b.cloned, b.copied, b.stats.placed), (0, 0, 0), "{b:?}");
}

/// The portable path, asked for: the same base from the same bytes.
#[test]
fn qcow2_base_written_from_user_space_when_asked() {
    tools::need("qemu-img");
    let d = Tmp::new();
    let img = image(d.path(), true);
    let b = build(&img, &d.path().join("cache"), true);
    assert_eq!((b.cloned, b.copied, b.stats.placed), (0, 0, 0), "{b:?}");
}
