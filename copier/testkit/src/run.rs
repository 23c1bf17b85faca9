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
