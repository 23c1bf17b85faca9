//! `zinstall provision` never makes a wrong guest, never lets a base
//! change under its guests, never loses a live guest's base to gc, and
//! leaves nothing behind when it fails. Real images made by qemu-img,
//! compared by `qemu-img compare`.

use zinstall_testkit::tools;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use zinstall_testkit::run::{s, text};

use zinstall_testkit::is_root;

use tmp::Tmp;
use zinstall_testkit::tmp;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    o
}

fn qemu_img(args: &[&str]) -> Output {
    run(tools::tool("qemu-img").args(args))
}

/// `qemu-img` with the words of `line` (paths in it have no spaces).
fn qemu_img_words(line: &str) -> Output {
    qemu_img(&line.split_whitespace().collect::<Vec<_>>())
}

/// `qemu-img convert` of the raw `src` into `out` in `fmt`, with `-o
/// opts` unless empty.
fn convert(src: &Path, fmt: &str, opts: &str, out: &Path) {
    let mut args = vec!["convert", "-q", "-f", "raw", "-O", fmt];
    if !opts.is_empty() {
        args.extend(["-o", opts]);
    }
    qemu_img(&[&args[..], &[s(src), s(out)]].concat());
}

/// A 16 MiB raw disk with data in a few places, none of it zeros.
fn disk(dir: &Path) -> PathBuf {
    let p = dir.join("src.raw");
    let mut data = vec![0u8; 16 << 20];
    for (i, off) in [0usize, 3 << 20, 11 << 20].iter().enumerate() {
        for (j, b) in data[*off..*off + (1 << 20)].iter_mut().enumerate() {
            *b = (j % 251) as u8 ^ (i as u8 * 77) | 1;
        }
    }
    fs::write(&p, data).unwrap();
    p
}

fn provision(image: &Path, out: &Path, cache: &Path, extra: &[&str]) -> Output {
    let mut args =
        vec!["provision", s(image), "--out", s(out), "--cache", s(cache)];
    args.extend_from_slice(extra);
    zinstall(&args)
}

/// True if `guest` reads exactly as `raw` does (`qemu-img compare`).
fn same_disk(guest: &Path, raw: &Path) -> bool {
    tools::tool("qemu-img")
        .args([
            "compare",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "raw",
            s(guest),
            s(raw),
        ])
        .status()
        .unwrap()
        .success()
}

/// Asserts that the `count` guests in `out`, made from `image`, read
/// exactly as `raw`.
fn guests_read_as(out: &Path, count: usize, raw: &Path, image: &Path) {
    for g in 0..count {
        let guest = out.join(format!("guest-{g}.qcow2"));
        assert!(
            same_disk(&guest, raw),
            "{}: guest {g} is not the disk inside",
            image.display()
        );
    }
}

