//! `bench composefs`: building a root in composefs form against the
//! plain install it replaces. A tar of a tree is installed by
//! `zinstall install` (a tree, flushed), by `zinstall install --format
//! composefs` (built in memory: each body straight into a fresh object
//! store, the EROFS image written, the store flushed), and by the same with
//! `--composefs-staging` (through a staging tree whose files are moved into
//! the store), and beside them `mkfs.erofs` of the
//! unpacked tree (erofs-utils: an image with the data in it, not
//! flushed), interleaved; the load before and after is printed.

use std::fs;
use std::path::Path;
use std::process::Command;

use zinstall_tune::peers;
use zinstall_tune::report;

fn io(e: std::io::Error) -> String {
    e.to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn run_ok(mut c: Command) -> Result<(), String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{c:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// `bench composefs`: `runs` of each, on the filesystem of `scratch`;
/// writes the samples as CSV to `csv` if given.
pub(crate) fn composefs_bench(
    runs: usize,
    tree: &Path,
    scratch: &Path,
    z: &Path,
    csv: Option<&Path>,
) -> Result<(), String> {
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    let base = scratch.join("composefs");
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).map_err(io)?;
    let archive = base.join("tree.tar");
    let parent = tree.parent().unwrap_or(Path::new("/"));
    let name = tree.file_name().ok_or("the tree has no name")?;
    let mut c = Command::new("tar");
    c.arg("-C").arg(parent).arg("-cf").arg(&archive).arg(name);
    run_ok(c)?;
    // The tree mkfs.erofs reads: the archive unpacked once.
    let unpacked = base.join("unpacked");
    fs::create_dir_all(&unpacked).map_err(io)?;
    let mut c = Command::new("tar");
    c.arg("-C").arg(&unpacked).arg("-xpf").arg(&archive);
    run_ok(c)?;
    let profile = base.join("bare.toml");
    fs::write(
        &profile,
        "source_root = \"/\"\ntrees = []\nlog = \"/dev/null\"\nimages_over_host = false\n",
    )
    .map_err(io)?;
    let (zp, cache, img) =
        (base.join("zp"), base.join("cache"), base.join("tree.erofs"));
    let names = [
        "zinstall install",
        "zinstall install --format composefs",
        "zinstall install --format composefs --composefs-staging",
        "mkfs.erofs",
    ];
    let load_before = crate::customize_setup::load();
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            // Each run from nothing: no root, no store, no image.
            if zp.join("composefs.json").exists() {
                let mut c = Command::new(z);
                c.args(["uninstall", "--zonepath", s(&zp)]);
                run_ok(c)?;
            }
            let _ = fs::remove_dir_all(&zp);
            let _ = fs::remove_dir_all(&cache);
            let _ = fs::remove_file(&img);
            peers::sync();
            let mut c;
            if i == 3 {
                c = Command::new("mkfs.erofs");
                c.arg("--quiet").arg(&img).arg(&unpacked);
            } else {
                c = Command::new(z);
                c.env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null")
                    .args([
                        "install",
                        "--profile",
                        s(&profile),
                        "--zonepath",
                        s(&zp),
                        "--cache",
                        s(&cache),
                    ]);
                if i >= 1 {
                    c.args(["--format", "composefs"]);
                }
                if i == 2 {
                    c.arg("--composefs-staging");
                }
                c.arg(&archive);
            }
            peers::time(c).map_err(|e| e.to_string())
        },
        &mut |l| eprintln!("{l}"),
    )?;
    let load_after = crate::customize_setup::load();
    let label = tree.display().to_string();
    if let Some(p) = csv {
        fs::write(p, report::csv(&label, &samples))
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    println!(
        "\ncomposefs build of a tar of {} ({} bytes); load before {load_before}, \
         after {load_after}\n\n{}",
        tree.display(),
        fs::metadata(&archive).map_or(0, |m| m.len()),
        report::markdown(&samples, "zinstall install")
    );
    let _ = fs::remove_dir_all(&base);
    Ok(())
}
