//! `bench install`: the seed zone install at the default tunables against
//! one worker taking batches of one, and without the final flush; and the
//! seed itself, which `bench daemon` installs too.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers;
use zinstall_tune::report;
use zinstall_tune::trees::{self, Shape};

use crate::archives;
use crate::common::workspace;

pub(crate) fn install_bench(
    runs: usize,
    scratch: &Path,
    zinstall: Option<PathBuf>,
) -> Result<(), String> {
    let z =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    let (seed, profile) = seed_install(scratch)?;
    // Installs flush the root before they are marked complete; --no-sync
    // is the install as it was timed before that, and beside it what
    // the flush costs.
    let names = ["install 8x128", "install 1x1", "install 8x128 --no-sync"];
    let zp = scratch.join("zonepath");
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            let _ = fs::remove_dir_all(&zp);
            peers::sync();
            peers::warm(&seed).map_err(|e| e.to_string())?;
            let mut c = std::process::Command::new(&z);
            c.env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null")
                .arg("install");
            if i == 1 {
                c.args(["--threads", "1", "--batch", "1"]);
            }
            if i == 2 {
                c.arg("--no-sync");
            }
            c.arg("--profile").arg(&profile).arg("--zonepath").arg(&zp);
            peers::time(c).map_err(|e| e.to_string())
        },
        &mut |l| eprintln!("{l}"),
    )?;
    let _ = fs::remove_dir_all(&zp);
    println!(
        "\nseed install ({})\n\n{}",
        seed.display(),
        report::markdown(&samples, "install 1x1")
    );
    Ok(())
}

/// The seed zone install's source root (a generated /usr and a baseline
/// archive, made once under `scratch`) and a profile with the shipped link
/// rules for it.
pub(crate) fn seed_install(
    scratch: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let seed = scratch.join("seedroot");
    let done = scratch.join("seedroot.done");
    if !done.exists() {
        let _ = fs::remove_dir_all(&seed);
        fs::create_dir_all(&seed).map_err(|e| e.to_string())?;
        let s = trees::generate(Shape::Usr, &seed.join("usr"), 1.0, false)
            .map_err(|e| e.to_string())?;
        eprintln!("seed /usr: {s:?}");
        fs::create_dir_all(seed.join("baseline")).map_err(|e| e.to_string())?;
        archives::archive_tar(
            &seed.join("baseline/files.tar"),
            "baseline",
            2000,
            10_000,
        )
        .map_err(|e| e.to_string())?;
        fs::write(&done, b"").map_err(|e| e.to_string())?;
    }
    // The shipped profile's link rules, on the seed tree.
    let shipped = include_str!("../../etc/zinstall/profile.toml");
    let rules: String = shipped
        .split("[[rule]]")
        .skip(1)
        .map(|r| {
            let r = r.split("\n[").next().unwrap_or("");
            format!("[[rule]]{r}\n")
        })
        .collect();
    let profile = scratch.join("seed-profile.toml");
    fs::write(&profile, format!(
        "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"{}\"\n\n{rules}\n[baseline]\nfile = \"files.tar\"\nsearch = [\"{}\"]\nrequired = true\n",
        seed.display(),
        scratch.join("seed-install.log").display(),
        seed.join("baseline").display()
    )).map_err(|e| e.to_string())?;
    Ok((seed, profile))
}