/// Asserts that each disk entry in `cache` holds its base and its record,
/// nothing more (no scratch copy of an image).
fn only_base_and_meta(cache: &Path) {
    for e in entries(cache) {
        let names: Vec<_> = fs::read_dir(&e)
            .unwrap()
            .map(|x| x.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(cache.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// A compressed qcow2 was taken for a compressed raw disk: its guests'
/// disks were the qcow2 file's own bytes. Each is now decompressed and
/// read as qcow2; the guests read as `qemu-img convert` reads the image.
#[test]
fn compressed_qcow2_images_give_the_disk_inside() {
    let d = Tmp::new();
    let src = disk(d.path());
    let qcow = d.path().join("a.qcow2");
    convert(&src, "qcow2", "", &qcow);
    let zq = d.path().join("c.qcow2");
    qemu_img_words(&format!(
        "convert -q -c -f raw -O qcow2 {} {}",
        s(&src),
        s(&zq)
    ));
    let mut images = Vec::new();
    for (prog, args, ext) in [
        ("zstd", &["-q", "-f", "-k"][..], "zst"),
        ("gzip", &["-f", "-k"][..], "gz"),
        ("xz", &["-f", "-k", "-T1"][..], "xz"),
    ] {
        run(tools::tool(prog).args(args).arg(&qcow));
        images.push(d.path().join(format!("a.qcow2.{ext}")));
    }
    // A compressed image holding compressed clusters.
    run(tools::tool("zstd").args(["-q", "-f", "-k"]).arg(&zq));
    images.push(d.path().join("c.qcow2.zst"));
    let cache = d.path().join("cache");
    for (i, img) in images.iter().enumerate() {
        let out = d.path().join(format!("out{i}"));
        let o = provision(img, &out, &cache, &["--count", "2"]);
        let t = text(&o);
        assert!(o.status.success(), "{}: {t}", img.display());
        assert!(t.contains("qcow2."), "told as compressed qcow2: {t}");
        guests_read_as(&out, 2, &src, img);
    }
    // Nothing of the decompressed image stays in the cache.
    only_base_and_meta(&cache);
    // A corrupt one (its L1 table past its end) is refused naming the
    // image given, not the scratch copy it was decompressed into.
    let bad = d.path().join("bad.qcow2");
    fs::copy(&qcow, &bad).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&bad).unwrap();
    std::os::unix::fs::FileExt::write_all_at(
        &f,
        &(1u64 << 40).to_be_bytes(),
        40,
    )
    .unwrap();
    run(tools::tool("zstd").args(["-q", "-f", "-k"]).arg(&bad));
    let zbad = d.path().join("bad.qcow2.zst");
    let out = d.path().join("badout");
    let o = provision(&zbad, &out, &cache, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains(s(&zbad)) && t.contains("L1 table"), "{t}");
    assert!(!t.contains("scratch"), "{t}");
    assert!(!out.exists());
}

/// `zinstall provision` with PATH holding no qemu-img.
fn provision_without_qemu_img(
    image: &Path,
    out: &Path,
    cache: &Path,
    empty: &Path,
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .env("PATH", empty)
        .args(["provision", s(image), "--out", s(out), "--cache", s(cache)])
        .output()
        .unwrap()
}

/// Nothing of a refused image is left: no guest, no entry, no scratch.
fn nothing_left(out: &Path, cache: &Path) {
    assert!(!out.exists(), "no guest in {}", out.display());
    if cache.exists() {
        assert_eq!(entries(cache), Vec::<PathBuf>::new());
        let scratch = cache.join("scratch");
        assert!(
            !scratch.exists()
                || fs::read_dir(&scratch).unwrap().next().is_none(),
            "scratch left in {}",
            scratch.display()
        );
    }
}

/// Disk formats zinstall does not read itself are converted by
/// qemu-img, plain or compressed, into guests that read as the disk
/// inside; with no qemu-img they are refused naming the format and the
/// conversion. A fixed VHD, a raw disk followed by a footer that shows
/// what it is only at its end (compressed: once decompressed), is read
/// natively, its footer cut off. An xz raw disk is read.
#[test]
fn foreign_disk_formats_are_converted_or_refused_by_name() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let empty = d.path().join("empty-bin");
    fs::create_dir(&empty).unwrap();
    for (fmt, opts, name, kind) in [
        ("vmdk", "", "VMDK", "vmdk"),
        ("vmdk", "subformat=streamOptimized", "VMDK", "vmdk"),
        ("vdi", "", "VDI", "vdi"),
        ("vhdx", "", "VHDX", "vhdx"),
        ("vpc", "subformat=dynamic", "VHD (dynamic)", "vpc"),
        ("qed", "", "QED", "qed"),
        ("parallels", "", "Parallels", "parallels"),
        ("vpc", "subformat=fixed", "", "raw"),
    ] {
        let img = d.path().join(format!("img-{opts}.{fmt}"));
        convert(&src, fmt, opts, &img);
        let zst = d.path().join(format!("img-{opts}.{fmt}.zst"));
        run(tools::tool("zstd").args(["-q", "-f", "-o", s(&zst), s(&img)]));
        for (case, kind) in
            [(&img, kind.to_string()), (&zst, format!("{kind}.zst"))]
        {
            let out = d.path().join("out");
            let o = provision(case, &out, &cache, &["--count", "2"]);
            let t = text(&o);
            assert!(o.status.success(), "{}: {t}", case.display());
            assert!(t.contains(&format!("({kind},")), "{kind}: {t}");
            guests_read_as(&out, 2, &src, case);
            fs::remove_dir_all(&out).unwrap();
            // No qemu-img: refused by name before the cache is touched,
            // except the fixed VHD, which needs none.
            let nocache = d.path().join("nocache");
            let o = provision_without_qemu_img(case, &out, &nocache, &empty);
            let t = text(&o);
            if name.is_empty() {
                assert!(o.status.success(), "{}: {t}", case.display());
                assert!(same_disk(&out.join("guest-0.qcow2"), &src));
                fs::remove_dir_all(&out).unwrap();
                continue;
            }
            assert_eq!(o.status.code(), Some(1), "{}: {t}", case.display());
            assert!(t.contains(name) && t.contains("no qemu-img"), "{t}");
            assert!(
                t.contains(&format!("qemu-img convert -f {fmt}")),
                "{}: {t}",
                case.display()
            );
            assert!(!nocache.exists(), "refused before the cache is touched");
            nothing_left(&out, &nocache);
        }
    }
    // The private copies qemu-img read are gone; one entry per image,
    // its base sparse: the disk's 3 MiB of data, not its 16 MiB.
    assert_eq!(entries(&cache).len(), 16);
    only_base_and_meta(&cache);
    for e in entries(&cache) {
        let used = fs::metadata(e.join("base.raw")).unwrap().blocks() * 512;
        assert!(used <= 6 << 20, "{}: {used} bytes allocated", e.display());
    }
    let xz = d.path().join("src.raw.xz");
    run(tools::tool("xz").args(["-f", "-k", "-T1", s(&src)]));
    let out = d.path().join("xzout");
    let o = provision(&xz, &out, &cache, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(same_disk(&out.join("guest-0.qcow2"), &src));
}

/// An image that would have qemu-img open another file (a backing file
/// anywhere on the host, a VMDK whose data is in other files), an
/// encrypted one, and a fixed VHD whose footer lies are refused, saying
/// why, and leave nothing.
#[test]
fn foreign_images_that_reach_outside_are_refused() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let vmdk = d.path().join("base.vmdk");
    convert(&src, "vmdk", "", &vmdk);
    let host = d.path().join("host-secret");
    fs::write(&host, vec![0x5au8; 1 << 20]).unwrap();
    let qed = d.path().join("evil.qed");
    qemu_img_words(&format!(
        "create -q -f qed -b {} -F raw {} 1M",
        s(&host),
        s(&qed)
    ));
    let child = d.path().join("child.vmdk");
    qemu_img_words(&format!(
        "create -q -f vmdk -b {} -F vmdk {}",
        s(&vmdk),
        s(&child)
    ));
    let flat = d.path().join("flat.vmdk");
    convert(&src, "vmdk", "subformat=monolithicFlat", &flat);
    let luks = d.path().join("disk.luks");
    let o = tools::qemu_img_luks(
        d.path(),
        &[
            "create",
            "-q",
            "--object",
            "secret,id=s0,data=key",
            "-f",
            "luks",
            "-o",
            "key-secret=s0",
            s(&luks),
            "4M",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let vhd = d.path().join("fixed.vhd");
    convert(&src, "vpc", "subformat=fixed", &vhd);
    // A footer whose size field is not the data before it.
    let bad_vhd = d.path().join("bad.vhd");
    fs::copy(&vhd, &bad_vhd).unwrap();
    let len = fs::metadata(&bad_vhd).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&bad_vhd).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xff], len - 512 + 100)
        .unwrap();
    drop(f);
    let bad_zst = d.path().join("bad.vhd.zst");
    run(tools::tool("zstd").args(["-q", "-f", "-o", s(&bad_zst), s(&bad_vhd)]));
    for (img, why) in [
        (&qed, "backing file"),
        (&child, "backing file"),
        (&flat, "in other files"),
        (&luks, "LUKS"),
        (&bad_vhd, "VHD footer"),
        (&bad_zst, "VHD footer"),
    ] {
        let out = d.path().join("out");
        let o = provision(img, &out, &cache, &[]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{}: {t}", img.display());
        assert!(t.contains(s(img)) && t.contains(why), "{why}: {t}");
        nothing_left(&out, &cache);
    }
}

/// Run as root, qemu-img runs as an unprivileged user and is given the
/// image and the disk to write as descriptors, never a path of the
/// host's; its failure is reported with its standard error.
#[test]
fn qemu_img_converts_as_nobody_from_descriptors() {
    if !zinstall_testkit::require_root() {
        return;
    }
    // Where the unprivileged user can run a program and leave a note.
    let d = Tmp::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let note = d.path().join("note");
    fs::create_dir(&note).unwrap();
    fs::set_permissions(&note, fs::Permissions::from_mode(0o777)).unwrap();
    let fake = d.path().join("qemu-img");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\n/usr/bin/id -u >> {n}/uid\n\
             echo \"$@\" >> {n}/args\n\
             echo 'qemu-img: cannot read it' >&2\nexit 1\n",
            n = note.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let src = disk(d.path());
    let vdi = d.path().join("img.vdi");
    convert(&src, "vdi", "", &vdi);
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let with = format!("--qemu-img={}", s(&fake));
    let o = provision(&vdi, &out, &cache, &[&with]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(s(&fake)) && t.contains("cannot read it"),
        "the program and its stderr: {t}"
    );
    let uid = fs::read_to_string(note.join("uid")).unwrap();
    assert_eq!(uid.trim(), "65534");
    let args = fs::read_to_string(note.join("args")).unwrap();
    assert!(
        args.starts_with("info --output=json -f vdi /proc/self/fd/3"),
        "{args}"
    );
    assert!(!args.contains(s(d.path())), "no host path given: {args}");
    nothing_left(&out, &cache);
}

/// `qemu-img commit` of one guest, run as root (whom the 0444 mode does
/// not stop), would write into the shared base. The immutable flag stops
/// it; if the flag is cleared and the base changed anyway, the next
/// provision notices and builds a new entry, so later guests are right.
#[test]
fn a_commit_never_changes_siblings_or_later_guests() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let o = provision(&src, &out, &cache, &["--count", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let (g0, g1) = (out.join("guest-0.qcow2"), out.join("guest-1.qcow2"));
    run(tools::tool("qemu-io").args([
        "-f",
        "qcow2",
        "-c",
        "write -P 0x5a 1M 64k",
        s(&g0),
    ]));
    let commit = tools::tool("qemu-img")
        .args(["commit", s(&g0)])
        .output()
        .unwrap();
    assert!(
        !commit.status.success(),
        "commit into the shared base succeeded"
    );
    assert!(same_disk(&g1, &src), "the sibling changed");
    let base = entries(&cache)[0].join("base.raw");
    assert!(fs::read(&base).unwrap() == fs::read(&src).unwrap());
    // Past the flag: the base changes under the guests.
    run(Command::new("chattr").args(["-i", s(&base)]));
    let commit = tools::tool("qemu-img")
        .args(["commit", s(&g0)])
        .output()
        .unwrap();
    assert!(commit.status.success(), "{}", text(&commit));
    assert!(!same_disk(&g1, &src), "the commit did not reach the base");
    let later = d.path().join("later");
    let o = provision(&src, &later, &cache, &["--count", "2"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("altered") && t.contains("rebuilt"), "{t}");
    for g in 0..2 {
        assert!(same_disk(&later.join(format!("guest-{g}.qcow2")), &src));
    }
    // The altered entry stays for the guests that use it.
    assert_eq!(entries(&cache).len(), 2);
    assert!(base.exists());
    let list = zinstall(&["cache", "list", "--cache", s(&cache)]);
    assert!(text(&list).contains("altered"), "{}", text(&list));
}

/// Without root (no immutable flag) or with it cleared, a base edited in
/// place is found by its stamp before reuse.
#[test]
fn an_edited_base_is_detected_and_rebuilt() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let o = provision(&src, &d.path().join("a"), &cache, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let base = entries(&cache)[0].join("base.raw");
    let _ = Command::new("chattr")
        .args(["-i", s(&base)])
        .stderr(Stdio::null())
        .status();
    fs::set_permissions(&base, fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = fs::read(&base).unwrap();
    bytes[100] ^= 0xff;
    fs::write(&base, &bytes).unwrap();
    let o = provision(&src, &d.path().join("b"), &cache, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("altered"), "{t}");
    assert!(same_disk(&d.path().join("b/guest-0.qcow2"), &src));
}

/// A file edited inside a tree entry no longer reaches new guests.
#[test]
fn an_edited_tree_entry_is_detected_and_rebuilt() {
    let d = Tmp::new();
    let root = d.path().join("rootfs");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/motd"), b"original\n").unwrap();
    let tar = d.path().join("rootfs.tar");
    run(tools::tool("tar").args(["-cf", s(&tar), "-C", s(&root), "."]));
    let cache = d.path().join("cache");
    let o = provision(&tar, &d.path().join("a"), &cache, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let motd = entries(&cache)[0].join("tree/etc/motd");
    let _ = Command::new("chattr")
        .args(["-R", "-i", s(&entries(&cache)[0])])
        .stderr(Stdio::null())
        .status();
    fs::write(&motd, b"edited\n").unwrap();
    let o = provision(&tar, &d.path().join("b"), &cache, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("altered"), "{t}");
    assert_eq!(
        fs::read(d.path().join("b/guest-0/etc/motd")).unwrap(),
        b"original\n"
    );
}

/// gc knew guests only by the path they were made at: a guest moved
/// away lost its base. Now a disk entry with a guest record is never
/// removed unless the guest is found or released: a guest moved or
/// copied anywhere, searched or not, keeps its base; `--release-missing`
/// lets go of guests that were deleted; a guest zinstall itself removes
/// (`--force`) releases its base at once.
#[test]
fn gc_keeps_the_base_of_a_moved_or_copied_guest() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    // Guests are moved and removed by hand here, their seeds not:
    // none are made (seeds are provision_seed's).
    let o = provision(&src, &out, &cache, &["--count", "1", "--no-seed"]);
    assert!(o.status.success(), "{}", text(&o));
    let gc = |extra: &[&str]| {
        let mut a = vec!["cache", "gc", "--cache", s(&cache)];
        a.extend_from_slice(extra);
        let o = zinstall(&a);
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    // Moved within its directory tree: found by inode.
    fs::create_dir(out.join("vm")).unwrap();
    let moved = out.join("vm/disk.qcow2");
    fs::rename(out.join("guest-0.qcow2"), &moved).unwrap();
    let t = gc(&[]);
    assert!(t.contains("kept") && t.contains("moved there"), "{t}");
    assert!(same_disk(&moved, &src), "the moved guest lost its base");
    // Copied where nobody searches and the original removed: held by its
    // record; found by its header where searched.
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let copy = elsewhere.join("copy.qcow2");
    fs::copy(&moved, &copy).unwrap();
    fs::remove_file(&moved).unwrap();
    let t = gc(&["--dry-run"]);
    assert!(
        t.contains("held by 1 recorded guest")
            && t.contains("would remove 0 entries"),
        "{t}"
    );
    let t = gc(&[]);
    assert!(t.contains("held by 1 recorded guest"), "{t}");
    assert!(same_disk(&copy, &src), "the copied guest lost its base");
    let t = gc(&["--search", s(&elsewhere), "--release-missing"]);
    assert!(t.contains("backing file"), "{t}");
    assert!(same_disk(&copy, &src), "the copied guest lost its base");
    // Gone everywhere, and said so: removed, with its lock and record
    // files.
    fs::remove_file(&copy).unwrap();
    let t = gc(&["--release-missing", "--dry-run"]);
    assert!(
        t.contains("would remove") && t.contains("no guest uses it"),
        "{t}"
    );
    let t = gc(&["--release-missing"]);
    assert!(t.contains("removed 1 entry ("), "{t}");
    let left: Vec<_> = fs::read_dir(cache.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let index: Vec<_> = fs::read_dir(cache.join("index"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(index.is_empty(), "{index:?}");

    // A guest moved away, then replaced by `--force` at its old path:
    // the moved one still holds its base; the one `--force` removed
    // holds nothing, so once the moved one is released too it goes.
    let o = provision(&src, &out, &cache, &["--count", "2", "--no-seed"]);
    assert!(o.status.success(), "{}", text(&o));
    let away = elsewhere.join("away.qcow2");
    fs::rename(out.join("guest-0.qcow2"), &away).unwrap();
    let other = d.path().join("other.raw");
    fs::write(&other, vec![7u8; 1 << 20]).unwrap();
    let o = provision(
        &other,
        &out,
        &cache,
        &["--count", "2", "--force", "--no-seed"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let t = gc(&[]);
    assert!(t.contains("held by 1 recorded guest"), "{t}");
    assert!(same_disk(&away, &src), "the moved guest lost its base");
    assert_eq!(entries(&cache).len(), 2);
    fs::remove_file(&away).unwrap();
    let t = gc(&["--release-missing"]);
    assert!(t.contains("removed 1 entry ("), "{t}");
    assert_eq!(entries(&cache).len(), 1, "the other image's entry stays");
}

/// `dpkg --purge` removed the whole cache, with the bases qcow2 guests
/// read: `qemu-img check` of a guest then failed ("Could not open backing
/// file"). `cache in-use` names what guests still read, as gc decides it,
/// for the purge to keep: the disk base of a guest, found or held by its
/// record; never a tree entry, whose guests are copies.
#[test]
fn cache_in_use_names_the_bases_guests_read() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let o = provision(&src, &out, &cache, &["--count", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let tree = d.path().join("tree");
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::write(tree.join("etc/motd"), b"hi\n").unwrap();
    let tar = d.path().join("tree.tar");
    let o =
        run(Command::new("tar").args(["-C", s(&tree), "-cf", s(&tar), "etc"]));
    assert!(o.status.success(), "{}", text(&o));
    let o = provision(&tar, &d.path().join("dirs"), &cache, &["--count", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(entries(&cache).len(), 2);
    let base = entries(&cache)
        .into_iter()
        .find(|e| e.join("base.raw").exists())
        .unwrap();
    let in_use = |json: bool| {
        let mut a = vec!["cache", "in-use", "--cache", s(&cache)];
        if json {
            a.push("--json");
        }
        let o = zinstall(&a);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let guest = out.join("guest-0.qcow2");
    let t = in_use(false);
    assert_eq!(
        t,
        format!("{}: used by {}\n", base.display(), guest.display()),
        "only the disk base, named with its guest"
    );
    let v: serde_json::Value = serde_json::from_str(&in_use(true)).unwrap();
    let list = v["result"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["dir"], s(&base), "{v}");
    // Moved where nobody looks: its record still holds the base.
    let away = d.path().join("away");
    fs::create_dir(&away).unwrap();
    fs::rename(&guest, away.join("vm.qcow2")).unwrap();
    let t = in_use(false);
    assert!(
        t.starts_with(&format!("{}: held by 1 recorded guest", base.display())),
        "{t}"
    );
    // Collected by gc once released: nothing in use is left.
    fs::remove_file(away.join("vm.qcow2")).unwrap();
    let o =
        zinstall(&["cache", "gc", "--cache", s(&cache), "--release-missing"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(in_use(false), "");
    // It reads the cache itself: not through zinstalld.
    let o = zinstall(&[
        "cache",
        "in-use",
        "--cache",
        s(&cache),
        "--daemon=/nowhere",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("cache in-use"), "{}", text(&o));
}

/// A failed `--count 3` left the guests it had made, and the rerun then
/// refused "guest exists already". Now a failure removes what the run
/// made, keeps what was there before, and the rerun succeeds.
#[test]
fn a_failed_provision_leaves_nothing_and_the_rerun_works() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    // guest-2 is in the way: guests 0 and 1 are made, then it fails.
    fs::write(out.join("guest-2.qcow2"), b"someone else's").unwrap();
    let o = provision(&src, &out, &cache, &["--count", "3"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("guest-2.qcow2") && t.contains("exists"), "{t}");
    let left: Vec<_> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec!["guest-2.qcow2"], "only what was there before");
    assert_eq!(
        fs::read(out.join("guest-2.qcow2")).unwrap(),
        b"someone else's"
    );
    // The guests it made and removed hold no base: gc may remove it.
    let o = zinstall(&["cache", "gc", "--cache", s(&cache)]);
    assert!(text(&o).contains("removed 1 entry ("), "{}", text(&o));
    fs::remove_file(out.join("guest-2.qcow2")).unwrap();
    let o = provision(&src, &out, &cache, &["--count", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    // A provision that fails at its first guest removes the output
    // directory it made.
    let out2 = d.path().join("out2");
    let o = provision(&src, &out2, &cache, &["--name", "no/such/dir"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!out2.exists());
}

/// Numbers are checked before they size anything; a missing qemu-img is
/// named before any work.
#[test]
fn numbers_and_programs_are_checked_first() {
    let d = Tmp::new();
    let src = disk(d.path());
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    for args in [
        &["--count", "99999999999"][..],
        &["--count", "0"][..],
        &["--size", "18446744073709551615"][..],
        &["--size", "2049T"][..],
    ] {
        let o = provision(&src, &out, &cache, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(!cache.exists() && !out.exists(), "{args:?}");
    }
    let o =
        provision(&src, &out, &cache, &["--qemu-img=/nonexistent/qemu-img"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("/nonexistent/qemu-img"), "{t}");
    assert!(!out.exists(), "{t}");
}

/// Overlays have one mode, native or made by qemu-img; a cache entry is
/// never more readable than its source; the cache root is 0700 unless
/// configured; `cache list` shows sources by absolute path.
#[test]
fn modes_of_overlays_entries_and_the_cache() {
    let d = Tmp::new();
    let src = disk(d.path());
    fs::set_permissions(&src, fs::Permissions::from_mode(0o600)).unwrap();
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let o = provision(&src, &out, &cache, &["--name", "n"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = provision(&src, &out, &cache, &["--name", "q", "--qemu-img"]);
    assert!(o.status.success(), "{}", text(&o));
    let mode =
        |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&out.join("n-0.qcow2")), 0o600);
    assert_eq!(mode(&out.join("q-0.qcow2")), 0o600);
    assert_eq!(mode(&cache), 0o700);
    let e = &entries(&cache)[0];
    assert_eq!(
        mode(&e.join("base.raw")) & 0o077,
        0,
        "{:o}",
        mode(&e.join("base.raw"))
    );
    assert_eq!(mode(e) & 0o077, 0);
    if is_root() {
        let md = fs::metadata(e.join("base.raw")).unwrap();
        assert_eq!((md.uid(), md.gid()), {
            let s = fs::metadata(&src).unwrap();
            (s.uid(), s.gid())
        });
    } else {
        zinstall_testkit::unmet("root, for the cache entry owner check");
    }
    // A world-readable source: readable entry, and a cache opened up by
    // configuration.
    let open = d.path().join("open.raw");
    fs::write(&open, vec![3u8; 1 << 20]).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o644)).unwrap();
    let o = provision(
        &open,
        &out,
        &cache,
        &["--name", "o", "--cache-mode", "0711"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mode(&cache), 0o711);
    // Relative source path: listed absolute.
    let rel = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .current_dir(d.path())
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["provision", "open.raw", "--out", "rel", "--cache", "cache2"])
        .output()
        .unwrap();
    assert!(rel.status.success(), "{}", text(&rel));
    let list =
        zinstall(&["cache", "list", "--cache", s(&d.path().join("cache2"))]);
    let abs = fs::canonicalize(&open).unwrap();
    assert!(text(&list).contains(s(&abs)), "{}", text(&list));
}
