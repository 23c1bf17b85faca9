//! Unpacking real archives, well-made and hostile. Every hostile case
//! keeps a sentinel outside the root and checks it is untouched.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{self as archive, UnpackOptions};
use zinstall_engine::{ArchiveRefusal, Error, Tunables};

/// Builds archives entry by entry, including entries tar-rs's builder
/// would refuse to write (absolute names, `..`).
struct Tar {
    b: tar::Builder<Vec<u8>>,
}

impl Tar {
    fn new() -> Self {
        Tar {
            b: tar::Builder::new(Vec::new()),
        }
    }

    fn meta(kind: &str) -> Self {
        let mut t = Tar::new();
        t.file(
            "zinstall.json",
            format!("{{\"v\":\"1\",\"t\":\"{kind}\"}}\n").as_bytes(),
            0o444,
        );
        t
    }

    fn header(
        name: &[u8],
        kind: tar::EntryType,
        size: u64,
        mode: u32,
    ) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        assert!(name.len() <= 100, "use long() for long names");
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_mtime(1_600_000_000);
        h.set_uid(0);
        h.set_gid(0);
        h
    }

    fn raw(&mut self, mut h: tar::Header, data: &[u8]) -> &mut Self {
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }

    fn file(&mut self, name: &str, data: &[u8], mode: u32) -> &mut Self {
        let h = Self::header(
            name.as_bytes(),
            tar::EntryType::Regular,
            data.len() as u64,
            mode,
        );
        self.raw(h, data)
    }

    fn dir(&mut self, name: &str, mode: u32) -> &mut Self {
        let h =
            Self::header(name.as_bytes(), tar::EntryType::Directory, 0, mode);
        self.raw(h, &[])
    }

    fn link(
        &mut self,
        kind: tar::EntryType,
        name: &str,
        target: &str,
    ) -> &mut Self {
        let mut h = Self::header(name.as_bytes(), kind, 0, 0o777);
        h.as_old_mut().linkname[..target.len()]
            .copy_from_slice(target.as_bytes());
        self.raw(h, &[])
    }

    /// A GNU long-name entry followed by a file.
    fn long(&mut self, name: &str, data: &[u8]) -> &mut Self {
        let mut body = name.as_bytes().to_vec();
        body.push(0);
        let h = Self::header(
            b"././@LongLink",
            tar::EntryType::GNULongName,
            body.len() as u64,
            0,
        );
        self.raw(h, &body);
        self.file("placeholder", data, 0o644)
    }

    /// A PAX header naming the next entry.
    fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut body = Vec::new();
        for (k, v) in records {
            let rest = format!(" {k}=").len() + v.len() + 1;
            let mut len = rest + 1;
            while len.to_string().len() + rest != len {
                len += 1;
            }
            body.extend_from_slice(format!("{len} {k}=").as_bytes());
            body.extend_from_slice(v);
            body.push(b'\n');
        }
        let h = Self::header(
            b"PaxHeader",
            tar::EntryType::XHeader,
            body.len() as u64,
            0,
        );
        self.raw(h, &body)
    }

    fn bytes(self) -> Vec<u8> {
        self.b.into_inner().unwrap()
    }
}

struct Scene {
    _d: tempfile::TempDir,
    root: PathBuf,
    sentinel: PathBuf,
    outside: PathBuf,
    archive: PathBuf,
}

/// A root to unpack into, and beside it a directory with a sentinel file
/// that nothing may touch.
fn scene() -> Scene {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("zone/root");
    fs::create_dir_all(&root).unwrap();
    let outside = d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let sentinel = outside.join("sentinel");
    fs::write(&sentinel, b"untouched").unwrap();
    let archive = d.path().join("image.tar");
    Scene {
        root,
        sentinel,
        outside,
        archive,
        _d: d,
    }
}

impl Scene {
    fn unpack(
        &self,
        data: &[u8],
        opts: &UnpackOptions,
    ) -> Result<archive::UnpackReport, Error> {
        fs::write(&self.archive, data).unwrap();
        archive::unpack(&self.archive, &self.root, opts)
    }

