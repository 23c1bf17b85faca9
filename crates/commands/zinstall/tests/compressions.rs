//! Every compression a rootfs tarball comes in, made by its own tool.
//! Those zinstall reads (bzip2, multi-stream pbzip2, lz4 frames with
//! every block option, a skippable frame and concatenated frames, gzip
//! with padding or garbage after its last member) install exactly what
//! GNU tar extracts; those it tells but does not read (legacy lzma,
//! lzip, lzop, compress, legacy lz4) are refused naming the format and
//! the command that converts them, with nothing written into the root;
//! a corrupt bzip2 stream is refused as bzip2 corruption, not as a
//! damaged tar. OCI layers whose bytes are not what their media type
//! says are refused naming both.

#![cfg(target_os = "linux")]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use zinstall_testkit::run::{s, text};
use zinstall_testkit::{require_root, tool};

use crate::oci::support;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

/// Runs `sh -c script` in `dir`, which must succeed; its stdout.
fn sh(dir: &Path, script: &str) -> Vec<u8> {
    let o = tool("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
    o.stdout
}

/// `program args` with `input` on its stdin; its output, which it must
/// give with success.
fn filter(program: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut c = tool(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let o = c.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(o.status.success(), "{program} {args:?}: {}", text(&o));
    o.stdout
}

/// A source tree (directories, a symlink, a hard link, an empty file,
/// modes, and a file of 300 KB, a third of it incompressible, so that
/// bzip2 -1 and lz4 -B4 make several blocks) packed by GNU tar, and what
/// GNU tar extracts from it.
struct Fixture {
    dir: tempfile::TempDir,
    tar: Vec<u8>,
    reference: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sh(
        d,
        "mkdir -p src/etc src/usr/bin src/var/empty && \
         echo hello > src/etc/motd && chmod 0640 src/etc/motd && \
         : > src/etc/empty && \
         seq 1 30000 > src/usr/bin/big && \
         head -c 100000 /dev/urandom >> src/usr/bin/big && \
         chmod 0755 src/usr/bin/big && \
         ln src/usr/bin/big src/usr/bin/big-again && \
         ln -s ../etc/motd src/usr/motd && \
         tar -cf root.tar -C src . && \
         mkdir ref && tar -xf root.tar -C ref",
    );
    let tar = fs::read(d.join("root.tar")).unwrap();
    let reference = d.join("ref");
    Fixture {
        dir,
        tar,
        reference,
    }
}

/// Every entry below `root` (type, mode, owner, size, mtime, link
/// target, link count) and every file's SHA-256, sorted.
fn tree(root: &Path) -> String {
    let mut lines: Vec<String> = String::from_utf8(sh(
        root,
        "find . -mindepth 1 -printf '%y %#m %U:%G %s %T@ %l %n %P\\n'; \
         find . -type f -exec sha256sum {} +",
    ))
    .unwrap()
    .lines()
    .map(str::to_string)
    .collect();
    lines.sort();
    assert!(lines.len() > 10, "{lines:?}");
    lines.join("\n")
}

fn profile(dir: &Path) -> PathBuf {
    let p = dir.join("profile.toml");
    fs::write(
        &p,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    p
}

/// `zinstall install` of `image` into a zonepath of its own; the
/// zonepath and the output.
fn install(dir: &Path, image: &Path) -> (PathBuf, Output) {
    let zp = dir.join(format!(
        "zp-{}",
        image.file_name().unwrap().to_string_lossy()
    ));
    let o = zinstall(&[
        "install",
        "--profile",
        s(&profile(dir)),
        "--zonepath",
        s(&zp),
        s(image),
    ]);
    (zp, o)
}

/// The bytes of an lz4 skippable frame (magic `0x184D2A5?`) holding
/// `data`.
fn skippable(nibble: u8, data: &[u8]) -> Vec<u8> {
    let mut v = vec![0x50 | nibble, 0x2a, 0x4d, 0x18];
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// How many bzip2 streams `b` holds: each starts `BZh` and a level, then
/// a block's magic.
fn bzip2_streams(b: &[u8]) -> usize {
    b.windows(10)
        .filter(|w| w.starts_with(b"BZh") && &w[4..] == b"1AY&SY")
        .count()
}

/// bzip2 (one stream, several blocks), pbzip2 (a stream per 100 KB) and
/// lz4 frames in every form install exactly what GNU tar extracts.
#[test]
fn bzip2_and_lz4_install_what_gnu_tar_extracts() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    let want = tree(&fx.reference);
    let half = fx.tar.len() / 2;
    let bz = filter("bzip2", &["-1", "-c"], &fx.tar);
    let pbz = filter("pbzip2", &["-1", "-b1", "-c"], &fx.tar);
    assert_eq!(bzip2_streams(&bz), 1);
    assert!(bzip2_streams(&pbz) > 2, "pbzip2 made one stream");
    let mut bz_cat = filter("bzip2", &["-c"], &fx.tar[..half]);
    bz_cat.extend(filter("bzip2", &["-c"], &fx.tar[half..]));
    let mut lz4_skip = skippable(0xa, b"made by hand");
    lz4_skip.extend(filter("lz4", &["-c"], &fx.tar));
    let mut lz4_cat = filter("lz4", &["-c", "-BX"], &fx.tar[..half]);
    lz4_cat.extend(skippable(0, b""));
    lz4_cat.extend(filter("lz4", &["-c", "--content-size"], &fx.tar[half..]));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("root.tar.bz2", bz),
        ("pbzip2.tar.bz2", pbz),
        ("cat.tbz2", bz_cat),
        ("plain.tar.lz4", filter("lz4", &["-c"], &fx.tar)),
        (
            "size.tar.lz4",
            filter("lz4", &["-c", "--content-size"], &fx.tar),
        ),
        (
            "linked.tar.lz4",
            filter("lz4", &["-c", "-B4", "-BD"], &fx.tar),
        ),
        (
            "checked.tar.lz4",
            filter("lz4", &["-c", "-B5", "-BX", "--content-size"], &fx.tar),
        ),
        (
            "nocrc.tar.lz4",
            filter("lz4", &["-c", "--no-frame-crc"], &fx.tar),
        ),
        ("skip.tar.lz4", lz4_skip),
        ("cat.tar.lz4", lz4_cat),
    ];
    for (name, bytes) in cases {
        let p = d.join(name);
        fs::write(&p, &bytes).unwrap();
        let (zp, o) = install(d, &p);
        assert!(o.status.success(), "{name}: {}", text(&o));
        assert_eq!(tree(&zp.join("root")), want, "{name}");
    }
}

/// gzip with zeros after its member (padding, which gzip ignores
/// silently) or garbage (which `gzip -d` ignores with a warning)
/// installs what GNU tar extracts, and the install says what it
/// ignored.
#[test]
fn gzip_padding_and_trailing_garbage_are_ignored_with_a_notice() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    let want = tree(&fx.reference);
    let gz = filter("gzip", &["-c"], &fx.tar);
    let mut garbage = gz.clone();
    garbage.extend_from_slice(b"this is not gzip\n");
    let mut padded = gz.clone();
    padded.extend_from_slice(&[0; 4096]);
    // gzip's own verdicts, which zinstall follows.
    let g = d.join("garbage.tar.gz");
    fs::write(&g, &garbage).unwrap();
    let o = tool("gzip").args(["-t", s(&g)]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("trailing garbage ignored"),
        "{}",
        text(&o)
    );
    for (name, bytes, said) in [
        (
            "garbage.tar.gz",
            garbage,
            "17 bytes after the last gzip member",
        ),
        (
            "padded.tar.gz",
            padded,
            "4096 zero bytes after the last gzip",
        ),
    ] {
        let p = d.join(name);
        fs::write(&p, &bytes).unwrap();
        let (zp, o) = install(d, &p);
        assert!(o.status.success(), "{name}: {}", text(&o));
        assert!(text(&o).contains(said), "{name}: {}", text(&o));
        assert_eq!(tree(&zp.join("root")), want, "{name}");
    }
}

/// Legacy lzma, lzip, lzop, compress and legacy lz4, each made by its
/// tool, are refused before any of it is read as tar, naming the format
/// and the command that converts the file; the root gets nothing.
#[test]
fn compressions_not_read_are_refused_naming_the_converter() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    for (name, program, args, format, command) in [
        (
            "a.tar.lzma",
            "xz",
            &["--format=lzma", "-c"][..],
            "legacy lzma",
            "xz -dc",
        ),
        ("a.tar.lz", "lzip", &["-c"], "lzip", "lzip -dc"),
        ("a.tar.lzo", "lzop", &["-c"], "lzop", "lzop -dc"),
        ("a.tar.Z", "compress", &["-c"], "compress (.Z)", "gzip -dc"),
        (
            "legacy.tar.lz4",
            "lz4",
            &["-l", "-c"],
            "legacy lz4",
            "lz4 -dc",
        ),
    ] {
        let p = d.join(name);
        fs::write(&p, filter(program, args, &fx.tar)).unwrap();
        let (zp, o) = install(d, &p);
        let out = text(&o);
        assert!(!o.status.success(), "{name}: {out}");
        let convert = format!("{command} {} | zstd -o {}", p.display(), {
            let stem = s(&p).rsplit_once('.').unwrap().0;
            if stem.ends_with(".tar") {
                format!("{stem}.zst")
            } else {
                format!("{stem}.tar.zst")
            }
        });
        assert!(
            out.contains(&format!("compressed with {format}"))
                && out.contains(&convert),
            "{name}: wanted {format} and `{convert}`: {out}"
        );
        assert!(!out.contains("checksum"), "{name}: {out}");
        let root = zp.join("root");
        assert!(
            !root.exists() || fs::read_dir(&root).unwrap().next().is_none(),
            "{name}: the root was written"
        );
    }
}

