//! `bench provision`: guests provisioned from a zstd sparse disk image
//! (first time, cached, and the naive way) and trees from a rootfs
//! tar.zst, on ext4 and optionally XFS.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers;
use zinstall_tune::report::{self, Samples};

use crate::common::{sh, source};

pub(crate) fn provision_bench(
    guests: usize,
    runs: usize,
    scale: f64,
    xfs: Option<&Path>,
    scratch: &Path,
    z: PathBuf,
) -> Result<(), String> {
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    let z = z.display().to_string();
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let disk_dir = source("sparse", scale, false, scratch)?;
    let raw = disk_dir.join("disk.img");
    let zst = scratch.join(format!("disk-{scale}.raw.zst"));
    if !zst.exists() {
        sh(&format!(
            "zstd -q -T0 -3 -f -o {} {}",
            zst.display(),
            raw.display()
        ))?;
    }
    let usr = source("usr", 1.0, false, scratch)?;
    let tzst = scratch.join("usr-1.tar.zst");
    if !tzst.exists() {
        sh(&format!(
            "tar --zstd --format=posix -cf {} -C {} .",
            tzst.display(),
            usr.display()
        ))?;
    }
    let n = guests;
    let mut samples: Vec<Samples> = Vec::new();
    let mut record = |name: &str, t: std::time::Duration| {
        eprintln!("  {name:<40} {:>8.3} s", t.as_secs_f64());
        match samples.iter_mut().find(|s| s.tool == name) {
            Some(s) => s.times.push(t),
            None => samples.push(Samples {
                tool: name.to_string(),
                times: vec![t],
            }),
        }
    };
    let work = scratch.join("prov");
    let mut places = vec![("ext4", work.clone())];
    if let Some(x) = xfs {
        places.push(("xfs", x.join("prov")));
    }
    for run in 0..runs {
        for (fsname, base) in &places {
            let _ = fs::remove_dir_all(base);
            fs::create_dir_all(base).map_err(|e| e.to_string())?;
            peers::sync();
            let cache = base.join("cache");
            let p = |image: &Path, out: &str| {
                format!(
                    "{z} provision {} --count {n} --out {} --cache {} > /dev/null",
                    image.display(),
                    base.join(out).display(),
                    cache.display()
                )
            };
            if *fsname == "ext4" {
                record(
                    &format!("disk: first provision ({n} guests)"),
                    sh(&p(&zst, "d1"))?,
                );
                // The first provision's writeback must not land in this one.
                peers::sync();
                record(
                    &format!("disk: cached provision ({n} guests)"),
                    sh(&p(&zst, "d2"))?,
                );
                let naive = format!(
                    "for i in $(seq 1 {n}); do zstd -q -d -f -o {}/naive-$i.raw {}; done",
                    base.display(),
                    zst.display()
                );
                peers::sync();
                record(
                    &format!("disk: naive, decompress per guest ({n})"),
                    sh(&naive)?,
                );
                // Eight full images would leave a small filesystem nearly
                // full, and slow every allocation in the rounds after.
                sh(&format!("rm -f {}/naive-*.raw", base.display()))?;
            }
            peers::sync();
            record(
                &format!("tree on {fsname}: first provision ({n} guests)"),
                sh(&p(&tzst, "t1"))?,
            );
            peers::sync();
            record(
                &format!("tree on {fsname}: cached provision ({n} guests)"),
                sh(&p(&tzst, "t2"))?,
            );
            let _ = run;
        }
    }
    let _ = fs::remove_dir_all(&work);
    if let Some(x) = xfs {
        let _ = fs::remove_dir_all(x.join("prov"));
    }
    println!(
        "\nprovision: {} ({}), {}\n\n{}",
        zst.display(),
        raw.display(),
        tzst.display(),
        report::markdown(&samples, "")
    );
    Ok(())
}
