//! Running `qemu-img` instead of the native writer, when asked.

use std::path::Path;
use std::process::Command;

use zinstall_qcow2::{Error, Problem, Result};

/// `qemu-img create -q -f qcow2 -o compat=1.1 -F raw -b BASE OVERLAY
/// [SIZE]`, run by absolute path with an empty environment; a failure
/// carries its exit status and standard error.
pub fn create_overlay(
    qemu_img: &Path,
    overlay: &Path,
    base: &Path,
    size: Option<u64>,
) -> Result<()> {
    let mut cmd = Command::new(qemu_img);
    cmd.env_clear()
        .args([
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=1.1",
            "-F",
            "raw",
            "-b",
        ])
        .arg(base)
        .arg(overlay);
    if let Some(s) = size {
        cmd.arg(s.to_string());
    }
    let out = cmd
        .output()
        .map_err(|e| Error::io(overlay, "run qemu-img", e))?;
    if !out.status.success() {
        return Err(Error::problem(
            overlay,
            Problem::QemuImg {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            },
        ));
    }
    Ok(())
}
