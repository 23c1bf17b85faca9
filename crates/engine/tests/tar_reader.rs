//! The tar reader against real archives: made here, from one source tree,
//! by GNU tar (PAX with each sparse version, GNU format), bsdtar and
//! Python's tarfile, then read back and compared field by field with the
//! source (xattrs and ACLs byte for byte with what the kernel returns),
//! plain and compressed; and against archives damaged on purpose.
//!
//! A missing tool fails the test, naming the Debian package to install.
//! What needs root (file capabilities, device nodes) is left out of the
//! tree when not root, and the test says so.

// Linux only: the tree is made with Linux's xattr namespaces (user.*,
// trusted.*, security.capability) and POSIX ACLs (setfacl, setcap).
// illumos keeps extended attributes as attribute directories and ACLs as
// NFSv4 ACLs, which these fixtures do not make.
#![cfg(target_os = "linux")]

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_archive::ArchiveRefusal;
use zinstall_archive::compress::{self, Compression};
use zinstall_archive::tar::{
    Kind, Limits, Member, NameTable, Reader, TarError, TarErrorKind,
};
use zinstall_engine::Error;

const GIB: u64 = 1 << 30;

use zinstall_testkit::is_root;

/// A command for `tool`, which must be installed (from `package`).
fn tool(name: &str, package: &str) -> Command {
    let found = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d.join(name).is_file())
    });
    assert!(
        found,
        "{name} not found: install the Debian package {package} \
         (apt-get install {package})"
    );
    Command::new(name)
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The xattrs of `p` as the kernel returns them, sorted by name.
fn xattrs_of(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    zinstall_testkit::xattrs(p)
}

/// The source tree, and what went into it.
struct Tree {
    _dir: tempfile::TempDir,
    work: PathBuf,
    src: PathBuf,
    /// Top-level names, in archive order.
    names: Vec<&'static str>,
    caps: bool,
}

const LONG_DIR: &str = "long-directory-name-that-goes-on-and-on-and-on";

fn long_name() -> String {
    format!(
        "{LONG_DIR}/{}/file-with-a-name-past-one-hundred-bytes",
        "x".repeat(60)
    )
}

/// Builds the source tree: capabilities (root only), ACLs naming uid 10,
/// default ACLs, xattrs with newlines and NULs, a 1960 mtime, a small
/// and a 9 GiB sparse file, links, a FIFO, a long name, a device (root
/// only).
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().to_path_buf();
    let src = work.join("src");
    fs::create_dir(&src).unwrap();
    let p = |n: &str| src.join(n);
    let mut names = vec!["plain", "hl"];
    fs::write(p("plain"), b"plain text\n").unwrap();
    fs::hard_link(p("plain"), p("hl")).unwrap();

    let caps = is_root();
    if caps {
        fs::write(p("capf"), b"cap\n").unwrap();
        run(tool("setcap", "libcap2-bin")
            .arg("cap_dac_override,cap_fowner+ep")
            .arg(p("capf")));
        let cap = xattrs_of(&p("capf"));
        assert!(
            cap.iter()
                .any(|(n, v)| n == b"security.capability" && v.contains(&0x0a)),
            "the capability value holds a newline byte: {cap:?}"
        );
        names.push("capf");
    } else {
        zinstall_testkit::unmet("root, for file capabilities (setcap)");
    }

    fs::write(p("aclf"), b"acl\n").unwrap();
    run(tool("setfacl", "acl")
        .args(["-m", "u:10:rwx,g:20:r-x"])
        .arg(p("aclf")));
    fs::create_dir(p("acldir")).unwrap();
    fs::write(p("acldir/inner"), b"inner\n").unwrap();
    run(tool("setfacl", "acl")
        .args(["-m", "u:10:r-x"])
        .arg(p("acldir")));
    run(tool("setfacl", "acl")
        .args(["-d", "-m", "u:10:r-x,g:20:rwx"])
        .arg(p("acldir")));
    names.extend(["aclf", "acldir"]);

    fs::write(p("xf"), b"xattrs\n").unwrap();
    run(tool("setfattr", "attr")
        .args(["-n", "user.nl", "-v", "line one\nline two\n"])
        .arg(p("xf")));
    run(tool("setfattr", "attr")
        .args(["-n", "user.bin", "-v", "0x0a000aff00"])
        .arg(p("xf")));
    names.push("xf");

    fs::write(p("old"), b"old\n").unwrap();
    run(tool("touch", "coreutils")
        .args(["-d", "1960-01-01 00:00:00.25 UTC"])
        .arg(p("old")));
    let m = fs::metadata(p("old")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (-315_619_200, 250_000_000));
    names.push("old");

    // Data at 500000 and at the end of 1 MiB; the rest holes.
    let f = File::create(p("sp")).unwrap();
    f.set_len(1 << 20).unwrap();
    f.write_all_at(&[0xab; 3000], 500_000).unwrap();
    f.write_all_at(b"end", (1 << 20) - 3).unwrap();
    // More than 8 GiB: a data block at 5 GiB and the last bytes.
    let f = File::create(p("big")).unwrap();
    f.set_len(9 * GIB).unwrap();
    f.write_all_at(b"middle", 5 * GIB).unwrap();
    f.write_all_at(b"tail", 9 * GIB - 4).unwrap();
    names.extend(["sp", "big"]);

    symlink("plain", p("ln")).unwrap();
    run(tool("mkfifo", "coreutils").arg(p("fifo")));
    names.extend(["ln", "fifo"]);
    let long = p(&long_name());
    fs::create_dir_all(long.parent().unwrap()).unwrap();
    fs::write(&long, b"long\n").unwrap();
    names.push(LONG_DIR);
    if is_root() {
        run(tool("mknod", "coreutils")
            .arg(p("cdev"))
            .args(["c", "1", "3"]));
        names.push("cdev");
    } else {
        zinstall_testkit::unmet("root, for device nodes (mknod)");
    }
    Tree {
        _dir: dir,
        work,
        src,
        names,
        caps,
    }
}

