//! Running the built zinstall binaries and reading what they printed.

use std::path::Path;
use std::process::{Command, Output};

/// The binary `bin` (a test's `env!("CARGO_BIN_EXE_zinstall")`) with no
/// defaults file, so that one on the test machine cannot change results.
pub fn command(bin: &str) -> Command {
    let mut c = Command::new(bin);
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
    c
}

/// [`command`] run with `args`, to the end.
pub fn output(bin: &str, args: &[&str]) -> Output {
    command(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"))
}

/// Standard output then standard error, as one text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Standard output and standard error, apart.
pub fn streams(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A test path as an argument (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 test path")
}

/// A program run by [`limited`].
#[cfg(target_os = "linux")]
pub struct Limited {
    /// Whether it exited 0.
    pub ok: bool,
    /// What it wrote: standard output, then standard error.
    pub out: String,
    /// Its peak resident memory in KiB (the kernel's count, from
    /// `wait4`). The kernel counts the calling process's resident memory
    /// at the fork too (it is the child's until `exec`), so a test that
    /// measures this runs [`alone`](crate::alone): a test binary running
    /// many tests can be a gigabyte.
    pub max_rss_kib: u64,
}

/// Runs `cmd` with its descriptor limit set to `nofile` (soft, hard)
/// when given, its output to `log` (Linux: `wait4`).
#[cfg(target_os = "linux")]
pub fn limited(
    cmd: &mut std::process::Command,
    nofile: Option<(u64, u64)>,
    log: &std::path::Path,
) -> Limited {
    cmd.stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::options().append(true).open(log).unwrap());
    if let Some((soft, hard)) = nofile {
        zinstall_sys::support::limit_nofile_on_exec(cmd, soft, hard);
    }
    // Reaped by wait4 below, which also gives its peak memory (std's
    // wait does not).
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().unwrap();
    let reaped = zinstall_sys::support::wait_with_rusage(child.id())
        .unwrap_or_else(|e| panic!("wait4 {}: {e}", child.id()));
    Limited {
        ok: reaped.ok,
        out: std::fs::read_to_string(log).unwrap(),
        max_rss_kib: reaped.max_rss_kib,
    }
}
