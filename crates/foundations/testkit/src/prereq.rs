//! Prerequisites that run or fail: root, CI, a test run alone in a
//! process of its own.

use std::io::Write;

/// True if the tests run as root.
pub fn is_root() -> bool {
    zinstall_sys::ident::euid() == 0
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

/// The running kernel's version, major and minor.
pub fn kernel() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default();
    let mut it = r.trim().split(['.', '-']).map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// True if the kernel has the filesystem `name`, loading its module
/// first where `modprobe` is there.
pub fn has_filesystem(name: &str) -> bool {
    let _ = std::process::Command::new("modprobe")
        .arg(name)
        .stderr(std::process::Stdio::null())
        .status();
    std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some(name))
}

/// True if composefs roots can be mounted here: root, Linux 6.12 or
/// later (EROFS from a file, overlay data-only layers), erofs and
/// overlayfs; otherwise the missing one is reported as unmet (a failure
/// naming it under CI).
pub fn composefs_mounts() -> bool {
    require_root()
        && require(
            kernel() >= (6, 12),
            "Linux 6.12 or later (composefs mounts)",
        )
        && require(has_filesystem("erofs"), "the kernel's erofs filesystem")
        && require(has_filesystem("overlay"), "the kernel's overlayfs")
}
