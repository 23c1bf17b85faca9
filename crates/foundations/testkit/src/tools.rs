//! External programs the tests drive, and the Debian package of each: a
//! test that needs one that is missing fails saying what to install
//! (`bash .ci/test` installs them all when run as root).

use std::path::Path;
use std::process::{Command, Output};

/// The Debian package that ships `program`.
pub fn package(program: &str) -> &'static str {
    match program {
        "getcap" | "setcap" => "libcap2-bin",
        "getfacl" | "setfacl" => "acl",
        "getfattr" | "setfattr" => "attr",
        "mkfs.xfs" => "xfsprogs",
        "mkfs.btrfs" => "btrfs-progs",
        "mkfs.ext4" => "e2fsprogs",
        "qemu-img" | "qemu-io" => "qemu-utils",
        "readelf" => "binutils",
        "zstd" | "pzstd" => "zstd",
        "xz" => "xz-utils",
        "bsdtar" => "libarchive-tools",
        "bpftrace" => "bpftrace",
        "setpriv" | "mount" | "umount" | "losetup" | "unshare" | "blkid" => {
            "util-linux"
        }
        "fsck.fat" | "fatlabel" => "dosfstools",
        "mcopy" | "mdir" => "mtools",
        "tar" => "tar",
        "script" => "bsdutils",
        "find" => "findutils",
        "gzip" => "gzip",
        "bzip2" => "bzip2",
        "pbzip2" => "pbzip2",
        "lz4" => "lz4",
        "lzip" => "lzip",
        "lzop" => "lzop",
        "compress" => "ncompress",
        "mandoc" => "mandoc",
        "make" => "make",
        "ssh-keygen" => "openssh-client",
        "umoci" => "umoci",
        "skopeo" => "skopeo",
        "docker-registry" => "docker-registry",
        "strace" => "strace",
        "python3" => "python3",
        "gpg" => "gnupg",
        "systemd-analyze" => "systemd",
        "xmllint" => "libxml2-utils",
        "fsck.erofs" | "dump.erofs" | "mkfs.erofs" => "erofs-utils",
        _ => "coreutils",
    }
}

/// True if `program` is on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| is_executable(&d.join(program)))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A command for `program`; panics naming its package if it is missing.
#[track_caller]
pub fn tool(program: &str) -> Command {
    need(program);
    Command::new(program)
}

/// Panics naming `program`'s Debian package if it is not on PATH.
#[track_caller]
pub fn need(program: &str) {
    assert!(
        have(program),
        "{program} is not installed: apt-get install {} (or run `bash .ci/test` as root, \
         which installs every tool the tests use)",
        package(program)
    );
}

/// `qemu-img ARGS` in `dir`, for a command that makes a LUKS-encrypted
/// image. qemu-img 7.2 calibrates the key's PBKDF by the thread's CPU
/// time, which the kernel counts in scheduler ticks: on a loaded machine
/// the sample can be zero and it fails with "Unable to get accurate CPU
/// usage". That failure alone is tried again, up to 20 times, waiting
/// longer each time for the machine to quieten (a burst of load made
/// five tries in a row fail).
pub fn qemu_img_luks(dir: &Path, args: &[&str]) -> Output {
    const QUIRK: &str = "Unable to get accurate CPU usage";
    let mut tries = 0;
    loop {
        let o = tool("qemu-img")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        tries += 1;
        if o.status.success()
            || tries == 20
            || !String::from_utf8_lossy(&o.stderr).contains(QUIRK)
        {
            return o;
        }
        std::thread::sleep(std::time::Duration::from_millis(100 * tries));
    }
}
