//! `bench composefs-guests`: 100 guests of one Debian-like root in
//! composefs form (`provision --format composefs`, each mounted once for
//! its identity, with and without new SSH host keys, and with
//! `--keep-identity`, never mounted), side by side with today's tree
//! guests of the same image, on ext4 on a direct-I/O
//! loop device made for the run: wall time of each provision after the
//! cache entry and the composefs image were made, and the new disk use
//! per guest (df before and after, and du of the guests' directories).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use zinstall_tune::peers;
use zinstall_tune::report::{self, Samples};

use crate::common::sh;

pub(crate) struct ComposefsBench<'a> {
    pub guests: usize,
    pub tree_guests: usize,
    pub runs: usize,
    pub root: &'a Path,
    pub scratch: &'a Path,
    pub zinstall: &'a Path,
    pub gib: u64,
}

fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The output of `sh -c cmd`, trimmed; an error with its stderr.
fn capture(cmd: &str) -> Result<String, String> {
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn number(cmd: &str) -> Result<u64, String> {
    let s = capture(cmd)?;
    s.split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("{cmd}: {s:?} is no number"))
}

/// Bytes used on the filesystem at `mnt`, after a sync.
fn used(mnt: &Path) -> Result<u64, String> {
    peers::sync();
    number(&format!(
        "df -B1 --output=used {} | tail -n 1",
        mnt.display()
    ))
}

/// Blocks allocated under `dir`, in bytes.
fn du(dir: &Path) -> Result<u64, String> {
    number(&format!("du -sB1 {}", dir.display()))
}

/// The ext4 filesystem on a direct-I/O loop device, made for the run and
/// taken down (unmounted, detached, its file removed) when dropped.
struct LoopExt4 {
    file: PathBuf,
    dev: String,
    mnt: PathBuf,
}

impl LoopExt4 {
    fn make(scratch: &Path, gib: u64) -> Result<LoopExt4, String> {
        let file = scratch.join("composefs-guests.ext4");
        let mnt = scratch.join("composefs-guests.mnt");
        let _ = fs::remove_file(&file);
        fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        sh(&format!("truncate -s {gib}G {}", file.display()))?;
        let dev = capture(&format!(
            "losetup --direct-io=on --find --show {}",
            file.display()
        ))?;
        let fs = LoopExt4 { file, dev, mnt };
        sh(&format!("mkfs.ext4 -q -F {}", fs.dev))?;
        sh(&format!("mount {} {}", fs.dev, fs.mnt.display()))?;
        Ok(fs)
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = sh(&format!("chattr -R -i {} 2>/dev/null", self.mnt.display()));
        let _ = sh(&format!("umount {}", self.mnt.display()));
        let _ = sh(&format!("losetup -d {}", self.dev));
        let _ = fs::remove_file(&self.file);
    }
}

/// One series' numbers per run: time, and bytes per guest by df and du.
struct Row {
    series: String,
    guests: usize,
    run: usize,
    seconds: f64,
    df_per_guest: u64,
    du_per_guest: u64,
    load: String,
}