    fn assert_outside_untouched(&self) {
        assert_eq!(fs::read(&self.sentinel).unwrap(), b"untouched");
        let names: Vec<_> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "something was created outside: {names:?}");
        let parent = self.root.parent().unwrap().parent().unwrap();
        let top: Vec<_> = fs::read_dir(parent)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(top.len(), 3, "{top:?}");
    }
}

fn layer_opts(threads: usize) -> UnpackOptions {
    UnpackOptions {
        tunables: Tunables {
            copy_threads: threads,
            ..Tunables::default()
        },
        expect: Some(ArchiveKind::Layer),
        ..UnpackOptions::default()
    }
}

fn refused(
    r: Result<archive::UnpackReport, Error>,
) -> (String, ArchiveRefusal) {
    match r {
        Err(Error::Archive { entry, reason, .. }) => (entry, reason),
        Err(other) => panic!("not a refusal: {other}"),
        Ok(r) => panic!("unpacked: {:?}", r.stats),
    }
}

fn good_layer() -> Vec<u8> {
    let mut t = Tar::meta("layer");
    t.dir("root/", 0o755)
        .dir("root/etc/", 0o755)
        .file("root/etc/hostname", b"guest\n", 0o644)
        .dir("root/ro/", 0o555)
        .file("root/ro/inside", b"x", 0o444)
        .file("root/usr/bin/tool", &vec![7u8; 3 << 20], 0o4755)
        .link(tar::EntryType::Symlink, "root/usr/bin/alias", "tool")
        .link(
            tar::EntryType::Link,
            "root/etc/hostname.2",
            "root/etc/hostname",
        )
        .file("outside-root.txt", b"not unpacked", 0o644);
    t.pax(&[
        ("SCHILY.xattr.user.note", b"v\x00w"),
        ("mtime", b"1600000000.123456789"),
    ]);
    t.file("root/etc/noted", b"n", 0o600);
    for i in 0..300 {
        t.file(
            &format!("root/data/f{i}"),
            format!("file {i}").as_bytes(),
            0o644,
        );
    }
    t.bytes()
}

#[test]
fn a_layer_unpacks_in_parallel_and_serially_alike() {
    let (a, b) = (scene(), scene());
    let ra = a.unpack(&good_layer(), &layer_opts(4)).unwrap();
    let rb = b.unpack(&good_layer(), &layer_opts(1)).unwrap();
    for (s, r) in [(&a, &ra), (&b, &rb)] {
        let root = &s.root;
        assert_eq!(fs::read(root.join("etc/hostname")).unwrap(), b"guest\n");
        assert_eq!(fs::read(root.join("usr/bin/tool")).unwrap().len(), 3 << 20);
        assert_eq!(
            fs::metadata(root.join("usr/bin/tool")).unwrap().mode() & 0o7777,
            0o4755
        );
        assert_eq!(
            fs::read_link(root.join("usr/bin/alias")).unwrap(),
            Path::new("tool")
        );
        let h = fs::metadata(root.join("etc/hostname.2")).unwrap();
        assert_eq!(
            h.ino(),
            fs::metadata(root.join("etc/hostname")).unwrap().ino()
        );
        assert_eq!(
            fs::metadata(root.join("ro")).unwrap().mode() & 0o777,
            0o555
        );
        let noted = fs::metadata(root.join("etc/noted")).unwrap();
        assert_eq!(
            (noted.mtime(), noted.mtime_nsec()),
            (1_600_000_000, 123_456_789)
        );
        assert!(!root.join("outside-root.txt").exists());
        assert_eq!(r.stats.skipped, 1);
        assert_eq!(r.stats.files, 304, "{:?}", r.stats);
        assert_eq!(r.stats.hardlinks, 1);
        assert_eq!(r.meta.as_ref().unwrap().kind, ArchiveKind::Layer);
        s.assert_outside_untouched();
    }
    // Directories the archive does not list get the time they were made.
    let opts = zinstall_verify::CompareOptions {
        atime: false,
        mtime: false,
        ..Default::default()
    };
    let c = zinstall_verify::compare(&a.root, &b.root, &opts).unwrap();
    assert!(c.is_identical(), "{c}");
}

