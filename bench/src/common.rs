//! What every command shares: the workspace the binaries are built in,
//! generated source trees under the scratch directory, shell commands
//! timed, and the optional peers. A leaf: it names no command.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers::{self, Tool};
use zinstall_tune::trees::{self, Shape};

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A generated tree under `scratch`, made once and reused.
pub(crate) fn source(
    tree: &str,
    scale: f64,
    empty: bool,
    scratch: &Path,
) -> Result<PathBuf, String> {
    let Ok(shape) = tree.parse::<Shape>() else {
        let p = PathBuf::from(tree);
        return if p.is_dir() {
            Ok(p)
        } else {
            Err(format!("{tree}: not a directory or a tree name"))
        };
    };
    let name =
        format!("src-{tree}-{scale}{}", if empty { "-empty" } else { "" });
    let dir = scratch.join(name);
    let done = scratch.join(format!(
        "{}.done",
        dir.file_name().unwrap_or_default().to_string_lossy()
    ));
    if !done.exists() {
        let _ = fs::remove_dir_all(&dir);
        let s = trees::generate(shape, &dir, scale, empty)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        eprintln!("generated {}: {s:?}", dir.display());
        fs::write(&done, b"").map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

pub(crate) fn sh(cmd: &str) -> Result<std::time::Duration, String> {
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd);
    peers::time(c).map_err(|e| e.to_string())
}

/// The peer `name` (xcp, fcp) if installed; says so when it is not.
pub(crate) fn optional_peer(name: &str) -> Option<Tool> {
    let t = peers::optional_peer(&workspace(), name);
    if t.is_none() {
        eprintln!("skipping {name}: not found (see bench/README.md)");
    }
    t
}
