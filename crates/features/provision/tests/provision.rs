//! Images as provisioning meets them: kinds told by content, and raw
//! bases written sparsely.

use zinstall_testkit::tools;

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_provision::{self as provision, Compression, ImageKind};

use tmp::Tmp;
use zinstall_testkit::tmp;

/// A 32 MiB raw disk with 3 MiB of data at scattered offsets.
fn raw_disk(dir: &Path) -> PathBuf {
    let p = dir.join("disk.img");
    let mut f = File::create(&p).unwrap();
    for (i, off) in [0u64, 5 << 20, 17 << 20].iter().enumerate() {
        f.seek(SeekFrom::Start(*off)).unwrap();
        let data: Vec<u8> = (0..(1 << 20))
            .map(|j: u32| (j.wrapping_mul(31) as u8) ^ i as u8)
            .collect();
        f.write_all(&data).unwrap();
    }
    f.set_len(32 << 20).unwrap();
    p
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kinds_are_told_by_content_not_name() {
    let d = Tmp::new();
    let raw = raw_disk(d.path());
    // Misleading names on purpose.
    let gz = d.path().join("image.tar");
    run(Command::new("sh").arg("-c").arg(format!(
        "gzip -c '{}' > '{}'",
        raw.display(),
        gz.display()
    )));
    let zst = d.path().join("image.qcow2");
    run(tools::tool("zstd")
        .args(["-q", "-f", "-o"])
        .arg(&zst)
        .arg(&raw));
    let root = d.path().join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/hostname"), b"guest\n").unwrap();
    let tar = d.path().join("rootfs.img");
    run(tools::tool("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&root)
        .arg("."));
    let tgz = d.path().join("rootfs.raw");
    run(tools::tool("tar")
        .arg("-czf")
        .arg(&tgz)
        .arg("-C")
        .arg(&root)
        .arg("."));
    let tzst = d.path().join("rootfs");
    run(tools::tool("tar")
        .arg("--zstd")
        .arg("-cf")
        .arg(&tzst)
        .arg("-C")
        .arg(&root)
        .arg("."));
    let qcow = d.path().join("disk.raw");
    run(tools::tool("qemu-img")
        .args(["convert", "-q", "-O", "qcow2"])
        .arg(&raw)
        .arg(&qcow));
    for (path, kind) in [
        (&raw, ImageKind::Raw(Compression::None)),
        (&gz, ImageKind::Raw(Compression::Gzip)),
        (&zst, ImageKind::Raw(Compression::Zstd)),
        (&tar, ImageKind::Tree(Compression::None)),
        (&tgz, ImageKind::Tree(Compression::Gzip)),
        (&tzst, ImageKind::Tree(Compression::Zstd)),
        (&qcow, ImageKind::Qcow2),
    ] {
        assert_eq!(
            provision::detect(path).unwrap(),
            kind,
            "{}",
            path.display()
        );
    }
    let e = provision::detect(&d.path().join("missing")).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn raw_base_is_written_sparsely_and_identically() {
    let d = Tmp::new();
    let raw = raw_disk(d.path());
    let zst = d.path().join("disk.zst");
    run(tools::tool("zstd")
        .args(["-q", "-f", "-o"])
        .arg(&zst)
        .arg(&raw));
    let out = d.path().join("base.raw");
    let dst = File::create_new(&out).unwrap();
    let mut src =
        provision::decompress(File::open(&zst).unwrap(), Compression::Zstd)
            .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut last = 0;
    let (read, written) =
        provision::write_sparse(&mut src, &dst, &mut buf, |n| last = n)
            .unwrap();
    assert_eq!(read, 32 << 20);
    assert_eq!(last, read, "progress reached the end");
    assert_eq!(written, 3 << 20, "only the data was written");
    drop(dst);
    assert_eq!(fs::read(&out).unwrap(), fs::read(&raw).unwrap());
    let allocated = fs::metadata(&out).unwrap().blocks() * 512;
    assert!(
        allocated <= 4 << 20,
        "{allocated} bytes allocated for 3 MiB of data"
    );
}
