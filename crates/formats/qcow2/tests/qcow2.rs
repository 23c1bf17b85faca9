//! qcow2 against the real qemu-img: native overlays it finds clean, and
//! native reading that matches its conversion byte for byte.

// Tests make and read their own fixtures by path: the seam is the
// product's.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_qcow2::{self as qcow2, ConvertOptions, Image, Problem};

fn qemu_img(args: &[&str]) -> std::process::Output {
    zinstall_testkit::tool("qemu-img")
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
    zinstall_testkit::need("qemu-img");
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

/// [`qcow2::convert_to_raw_streaming`] on `threads` threads: the output
/// and every byte the sink was handed.
fn convert_streaming(
    img: &Path,
    out: &Path,
    threads: usize,
) -> (qcow2::ConvertStats, Vec<u8>) {
    let image = Image::open(img).unwrap();
    let f = File::create_new(out).unwrap();
    let mut fed = Vec::new();
    let st = qcow2::convert_to_raw_streaming(
        &image,
        &f,
        &ConvertOptions { threads },
        &mut |b: &[u8]| fed.extend_from_slice(b),
    )
    .unwrap();
    (st, fed)
}

/// Clusters written in reverse order lie in the file in the reverse of
/// guest order: the file-order conversion still puts each in its place,
/// with one writer or several taking the file's 4 MiB pieces, and runs
/// of clusters that straddle two pieces.
#[test]
fn streaming_conversion_handles_any_host_order() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let img = d.path().join("rev.qcow2");
    ok(&["create", "-q", "-f", "qcow2", s(&img), "64M"]);
    let mut args = vec!["-f".to_string(), "qcow2".to_string()];
    for i in (0..16u64).rev() {
        args.push("-c".into());
        args.push(format!("write -P {} {} 1200k", i + 1, (i << 22) + 4096));
    }
    args.push(s(&img).to_string());
    let o = Command::new("qemu-io").args(&args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::metadata(&img).unwrap().len() > 16 << 20);
    let want = fs::read({
        let want = d.path().join("want.raw");
        ok(&["convert", "-q", "-O", "raw", s(&img), s(&want)]);
        want
    })
    .unwrap();
    for threads in 1..=4 {
        let got = d.path().join(format!("got-{threads}.raw"));
        let (st, fed) = convert_streaming(&img, &got, threads);
        assert!(fed == fs::read(&img).unwrap(), "{threads} threads: sink");
        assert!(fs::read(&got).unwrap() == want, "{threads} threads: disk");
        assert_eq!(st.written, 16 * 1200 * 1024, "{threads} threads");
    }
}

