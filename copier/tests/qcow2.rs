//! qcow2 against the real qemu-img: native overlays it finds clean, and
//! native reading that matches its conversion byte for byte.

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use copier::qcow2::{self, ConvertOptions, Image, Problem};

fn qemu_img(args: &[&str]) -> std::process::Output {
    Command::new("qemu-img")
        .args(args)
        .output()
        .expect("qemu-img")
}

fn ok(args: &[&str]) -> String {
    let o = qemu_img(args);
    assert!(
        o.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn have_qemu() -> bool {
    Command::new("qemu-img").arg("--version").output().is_ok()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// 64 MiB raw: random extents, a run of a repeated byte, holes.
fn pattern(dir: &Path) -> PathBuf {
    let p = dir.join("src.raw");
    let mut f = File::create(&p).unwrap();
    f.set_len(64 << 20).unwrap();
    let mut x = 0x1234_5678_9abc_def1u64;
    for i in 0..24u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = x % ((63 << 20) as u64);
        let len = 1000 + (x >> 40) as usize % 300_000;
        let data: Vec<u8> =
            (0..len).map(|j| (j as u64 ^ x ^ i) as u8).collect();
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&data).unwrap();
    }
    f.seek(SeekFrom::Start(40 << 20)).unwrap();
    f.write_all(&vec![b'Z'; 3 << 20]).unwrap();
    p
}

fn convert_native(img: &Path, out: &Path) -> qcow2::ConvertStats {
    let image = Image::open(img).unwrap();
    let f = File::create_new(out).unwrap();
    qcow2::convert_to_raw(&image, &f, &ConvertOptions { threads: 3 }, &|_| {})
        .unwrap()
}

#[test]
fn native_overlays_are_clean_and_chain_to_the_base() {
    if !have_qemu() {
        eprintln!("skipped: native_overlays: no qemu-img");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let base = pattern(d.path());
    fs::set_permissions(&base, fs::Permissions::from_mode_const(0o444))
        .unwrap();
    let before = fs::read(&base).unwrap();
    for (name, size) in [
        ("eq.qcow2", 64u64 << 20),
        ("1g.qcow2", 1 << 30),
        ("100g.qcow2", 100 << 30),
        ("16t.qcow2", 16 << 40),
        ("odd.qcow2", (64 << 20) + 1000),
    ] {
        let ov = d.path().join(name);
        let got = qcow2::create_overlay(&ov, &base, "raw", size).unwrap();
        assert_eq!(got, size.div_ceil(512) * 512);
        let check = ok(&["check", s(&ov)]);
        assert!(check.contains("No errors were found"), "{name}: {check}");
        let info = ok(&["info", "--output=json", "--backing-chain", s(&ov)]);
        let chain: serde_json::Value = serde_json::from_str(&info).unwrap();
        assert_eq!(chain[0]["virtual-size"], got, "{name}");
        assert_eq!(chain[0]["backing-filename"], s(&base), "{name}");
        assert_eq!(chain[0]["backing-filename-format"], "raw", "{name}");
        assert_eq!(chain[1]["filename"], s(&base), "{name}");
        assert_eq!(fs::metadata(&ov).unwrap().mode() & 0o777, 0o600);
    }
    let eq = d.path().join("eq.qcow2");
    assert!(
        ok(&["compare", s(&base), s(&eq)]).contains("Images are identical")
    );
    // A guest write lands in its overlay only.
    let other = d.path().join("other.qcow2");
    qcow2::create_overlay(&other, &base, "raw", 64 << 20).unwrap();
    let o = Command::new("qemu-io")
        .args(["-f", "qcow2", "-c", "write -P 0xab 0 64k", s(&eq)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(ok(&["check", s(&eq)]).contains("No errors were found"));
    assert!(fs::read(&base).unwrap() == before, "the base changed");
    let (a, b) = (d.path().join("a.raw"), d.path().join("b.raw"));
    ok(&["convert", "-O", "raw", s(&eq), s(&a)]);
    ok(&["convert", "-O", "raw", s(&other), s(&b)]);
    let (a, b) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    assert!(a[..65536].iter().all(|&x| x == 0xab));
    assert!(b == before, "the other guest sees the write");
    assert!(a[65536..] == before[65536..]);
    // Refusals.
    let e = qcow2::create_overlay(
        &d.path().join("r.qcow2"),
        Path::new("rel.raw"),
        "raw",
        1 << 20,
    )
    .unwrap_err();
    assert!(e.to_string().contains("absolute"), "{e}");
    let e = qcow2::create_overlay(&eq, &base, "raw", 1 << 20).unwrap_err();
    assert!(e.to_string().contains("create"), "{e}");
    assert!(!d.path().join("r.qcow2").exists());
}

trait FromModeConst {
    fn from_mode_const(m: u32) -> Self;
}

impl FromModeConst for fs::Permissions {
    fn from_mode_const(m: u32) -> Self {
        use std::os::unix::fs::PermissionsExt;
        fs::Permissions::from_mode(m)
    }
}

#[test]
fn native_reading_matches_qemu_img_for_every_kind_of_image() {
    if !have_qemu() {
        eprintln!("skipped: native_reading: no qemu-img");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = pattern(d.path());
    let reference = fs::read(&src).unwrap();
    let variants: [&[&str]; 6] = [
        &[],
        &["-c"],
        &["-c", "-o", "compression_type=zstd"],
        &["-o", "cluster_size=4096"],
        &["-c", "-o", "cluster_size=2M"],
        &["-o", "compat=0.10"],
    ];
    for (i, v) in variants.iter().enumerate() {
        let img = d.path().join(format!("v{i}.qcow2"));
        let mut args = vec!["convert", "-q", "-O", "qcow2"];
        args.extend_from_slice(v);
        args.extend([s(&src), s(&img)]);
        ok(&args);
        let out = d.path().join(format!("v{i}.raw"));
        let st = convert_native(&img, &out);
        let got = fs::read(&out).unwrap();
        assert!(got == reference, "{v:?}: differs from the source");
        if v.contains(&"-c") {
            assert!(st.compressed_clusters > 0, "{v:?}: {st:?}");
        }
        let allocated = fs::metadata(&out).unwrap().blocks() * 512;
        assert!(allocated < 16 << 20, "{v:?}: {allocated} bytes allocated");
        // Random reads across cluster boundaries.
        let image = Image::open(&img).unwrap();
        let mut x = 99u64;
        for _ in 0..200 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 20) % (64 << 20);
            let len = ((x >> 8) % 200_000) as usize;
            let mut buf = vec![0u8; len];
            image.read_at(&mut buf, off).unwrap();
            let end = (off as usize + len).min(reference.len());
            assert!(
                buf[..end - off as usize] == reference[off as usize..end],
                "{v:?} at {off}+{len}"
            );
        }
    }
    // A zero-flagged cluster over data reads as zeros.
    let z = d.path().join("z.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&z)]);
    let o = Command::new("qemu-io")
        .args(["-f", "qcow2", "-c", "write -z 40M 64k", s(&z)])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = d.path().join("z.raw");
    convert_native(&z, &out);
    let got = fs::read(&out).unwrap();
    assert!(got[40 << 20..(40 << 20) + 65536].iter().all(|&b| b == 0));
    assert!(
        got[(40 << 20) + 65536..(43 << 20)]
            .iter()
            .all(|&b| b == b'Z')
    );
}

fn refusal(path: &Path) -> qcow2::Error {
    let e = Image::open(path).and_then(|i| {
        i.require_standalone()?;
        let out = path.with_extension("out");
        let f = File::create(&out).unwrap();
        qcow2::convert_to_raw(&i, &f, &ConvertOptions::default(), &|_| {})
            .map(|_| i)
    });
    let e = e.unwrap_err();
    assert!(e.to_string().contains(s(path)), "{e}");
    e
}

fn patch(src: &Path, dst: &Path, at: u64, bytes: &[u8]) {
    fs::copy(src, dst).unwrap();
    let f = fs::OpenOptions::new().write(true).open(dst).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

#[test]
fn bad_images_are_refused_with_the_reason() {
    if !have_qemu() {
        eprintln!("skipped: bad_images: no qemu-img");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = pattern(d.path());
    let img = d.path().join("good.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
    let p = |n: &str| d.path().join(n);
    patch(&img, &p("magic.qcow2"), 0, b"QFJ\xfb");
    assert!(matches!(
        refusal(&p("magic.qcow2")).problem,
        Some(Problem::BadMagic)
    ));
    // Unknown incompatible bit 20.
    patch(&img, &p("bits.qcow2"), 72, &(1u64 << 20).to_be_bytes());
    assert!(
        matches!(refusal(&p("bits.qcow2")).problem, Some(Problem::UnknownFeatures(m)) if m == 1 << 20)
    );
    patch(&img, &p("crypt.qcow2"), 32, &1u32.to_be_bytes());
    assert!(matches!(
        refusal(&p("crypt.qcow2")).problem,
        Some(Problem::Encrypted)
    ));
    // Truncated right after the header: the L1 table is gone.
    fs::copy(&img, p("short.qcow2")).unwrap();
    File::options()
        .write(true)
        .open(p("short.qcow2"))
        .unwrap()
        .set_len(4096)
        .unwrap();
    assert!(matches!(
        refusal(&p("short.qcow2")).problem,
        Some(Problem::Corrupt(_))
    ));
    // External data file.
    let ext = p("ext.qcow2");
    ok(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        &format!("data_file={}", s(&p("data.bin"))),
        s(&ext),
        "1M",
    ]);
    assert!(matches!(refusal(&ext).problem, Some(Problem::ExternalData)));
    // A backing file of its own.
    let ov = p("ov.qcow2");
    ok(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        "raw",
        "-b",
        s(&src),
        s(&ov),
    ]);
    assert!(matches!(refusal(&ov).problem, Some(Problem::HasBacking(_))));
    // Corrupt compressed data: the error names the guest offset.
    let c = p("c.qcow2");
    ok(&["convert", "-q", "-c", "-O", "qcow2", s(&src), s(&c)]);
    // Find the first compressed cluster through L1[0] and its L2 table
    // (64 KiB clusters: the offset is bits 0-53) and trash its bytes.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&c)
        .unwrap();
    let be = |at: u64| {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, at).unwrap();
        u64::from_be_bytes(b)
    };
    let l2 = be(be(40)) & 0x00ff_ffff_ffff_fe00;
    let entry = (0..8192)
        .map(|i| be(l2 + i * 8))
        .find(|e| e & (1 << 62) != 0)
        .unwrap();
    let off = entry & ((1u64 << 54) - 1);
    f.write_all_at(&[0xff; 64], off + 8).unwrap();
    let e = refusal(&c);
    assert!(matches!(e.problem, Some(Problem::Decompress { .. })), "{e}");
    assert!(e.to_string().contains("guest offset 0x"), "{e}");
}