pub(crate) fn bench(b: &ComposefsBench) -> Result<(), String> {
    if !b.zinstall.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            b.zinstall.display()
        ));
    }
    if !b.root.join("etc").is_dir() {
        return Err(format!(
            "{}: no root filesystem there (give --root DIR, a Debian root \
             such as debootstrap makes)",
            b.root.display()
        ));
    }
    let z = b.zinstall.display().to_string();
    fs::create_dir_all(b.scratch).map_err(|e| e.to_string())?;
    let tar = b.scratch.join("composefs-guests-root.tar");
    if !tar.exists() {
        sh(&format!(
            "tar --numeric-owner --xattrs --acls -cf {}.tmp -C {} . && mv {}.tmp {}",
            tar.display(),
            b.root.display(),
            tar.display(),
            tar.display()
        ))?;
    }
    let image_bytes = number(&format!("du -sB1 {}", b.root.display()))?;
    let ext4 = LoopExt4::make(b.scratch, b.gib)?;
    let mnt = ext4.mnt.clone();
    let cache = mnt.join("cache");
    let provision = |out: &Path, count: usize, more: &str| {
        format!(
            "{z} provision {} --count {count} --out {} --cache {} \
             --allow-devices {more} > /dev/null",
            tar.display(),
            out.display(),
            cache.display()
        )
    };
    // The cache entry and the composefs image, made once, then untimed
    // in every series.
    let before = used(&mnt)?;
    let first = sh(&provision(&mnt.join("first"), 1, "--format composefs"))?;
    let entry_bytes = used(&mnt)?.saturating_sub(before);
    let store_bytes = du(&cache.join("composefs"))?;
    eprintln!(
        "first provision (entry and composefs image): {:.3} s, {} MiB new",
        first.as_secs_f64(),
        entry_bytes >> 20
    );
    // Each guest's own identity: a hostname, a machine-id and new SSH
    // host keys (ssh-keygen, the same for both forms), or without the
    // keys, or none (a composefs guest is then never mounted).
    let series: [(&str, usize, &str); 5] = [
        ("composefs, new identity", b.guests, "--format composefs"),
        (
            "composefs, --ssh-host-keys remove",
            b.guests,
            "--format composefs --ssh-host-keys remove",
        ),
        (
            "composefs, --keep-identity",
            b.guests,
            "--format composefs --keep-identity",
        ),
        ("tree, new identity", b.tree_guests, ""),
        ("tree, --keep-identity", b.tree_guests, "--keep-identity"),
    ];
    let mut rows: Vec<Row> = Vec::new();
    let mut samples: Vec<Samples> = Vec::new();
    for run in 0..b.runs {
        for (i, (name, count, more)) in series.iter().enumerate() {
            if *count == 0 {
                continue;
            }
            let out = mnt.join(format!("run{run}-{i}"));
            let u0 = used(&mnt)?;
            let t = sh(&provision(&out, *count, more))?;
            let u1 = used(&mnt)?;
            let d = du(&out)?;
            let row = Row {
                series: name.to_string(),
                guests: *count,
                run,
                seconds: t.as_secs_f64(),
                df_per_guest: u1.saturating_sub(u0) / *count as u64,
                du_per_guest: d / *count as u64,
                load: load(),
            };
            eprintln!(
                "  {:<28} {:>4} guests {:>8.3} s  df {:>10} B/guest  du {:>10} B/guest  load {}",
                row.series,
                row.guests,
                row.seconds,
                row.df_per_guest,
                row.du_per_guest,
                row.load
            );
            let label = format!("{name} ({count} guests)");
            match samples.iter_mut().find(|s| s.tool == label) {
                Some(s) => s.times.push(t),
                None => samples.push(Samples {
                    tool: label,
                    times: vec![t],
                }),
            }
            rows.push(row);
            let _ = sh(&format!("chattr -R -i {} 2>/dev/null", out.display()));
            sh(&format!("rm -rf {}", out.display()))?;
        }
    }
    let mut csv = String::from(
        "series,guests,run,seconds,df_bytes_per_guest,du_bytes_per_guest,load\n",
    );
    for r in &rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.3},{},{},{}",
            r.series,
            r.guests,
            r.run,
            r.seconds,
            r.df_per_guest,
            r.du_per_guest,
            r.load
        );
    }
    let csv_path = b.scratch.join("composefs-guests.csv");
    fs::write(&csv_path, &csv).map_err(|e| e.to_string())?;
    let mut per_guest = String::from(
        "| series | guests | median df B/guest | median du B/guest | % of image (df) |\n|---|---:|---:|---:|---:|\n",
    );
    for (name, count, _) in series.iter().filter(|s| s.1 > 0) {
        let med = |f: &dyn Fn(&Row) -> u64| {
            let mut v: Vec<u64> =
                rows.iter().filter(|r| r.series == *name).map(f).collect();
            v.sort();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        let (df, d) = (med(&|r| r.df_per_guest), med(&|r| r.du_per_guest));
        let _ = writeln!(
            per_guest,
            "| {name} | {count} | {df} | {d} | {:.4} |",
            100.0 * df as f64 / image_bytes.max(1) as f64
        );
    }
    println!(
        "\ncomposefs guests: {} ({} MiB), ext4 on a direct-I/O loop device \
         ({}); first provision {:.3} s, {} MiB new (the composefs store \
         {} MiB of it)\n\n{}\n{}\nCSV: {}",
        b.root.display(),
        image_bytes >> 20,
        ext4.dev,
        first.as_secs_f64(),
        entry_bytes >> 20,
        store_bytes >> 20,
        report::markdown(&samples, ""),
        per_guest,
        csv_path.display()
    );
    drop(ext4);
    Ok(())
}
