//! Sets `ZINSTALL_COMMIT` for `zinstall --version`: the short commit of
//! the checkout being built, with `-dirty` when tracked files differ from
//! it. A build outside git (a release tarball) takes `ZINSTALL_COMMIT`
//! from the environment, or says `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ZINSTALL_COMMIT");
    let commit = match std::env::var("ZINSTALL_COMMIT") {
        Ok(c) if !c.is_empty() => c,
        _ => from_git().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=ZINSTALL_COMMIT={commit}");
}

/// Runs git in the package's directory; `None` on any failure.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn from_git() -> Option<String> {
    // Only a checkout of this workspace counts: a tarball unpacked inside
    // some other repository must not take that repository's commit.
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(3)?;
    if top.canonicalize().ok()? != workspace.canonicalize().ok()? {
        return None;
    }
    // Rebuild when HEAD moves (a checkout or a commit) and when the index
    // changes (a commit, or `git add` of an edit); `--git-path` finds
    // these in a linked worktree too, where `.git` is a file.
    for name in ["HEAD", "index"] {
        watch(git(&["rev-parse", "--git-path", name])?);
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(git(&["rev-parse", "--git-path", &branch])?);
        watch(git(&["rev-parse", "--git-path", "packed-refs"])?);
    }
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty = !Command::new("git")
        .args(["diff-index", "--quiet", "HEAD", "--"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .ok()?
        .success();
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// Reruns this script when `path` changes. A path that does not exist
/// (`packed-refs` in a new clone) is left out: cargo would rerun the
/// script, and rebuild this package, on every build.
fn watch(path: String) {
    let p = Path::new(&path);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
    };
    if !p.exists() {
        return;
    }
    println!("cargo:rerun-if-changed={}", p.display());
}