#[test]
fn native_reading_matches_qemu_img_for_every_kind_of_image() {
    zinstall_testkit::need("qemu-img");
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
        let (st2, fed) =
            convert_streaming(&img, &d.path().join(format!("s{i}.raw")), 3);
        assert_eq!(st2, st, "{v:?}");
        assert!(
            fed == fs::read(&img).unwrap(),
            "{v:?}: the sink missed bytes"
        );
        assert!(
            fs::read(d.path().join(format!("s{i}.raw"))).unwrap() == reference,
            "{v:?}: streaming conversion differs from the source"
        );
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
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let src = pattern(d.path());
    let img = d.path().join("good.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
    let p = |n: &str| d.path().join(n);
    patch(&img, &p("magic.qcow2"), 0, b"QFJ\xfb");
    assert!(matches!(
        refusal(&p("magic.qcow2")).refusal(),
        Some(&Problem::BadMagic)
    ));
    // Unknown incompatible bit 20.
    patch(&img, &p("bits.qcow2"), 72, &(1u64 << 20).to_be_bytes());
    assert!(
        matches!(refusal(&p("bits.qcow2")).refusal(), Some(&Problem::UnknownFeatures(m)) if m == 1 << 20)
    );
    patch(&img, &p("crypt.qcow2"), 32, &1u32.to_be_bytes());
    assert!(matches!(
        refusal(&p("crypt.qcow2")).refusal(),
        Some(&Problem::Encrypted(1))
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
        refusal(&p("short.qcow2")).refusal(),
        Some(&Problem::OutsideFile {
            what: "L1 table",
            ..
        })
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
    assert!(matches!(
        refusal(&ext).refusal(),
        Some(&Problem::ExternalData)
    ));
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
    assert!(matches!(
        refusal(&ov).refusal(),
        Some(&Problem::HasBacking(_))
    ));
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
    assert!(
        matches!(e.refusal(), Some(&Problem::Decompress { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("guest offset 0x"), "{e}");
}

/// `len` bytes of raw disk: data in most 64 KiB clusters, a hole in some.
fn small_pattern(dir: &Path, name: &str, len: u64) -> PathBuf {
    let p = dir.join(name);
    let f = File::create(&p).unwrap();
    f.set_len(len).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut at = 0;
    while at < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if !x.is_multiple_of(5) {
            let n = (len - at).min(65536 - (x >> 50)) as usize;
            let data: Vec<u8> = (0..n).map(|j| (j as u64 ^ x) as u8).collect();
            f.write_all_at(&data, at).unwrap();
        }
        at += 65536;
    }
    p
}

/// Not a test of its own: reads one image in this process when a parent
/// test asks for it (`--ignored`, `ZINSTALL_QCOW2_CHILD`), and prints the
/// outcome and the process's peak resident memory for the parent.
#[test]
#[ignore = "the entry point of read_in_child's children"]
fn child_reads_one_image() {
    let path = std::env::var_os("ZINSTALL_QCOW2_CHILD")
        .expect("run only as a child, with ZINSTALL_QCOW2_CHILD set");
    let path = PathBuf::from(path);
    let out = path.with_extension("child-out");
    let r = Image::open(&path).and_then(|img| {
        img.require_standalone()?;
        let mut buf = vec![0u8; 200_000];
        for off in [0, 65_000, img.virtual_size().saturating_sub(100)] {
            img.read_at(&mut buf, off)?;
        }
        let f = File::create(&out).unwrap();
        let opts = ConvertOptions { threads: 4 };
        qcow2::convert_to_raw(&img, &f, &opts, &|_| {})
    });
    let _ = fs::remove_file(&out);
    // libtest's "test ... " has no newline yet: start a line.
    match r {
        Ok(st) => println!("\nCHILD-RESULT ok {}", st.virtual_size),
        Err(e) => println!("\nCHILD-RESULT err {e}"),
    }
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse::<u64>()
        .unwrap();
    println!("CHILD-HWM-KB {hwm}");
}

/// What reading `path` in a child process gave: `Ok(())` or the error's
/// text. Fails the test if the child died (a panic, an abort) or its
/// peak memory passed 128 MiB.
fn read_in_child(path: &Path) -> Result<(), String> {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_reads_one_image",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env("ZINSTALL_QCOW2_CHILD", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}: child died ({}): {stdout}{}",
        path.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let hwm: u64 = stdout
        .lines()
        .find_map(|l| Some(&l[l.find("CHILD-HWM-KB ")? + 13..]))
        .unwrap_or_else(|| {
            panic!("{}: no memory figure: {stdout}", path.display())
        })
        .parse()
        .unwrap();
    assert!(hwm < 128 << 10, "{}: peak RSS {hwm} kB", path.display());
    let result = stdout
        .lines()
        .find_map(|l| Some(&l[l.find("CHILD-RESULT ")? + 13..]))
        .unwrap_or_else(|| panic!("{}: no result: {stdout}", path.display()));
    match result.strip_prefix("err ") {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// Bytes to write at an offset.
type Patch = (u64, Vec<u8>);

/// What a patched header must give.
#[derive(Debug)]
enum Want {
    /// Read, and converted.
    Read,
    /// Refused with a message containing this.
    Refused(&'static str),
    /// Either, but never a crash or a huge allocation.
    Either,
}

/// Every header field, and the first L1 and L2 entries, at its extremes
/// (0, 1, the maximum, just past the end of the file, unaligned): each
/// image is read or refused with a clear error, in a child process whose
/// peak memory stays small.
#[test]
fn header_fields_at_their_extremes_are_read_or_refused() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let src = small_pattern(d.path(), "src.raw", 4 << 20);
    let img = d.path().join("good.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
    let empty = d.path().join("empty.qcow2");
    ok(&["create", "-q", "-f", "qcow2", s(&empty), "1G"]);
    let len = fs::metadata(&img).unwrap().len();
    let be = |at: u64| {
        let mut b = [0u8; 8];
        File::open(&img).unwrap().read_exact_at(&mut b, at).unwrap();
        u64::from_be_bytes(b)
    };
    let l1_off = be(40);
    let l2_off = be(l1_off) & 0x00ff_ffff_ffff_fe00;
    let l2e_at = (0..8192)
        .map(|i| l2_off + i * 8)
        .find(|&a| be(a) != 0)
        .unwrap();
    let past = len + 1;
    let past_aligned = len.next_multiple_of(65536) + 65536;
    use Want::*;
    let u32s = |at: u64, v: u32| (at, v.to_be_bytes().to_vec());
    let u64s = |at: u64, v: u64| (at, v.to_be_bytes().to_vec());
    #[rustfmt::skip]
    let cases: Vec<(&str, Patch, Want)> = vec![
        ("version 0", u32s(4, 0), Refused("version 0")),
        ("version 1", u32s(4, 1), Refused("version 1")),
        ("version 2", u32s(4, 2), Read),
        ("version max", u32s(4, u32::MAX), Refused("version")),
        ("backing offset 1", u64s(8, 1), Refused("backing file")),
        ("backing offset max", u64s(8, u64::MAX), Refused("backing file")),
        ("backing offset past", u64s(8, past), Refused("backing file")),
        ("cluster_bits 0", u32s(20, 0), Refused("cluster_bits 0")),
        ("cluster_bits 1", u32s(20, 1), Refused("cluster_bits 1")),
        ("cluster_bits 9", u32s(20, 9), Either),
        ("cluster_bits 21", u32s(20, 21), Either),
        ("cluster_bits 22", u32s(20, 22), Refused("cluster_bits 22")),
        ("cluster_bits max", u32s(20, u32::MAX), Refused("cluster_bits")),
        ("size 0", u64s(24, 0), Read),
        ("size 1", u64s(24, 1), Read),
        ("size 511", u64s(24, 511), Read),
        ("size past", u64s(24, past), Read),
        ("size 1 TiB", u64s(24, 1 << 40), Refused("L1 has 1 entries")),
        ("size max", u64s(24, u64::MAX), Refused("too large")),
        ("crypt 1", u32s(32, 1), Refused("encrypted")),
        ("crypt max", u32s(32, u32::MAX), Refused("encrypted")),
        ("l1_size 0", u32s(36, 0), Refused("L1 has 0 entries")),
        ("l1_size 1", u32s(36, 1), Read),
        ("l1_size max", u32s(36, u32::MAX), Read),
        ("l1 offset 0", u64s(40, 0), Refused("offset 0")),
        ("l1 offset 1", u64s(40, 1), Refused("unaligned")),
        ("l1 offset max", u64s(40, u64::MAX), Refused("unaligned")),
        ("l1 offset wraps", u64s(40, u64::MAX - 65535), Refused("outside the file")),
        ("l1 offset past", u64s(40, past_aligned), Refused("outside the file")),
        ("l1 offset unaligned", u64s(40, l1_off + 8), Refused("unaligned")),
        ("refcount table max", u64s(48, u64::MAX), Read),
        ("refcount clusters max", u32s(56, u32::MAX), Read),
        ("snapshots max", u32s(60, u32::MAX), Read),
        ("snapshots offset max", u64s(64, u64::MAX), Read),
        ("incompatible dirty", u64s(72, 1), Read),
        ("incompatible corrupt", u64s(72, 2), Read),
        ("incompatible external data", u64s(72, 4), Refused("external data file")),
        ("incompatible extended L2", u64s(72, 1 << 4), Either),
        ("incompatible max", u64s(72, u64::MAX), Refused("unknown incompatible")),
        ("incompatible zstd bit", u64s(72, 1 << 3), Refused("compression type")),
        ("compatible max", u64s(80, u64::MAX), Read),
        ("autoclear max", u64s(88, u64::MAX), Read),
        ("refcount order max", u32s(96, u32::MAX), Read),
        ("header_length 0", u32s(100, 0), Refused("header_length")),
        ("header_length 103", u32s(100, 103), Refused("header_length")),
        ("header_length 104", u32s(100, 104), Read),
        ("header_length max", u32s(100, u32::MAX), Refused("header_length")),
        ("compression type 1", (104, vec![1]), Refused("compression type")),
        ("compression type max", (104, vec![255]), Refused("compression type")),
        ("L1[0] 0", u64s(l1_off, 0), Read),
        ("L1[0] 1", u64s(l1_off, 1), Read),
        ("L1[0] max", u64s(l1_off, u64::MAX), Refused("unaligned")),
        ("L1[0] unaligned", u64s(l1_off, l2_off + 512), Refused("is unaligned")),
        ("L1[0] past", u64s(l1_off, past_aligned), Refused("outside the file")),
        ("L2 entry max", u64s(l2e_at, u64::MAX), Refused("outside the file")),
        ("L2 entry unaligned", u64s(l2e_at, (1 << 63) | 0x10200), Refused("data cluster at 0x10200 is unaligned")),
        ("L2 entry past", u64s(l2e_at, (1 << 63) | past_aligned), Refused("outside the file")),
        ("L2 compressed past", u64s(l2e_at, (1 << 62) | past), Refused("outside the file")),
        ("L2 zero flag", u64s(l2e_at, 1), Read),
    ];
    for (name, (at, bytes), want) in cases {
        let p = d.path().join(format!("{}.qcow2", name.replace(' ', "_")));
        patch(&img, &p, at, &bytes);
        let got = read_in_child(&p);
        match (&want, &got) {
            (Read, Ok(())) | (Either, _) => {}
            (Refused(what), Err(e)) if e.contains(what) => {
                assert!(e.contains(s(&p)), "{name}: {e}");
            }
            _ => panic!("{name}: wanted {want:?}, got {got:?}"),
        }
    }
    // The empty image: its L1 at the end of the file, unpadded.
    for (name, at, v) in [
        ("empty as made", 0, None),
        ("empty l1_size max", 36, Some(u32::MAX)),
        ("empty l1_size 1", 36, Some(1)),
    ] {
        let p = d.path().join(format!("{}.qcow2", name.replace(' ', "_")));
        match v {
            Some(v) => patch(&empty, &p, at, &v.to_be_bytes()),
            None => {
                fs::copy(&empty, &p).unwrap();
            }
        }
        let got = read_in_child(&p);
        if name.ends_with("1") {
            assert!(got.unwrap_err().contains("L1 has 1 entries"), "{name}");
        } else {
            got.unwrap();
        }
    }
}

/// An image declaring four billion L1 entries (32 GiB) over a sparse file
/// long enough to hold them: only what the virtual size maps is read.
#[test]
fn a_huge_sparse_l1_table_is_not_read_whole() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let src = small_pattern(d.path(), "src.raw", 1 << 20);
    let img = d.path().join("good.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
    let huge = d.path().join("huge.qcow2");
    patch(&img, &huge, 36, &u32::MAX.to_be_bytes());
    let l1_off = {
        let mut b = [0u8; 8];
        File::open(&huge)
            .unwrap()
            .read_exact_at(&mut b, 40)
            .unwrap();
        u64::from_be_bytes(b)
    };
    let f = fs::OpenOptions::new().write(true).open(&huge).unwrap();
    f.set_len(l1_off + u64::from(u32::MAX) * 8).unwrap();
    drop(f);
    assert!(fs::metadata(&huge).unwrap().blocks() * 512 < 4 << 20);
    read_in_child(&huge).unwrap();
    let out = d.path().join("huge.raw");
    convert_native(&huge, &out);
    assert!(fs::read(&out).unwrap() == fs::read(&src).unwrap());
    // The same declared table past the end of u64: refused.
    let wraps = d.path().join("wraps.qcow2");
    patch(&img, &wraps, 36, &u32::MAX.to_be_bytes());
    let f = fs::OpenOptions::new().write(true).open(&wraps).unwrap();
    f.write_all_at(&(u64::MAX - 65535).to_be_bytes(), 40)
        .unwrap();
    let e = read_in_child(&wraps).unwrap_err();
    assert!(
        e.contains("L1 table") && e.contains("outside the file"),
        "{e}"
    );
}

/// Conversion with more threads than clusters, and cluster counts that
/// do not divide among the threads: every split gives the image back.
#[test]
fn conversion_splits_any_cluster_count_among_any_threads() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    for clusters in [1u64, 2, 3, 7, 10, 17] {
        // A partial last cluster too.
        let len = clusters * 65536 - if clusters > 2 { 4096 } else { 0 };
        let src = small_pattern(d.path(), &format!("c{clusters}.raw"), len);
        let img = d.path().join(format!("c{clusters}.qcow2"));
        ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
        let reference = fs::read(&src).unwrap();
        let image = Image::open(&img).unwrap();
        for threads in 1..=9 {
            let out = d.path().join(format!("c{clusters}-t{threads}.raw"));
            let f = File::create_new(&out).unwrap();
            let opts = ConvertOptions { threads };
            let st = qcow2::convert_to_raw(&image, &f, &opts, &|_| {})
                .unwrap_or_else(|e| panic!("{clusters}×{threads}: {e}"));
            assert_eq!(
                st.data_clusters + st.hole_clusters + st.compressed_clusters,
                clusters,
                "{clusters}×{threads}: {st:?}"
            );
            assert!(
                fs::read(&out).unwrap() == reference,
                "{clusters}×{threads}"
            );
            let cmp =
                ok(&["compare", "-f", "raw", "-F", "qcow2", s(&out), s(&img)]);
            assert!(cmp.contains("identical"), "{clusters}×{threads}: {cmp}");
            fs::remove_file(&out).unwrap();
        }
    }
}

/// Overlay sizes: the largest qcow2 allows is made, one more is refused
/// with the reason, and nothing wraps to a 0-byte disk.
#[test]
fn overlay_sizes_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().join("base.raw");
    File::create(&base).unwrap().set_len(1 << 20).unwrap();
    let max = qcow2::MAX_OVERLAY_SIZE;
    assert_eq!(max, 2 << 50);
    assert_eq!(max, qcow2::max_virtual_size(16));
    let ov = d.path().join("max.qcow2");
    assert_eq!(qcow2::create_overlay(&ov, &base, "raw", max).unwrap(), max);
    assert!(ok(&["check", s(&ov)]).contains("No errors were found"));
    for size in [max + 1, u64::MAX - 510, u64::MAX] {
        let p = d.path().join(format!("{size}.qcow2"));
        let e = qcow2::create_overlay(&p, &base, "raw", size).unwrap_err();
        assert!(
            matches!(e.refusal(), Some(&Problem::TooLarge { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("too large"), "{e}");
        assert!(!p.exists());
    }
}

/// Places the front half of each range it is asked for (as a kernel
/// copy that stops short would), by a read and a write of its own.
struct HalfCopier {
    placed: std::sync::atomic::AtomicU64,
    calls: std::sync::atomic::AtomicU64,
}

impl qcow2::KernelCopy for HalfCopier {
    fn copy(
        &self,
        src: &File,
        src_off: u64,
        dst: &File,
        dst_off: u64,
        len: u64,
    ) -> std::io::Result<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        self.calls.fetch_add(1, Relaxed);
        let half = len / 2;
        let mut buf = vec![0u8; half as usize];
        src.read_exact_at(&mut buf, src_off)?;
        dst.write_all_at(&buf, dst_off)?;
        self.placed.fetch_add(half, Relaxed);
        Ok(half)
    }
}

/// Plain clusters go to the kernel copy; what it leaves is written from
/// the buffers read, and the result is the image's disk, with runs of
/// zeros in plain clusters left as holes.
#[test]
fn kernel_copies_that_stop_short_are_finished_from_the_buffers() {
    zinstall_testkit::need("qemu-img");
    use std::sync::atomic::Ordering::Relaxed;
    let d = tempfile::tempdir().unwrap();
    let src = pattern(d.path());
    let reference = fs::read(&src).unwrap();
    let variants: [&[&str]; 4] = [
        &[],
        &["-c"],
        &["-o", "cluster_size=4096"],
        &["-o", "cluster_size=2M"],
    ];
    for (i, v) in variants.iter().enumerate() {
        let img = d.path().join(format!("k{i}.qcow2"));
        let mut args = vec!["convert", "-q", "-O", "qcow2"];
        args.extend_from_slice(v);
        args.extend([s(&src), s(&img)]);
        ok(&args);
        // A plain cluster of zeros: written as data, not flagged zero.
        let o = Command::new("qemu-io")
            .args(["-f", "qcow2", "-c", "write -P 0 20M 1M", s(&img)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut want = reference.clone();
        want[20 << 20..21 << 20].fill(0);
        let image = Image::open(&img).unwrap();
        let out = d.path().join(format!("k{i}.raw"));
        let f = File::create_new(&out).unwrap();
        let k = HalfCopier {
            placed: 0.into(),
            calls: 0.into(),
        };
        let mut fed = Vec::new();
        let st = qcow2::convert_to_raw_streaming_with(
            &image,
            &f,
            &ConvertOptions { threads: 2 },
            &mut |b: &[u8]| fed.extend_from_slice(b),
            &k,
        )
        .unwrap();
        assert!(fs::read(&out).unwrap() == want, "{v:?}: differs");
        assert!(
            fed == fs::read(&img).unwrap(),
            "{v:?}: the sink missed bytes"
        );
        assert_eq!(st.placed, k.placed.load(Relaxed), "{v:?}");
        if v.contains(&"-c") {
            // Its only plain clusters are the zeroed MiB: nothing to copy.
            assert_eq!(st.data_clusters, 16, "{v:?}: {st:?}");
            assert_eq!(k.calls.load(Relaxed), 0, "{v:?}");
        } else {
            assert!(st.placed > 0 && st.placed < st.written, "{v:?}: {st:?}");
        }
        // The written bytes are the non-zero ones: the zeroed MiB is a
        // hole, not data.
        let nonzero = want
            .chunks(4096)
            .filter(|b| b.iter().any(|&x| x != 0))
            .map(|b| b.len() as u64)
            .sum::<u64>();
        assert_eq!(st.written, nonzero, "{v:?}: {st:?}");
        let allocated = fs::metadata(&out).unwrap().blocks() * 512;
        assert!(allocated <= nonzero + (1 << 20), "{v:?}: {allocated}");
    }
}

/// A kernel copy's failure (a full disk) fails the conversion, naming
/// the image and what was being done.
#[test]
fn a_failing_kernel_copy_is_reported() {
    zinstall_testkit::need("qemu-img");
    struct Full;
    impl qcow2::KernelCopy for Full {
        fn copy(
            &self,
            _: &File,
            _: u64,
            _: &File,
            _: u64,
            _: u64,
        ) -> std::io::Result<u64> {
            Err(std::io::Error::from_raw_os_error(28))
        }
    }
    let d = tempfile::tempdir().unwrap();
    let src = pattern(d.path());
    let img = d.path().join("f.qcow2");
    ok(&["convert", "-q", "-O", "qcow2", s(&src), s(&img)]);
    let image = Image::open(&img).unwrap();
    let f = File::create_new(d.path().join("f.raw")).unwrap();
    let e = qcow2::convert_to_raw_streaming_with(
        &image,
        &f,
        &ConvertOptions { threads: 2 },
        &mut |_: &[u8]| {},
        &Full,
    )
    .unwrap_err();
    assert!(
        matches!(
            &e.kind,
            qcow2::ErrorKind::Io { op: "copy to output", error }
                // ENOSPC
                if error.raw_os_error() == Some(28)
        ),
        "{e}"
    );
    let t = e.to_string();
    assert!(t.contains(s(&img)) && t.contains("os error 28"), "{t}");
}

/// `qemu-io -f FMT -c CMD ...` on `img`, which must succeed.
fn qemu_io(img: &Path, fmt: &str, cmds: &[&str]) {
    let mut c = zinstall_testkit::tool("qemu-io");
    // qemu opens a relative data file name from its working directory.
    c.current_dir(img.parent().unwrap());
    c.args(["-f", fmt]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    let o = c.arg(img).output().unwrap();
    assert!(o.status.success(), "qemu-io {cmds:?}: {o:?}");
}

/// `qemu-img create -q ARGS` run in `dir` (relative names are the
/// image's, as a user would make them).
fn create_in(dir: &Path, args: &[&str]) {
    let o = zinstall_testkit::tool("qemu-img")
        .current_dir(dir)
        .arg("create")
        .arg("-q")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-img create {args:?}: {o:?}");
}

/// Opens `img` with its chain and converts it natively (threads 3, and
/// streaming: the sink gets every file's bytes in chain order); both
/// must equal `qemu-img convert -O raw` run in the image's directory,
/// byte for byte. Returns the image.
fn chain_matches_qemu_img(img: &Path, opts: &qcow2::ChainOptions) -> Image {
    let dir = img.parent().unwrap();
    let want = dir.join("want.raw");
    let _ = fs::remove_file(&want);
    let o = zinstall_testkit::tool("qemu-img")
        .current_dir(dir)
        .args(["convert", "-O", "raw", s(img), s(&want)])
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-img convert {img:?}: {o:?}");
    let want = fs::read(&want).unwrap();
    let image = Image::open_chain(img, opts).unwrap();
    let got = dir.join("got.raw");
    let _ = fs::remove_file(&got);
    let f = File::create_new(&got).unwrap();
    qcow2::convert_to_raw(&image, &f, &ConvertOptions { threads: 3 }, &|_| {})
        .unwrap();
    assert!(
        fs::read(&got).unwrap() == want,
        "{img:?}: differs from qemu-img"
    );
    fs::remove_file(&got).unwrap();
    let f = File::create_new(&got).unwrap();
    let mut fed = Vec::new();
    qcow2::convert_to_raw_streaming(
        &image,
        &f,
        &ConvertOptions { threads: 2 },
        &mut |b| fed.extend_from_slice(b),
    )
    .unwrap();
    assert!(
        fs::read(&got).unwrap() == want,
        "{img:?}: streaming differs"
    );
    let mut all = Vec::new();
    for (_, mut file) in image.files() {
        std::io::Read::read_to_end(&mut file, &mut all).unwrap();
    }
    assert!(
        fed == all,
        "{img:?}: the sink got other bytes than the files'"
    );
    fs::remove_file(&got).unwrap();
    image
}

fn chain_refusal(img: &Path, opts: &qcow2::ChainOptions) -> qcow2::Error {
    Image::open_chain(img, opts).unwrap_err()
}

#[test]
fn backing_chains_read_like_qemu_img() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let opts = qcow2::ChainOptions::default();
    create_in(dir, &["-f", "qcow2", "base.qcow2", "64M"]);
    qemu_io(
        &dir.join("base.qcow2"),
        "qcow2",
        &[
            "write -P 0x11 0 256k",
            "write -P 0x12 1M 64k",
            "write -P 0x13 60M 4M",
        ],
    );
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            "base.qcow2",
            "mid.qcow2",
        ],
    );
    // A zero cluster over the base's data, and a partial one.
    qemu_io(
        &dir.join("mid.qcow2"),
        "qcow2",
        &[
            "write -P 0x22 64k 64k",
            "write -z 1M 64k",
            "write -z 192k 32k",
        ],
    );
    // Larger than the chain under it: past 64 MiB reads zeros.
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            "mid.qcow2",
            "top.qcow2",
            "80M",
        ],
    );
    qemu_io(
        &dir.join("top.qcow2"),
        "qcow2",
        &[
            "write -P 0x33 132k 4k",
            "write -z 0 64k",
            "write -P 0x44 70M 64k",
            "write -P 0x45 63M 2M",
        ],
    );
    let top = chain_matches_qemu_img(&dir.join("top.qcow2"), &opts);
    let mut got = vec![0u8; 70 << 20];
    top.read_at(&mut got, 0).unwrap();
    // The zero clusters do not fall through to the base.
    assert!(got[..64 << 10].iter().all(|&b| b == 0));
    assert!(got[1 << 20..(1 << 20) + (64 << 10)].iter().all(|&b| b == 0));
    assert!(got[(128 << 10)..(132 << 10)].iter().all(|&b| b == 0x11));
    assert!(got[(64 << 10)..(128 << 10)].iter().all(|&b| b == 0x22));
    assert!(got[(66 << 20)..].iter().all(|&b| b == 0));
    assert_eq!(top.files().len(), 3);
    // A raw base under two qcow2 levels.
    let raw = pattern(dir);
    create_in(
        dir,
        &["-f", "qcow2", "-F", "raw", "-b", "src.raw", "r1.qcow2"],
    );
    qemu_io(
        &dir.join("r1.qcow2"),
        "qcow2",
        &["write -z 0 1M", "write -P 0x66 3M 100k"],
    );
    create_in(
        dir,
        &[
            "-f", "qcow2", "-F", "qcow2", "-b", "r1.qcow2", "r2.qcow2", "65M",
        ],
    );
    qemu_io(&dir.join("r2.qcow2"), "qcow2", &["write -P 0x77 2M 64k"]);
    let r2 = chain_matches_qemu_img(&dir.join("r2.qcow2"), &opts);
    assert!(r2.data_bytes().unwrap() <= 65 << 20);
    assert!(fs::metadata(&raw).unwrap().len() == 64 << 20);
    // An image alone still says it has a backing file.
    assert!(matches!(
        Image::open(&dir.join("r2.qcow2"))
            .unwrap()
            .require_standalone()
            .unwrap_err()
            .refusal(),
        Some(Problem::HasBacking(_))
    ));
}

#[test]
fn dirty_subcluster_and_data_file_images_read_like_qemu_img() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let opts = qcow2::ChainOptions::default();
    // Lazy refcounts left dirty: the bit set by hand, as a crash leaves
    // it.
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=on",
            "dirty.qcow2",
            "8M",
        ],
    );
    let dirty = dir.join("dirty.qcow2");
    qemu_io(
        &dirty,
        "qcow2",
        &["write -P 0x5a 0 64k", "write -P 0x5b 5M 1M"],
    );
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dirty)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 79).unwrap();
    f.write_all_at(&[b[0] | 1], 79).unwrap();
    drop(f);
    let before = fs::read(&dirty).unwrap();
    let img = chain_matches_qemu_img(&dirty, &opts);
    let notices = img.notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("dirty") && n.contains(s(&dirty))),
        "{notices:?}"
    );
    assert!(fs::read(&dirty).unwrap() == before, "the image was changed");
    // Extended L2: subcluster writes and zeroes, alone and over a base.
    create_in(dir, &["-f", "qcow2", "base.qcow2", "8M"]);
    qemu_io(&dir.join("base.qcow2"), "qcow2", &["write -P 0x11 0 1M"]);
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on",
            "-F",
            "qcow2",
            "-b",
            "base.qcow2",
            "ext.qcow2",
        ],
    );
    let ext = dir.join("ext.qcow2");
    qemu_io(
        &ext,
        "qcow2",
        &[
            "write -P 0x66 2k 2k",
            "write -z 8k 2k",
            "write -P 0x5a 68k 4k",
            "write -z 256k 8k",
            "write -P 0x67 512k 64k",
            "write -z 640k 64k",
            "write -P 0x68 2M 6k",
        ],
    );
    let e = chain_matches_qemu_img(&ext, &opts);
    let mut got = vec![0u8; 12 << 10];
    e.read_at(&mut got, 0).unwrap();
    assert!(got[..2048].iter().all(|&b| b == 0x11), "falls through");
    assert!(got[2048..4096].iter().all(|&b| b == 0x66));
    assert!(got[8192..10240].iter().all(|&b| b == 0), "zero subcluster");
    assert!(got[10240..].iter().all(|&b| b == 0x11));
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on,cluster_size=16k",
            "ext16.qcow2",
            "4M",
        ],
    );
    qemu_io(
        &dir.join("ext16.qcow2"),
        "qcow2",
        &["write -P 0x21 1536 512", "write -P 0x22 1M 9k"],
    );
    chain_matches_qemu_img(&dir.join("ext16.qcow2"), &opts);
    // External data files, plain and raw.
    for (name, o) in [
        ("data.qcow2", "data_file=data.bin"),
        ("rawdata.qcow2", "data_file=raw.bin,data_file_raw=on"),
    ] {
        create_in(dir, &["-f", "qcow2", "-o", o, name, "4M"]);
        qemu_io(
            &dir.join(name),
            "qcow2",
            &[
                "write -P 0x31 0 64k",
                "write -z 64k 64k",
                "write -P 0x32 1M 100k",
            ],
        );
        let i = chain_matches_qemu_img(&dir.join(name), &opts);
        assert_eq!(i.files().len(), 2, "{name}");
    }
    // A data file with subclusters over a backing file.
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on,data_file=xd.bin",
            "-F",
            "qcow2",
            "-b",
            "base.qcow2",
            "xd.qcow2",
        ],
    );
    qemu_io(
        &dir.join("xd.qcow2"),
        "qcow2",
        &["write -P 0x41 4k 2k", "write -z 16k 2k"],
    );
    chain_matches_qemu_img(&dir.join("xd.qcow2"), &opts);
    // LUKS: refused, saying how to give the key.
    let o = zinstall_testkit::tools::qemu_img_luks(
        dir,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "--object",
            "secret,id=sec0,data=abc",
            "-o",
            "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10",
            "luks.qcow2",
            "1M",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let e = chain_refusal(&dir.join("luks.qcow2"), &opts);
    assert!(matches!(e.refusal(), Some(Problem::Encrypted(2))), "{e}");
    assert!(e.refusal().unwrap().is_unsupported());
    let m = e.to_string();
    assert!(
        m.contains("LUKS") && m.contains("encrypt.key-secret=sec0"),
        "{m}"
    );
}