/// What a member read from an archive holds.
struct Got {
    m: Member,
    body: Vec<u8>,
}

/// Reads every member of `path` (compression told by content), bodies
/// included, and drains the stream.
fn read_archive(path: &Path, limits: Limits) -> Result<Vec<Got>, Error> {
    let mut f = File::open(path).unwrap();
    let mut head = [0u8; compress::MAGIC_LEN];
    let n = f.read(&mut head).unwrap();
    let c = compress::compression_of(&head[..n]);
    let f = File::open(path).unwrap();
    let d = compress::decompress(io::BufReader::new(f), c).unwrap();
    read_from(Reader::new(d, limits)).map_err(|e| Error::tar(path, e))
}

fn read_from<R: Read>(mut r: Reader<R>) -> Result<Vec<Got>, TarError> {
    let mut out = Vec::new();
    while let Some(m) = r.next()? {
        let mut body = Vec::new();
        r.body().read_to_end(&mut body).map_err(TarError::from_io)?;
        assert_eq!(body.len() as u64, m.stored_size);
        out.push(Got { m, body });
    }
    r.finish()?;
    Ok(out)
}

/// The same plain tar file read with seeks, bodies copied from the
/// members' offsets in the file: must give what streaming gave.
fn check_seekable(path: &Path, streamed: &[Got]) {
    let f = File::open(path).unwrap();
    let mut r = Reader::seekable(f, Limits::default()).unwrap();
    let data = File::open(path).unwrap();
    let mut i = 0;
    while let Some(m) = r.next().unwrap() {
        let mut body = vec![0u8; m.stored_size as usize];
        let mut at = 0usize;
        for (_, len, off) in m.segments() {
            data.read_exact_at(&mut body[at..at + len as usize], off)
                .unwrap();
            at += len as usize;
        }
        assert_eq!(m, streamed[i].m);
        assert_eq!(body, streamed[i].body, "{}", m.name_lossy());
        i += 1;
    }
    assert_eq!(i, streamed.len());
}

/// How a writer records times and xattrs.
#[derive(Clone, Copy)]
struct Expect {
    time: Time,
    xattrs: Xattrs,
}

#[derive(Clone, Copy, PartialEq)]
enum Time {
    /// Nanoseconds (PAX from GNU tar).
    Exact,
    /// Nanoseconds, except that bsdtar writes a negative time with a
    /// fraction as seconds then nanoseconds, which reads 0.5 s off
    /// here (see `parse_time`).
    Libarchive,
    /// A float's decimal form (Python's PAX): within a microsecond.
    Micro,
    /// Whole seconds rounded down (GNU tar's GNU format).
    Floor,
    /// Whole seconds rounded toward zero (Python's GNU format).
    Trunc,
}

#[derive(Clone, Copy, PartialEq)]
enum Xattrs {
    /// Every xattr of the source.
    All,
    /// Only the ACLs (GNU tar `--acls` without `--xattrs`).
    AclsOnly,
    /// None (formats without them).
    None,
}

fn strip(name: &[u8]) -> String {
    let s = String::from_utf8(name.to_vec()).unwrap();
    let s = s.strip_prefix("./").unwrap_or(&s).to_string();
    s.strip_suffix('/').unwrap_or(&s).to_string()
}