/// A flipped byte inside a bzip2 block is bzip2 corruption, named as
/// such, not tar damage; the root is not left half-made.
#[test]
fn corrupt_bzip2_is_refused_as_bzip2_corruption() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    let mut bz = filter("bzip2", &["-c"], &fx.tar);
    let at = bz.len() / 2;
    bz[at] ^= 0x20;
    let p = d.join("corrupt.tar.bz2");
    fs::write(&p, &bz).unwrap();
    let o = tool("bzip2").args(["-t", s(&p)]).output().unwrap();
    assert!(!o.status.success(), "bzip2 -t took it: {}", text(&o));
    let (_, o) = install(d, &p);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("bzip2 stream corrupt"), "{out}");
    assert!(!out.contains("header checksum"), "{out}");
}

/// An OCI layer whose media type says gzip but whose blob is bzip2 (a
/// compression OCI has no media type for) or zstd is refused naming
/// both, before any of it is unpacked.
#[test]
fn oci_layers_not_compressed_as_their_media_type_says_are_refused() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    for (tool_name, found, advice) in [
        ("bzip2", "bzip2", "recompress the layer with gzip or zstd"),
        ("zstd", "zstd", "correct its media type"),
    ] {
        let blob = filter(tool_name, &["-c"], &fx.tar);
        let layout = d.join(format!("oci-{tool_name}"));
        support::write_layout(
            &layout,
            std::slice::from_ref(&fx.tar),
            support::host_arch(),
            &|what, v| {
                if what == "manifest" {
                    v["layers"][0]["digest"] =
                        serde_json::json!(support::put_blob(&layout, &blob));
                    v["layers"][0]["size"] = serde_json::json!(blob.len());
                }
            },
        );
        let (zp, o) = install(d, &layout);
        let out = text(&o);
        assert!(!o.status.success(), "{out}");
        assert!(
            out.contains(&format!(
                "media type application/vnd.oci.image.layer.v1.tar+gzip \
                 says gzip, but the blob is {found}"
            )) && out.contains(advice),
            "{out}"
        );
        let root = zp.join("root");
        assert!(
            !root.exists() || fs::read_dir(&root).unwrap().next().is_none(),
            "{tool_name}: the root was written"
        );
    }
}