/// Any batch size gives the same tree, from a file and from a stream.
#[test]
fn batch_sizes_do_not_change_the_tree() {
    let data = good_layer();
    let serial = scene();
    serial.unpack(&data, &layer_opts(1)).unwrap();
    let opts = zinstall_verify::CompareOptions {
        atime: false,
        mtime: false,
        ..Default::default()
    };
    for batch in [1, 7, 1000] {
        let o = UnpackOptions {
            tunables: Tunables {
                copy_threads: 3,
                copy_batch: batch,
                ..Tunables::default()
            },
            ..layer_opts(3)
        };
        let from_file = scene();
        from_file.unpack(&data, &o).unwrap();
        let streamed = scene();
        archive::unpack_from(&data[..], &streamed.archive, &streamed.root, &o)
            .unwrap();
        for s in [&from_file, &streamed] {
            let c =
                zinstall_verify::compare(&serial.root, &s.root, &opts).unwrap();
            assert!(c.is_identical(), "batch {batch}: {c}");
        }
    }
}

/// A plain tar file has its bodies copied from their ranges of the file;
/// a stream has them read by the reader. Both must give the same tree,
/// also when the archive is on another filesystem than the root (where
/// copy_file_range gives way to reads and writes).
#[test]
fn plain_files_and_streams_unpack_alike() {
    let data = good_layer();
    let by_range = scene();
    by_range.unpack(&data, &layer_opts(4)).unwrap();
    let streamed = scene();
    archive::unpack_from(
        &data[..],
        &streamed.archive,
        &streamed.root,
        &layer_opts(4),
    )
    .unwrap();
    let opts = zinstall_verify::CompareOptions {
        atime: false,
        mtime: false,
        ..Default::default()
    };
    let c = zinstall_verify::compare(&by_range.root, &streamed.root, &opts)
        .unwrap();
    assert!(c.is_identical(), "{c}");
    let shm = Path::new("/dev/shm");
    let root_dev = fs::metadata(&by_range.root).unwrap().dev();
    match fs::metadata(shm) {
        Ok(m) if m.is_dir() && m.dev() != root_dev => {
            let other_fs = tempfile::tempdir_in(shm).unwrap();
            let far = other_fs.path().join("image.tar");
            fs::write(&far, &data).unwrap();
            let s = scene();
            for threads in [1, 4] {
                fs::remove_dir_all(&s.root).unwrap();
                fs::create_dir(&s.root).unwrap();
                archive::unpack(&far, &s.root, &layer_opts(threads)).unwrap();
                let c =
                    zinstall_verify::compare(&by_range.root, &s.root, &opts)
                        .unwrap();
                assert!(c.is_identical(), "{threads} workers: {c}");
            }
        }
        _ => {
            zinstall_testkit::unmet(
                "/dev/shm on another filesystem, for the cross-filesystem case",
            );
        }
    }
}

#[test]
fn compressed_archives_are_told_by_content() {
    let data = good_layer();
    let mut gz =
        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&data).unwrap();
    let zst = zstd::encode_all(&data[..], 3).unwrap();
    for bytes in [gz.finish().unwrap(), zst] {
        let s = scene();
        s.unpack(&bytes, &layer_opts(2)).unwrap();
        assert_eq!(fs::read(s.root.join("etc/hostname")).unwrap(), b"guest\n");
    }
}

#[test]
fn later_layers_replace_earlier_files() {
    let s = scene();
    s.unpack(&good_layer(), &layer_opts(3)).unwrap();
    let mut t = Tar::meta("layer");
    t.file("root/etc/hostname", b"second\n", 0o600);
    t.link(tar::EntryType::Symlink, "root/data/f1", "f2");
    s.unpack(&t.bytes(), &layer_opts(3)).unwrap();
    assert_eq!(fs::read(s.root.join("etc/hostname")).unwrap(), b"second\n");
    assert_eq!(
        fs::read_link(s.root.join("data/f1")).unwrap(),
        Path::new("f2")
    );
    // The hard link made by the first layer still holds the old content.
    assert_eq!(fs::read(s.root.join("etc/hostname.2")).unwrap(), b"guest\n");
}