#[test]
fn hostile_backing_names_are_refused_naming_the_file() {
    zinstall_testkit::need("qemu-img");
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let none = qcow2::ChainOptions::default();
    let allowed = qcow2::ChainOptions {
        backing_dir: Some(dir.to_path_buf()),
        ..Default::default()
    };
    create_in(dir, &["-f", "raw", "base.raw", "1M"]);
    fs::write(dir.join("base.raw"), vec![0x42u8; 1 << 20]).unwrap();
    let refused = |img: &Path, opts: &qcow2::ChainOptions, what: &str| {
        let e = chain_refusal(img, opts);
        let m = e.to_string();
        assert!(m.contains(s(img)) && m.contains(what), "{m}");
        e
    };
    // Absolute: refused, unless beneath the allowed directory.
    let abs = dir.join("abs.qcow2");
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-F",
            "raw",
            "-b",
            s(&dir.join("base.raw")),
            "abs.qcow2",
        ],
    );
    refused(&abs, &none, "absolute");
    chain_matches_qemu_img(&abs, &allowed);
    // `..`: likewise.
    fs::create_dir(dir.join("sub")).unwrap();
    create_in(
        &dir.join("sub"),
        &["-f", "qcow2", "-F", "raw", "-b", "../base.raw", "up.qcow2"],
    );
    let up = dir.join("sub/up.qcow2");
    refused(&up, &none, "..");
    chain_matches_qemu_img(&up, &allowed);
    // Outside the allowed directory: refused even so.
    let inner = qcow2::ChainOptions {
        backing_dir: Some(dir.join("sub")),
        ..Default::default()
    };
    refused(&up, &inner, "..");
    refused(&abs, &inner, "absolute");
    // A symlink out of the directory, and one beside it: never followed.
    let out = tempfile::tempdir().unwrap();
    fs::write(out.path().join("secret.raw"), b"secret").unwrap();
    std::os::unix::fs::symlink(
        out.path().join("secret.raw"),
        dir.join("link.raw"),
    )
    .unwrap();
    create_in(
        dir,
        &[
            "-f", "qcow2", "-F", "raw", "-b", "base.raw", "ln.qcow2", "1M",
        ],
    );
    let ln = dir.join("ln.qcow2");
    rebase(&ln, "link.raw", "raw");
    let e = refused(&ln, &allowed, "symlink");
    assert!(matches!(
        e.refusal(),
        Some(Problem::NameRefused {
            what: "backing file",
            ..
        })
    ));
    fs::create_dir(dir.join("real")).unwrap();
    fs::copy(dir.join("base.raw"), dir.join("real/base.raw")).unwrap();
    std::os::unix::fs::symlink("real", dir.join("dirlink")).unwrap();
    rebase(&ln, "dirlink/base.raw", "raw");
    refused(&ln, &allowed, "symlink");
    // A data file name follows the same rules.
    create_in(
        dir,
        &[
            "-f",
            "qcow2",
            "-o",
            &format!("data_file={}", dir.join("d.bin").display()),
            "absdata.qcow2",
            "1M",
        ],
    );
    let e = refused(&dir.join("absdata.qcow2"), &none, "absolute");
    assert!(matches!(
        e.refusal(),
        Some(Problem::NameRefused {
            what: "data file",
            ..
        })
    ));
    // A loop: A -> B -> A.
    create_in(
        dir,
        &["-f", "qcow2", "-F", "raw", "-b", "base.raw", "a.qcow2"],
    );
    create_in(
        dir,
        &["-f", "qcow2", "-F", "qcow2", "-b", "a.qcow2", "b.qcow2"],
    );
    rebase(&dir.join("a.qcow2"), "b.qcow2", "qcow2");
    let e = refused(&dir.join("a.qcow2"), &none, "loops");
    assert!(matches!(e.refusal(), Some(Problem::ChainLoop { .. })));
    assert!(e.to_string().contains("b.qcow2"), "{e}");
    // The deepest chain read, and one image more.
    let mut prev = ("base.raw".to_string(), "raw");
    for i in 1..=qcow2::MAX_CHAIN {
        let name = format!("c{i}.qcow2");
        create_in(dir, &["-f", "qcow2", "-F", prev.1, "-b", &prev.0, &name]);
        qemu_io(
            &dir.join(&name),
            "qcow2",
            &[&format!("write -P {i} {}k 4k", i * 32)],
        );
        prev = (name, "qcow2");
    }
    let deepest = dir.join(format!("c{}.qcow2", qcow2::MAX_CHAIN - 1));
    assert_eq!(
        chain_matches_qemu_img(&deepest, &none).files().len(),
        qcow2::MAX_CHAIN
    );
    let deeper = dir.join(format!("c{}.qcow2", qcow2::MAX_CHAIN));
    let e = refused(&deeper, &none, "deeper than 16");
    assert!(
        e.to_string().contains("c1.qcow2 -> ")
            && e.to_string().contains("base.raw"),
        "{e}"
    );
    // A format other than qcow2 or raw.
    rebase(&ln, "base.raw", "vmdk");
    let e = refused(&ln, &none, "vmdk");
    assert!(matches!(e.refusal(), Some(Problem::BackingFormat(_))));
}

/// Rewrites `img`'s backing file name and format, unchecked.
fn rebase(img: &Path, name: &str, fmt: &str) {
    let o = zinstall_testkit::tool("qemu-img")
        .current_dir(img.parent().unwrap())
        .args(["rebase", "-u", "-f", "qcow2", "-F", fmt, "-b", name, s(img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "rebase {img:?} {name}: {o:?}");
}
