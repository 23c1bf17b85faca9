//! The safe functions over real files: each call made once, its result
//! checked against what std says.

// Tests make and read their own fixtures by path.
#![allow(clippy::disallowed_methods)]

use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use crate::fs::{self, Stat, Times, at};
use crate::{cstr, ident, process};

#[test]
fn a_path_with_a_nul_is_an_error() {
    let e = cstr(std::path::Path::new("a\0b")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn device_numbers_round_trip() {
    let d = fs::makedev(8, 17);
    assert_eq!(fs::major_minor(d), (8, 17));
}

#[test]
fn at_calls_make_what_std_sees() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = at::open_dir(libc::AT_FDCWD, &cstr(tmp.path()).unwrap()).unwrap();
    let d = dir.as_raw_fd();
    let mut f = at::create_file(d, c"file").unwrap();
    f.write_all(b"hello").unwrap();
    assert!(at::create_file(d, c"file").is_err(), "O_EXCL");
    at::mkdir(d, c"sub", 0o750).unwrap();
    at::symlink(c"file", d, c"link").unwrap();
    at::link(d, c"file", d, c"hard").unwrap();

    let st = at::stat(d, c"file").unwrap();
    let md = std::fs::symlink_metadata(tmp.path().join("file")).unwrap();
    assert_eq!(st, Stat::of_metadata(&md));
    assert_eq!(st.size, 5);
    assert_eq!(st.nlink, 2);
    assert!(at::stat(d, c"sub").unwrap().is_dir());
    assert!(at::stat(d, c"link").unwrap().is_symlink());
    assert_eq!(at::readlink(d, c"link").unwrap(), b"file");
    assert!(at::lstat(d, c"gone").unwrap().is_none());
    assert!(at::open_read(d, c"link").is_err(), "O_NOFOLLOW");

    let t = Times {
        atime: (1_000_000, 5),
        mtime: (2_000_000, 123_456_789),
    };
    at::set_times(d, c"file", &t).unwrap();
    assert_eq!(at::stat(d, c"file").unwrap().times, t);

    at::rename(d, c"hard", c"moved").unwrap();
    let mut names = at::read_names(&dir).unwrap();
    names.sort();
    let want: Vec<CString> = ["file", "link", "moved", "sub"]
        .iter()
        .map(|n| CString::new(*n).unwrap())
        .collect();
    assert_eq!(names, want);

    let mut seen = Vec::new();
    let fresh =
        at::open_dir(libc::AT_FDCWD, &cstr(tmp.path()).unwrap()).unwrap();
    fs::read_dir(fresh.as_raw_fd(), &mut Vec::new(), |n, _| {
        seen.push(n.to_owned());
        Ok(true)
    })
    .unwrap();
    seen.sort();
    assert_eq!(seen, want);

    at::unlink(d, c"moved", false).unwrap();
    at::unlink(d, c"sub", true).unwrap();
    assert!(at::lstat(d, c"sub").unwrap().is_none());
}

#[test]
fn holes_and_data_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let f = std::fs::File::create(tmp.path().join("f")).unwrap();
    f.set_len(1 << 20).unwrap();
    // All one hole, or (no SEEK_HOLE support) all data: either way the
    // first hole is found at or before the end.
    let hole = fs::seek(&f, 0, false).unwrap().unwrap();
    assert!(hole <= 1 << 20);
}

#[test]
fn the_effective_ids_are_what_a_new_file_gets() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("f");
    std::fs::File::create(&p).unwrap();
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!(md.uid(), ident::euid());
    if !ident::groups().contains(&md.gid()) {
        assert_eq!(md.gid(), ident::egid());
    }
    assert_eq!(ident::user_id("root"), Some(0));
    assert_eq!(ident::user_id("no such user, surely"), None);
}

#[test]
fn limits_and_times_are_read() {
    let (soft, hard) = process::nofile_limits().unwrap();
    assert!(soft <= hard);
    let spin = std::time::Instant::now();
    while spin.elapsed() < std::time::Duration::from_millis(20) {}
    assert!(process::thread_cpu_time() > std::time::Duration::ZERO);
    assert!(process::cpu_times().0 > std::time::Duration::ZERO);
    assert!(process::process_exists(std::process::id() as i32));
}

/// A root that is not a directory, or no program, is refused before
/// any process is made, naming the step.
#[cfg(target_os = "linux")]
#[test]
fn a_run_in_root_is_refused_before_it_starts() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, "").unwrap();
    let out = std::fs::File::create(d.path().join("log")).unwrap();
    let sh = [std::ffi::OsStr::new("/bin/sh")];
    let ask = |root: &std::path::Path, argv: &[&std::ffi::OsStr]| {
        process::run_in_root(&process::InRoot {
            root,
            argv,
            script: None,
            output: std::os::fd::AsFd::as_fd(&out),
            timeout: std::time::Duration::from_secs(1),
            cancelled: None,
        })
    };
    let e = ask(&file, &sh).unwrap_err();
    assert_eq!(e.step, "stat the root");
    assert_eq!(e.error.raw_os_error(), Some(libc::ENOTDIR));
    let e = ask(d.path(), &[]).unwrap_err();
    assert_eq!(e.step, "the command's arguments");
    assert_eq!(
        process::RunEnd::TimedOut.to_string(),
        "ran past its timeout and was killed"
    );
    assert!(process::RunEnd::Exited(0).success());
    assert!(!process::RunEnd::Exited(3).success());
}

/// `unmount` undoes a mount, refuses a symlink to a mount point instead
/// of following it, and says EINVAL where nothing is mounted.
#[cfg(target_os = "linux")]
#[test]
fn unmount_undoes_a_mount_and_never_follows_a_symlink() {
    let euid = std::fs::metadata("/proc/self").unwrap().uid();
    if euid != 0 {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "unmount's test needs root (run the tests as root)"
        );
        eprintln!("SKIPPED: unmount needs root (under CI=true this fails)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().join("m");
    std::fs::create_dir(&at).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&at, &link).unwrap();
    let mounted = |p: &std::path::Path| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == p.to_str())
    };
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&at)
        .status()
        .unwrap();
    assert!(ok.success());
    let e = fs::unmount(&link).unwrap_err();
    assert!(mounted(&at), "unmounted through the symlink ({e})");
    fs::unmount(&at).unwrap();
    assert!(!mounted(&at));
    let e = fs::unmount(&at).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
}