#[test]
fn metadata_is_required_and_checked() {
    let s = scene();
    let mut t = Tar::new();
    t.file("root/x", b"x", 0o644);
    assert_eq!(
        refused(s.unpack(&t.bytes(), &layer_opts(2))).1,
        ArchiveRefusal::MissingMetadata
    );
    let mut t = Tar::meta("baseline");
    t.file("root/x", b"x", 0o644);
    assert!(matches!(
        refused(s.unpack(&t.bytes(), &layer_opts(2))).1,
        ArchiveRefusal::WrongArchiveType { .. }
    ));
    assert!(!s.root.join("x").exists());
    // Without an expectation a plain rootfs tar unpacks whole.
    let mut t = Tar::new();
    t.dir("etc/", 0o755)
        .file("etc/os-release", b"ID=test\n", 0o644);
    s.unpack(&t.bytes(), &UnpackOptions::default()).unwrap();
    assert!(s.root.join("etc/os-release").exists());
}

/// Each hostile archive is refused with its reason, naming the entry,
/// and nothing outside the root changes.
#[test]
fn hostile_archives_stay_inside_the_root() {
    type Case = (
        &'static str,
        Box<dyn Fn(&Scene) -> Vec<u8>>,
        Box<dyn Fn(&ArchiveRefusal) -> bool>,
    );
    let cases: Vec<Case> = vec![
        (
            // A leading `/` is removed, as GNU tar removes it (the member
            // lands beneath the root): `..` after it is still refused.
            "absolute path with dot-dot",
            Box::new(|s| {
                let mut t = Tar::meta("layer");
                let name = format!(
                    "/root/../../outside/{}",
                    s.sentinel.file_name().unwrap().to_str().unwrap()
                );
                t.file(&name, b"overwritten", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DotDot),
        ),
        (
            "dot-dot",
            Box::new(|s| {
                let mut t = Tar::meta("layer");
                let name = format!(
                    "root/../../outside/{}",
                    s.sentinel.file_name().unwrap().to_str().unwrap()
                );
                t.file(&name, b"overwritten", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DotDot),
        ),
        (
            "PAX path with dot-dot",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.pax(&[("path", b"root/../../outside/sentinel")]);
                t.file("root/innocent", b"overwritten", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DotDot),
        ),
        (
            "GNU long name escaping",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                let long = format!(
                    "root/{}/../../../../outside/sentinel",
                    "a".repeat(120)
                );
                t.long(&long, b"overwritten");
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DotDot),
        ),
        (
            "file through an archive symlink",
            Box::new(|s| {
                let mut t = Tar::meta("layer");
                t.link(
                    tar::EntryType::Symlink,
                    "root/escape",
                    s.outside.to_str().unwrap(),
                );
                t.file("root/escape/sentinel", b"overwritten", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::ThroughSymlink),
        ),
        (
            "file through a relative symlink",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(tar::EntryType::Symlink, "root/up", "../../outside");
                t.file("root/up/new", b"planted", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::ThroughSymlink),
        ),
        (
            "directory through a symlink",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(tar::EntryType::Symlink, "root/up", "../../outside");
                t.dir("root/up/sub/", 0o755);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::ThroughSymlink),
        ),
        (
            "hard link to outside",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(
                    tar::EntryType::Link,
                    "root/passwd",
                    "root/../../outside/sentinel",
                );
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::HardLinkOutside),
        ),
        (
            "hard link outside the root member",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(tar::EntryType::Link, "root/passwd", "etc/passwd");
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::HardLinkOutside),
        ),
        (
            "hard link through a symlink",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(tar::EntryType::Symlink, "root/up", "../../outside");
                t.link(tar::EntryType::Link, "root/grab", "root/up/sentinel");
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::HardLinkOutside),
        ),
        (
            "device node",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                let mut h =
                    Tar::header(b"root/mem", tar::EntryType::Char, 0, 0o666);
                h.set_device_major(1).unwrap();
                h.set_device_minor(1).unwrap();
                t.raw(h, &[]);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DeviceNotAllowed),
        ),
        (
            "file over a directory",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.dir("root/d/", 0o755)
                    .file("root/d/keep", b"k", 0o644)
                    .file("root/d", b"x", 0o644);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::FileOverDirectory),
        ),
        (
            "directory over a symlink",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.link(tar::EntryType::Symlink, "root/s", "elsewhere");
                t.dir("root/s/", 0o755);
                t.bytes()
            }),
            Box::new(|r| *r == ArchiveRefusal::DirectoryOverSymlink),
        ),
        (
            "truncated",
            Box::new(|_| {
                let mut t = Tar::meta("layer");
                t.file("root/big", &vec![1u8; 100_000], 0o644);
                let mut b = t.bytes();
                b.truncate(60_000);
                b
            }),
            Box::new(|r| matches!(r, ArchiveRefusal::Truncated { .. })),
        ),
        (
            "corrupt gzip",
            Box::new(|_| {
                let mut gz = flate2::write::GzEncoder::new(
                    Vec::new(),
                    flate2::Compression::fast(),
                );
                gz.write_all(&good_layer()).unwrap();
                let mut b = gz.finish().unwrap();
                let n = b.len();
                for x in &mut b[n / 2..n / 2 + 64] {
                    *x ^= 0x5a;
                }
                b
            }),
            Box::new(|r| matches!(r, ArchiveRefusal::Corrupt(_))),
        ),
    ];
    for (what, make, want) in &cases {
        for threads in [1, 4] {
            let s = scene();
            let data = make(&s);
            let (entry, reason) =
                refused(s.unpack(&data, &layer_opts(threads)));
            assert!(want(&reason), "{what}: {reason} (entry {entry:?})");
            s.assert_outside_untouched();
            assert!(!Path::new("/tmp/zinstall-abs-evil").exists(), "{what}");
        }
    }
}

