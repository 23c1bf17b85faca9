//! Test support shared by every crate of the workspace.
//!
//! A test either runs or fails. A prerequisite the machine lacks (root, a
//! loop device, a filesystem type) is, under `CI=true`, a failure that
//! names it; elsewhere the test is skipped with a line written straight to
//! the terminal's stderr (libtest does not capture it), so a developer sees
//! what did not run. A missing external program is always a failure that
//! names the Debian package to install: `bash .ci/test` installs them all.
//!
//! ```ignore
//! #[test]
//! fn owners_are_kept() {
//!     if !zinstall_testkit::require_root() {
//!         return;
//!     }
//!     let tar = zinstall_testkit::tool("tar");
//!     // ...
//! }
//! ```

#![deny(missing_docs)]

pub mod fsops;
pub mod loopfs;
pub mod run;
pub mod sentinel;
pub mod tmp;
pub mod tools;

pub use loopfs::{Kind, LoopFs, delayed_extents, shares_extents};
pub use tmp::Tmp;
pub use tools::{have, need, package, tool};

use std::io::Write;

/// True if the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True under continuous integration (`CI` set to anything but empty,
/// `0` or `false`), where every prerequisite must be there.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
    })
}

/// The running test's name, as libtest names its thread.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_string()
}

/// Set in the process [`alone`] starts for one test.
const ALONE: &str = "ZINSTALL_TEST_ALONE";

/// Runs the calling test again in a process of its own, where no other
/// test runs, and returns false once it passed there; in that process it
/// returns true, and the test's body runs. For tests that look at the
/// whole process (its threads, its descriptors), which every test of one
/// test binary shares:
///
/// ```ignore
/// if !zinstall_testkit::alone() {
///     return;
/// }
/// ```
#[track_caller]
pub fn alone() -> bool {
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let name = test_name();
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(&exe)
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, &name)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name}, run alone, failed:\n{text}");
    // A name libtest did not match would run nothing and pass.
    assert!(
        text.contains("test result: ok. 1 passed"),
        "{name}, run alone, ran no test:\n{text}"
    );
    false
}

/// Seeded bytes (xorshift), the same on every run.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Reports a prerequisite this machine lacks: a panic naming it under CI
/// (the test fails), else a visible skip line. Returns false so a test can
/// write `if !unmet_or_skip(..) { return; }`-style checks through the
/// `require_*` helpers.
#[track_caller]
pub fn unmet(what: &str) -> bool {
    let test = test_name();
    if in_ci() {
        panic!("{test}: prerequisite missing under CI=true: {what}");
    }
    // Straight to the process's stderr: libtest captures only the print
    // macros, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {what} (under CI=true this fails)"
    );
    false
}

/// True if the test runs as root; otherwise see [`unmet`].
#[must_use]
#[track_caller]
pub fn require_root() -> bool {
    is_root()
        || unmet("root (run the tests as root, as `bash .ci/test` in CI does)")
}

/// True if `cond` holds; otherwise `what` is reported as [`unmet`].
#[must_use]
#[track_caller]
pub fn require(cond: bool, what: &str) -> bool {
    cond || unmet(what)
}

/// `renameat2(a, b, RENAME_EXCHANGE)`: both names stay, their inodes
/// trade places atomically (how the race tests swap a directory and a
/// symlink under a running copy). False if the kernel refused.
#[cfg(target_os = "linux")]
pub fn exchange(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(a), Ok(b)) = (
        std::ffi::CString::new(a.as_os_str().as_bytes()),
        std::ffi::CString::new(b.as_os_str().as_bytes()),
    ) else {
        return false;
    };
    // SAFETY: two valid C strings; a plain system call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    rc == 0
}

/// `find DIR -printf` of depth, type, mode, modification time and size
/// of every entry, sorted: find descends by descriptor, so it lists
/// trees deeper than a path can name.
pub fn listing(dir: &std::path::Path) -> Vec<String> {
    let o = tool("find")
        .arg(dir)
        .args(["-printf", "%d %y %m %T@ %s %P\\n"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// The extended attributes of `p` (not following a symlink), by name,
/// as the kernel returns them.
#[cfg(target_os = "linux")]
pub fn xattrs(p: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: a valid path and a buffer of the length given.
    let n = unsafe {
        libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len())
    };
    assert!(n >= 0, "llistxattr {}", p.display());
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: valid strings and a buffer of the length given.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cn.as_ptr(),
                v.as_mut_ptr().cast(),
                v.len(),
            )
        };
        assert!(n >= 0, "lgetxattr {} {cn:?}", p.display());
        v.truncate(n as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    out
}
