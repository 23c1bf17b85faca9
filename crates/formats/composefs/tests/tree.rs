//! The source tree every image test writes: each file type, small and
//! large files, hard links, special bits, owners, capabilities, ACLs and
//! nanosecond times.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use zinstall_sys::fs::{Times, at};
use zinstall_testkit::{pseudo_random, tool};

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn run(cmd: &mut std::process::Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Large enough to be an object, several fs-verity blocks and more than
/// one Merkle level (> 128 blocks of 4 KiB).
pub const LARGE: usize = 3 * 1024 * 1024 + 123;

/// Builds the tree in `src` (an empty directory). With `root`, also
/// device nodes, other owners and a file capability.
pub fn build(src: &Path, root: bool) {
    fs::write(src.join("small.txt"), b"small\n").unwrap();
    fs::write(src.join("exactly64"), [b'x'; 64]).unwrap();
    fs::write(src.join("just65"), [b'y'; 65]).unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    fs::write(src.join("large"), pseudo_random(LARGE, 1)).unwrap();
    fs::write(src.join("large.copy"), pseudo_random(LARGE, 1)).unwrap();
    fs::write(src.join("block"), pseudo_random(4096, 2)).unwrap();
    fs::hard_link(src.join("large"), src.join("large.link")).unwrap();
    fs::hard_link(src.join("small.txt"), src.join("small.link")).unwrap();
    symlink("small.txt", src.join("sym")).unwrap();
    symlink("../nowhere/at/all", src.join("dangling")).unwrap();
    zinstall_testkit::mkfifo(&src.join("fifo"), 0o640);
    fs::create_dir_all(src.join("dir/sub/deeper")).unwrap();
    fs::write(src.join("dir/sub/deeper/file"), pseudo_random(5000, 3)).unwrap();
    fs::hard_link(src.join("large"), src.join("dir/sub/large.link2")).unwrap();
    fs::create_dir(src.join("sticky")).unwrap();
    chmod(&src.join("sticky"), 0o1777);
    fs::write(src.join("setuid"), pseudo_random(200, 4)).unwrap();
    chmod(&src.join("setuid"), 0o4755);
    fs::write(src.join("setgid"), b"sg").unwrap();
    chmod(&src.join("setgid"), 0o2711);
    fs::write(src.join("acl"), b"acl file\n").unwrap();
    run(tool("setfacl")
        .args(["-m", "u:1234:rwx"])
        .arg(src.join("acl")));
    fs::create_dir(src.join("acl.dir")).unwrap();
    run(tool("setfacl")
        .args(["-d", "-m", "g:4321:rx"])
        .arg(src.join("acl.dir")));
    if root {
        let dev = |name: &str, kind: u32, rdev: u64| {
            at::mknod(libc::AT_FDCWD, &c(&src.join(name)), kind | 0o660, rdev)
                .unwrap();
        };
        dev("null", libc::S_IFCHR, zinstall_sys::fs::makedev(1, 3));
        dev("loopdev", libc::S_IFBLK, zinstall_sys::fs::makedev(7, 200));
        fs::write(src.join("ping"), pseudo_random(300, 5)).unwrap();
        chmod(&src.join("ping"), 0o755);
        run(tool("setcap").arg("cap_net_raw+ep").arg(src.join("ping")));
        std::os::unix::fs::lchown(src.join("setuid"), Some(0), Some(0))
            .unwrap();
        std::os::unix::fs::lchown(src.join("dir"), Some(1234), Some(5678))
            .unwrap();
        std::os::unix::fs::lchown(src.join("sym"), Some(4321), Some(8765))
            .unwrap();
        std::os::unix::fs::lchown(src.join("large"), Some(1001), Some(1002))
            .unwrap();
    }
    stamp(src, 1_700_000_000);
}

/// Gives every entry under `dir` (and `dir` itself, last) its own
/// modification time with nanoseconds, symlinks included.
fn stamp(dir: &Path, base: i64) {
    let mut n = 0i64;
    let mut set = |p: &Path| {
        n += 1;
        let t = Times {
            atime: (base, 0),
            mtime: (base + n * 1000, 123_456_789 - n),
        };
        at::set_times(libc::AT_FDCWD, &c(p), &t).unwrap();
    };
    fn walk(p: &Path, set: &mut dyn FnMut(&Path)) {
        let mut names: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for q in names {
            if fs::symlink_metadata(&q).unwrap().is_dir() {
                walk(&q, set);
            }
            set(&q);
        }
    }
    walk(dir, &mut set);
    set(dir);
}