#[test]
fn decompression_bomb_is_refused() {
    let s = scene();
    let mut t = Tar::meta("layer");
    for i in 0..20 {
        t.file(&format!("root/zeros{i}"), &vec![0u8; 1 << 20], 0o644);
    }
    let zst = zstd::encode_all(&t.bytes()[..], 19).unwrap();
    assert!(zst.len() < 100_000, "a real bomb: {} bytes", zst.len());
    let opts = UnpackOptions {
        max_bytes: 8 << 20,
        ..layer_opts(2)
    };
    let (_, reason) = refused(s.unpack(&zst, &opts));
    // Refused on the declared sizes, before anything is written.
    assert_eq!(
        reason,
        ArchiveRefusal::LimitExceeded {
            what: "total declared bytes".into(),
            limit: 8 << 20
        }
    );
    s.assert_outside_untouched();
}

#[test]
fn errors_name_archive_entry_and_reason() {
    let s = scene();
    let mut t = Tar::meta("layer");
    t.link(tar::EntryType::Symlink, "root/up", "../..");
    t.file("root/up/x", b"x", 0o644);
    let e = s
        .unpack(&t.bytes(), &layer_opts(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains(s.archive.to_str().unwrap()), "{e}");
    assert!(e.contains("root/up/x"), "{e}");
    assert!(e.contains("symlink"), "{e}");
    // Symlinks already in the root are not followed either.
    fs::create_dir_all(s.root.join("etc")).unwrap();
    symlink(&s.outside, s.root.join("etc/trap")).unwrap();
    let mut t = Tar::meta("layer");
    t.file("root/etc/trap/sentinel", b"overwritten", 0o644);
    assert_eq!(
        refused(s.unpack(&t.bytes(), &layer_opts(2))).1,
        ArchiveRefusal::ThroughSymlink
    );
    s.assert_outside_untouched();
    let _ = fs::Permissions::from_mode(0o755);
}

#[test]
fn the_layers_own_root_entry_sets_the_roots_metadata() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = scene();
    let mut t = Tar::meta("layer");
    t.dir("root/", 0o750);
    t.file("root/f", b"x", 0o644);
    s.unpack(&t.bytes(), &layer_opts(2)).unwrap();
    let md = fs::metadata(&s.root).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o750);
    assert_eq!(md.mtime(), 1_600_000_000);
}