/// Provisioning tells compressions by the same table: a bzip2 and an
/// lz4 rootfs tarball make guests equal to what GNU tar extracts; an
/// lzip one is refused naming the command that converts it, before the
/// cache is touched.
#[test]
fn provision_reads_bzip2_and_lz4_and_names_the_rest() {
    if !require_root() {
        return;
    }
    let fx = fixture();
    let d = fx.dir.path();
    let want = tree(&fx.reference);
    let provision = |image: &Path, out: &Path| {
        zinstall(&[
            "provision",
            s(image),
            "--out",
            s(out),
            "--cache",
            s(&d.join("cache")),
            "--keep-identity",
        ])
    };
    for (name, program) in [("p.tar.bz2", "bzip2"), ("p.tar.lz4", "lz4")] {
        let p = d.join(name);
        fs::write(&p, filter(program, &["-c"], &fx.tar)).unwrap();
        let out = d.join(format!("guests-{program}"));
        let o = provision(&p, &out);
        assert!(o.status.success(), "{name}: {}", text(&o));
        assert_eq!(tree(&out.join("guest-0")), want, "{name}");
    }
    let p = d.join("p.tar.lz");
    fs::write(&p, filter("lzip", &["-c"], &fx.tar)).unwrap();
    let out = d.join("guests-lzip");
    let o = provision(&p, &out);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    let convert = format!(
        "lzip -dc {} | zstd -o {}/p.tar.zst",
        p.display(),
        d.display()
    );
    assert!(
        said.contains("compressed with lzip") && said.contains(&convert),
        "{said}"
    );
    assert!(!out.join("guest-0").exists(), "{said}");
}
