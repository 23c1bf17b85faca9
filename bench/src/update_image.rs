//! The update's other targets, each side by side with what it is
//! measured against, interleaved:
//!
//! - `bench install-tar`: `zinstall install --no-sync` of a tar of a tree
//!   (the manifest recorded included) against GNU tar `-xpf` of it;
//! - `bench update-image`: `zinstall update` of a root installed from an
//!   OCI image (made with umoci from a tree) to a version that adds one
//!   layer (a percentage of the tree's files changed), against a fresh
//!   install of that version; the bytes the update wrote against the
//!   layer's content;
//! - `bench update-dirty`: an update that changes three files, on an
//!   idle filesystem and on one another process keeps dirty.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

use zinstall_tune::peers;
use zinstall_tune::report;

use crate::update::files;

fn zinstall(z: &Path) -> Command {
    let mut c = Command::new(z);
    c.env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null");
    c
}

fn run_ok(mut c: Command) -> Result<String, String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{c:?}: {}: {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn need(z: &Path) -> Result<(), String> {
    if z.is_file() {
        Ok(())
    } else {
        Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ))
    }
}

/// A profile of images alone, its log nowhere.
fn bare_profile(at: &Path) -> Result<PathBuf, String> {
    let p = at.join("bare.toml");
    fs::write(
        &p,
        "source_root = \"/\"\ntrees = []\nlog = \"/dev/null\"\nimages_over_host = false\n",
    )
    .map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

fn remove(p: &Path) {
    let _ = fs::remove_dir_all(p);
}

/// A number from `"key":N` in a JSON text.
fn json_u64(text: &str, key: &str) -> u64 {
    text.split(&format!("\"{key}\":"))
        .nth(1)
        .and_then(|s| {
            s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// `bench install-tar`.
pub fn install_tar(
    runs: usize,
    tree: &Path,
    scratch: &Path,
    z: &Path,
    before: Option<&Path>,
) -> Result<(), String> {
    need(z)?;
    let io = |e: std::io::Error| e.to_string();
    let base = scratch.join("install-tar");
    remove(&base);
    fs::create_dir_all(&base).map_err(io)?;
    let archive = base.join("tree.tar");
    let parent = tree.parent().unwrap_or(Path::new("/"));
    let name = tree.file_name().ok_or("the tree has no name")?;
    let mut c = Command::new("tar");
    c.arg("-C").arg(parent).arg("-cf").arg(&archive).arg(name);
    run_ok(c)?;
    let profile = bare_profile(&base)?;
    let (zp, out) = (base.join("zp"), base.join("tar-out"));
    let mut names = vec!["zinstall install --no-sync", "tar -xpf"];
    if before.is_some() {
        names.push("before: zinstall install --no-sync");
    }
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            remove(&zp);
            remove(&out);
            peers::sync();
            match i {
                0 | 2 => {
                    let bin = if i == 0 { z } else { before.unwrap_or(z) };
                    let mut c = zinstall(bin);
                    c.args([
                        "install",
                        "--no-sync",
                        "--profile",
                        s(&profile),
                        "--zonepath",
                        s(&zp),
                        s(&archive),
                    ]);
                    peers::time(c).map_err(|e| e.to_string())
                }
                _ => {
                    fs::create_dir_all(&out).map_err(io)?;
                    let mut c = Command::new("tar");
                    c.arg("-C").arg(&out).arg("-xpf").arg(&archive);
                    peers::time(c).map_err(|e| e.to_string())
                }
            }
        },
        &mut |l| eprintln!("{l}"),
    )?;
    println!(
        "\ninstall of a tar of {} ({} bytes)\n\n{}",
        tree.display(),
        fs::metadata(&archive).map_or(0, |m| m.len()),
        report::markdown(&samples, "tar -xpf")
    );
    remove(&base);
    Ok(())
}

/// Appends to every `step`th file of `dir`: the content of one layer.
fn change_every(dir: &Path, step: usize) -> Result<(usize, u64), String> {
    let mut all = Vec::new();
    files(dir, &mut all).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut bytes = 0u64;
    let mut n = 0;
    for p in all.iter().step_by(step.max(1)) {
        let mut data =
            fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        data.extend_from_slice(b"changed in version 2\n");
        bytes += data.len() as u64;
        fs::write(p, &data).map_err(|e| format!("{}: {e}", p.display()))?;
        n += 1;
    }
    Ok((n, bytes))
}

fn umoci(args: &[&str]) -> Result<String, String> {
    let mut c = Command::new("umoci");
    c.args(args);
    run_ok(c).map_err(|e| format!("{e} (apt-get install umoci)"))
}

/// `bench update-image`.
pub fn update_image(
    runs: usize,
    tree: &Path,
    percent: f64,
    scratch: &Path,
    z: &Path,
) -> Result<(), String> {
    need(z)?;
    let io = |e: std::io::Error| e.to_string();
    let base = scratch.join("update-image");
    remove(&base);
    fs::create_dir_all(&base).map_err(io)?;
    let lay = base.join("layout");
    let (v1, v2) = (
        format!("{}:v1", lay.display()),
        format!("{}:v2", lay.display()),
    );
    let bundle = base.join("bundle");
    umoci(&["init", "--layout", s(&lay)])?;
    umoci(&["new", "--image", &v1])?;
    umoci(&["unpack", "--image", &v1, s(&bundle)])?;
    let mut c = Command::new("cp");
    c.arg("-a").arg(tree).arg(bundle.join("rootfs/share"));
    run_ok(c)?;
    umoci(&["repack", "--image", &v1, s(&bundle)])?;
    remove(&bundle);
    umoci(&["unpack", "--image", &v1, s(&bundle)])?;
    let step = (100.0 / percent.max(0.01)).round() as usize;
    let (changed, content) = change_every(&bundle.join("rootfs/share"), step)?;
    umoci(&["repack", "--image", &v2, s(&bundle)])?;
    remove(&bundle);
    eprintln!(
        "version 2 adds a layer of {changed} changed files, {content} bytes"
    );
    let profile = bare_profile(&base)?;
    let (zp, fresh) = (base.join("zp"), base.join("fresh"));
    let names = ["zinstall update to v2", "fresh install of v2"];
    let mut written = Vec::new();
    let mut reused = 0;
    let samples = report::interleaved(
        &names,
        runs,
        |i| match i {
            0 => {
                remove(&zp);
                let mut c = zinstall(z);
                c.args([
                    "install",
                    "--no-sync",
                    "--profile",
                    s(&profile),
                    "--zonepath",
                    s(&zp),
                    &v1,
                ]);
                run_ok(c)?;
                peers::sync();
                let mut c = zinstall(z);
                c.args([
                    "update",
                    "--json",
                    "--profile",
                    s(&profile),
                    "--zonepath",
                    s(&zp),
                    &v2,
                ]);
                let t0 = Instant::now();
                let out = run_ok(c)?;
                let took = t0.elapsed();
                written.push(json_u64(&out, "bytes"));
                reused = json_u64(&out, "layers_reused");
                Ok(took)
            }
            _ => {
                remove(&fresh);
                peers::sync();
                let mut c = zinstall(z);
                c.args([
                    "install",
                    "--no-sync",
                    "--profile",
                    s(&profile),
                    "--zonepath",
                    s(&fresh),
                    &v2,
                ]);
                peers::time(c).map_err(|e| e.to_string())
            }
        },
        &mut |l| eprintln!("{l}"),
    )?;
    written.sort_unstable();
    let median = written.get(written.len() / 2).copied().unwrap_or(0);
    println!(
        "\nupdate of a root installed from an image of {} to a version adding one layer \
         ({changed} files changed, {content} bytes of content); the update read \
         the new layer alone ({reused} layer(s) as recorded) and wrote {median} bytes \
         ({:.2}× the layer's content)\n\n{}",
        tree.display(),
        median as f64 / content.max(1) as f64,
        report::markdown(&samples, "fresh install of v2")
    );
    remove(&base);
    Ok(())
}

/// A process writing without pause to a file under `dir`, never
/// flushing: the filesystem always has dirty data.
fn dirtier(dir: &Path) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let f = dir.join("dirty");
    Command::new("sh")
        .process_group(0)
        .arg("-c")
        .arg(format!(
            "while :; do dd if=/dev/zero of={} bs=1M count=512 conv=notrunc status=none; done",
            f.display()
        ))
        .spawn()
        .map_err(|e| format!("sh: {e}"))
}

/// `bench update-dirty`.
pub fn update_dirty(
    runs: usize,
    tree: &Path,
    scratch: &Path,
    z: &Path,
) -> Result<(), String> {
    need(z)?;
    let io = |e: std::io::Error| e.to_string();
    let base = scratch.join("update-dirty");
    remove(&base);
    let src = base.join("src");
    fs::create_dir_all(src.join("usr")).map_err(io)?;
    let mut c = zinstall(z);
    c.arg("copy").arg(tree).arg(src.join("usr/share"));
    run_ok(c)?;
    let mut all = Vec::new();
    files(&src.join("usr/share"), &mut all).map_err(io)?;
    let three: Vec<PathBuf> = all
        .iter()
        .step_by((all.len() / 3).max(1))
        .take(3)
        .cloned()
        .collect();
    let profile = base.join("p.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"/dev/null\"\n",
            src.display()
        ),
    )
    .map_err(io)?;
    let zp = base.join("zp");
    let mut c = zinstall(z);
    c.args([
        "install",
        "--no-sync",
        "--profile",
        s(&profile),
        "--zonepath",
        s(&zp),
    ]);
    run_ok(c)?;
    peers::sync();
    let names = ["3-file update, idle", "3-file update, dirty"];
    let mut round = 0u64;
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            round += 1;
            for p in &three {
                fs::write(p, format!("round {round}\n")).map_err(io)?;
            }
            peers::sync();
            let mut dirty = if i == 1 {
                let child = dirtier(&base)?;
                // Let it fill the page cache with dirty pages first.
                std::thread::sleep(std::time::Duration::from_secs(3));
                Some(child)
            } else {
                None
            };
            let mut c = zinstall(z);
            c.args(["update", "--profile", s(&profile), "--zonepath", s(&zp)]);
            let t = peers::time(c).map_err(|e| e.to_string());
            if let Some(d) = dirty.as_mut() {
                // The shell and its dd, as a group.
                let _ = Command::new("kill")
                    .arg("--")
                    .arg(format!("-{}", d.id()))
                    .status();
                let _ = d.wait();
            }
            t
        },
        &mut |l| eprintln!("{l}"),
    )?;
    println!(
        "\nupdate of three files of a root of {} beside a writer keeping the \
         filesystem dirty\n\n{}",
        tree.display(),
        report::markdown(&samples, "3-file update, idle")
    );
    remove(&base);
    Ok(())
}