/// `len` bytes that differ with their position (so a chunk out of order or
/// repeated shows), with a run of zeros from `zeros.0` to `zeros.1`.
fn patterned(len: usize, zeros: (usize, usize)) -> Vec<u8> {
    (0..len)
        .map(|i| match (zeros.0..zeros.1).contains(&i) {
            true => 0,
            false => (i / 7 % 251) as u8 + 1,
        })
        .collect()
}

/// Bodies over 1 MiB read from a stream go to a worker in chunks while
/// the reader reads on: every byte in its place (zeros kept as holes, a
/// file ending in zeros its full length), a second entry for the same
/// path replacing the first, a hard link to a body still being written
/// finding it whole, whatever the worker count.
#[test]
fn large_bodies_from_a_stream_are_written_whole() {
    const MIB: usize = 1 << 20;
    let big = patterned(5 * MIB / 2 + 3, (MIB - 100, 2 * MIB + 4096 * 3));
    let tail_zeros = patterned(2 * MIB + 1, (MIB + 12_288, 2 * MIB + 1));
    let replaced = patterned(3 * MIB, (0, 0));
    let mut t = Tar::meta("layer");
    t.dir("root/", 0o755).dir("root/d/", 0o755);
    t.file("root/d/big", &big, 0o644);
    t.link(tar::EntryType::Link, "root/d/big.link", "root/d/big");
    t.file("root/d/tail", &tail_zeros, 0o600);
    t.file("root/d/twice", &replaced, 0o644);
    for i in 0..50 {
        t.file(
            &format!("root/d/small{i}"),
            format!("{i}").as_bytes(),
            0o644,
        );
    }
    t.file("root/d/twice", &big[..MIB + 1], 0o640);
    let data = zstd::encode_all(&t.bytes()[..], 1).unwrap();
    for threads in [1, 2, 8] {
        let s = scene();
        let r = s.unpack(&data, &layer_opts(threads)).unwrap();
        let d = s.root.join("d");
        assert!(fs::read(d.join("big")).unwrap() == big, "{threads}: big");
        assert!(fs::read(d.join("tail")).unwrap() == tail_zeros, "{threads}");
        assert!(fs::read(d.join("twice")).unwrap()[..] == big[..MIB + 1]);
        let twice = fs::metadata(d.join("twice")).unwrap();
        assert_eq!(twice.mode() & 0o777, 0o640, "{threads}: the second entry");
        let (b, l) = (
            fs::metadata(d.join("big")).unwrap(),
            fs::metadata(d.join("big.link")).unwrap(),
        );
        assert_eq!((b.ino(), b.nlink()), (l.ino(), 2), "{threads}");
        // The zeros are holes: fewer blocks than the length needs.
        let tail = fs::metadata(d.join("tail")).unwrap();
        assert!(
            tail.blocks() * 512 < tail.len() - (MIB as u64) / 2,
            "{threads}: {} blocks for {} bytes",
            tail.blocks(),
            tail.len()
        );
        assert_eq!(r.stats.files, 54, "{threads}: {:?}", r.stats);
        assert_eq!(fs::read_dir(&d).unwrap().count(), 54, "{threads}");
        s.assert_outside_untouched();
    }
}

/// A stream that ends inside a large body is refused as truncated, and
/// the body written so far is not left behind under any name.
#[test]
fn a_stream_cut_inside_a_large_body_leaves_no_part_of_it() {
    const MIB: usize = 1 << 20;
    let mut t = Tar::meta("layer");
    t.dir("root/", 0o755);
    t.file("root/first", b"whole", 0o644);
    t.file("root/big", &patterned(4 * MIB, (0, 0)), 0o644);
    let tar = t.bytes();
    // Cut after 2.5 MiB of the body: two chunks handed over, the third
    // short.
    let cut = tar.len() - 3 * 512 - 3 * MIB / 2;
    let data = zstd::encode_all(&tar[..cut], 1).unwrap();
    for threads in [1, 4] {
        let s = scene();
        let e = s.unpack(&data, &layer_opts(threads)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("truncated"), "{threads}: {msg}");
        assert!(msg.contains(s.archive.to_str().unwrap()), "{msg}");
        let left: Vec<_> = fs::read_dir(&s.root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !left.iter().any(|n| n != "first"),
            "{threads}: left {left:?}"
        );
        s.assert_outside_untouched();
    }
}