/// Compares every member with its source; returns the names seen.
fn compare(t: &Tree, got: &[Got], e: Expect) -> Vec<String> {
    let mut seen = Vec::new();
    for g in got {
        let m = &g.m;
        let name = strip(&m.name);
        let path = t.src.join(&name);
        let st = fs::symlink_metadata(&path)
            .unwrap_or_else(|_| panic!("{name}: not in the source"));
        let what = |field: &str| format!("{name}: {field}");
        let ft = st.file_type();
        let want_kind = if m.kind == Kind::HardLink {
            let target = t.src.join(strip(m.link.as_deref().unwrap()));
            assert_eq!(
                fs::metadata(target).unwrap().ino(),
                st.ino(),
                "{}",
                what("hard link target")
            );
            Kind::HardLink
        } else if ft.is_dir() {
            Kind::Directory
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if st.mode() & libc::S_IFMT == libc::S_IFIFO {
            Kind::Fifo
        } else if st.mode() & libc::S_IFMT == libc::S_IFCHR {
            Kind::CharDevice
        } else {
            Kind::File
        };
        assert_eq!(m.kind, want_kind, "{}", what("kind"));
        assert_eq!(m.mode, st.mode() & 0o7777, "{}", what("mode"));
        assert_eq!((m.uid, m.gid), (st.uid(), st.gid()), "{}", what("owner"));
        let (s, ns) = (st.mtime(), st.mtime_nsec() as u32);
        let want_time = match e.time {
            Time::Exact => (s, ns),
            Time::Libarchive if s < 0 && ns > 0 => (s - 1, 1_000_000_000 - ns),
            Time::Libarchive => (s, ns),
            Time::Floor => (s, 0),
            Time::Trunc if s < 0 && ns > 0 => (s + 1, 0),
            Time::Trunc => (s, 0),
            Time::Micro => {
                let d = (m.mtime.0 - s) * 1_000_000_000 + i64::from(m.mtime.1)
                    - i64::from(ns);
                assert!(d.abs() < 1000, "{}: {:?}", what("mtime"), m.mtime);
                m.mtime
            }
        };
        assert_eq!(m.mtime, want_time, "{}", what("mtime"));
        if m.kind == Kind::Symlink {
            let target = fs::read_link(&path).unwrap();
            assert_eq!(
                m.link.as_deref(),
                Some(target.as_os_str().as_bytes()),
                "{}",
                what("link")
            );
        }
        if m.kind == Kind::CharDevice {
            let rdev = st.rdev();
            assert_eq!(
                m.dev,
                (libc::major(rdev), libc::minor(rdev)),
                "{}",
                what("dev")
            );
        }
        let mut xattrs = m.xattrs.clone();
        xattrs.sort();
        let want: Vec<_> = match e.xattrs {
            Xattrs::All => xattrs_of(&path),
            Xattrs::AclsOnly => xattrs_of(&path)
                .into_iter()
                .filter(|(n, _)| n.starts_with(b"system.posix_acl_"))
                .collect(),
            Xattrs::None => Vec::new(),
        };
        assert_eq!(xattrs, want, "{}", what("xattrs"));
        if m.kind == Kind::File {
            check_body(&path, g, &what("body"));
        }
        seen.push(name);
    }
    seen.sort();
    seen
}

/// The body, placed by the sparse map if any, is the source's content;
/// bytes outside the map are zero (read for files up to 16 MiB).
fn check_body(path: &Path, g: &Got, what: &str) {
    let m = &g.m;
    let src = File::open(path).unwrap();
    let size = src.metadata().unwrap().len();
    assert_eq!(m.size, size, "{what}: size");
    let segments: Vec<(u64, u64)> = match &m.sparse {
        Some(map) => map.clone(),
        None => vec![(0, m.stored_size)],
    };
    let mut at = 0usize;
    for (off, len) in &segments {
        let mut want = vec![0u8; *len as usize];
        src.read_exact_at(&mut want, *off).unwrap();
        assert!(
            g.body[at..at + *len as usize] == want[..],
            "{what}: segment at {off}"
        );
        at += *len as usize;
    }
    if size <= 16 << 20 {
        let all = fs::read(path).unwrap();
        let mut covered = vec![false; all.len()];
        for (off, len) in &segments {
            covered[*off as usize..(*off + *len) as usize].fill(true);
        }
        assert!(
            all.iter().zip(&covered).all(|(&b, &c)| c || b == 0),
            "{what}: data outside the sparse map"
        );
    } else {
        for (at, len) in [(5 * GIB, 6), (9 * GIB - 4, 4)] {
            assert!(
                segments.iter().any(|&(o, l)| o <= at && at + len <= o + l),
                "{what}: written bytes at {at} not in the map"
            );
        }
    }
}

/// Every name a recursive archive of `names` holds.
fn expected_names(t: &Tree, names: &[&str]) -> Vec<String> {
    fn walk(root: &Path, rel: &str, out: &mut Vec<String>) {
        out.push(rel.to_string());
        let p = root.join(rel);
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                let n = e.unwrap().file_name();
                walk(root, &format!("{rel}/{}", n.to_str().unwrap()), out);
            }
        }
    }
    let mut out = Vec::new();
    for n in names {
        walk(&t.src, n, &mut out);
    }
    out.sort();
    out
}

