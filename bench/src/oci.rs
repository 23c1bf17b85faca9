//! `bench oci`: an OCI image of three layers made with umoci from a real
//! tree (its top-level directories split in three, each upper layer
//! deleting some of what the layers below added, so whiteouts are
//! applied), installed by zinstall and unpacked by umoci, interleaved.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_tune::peers;
use zinstall_tune::report;

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let o = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e} (apt-get install {program})"))?;
    if !o.status.success() {
        return Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Builds (once, under `scratch`) the image of `tree` and returns the
/// layout's `DIR:t`.
fn image(tree: &Path, scratch: &Path) -> Result<String, String> {
    let lay = scratch.join("oci-layout");
    let image = format!("{}:t", lay.display());
    let done = scratch.join("oci-layout.done");
    if done.exists() {
        return Ok(image);
    }
    let _ = fs::remove_dir_all(&lay);
    let bundle = scratch.join("oci-bundle");
    let _ = fs::remove_dir_all(&bundle);
    let mut tops: Vec<PathBuf> = fs::read_dir(tree)
        .map_err(|e| format!("{}: {e}", tree.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    tops.sort();
    let third = tops.len().div_ceil(3);
    run("umoci", &["init", "--layout", s(&lay)])?;
    run("umoci", &["new", "--image", &image])?;
    let rootfs = bundle.join("rootfs");
    for (n, group) in tops.chunks(third.max(1)).enumerate() {
        run("umoci", &["unpack", "--image", &image, s(&bundle)])?;
        let into = rootfs.join("share");
        fs::create_dir_all(&into).map_err(|e| e.to_string())?;
        for t in group {
            run("cp", &["-a", s(t), s(&into)])?;
        }
        // Upper layers delete every fifth directory the layer below
        // added: whole trees become whiteouts.
        if n > 0 {
            for t in tops
                .chunks(third.max(1))
                .nth(n - 1)
                .unwrap_or(&[])
                .iter()
                .step_by(5)
            {
                if let Some(name) = t.file_name() {
                    let _ = fs::remove_dir_all(into.join(name));
                    let _ = fs::remove_file(into.join(name));
                }
            }
        }
        run("umoci", &["repack", "--image", &image, s(&bundle)])?;
        fs::remove_dir_all(&bundle).map_err(|e| e.to_string())?;
    }
    fs::write(&done, b"").map_err(|e| e.to_string())?;
    Ok(image)
}

/// Times `zinstall install` of the image against `umoci unpack` of it,
/// `runs` times each, interleaved; checks the two roots are the same.
pub fn bench(
    runs: usize,
    tree: &Path,
    scratch: &Path,
    z: &Path,
) -> Result<(), String> {
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let image = image(tree, scratch)?;
    let profile = scratch.join("oci-profile.toml");
    fs::write(
        &profile,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            scratch.join("oci-install.log").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let zp = scratch.join("oci-zonepath");
    let bundle = scratch.join("oci-umoci");
    let names = ["zinstall install", "umoci unpack"];
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            // Each removes only its own: the last of each is compared.
            let _ = fs::remove_dir_all(if i == 0 { &zp } else { &bundle });
            peers::sync();
            let mut c =
                Command::new(if i == 0 { z } else { Path::new("umoci") });
            if i == 0 {
                c.env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null")
                    .arg("install")
                    .arg("--profile")
                    .arg(&profile)
                    .arg("--zonepath")
                    .arg(&zp)
                    .arg(&image);
            } else {
                c.args(["unpack", "--image", &image]).arg(&bundle);
            }
            peers::time(c).map_err(|e| e.to_string())
        },
        &mut |l| eprintln!("{l}"),
    )?;
    // The last run of each: the same tree.
    let o = Command::new(z)
        .args(["verify", "--no-atime"])
        .arg(bundle.join("rootfs"))
        .arg(zp.join("root"))
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "zinstall's root differs from umoci's: {}",
            String::from_utf8_lossy(&o.stdout)
        ));
    }
    let _ = fs::remove_dir_all(&zp);
    let _ = fs::remove_dir_all(&bundle);
    println!(
        "\nOCI image of {} in 3 layers ({image}); roots verified identical\n\n{}",
        tree.display(),
        report::markdown(&samples, "umoci unpack")
    );
    Ok(())
}
