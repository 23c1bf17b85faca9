//! Running `qemu-img` instead of the native writer, when asked.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::error::{ProvisionError as Error, Result};
use crate::guests::OVERLAY_MODE;

/// Checks that `qemu_img` can be run: a regular file with an execute
/// bit. Called before anything is extracted, so that a wrong path is
/// named at once rather than after a long build.
pub fn check(qemu_img: &Path, target: &Path) -> Result<()> {
    let md = fs::metadata(qemu_img).map_err(|e| Error::Program {
        program: qemu_img.to_path_buf(),
        target: target.to_path_buf(),
        source: e,
    })?;
    if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
        return Err(Error::Program {
            program: qemu_img.to_path_buf(),
            target: target.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
    }
    Ok(())
}

/// `qemu-img create -q -f qcow2 -o compat=1.1 -F raw -b BASE OVERLAY
/// [SIZE]`, run by the path given with an empty environment; the overlay
/// then gets [`OVERLAY_MODE`], like a native one. A failure names the
/// program and carries its exit status and standard error.
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
    let out = cmd.output().map_err(|e| Error::Program {
        program: qemu_img.to_path_buf(),
        target: overlay.to_path_buf(),
        source: e,
    })?;
    if !out.status.success() {
        return Err(Error::ProgramFailed {
            program: qemu_img.to_path_buf(),
            target: overlay.to_path_buf(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    fs::set_permissions(overlay, fs::Permissions::from_mode(OVERLAY_MODE))
        .map_err(|e| Error::io(copier::Op::Chmod, overlay, e))
}