fn gnu_tar(t: &Tree, out: &str, args: &[&str], names: &[&str]) -> PathBuf {
    let path = t.work.join(out);
    run(tool("tar", "tar")
        .args(args)
        .arg("-cf")
        .arg(&path)
        .arg("-C")
        .arg(&t.src)
        .args(names));
    path
}

fn check_archive(t: &Tree, path: &Path, names: &[&str], e: Expect) -> Vec<Got> {
    let got = read_archive(path, Limits::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(compare(t, &got, e), expected_names(t, names));
    check_seekable(path, &got);
    got
}

fn sparse_members(got: &[Got]) -> Vec<String> {
    got.iter()
        .filter(|g| g.m.sparse.is_some())
        .map(|g| strip(&g.m.name))
        .collect()
}

#[test]
fn gnu_tar_pax_every_sparse_version_with_xattrs_and_acls() {
    let t = tree();
    let e = Expect {
        time: Time::Exact,
        xattrs: Xattrs::All,
    };
    for version in ["0.0", "0.1", "1.0"] {
        let path = gnu_tar(
            &t,
            &format!("gnu-pax-{version}.tar"),
            &[
                "--format=pax",
                "--xattrs",
                "--acls",
                "--xattrs-include=*",
                "-S",
                &format!("--sparse-version={version}"),
            ],
            &t.names,
        );
        let got = check_archive(&t, &path, &t.names, e);
        assert_eq!(sparse_members(&got), ["sp", "big"], "{version}");
        let big = got.iter().find(|g| strip(&g.m.name) == "big").unwrap();
        assert_eq!(big.m.size, 9 * GIB);
        if t.caps {
            let capf = got.iter().find(|g| g.m.name == b"capf").unwrap();
            assert!(
                capf.m
                    .xattrs
                    .iter()
                    .any(|(n, _)| n == b"security.capability")
            );
        }
    }
}

#[test]
fn gnu_tar_text_acls_only() {
    // Without --xattrs, GNU tar stores ACLs only as text (names for ids
    // the host can name): they are turned into the kernel's xattrs.
    let t = tree();
    let names = ["aclf", "acldir", "plain"];
    let path = gnu_tar(&t, "gnu-acls.tar", &["--format=pax", "--acls"], &names);
    let raw = fs::read(&path).unwrap();
    assert!(find(&raw, b"SCHILY.acl.default=").is_some());
    assert!(find(&raw, b"SCHILY.xattr.system.posix_acl").is_none());
    check_archive(
        &t,
        &path,
        &names,
        Expect {
            time: Time::Exact,
            xattrs: Xattrs::AclsOnly,
        },
    );
    // Names are resolved only when no id is given: with an empty table
    // a named entry is dropped (GNU tar warns and goes on), and a quirk
    // says which.
    let f = File::open(&path).unwrap();
    let mut r =
        Reader::new(f, Limits::default()).with_names(NameTable::empty());
    let host = NameTable::host();
    if host.uid(b"uucp") == Some(10) {
        let mut dropped = Vec::new();
        while r.next().unwrap().is_some() {
            dropped.extend(r.take_quirks());
        }
        assert!(
            dropped.iter().any(|q| q.to_string().contains("uucp")),
            "{dropped:?}"
        );
    }
}

#[test]
fn gnu_tar_gnu_format_old_sparse_and_long_names() {
    let t = tree();
    let path = gnu_tar(&t, "gnu.tar", &["--format=gnu", "-S"], &t.names);
    let raw = fs::read(&path).unwrap();
    assert!(find(&raw, b"././@LongLink").is_some());
    let got = check_archive(
        &t,
        &path,
        &t.names,
        Expect {
            time: Time::Floor,
            xattrs: Xattrs::None,
        },
    );
    assert_eq!(sparse_members(&got), ["sp", "big"]);
    assert!(got.iter().any(|g| strip(&g.m.name) == long_name()));
}

#[test]
fn bsdtar_pax_with_xattrs_acls_and_sparse() {
    let t = tree();
    let path = t.work.join("bsd.tar");
    run(tool("bsdtar", "libarchive-tools")
        .args(["--format=pax", "--xattrs", "--acls", "-cf"])
        .arg(&path)
        .arg("-C")
        .arg(&t.src)
        .args(&t.names));
    let raw = fs::read(&path).unwrap();
    // Star-style text ACLs with ids, xattrs in both spellings.
    assert!(
        find(&raw, b"user:uucp:rwx:10").is_some()
            || find(&raw, b"user:10:rwx:10").is_some()
    );
    assert!(find(&raw, b"LIBARCHIVE.xattr.user.nl=").is_some());
    let got = check_archive(
        &t,
        &path,
        &t.names,
        Expect {
            time: Time::Libarchive,
            xattrs: Xattrs::All,
        },
    );
    assert_eq!(sparse_members(&got), ["sp", "big"]);
}

#[test]
fn python_tarfile_pax_and_gnu() {
    let t = tree();
    // tarfile reads sparse files whole: the 9 GiB one stays out.
    let names: Vec<&str> =
        t.names.iter().copied().filter(|&n| n != "big").collect();
    for (format, time) in
        [("PAX_FORMAT", Time::Micro), ("GNU_FORMAT", Time::Trunc)]
    {
        let path = t.work.join(format!("py-{format}.tar"));
        let script = format!(
            "import sys, tarfile\n\
             t = tarfile.open(sys.argv[1], 'w', format=tarfile.{format})\n\
             for n in sys.argv[3:]:\n    t.add(sys.argv[2] + '/' + n, arcname=n)\n\
             t.close()\n"
        );
        run(tool("python3", "python3")
            .args(["-c", &script])
            .arg(&path)
            .arg(&t.src)
            .args(&names));
        check_archive(
            &t,
            &path,
            &names,
            Expect {
                time,
                xattrs: Xattrs::None,
            },
        );
    }
    // A binary xattr in a PAX header Python writes itself.
    let path = t.work.join("py-xattr.tar");
    run(tool("python3", "python3")
        .arg("-c")
        .arg(
            "import sys, tarfile\n\
         t = tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT)\n\
         i = tarfile.TarInfo('x'); i.size = 3\n\
         i.pax_headers = {'SCHILY.xattr.user.bin': 'a\\n\\x00b', 'size': '3'}\n\
         import io; t.addfile(i, io.BytesIO(b'abc'))\n\
         t.close()\n",
        )
        .arg(&path));
    let got = read_archive(&path, Limits::default()).unwrap();
    assert_eq!(
        got[0].m.xattrs,
        vec![(b"user.bin".to_vec(), b"a\n\0b".to_vec())]
    );
    assert_eq!(got[0].body, b"abc");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A small GNU tar PAX archive of the plain files, for the compression
/// and damage tests.
fn small_archive(t: &Tree) -> PathBuf {
    gnu_tar(
        t,
        "small.tar",
        &["--format=pax", "--xattrs", "--xattrs-include=*"],
        &["plain", "xf", "old", "acldir"],
    )
}

fn member_names(got: &[Got]) -> Vec<String> {
    got.iter().map(|g| strip(&g.m.name)).collect()
}

fn compressed(t: &Tree, tar: &Path, out: &str, cmd: &mut Command) -> PathBuf {
    let bytes = run(cmd.arg(tar));
    let path = t.work.join(out);
    fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn compressed_archives_read_to_their_end() {
    let t = tree();
    let tar = small_archive(&t);
    let plain = member_names(&read_archive(&tar, Limits::default()).unwrap());

    let gz = compressed(&t, &tar, "a.tar.gz", tool("gzip", "gzip").arg("-c"));
    let zst = compressed(
        &t,
        &tar,
        "a.tar.zst",
        tool("zstd", "zstd").args(["-q", "-c"]),
    );
    let pz = compressed(
        &t,
        &tar,
        "a.tar.pzst",
        tool("pzstd", "zstd").args(["-q", "-p", "2", "-c"]),
    );
    let xz = compressed(&t, &tar, "a.tar.xz", tool("xz", "xz-utils").arg("-c"));
    // gzip in two members: the tar split in two, each half compressed.
    let raw = fs::read(&tar).unwrap();
    let half = t.work.join("half");
    let mut two = Vec::new();
    for part in [&raw[..1536], &raw[1536..]] {
        fs::write(&half, part).unwrap();
        two.extend(run(tool("gzip", "gzip").arg("-c").arg(&half)));
    }
    let gz2 = t.work.join("two.tar.gz");
    fs::write(&gz2, &two).unwrap();
    // A skippable frame first, as seekable zstd writers put metadata.
    let mut skip = vec![0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3];
    skip.extend(fs::read(&zst).unwrap());
    let zskip = t.work.join("skip.tar.zst");
    fs::write(&zskip, &skip).unwrap();

    let pz_bytes = fs::read(&pz).unwrap();
    assert_eq!(
        &pz_bytes[1..4],
        &[0x2a, 0x4d, 0x18],
        "pzstd starts with a skippable frame"
    );
    for (p, c) in [
        (&gz, Compression::Gzip),
        (&gz2, Compression::Gzip),
        (&zst, Compression::Zstd),
        (&pz, Compression::Zstd),
        (&zskip, Compression::Zstd),
        (&xz, Compression::Xz),
    ] {
        let head = fs::read(p).unwrap();
        assert_eq!(compress::compression_of(&head[..6]), c, "{}", p.display());
        let got = read_archive(p, Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(member_names(&got), plain, "{}", p.display());
    }
}

/// Expects `path` to be refused; returns the error's text.
fn refused(
    path: &Path,
    limits: Limits,
    why: impl Fn(&Error) -> bool,
) -> String {
    let e = match read_archive(path, limits) {
        Ok(_) => panic!("{} was read", path.display()),
        Err(e) => e,
    };
    let s = e.to_string();
    assert!(why(&e), "{}: {s}", path.display());
    assert!(
        s.contains(&path.display().to_string()),
        "names the archive: {s}"
    );
    s
}

fn corrupt(e: &Error) -> bool {
    matches!(
        e,
        Error::Archive {
            reason: ArchiveRefusal::Corrupt(_),
            ..
        }
    )
}

fn truncated(e: &Error) -> bool {
    matches!(
        e,
        Error::Archive {
            reason: ArchiveRefusal::Truncated { .. },
            ..
        }
    )
}

fn limit(e: &Error) -> bool {
    matches!(
        e,
        Error::Archive {
            reason: ArchiveRefusal::LimitExceeded { .. },
            ..
        }
    )
}

#[test]
fn damaged_compressed_archives_are_refused() {
    let t = tree();
    let tar = small_archive(&t);
    let write = |name: &str, b: &[u8]| {
        let p = t.work.join(name);
        fs::write(&p, b).unwrap();
        p
    };

    let gz = fs::read(compressed(
        &t,
        &tar,
        "a.tar.gz",
        tool("gzip", "gzip").arg("-c"),
    ))
    .unwrap();
    let mut bad = gz.clone();
    let n = bad.len();
    bad[n - 8] ^= 0xff; // CRC32
    let s = refused(&write("crc.tar.gz", &bad), Limits::default(), corrupt);
    assert!(s.contains("gzip"), "{s}");
    let mut bad = gz.clone();
    bad[n - 1] ^= 0x01; // ISIZE
    refused(&write("isize.tar.gz", &bad), Limits::default(), corrupt);
    refused(
        &write("cut.tar.gz", &gz[..n - 4]),
        Limits::default(),
        truncated,
    );
    // Garbage after the last member: read and ignored, as `gzip -d`
    // ignores it, and logged for the unpack's notice.
    let mut junk = gz.clone();
    junk.extend_from_slice(b"garbage after the last gzip member");
    let d =
        compress::decompress(&junk[..], compress::Compression::Gzip).unwrap();
    let log = d.ignored();
    read_from(Reader::new(d, Limits::default())).unwrap();
    assert_eq!(
        log.take(),
        vec![compress::Ignored::GzipGarbage {
            at: gz.len() as u64,
            len: 34
        }]
    );

    let zst = fs::read(compressed(
        &t,
        &tar,
        "a.tar.zst",
        tool("zstd", "zstd").args(["-q", "-c"]),
    ))
    .unwrap();
    let mut bad = zst.clone();
    let n = bad.len();
    bad[n - 1] ^= 0xff; // content checksum
    let s = refused(&write("sum.tar.zst", &bad), Limits::default(), corrupt);
    assert!(s.contains("zstd"), "{s}");
    refused(
        &write("cut.tar.zst", &zst[..n - 2]),
        Limits::default(),
        truncated,
    );

    let xz = fs::read(compressed(
        &t,
        &tar,
        "a.tar.xz",
        tool("xz", "xz-utils").arg("-c"),
    ))
    .unwrap();
    refused(
        &write("cut.tar.xz", &xz[..xz.len() - 10]),
        Limits::default(),
        |e| truncated(e) || corrupt(e),
    );
}

/// Rewrites the checksum of the header at `at`.
fn fix_sum(b: &mut [u8], at: usize) {
    let h = &mut b[at..at + 512];
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&x| u64::from(x)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// Replaces `from` by `to` (same length) at its first occurrence.
fn patch(b: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let at = find(b, from).unwrap_or_else(|| {
        panic!("{:?} not found", String::from_utf8_lossy(from))
    });
    b[at..at + from.len()].copy_from_slice(to);
}

#[test]
fn damaged_tar_archives_are_refused() {
    let t = tree();
    let tar = small_archive(&t);
    let raw = fs::read(&tar).unwrap();
    let write = |name: &str, b: &[u8]| {
        let p = t.work.join(name);
        fs::write(&p, b).unwrap();
        p
    };
    let got = read_archive(&tar, Limits::default()).unwrap();
    let plain = &got[0].m;
    assert_eq!(plain.name, b"plain");
    let body_at = plain.data_offset as usize;
    // In a header, in a body, in the padding.
    refused(
        &write("cut-header.tar", &raw[..100]),
        Limits::default(),
        truncated,
    );
    refused(
        &write("cut-body.tar", &raw[..body_at + 5]),
        Limits::default(),
        truncated,
    );
    refused(
        &write("cut-pad.tar", &raw[..body_at + 100]),
        Limits::default(),
        truncated,
    );
    // Ending on a block boundary with no end blocks is the end.
    let end = got.last().unwrap();
    let last_end = (end.m.data_offset + end.m.stored_size).div_ceil(512) * 512;
    assert!(
        read_archive(
            &write("no-end.tar", &raw[..last_end as usize]),
            Limits::default()
        )
        .is_ok()
    );

    let mut bad_sum = raw.clone();
    // A byte of the first header's name.
    bad_sum[plain.header_offset as usize] ^= 0x20;
    refused(&write("sum.tar", &bad_sum), Limits::default(), |e| {
        e.to_string().contains("checksum")
    });

    // A PAX record whose length lies.
    let mut lie = raw.clone();
    let at = find(&lie, b" mtime=").unwrap();
    lie[at - 1] += 1;
    refused(&write("lie.tar", &lie), Limits::default(), corrupt);

    // Garbage after the end blocks: read to the end (so that a
    // decompressor's trailer is checked), ignored and said, as GNU tar
    // ignores it (tests/tar_quirks.rs unpacks it).
    let mut junk = raw.clone();
    junk.extend_from_slice(b"garbage");
    let f = File::open(write("junk.tar", &junk)).unwrap();
    let mut r = Reader::new(f, Limits::default());
    while r.next().unwrap().is_some() {}
    r.read_rest().unwrap();
    let q = r.take_quirks();
    assert_eq!(q.len(), 1);
    assert!(
        q[0].to_string().contains("non-zero data after the end"),
        "{}",
        q[0]
    );
}

#[test]
fn hostile_sizes_are_refused() {
    let t = tree();
    let write = |name: &str, b: &[u8]| {
        let p = t.work.join(name);
        fs::write(&p, b).unwrap();
        p
    };
    // PAX size 10 GiB, 512 bytes of body, then the end of the stream.
    let mut pax = b"20 size=10737418240\n".to_vec();
    pax.resize(512, 0);
    let mut b = header(b"PaxHeader", b'x', 20).to_vec();
    b.extend_from_slice(&pax);
    b.extend_from_slice(&header(b"huge", b'0', 0));
    b.extend_from_slice(&[7u8; 512]);
    let p = write("huge.tar", &b);
    let s = refused(&p, Limits::default(), truncated);
    assert!(s.contains("\"huge\""), "{s}");
    // The same file read with seeks: refused when the member is returned.
    let mut r =
        Reader::seekable(File::open(&p).unwrap(), Limits::default()).unwrap();
    assert!(r.next().unwrap_err().is_truncated());

    // A long-name bomb.
    let mut b = header(b"././@LongLink", b'L', 1 << 40).to_vec();
    b.extend_from_slice(&[b'a'; 512]);
    let s = refused(&write("longname.tar", &b), Limits::default(), limit);
    assert!(s.contains("long name bytes"), "{s}");

    // A sparse bomb: GNU tar's own archive of a 3 GiB hole.
    let f = File::create(t.src.join("hole")).unwrap();
    f.set_len(3 * GIB).unwrap();
    let bomb = gnu_tar(
        &t,
        "bomb.tar",
        &["--format=pax", "-S", "--sparse-version=1.0"],
        &["hole"],
    );
    let len = fs::metadata(&bomb).unwrap().len();
    assert!(len <= 10240, "{len}");
    let got = read_archive(&bomb, Limits::default()).unwrap();
    assert_eq!(got[0].m.size, 3 * GIB);
    let limits = Limits {
        max_total_bytes: GIB,
        ..Limits::default()
    };
    let s = refused(&bomb, limits, limit);
    assert!(
        s.contains("\"hole\"") && s.contains("total declared bytes"),
        "{s}"
    );
}

#[test]
fn damaged_sparse_maps_are_refused() {
    let t = tree();
    // Two data segments, so that they can be made to overlap.
    let f = File::create(t.src.join("two")).unwrap();
    f.set_len(1 << 20).unwrap();
    f.write_all_at(&[1u8; 100], 0).unwrap();
    f.write_all_at(&[2u8; 100], 600_000).unwrap();
    let path = gnu_tar(
        &t,
        "two.tar",
        &["--format=pax", "-S", "--sparse-version=0.1"],
        &["two"],
    );
    let raw = fs::read(&path).unwrap();
    let got = read_archive(&path, Limits::default()).unwrap();
    let map = got[0].m.sparse.clone().unwrap();
    assert_eq!(map.len(), 2, "{map:?}");
    let second = map[1].0.to_string();
    let write = |name: &str, b: &[u8]| {
        let p = t.work.join(name);
        fs::write(&p, b).unwrap();
        p
    };
    // Overlapping: the second segment moved onto the first.
    let mut overlap = raw.clone();
    patch(
        &mut overlap,
        format!(",{second},").as_bytes(),
        format!(",{:0w$},", 1, w = second.len()).as_bytes(),
    );
    let s =
        refused(&write("overlap.tar", &overlap), Limits::default(), corrupt);
    assert!(s.contains("overlaps"), "{s}");
    // Out of range: the real size made tiny.
    let mut short = raw.clone();
    patch(
        &mut short,
        b"GNU.sparse.size=1048576",
        b"GNU.sparse.size=0000001",
    );
    let s = refused(&write("range.tar", &short), Limits::default(), corrupt);
    assert!(s.contains("past the real size"), "{s}");
}

/// A ustar header block.
fn header(name: &[u8], typ: u8, size: u64) -> [u8; 512] {
    let mut b = [0u8; 512];
    b[..name.len()].copy_from_slice(name);
    b[100..108].copy_from_slice(b"0000644\0");
    b[108..116].copy_from_slice(b"0000000\0");
    b[116..124].copy_from_slice(b"0000000\0");
    if size < 1 << 33 {
        b[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    } else {
        b[128..136].copy_from_slice(&size.to_be_bytes());
        b[124] = 0x80;
    }
    b[136..148].copy_from_slice(b"00000000000\0");
    b[156] = typ;
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    fix_sum(&mut b, 0);
    b
}

#[test]
fn refusals_convert_to_archive_errors() {
    let e = TarError {
        member: "m".into(),
        offset: 0,
        kind: TarErrorKind::Truncated("body"),
    };
    let s = Error::tar(Path::new("/x.tar"), e).to_string();
    assert_eq!(s, "/x.tar: entry \"m\": archive truncated in the body");
}

/// Unpacks `archive` into a new root and compares it with the source
/// tree on every attribute a copy keeps (access times aside: the archives
/// here do not hold them). Returns the differences, one line each.
fn unpack_and_verify(t: &Tree, archive: &Path, names: &[&str]) -> String {
    use zinstall_engine::unpack::{UnpackOptions, unpack};
    use zinstall_verify::{CompareOptions, compare};
    let root = t.work.join(format!(
        "root-{}",
        archive.file_name().unwrap().to_string_lossy()
    ));
    fs::create_dir(&root).unwrap();
    let opts = UnpackOptions {
        allow_devices: true,
        ..UnpackOptions::default()
    };
    unpack(archive, &root, &opts)
        .unwrap_or_else(|e| panic!("{}: {e}", archive.display()));
    let opts = CompareOptions {
        atime: false,
        sparse: true,
        ..CompareOptions::default()
    };
    let mut out = String::new();
    for n in names {
        let c = compare(&t.src.join(n), &root.join(n), &opts).unwrap();
        assert!(c.entries_compared > 0, "{n}: nothing compared");
        out.push_str(&c.to_string());
    }
    out
}

#[test]
fn layers_install_with_every_attribute_a_copy_keeps() {
    let t = tree();
    for (out, args) in [
        ("v-pax-0.0.tar", "--sparse-version=0.0"),
        ("v-pax-0.1.tar", "--sparse-version=0.1"),
        ("v-pax-1.0.tar", "--sparse-version=1.0"),
    ] {
        let path = gnu_tar(
            &t,
            out,
            &[
                "--format=pax",
                "--xattrs",
                "--acls",
                "--xattrs-include=*",
                "-S",
                args,
            ],
            &t.names,
        );
        let diff = unpack_and_verify(&t, &path, &t.names);
        assert!(diff.is_empty(), "{out}:\n{diff}");
        // Compressed the same layer reads the same.
        let zst = compressed(
            &t,
            &path,
            &format!("{out}.zst"),
            tool("zstd", "zstd").args(["-q", "-c"]),
        );
        let diff = unpack_and_verify(&t, &zst, &t.names);
        assert!(diff.is_empty(), "{out}.zst:\n{diff}");
    }
    // GNU tar's text ACLs alone (no raw ACL xattrs) give the same ACLs.
    let path = gnu_tar(
        &t,
        "v-acl-text.tar",
        &["--format=pax", "--acls", "-S"],
        &["aclf", "acldir"],
    );
    let diff = unpack_and_verify(&t, &path, &["aclf", "acldir"]);
    assert!(diff.is_empty(), "text ACLs:\n{diff}");
    // bsdtar: everything but the 1960 file's fraction, which bsdtar
    // writes in a form no other reader takes (see Time::BsdNegative).
    let names: Vec<&str> =
        t.names.iter().copied().filter(|&n| n != "old").collect();
    let path = t.work.join("v-bsdtar.tar");
    run(tool("bsdtar", "libarchive-tools")
        .args(["--format=pax", "--xattrs", "--acls", "-S", "-cf"])
        .arg(&path)
        .arg("-C")
        .arg(&t.src)
        .args(&names));
    let diff = unpack_and_verify(&t, &path, &names);
    assert!(diff.is_empty(), "bsdtar:\n{diff}");
}
