//! `bench provision`'s qcow2 comparison: a native qcow2 read by
//! `zinstall provision` against `qemu-img convert`, with and without the
//! flush, on images made once with qemu-img and qemu-io.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers;
use zinstall_tune::report::{self, Samples};

use crate::common::sh;

/// The qcow2 comparison's settings.
pub(crate) struct Qcow2Bench {
    pub(crate) runs: usize,
    pub(crate) gib: u64,
    pub(crate) data: f64,
    pub(crate) other: Option<PathBuf>,
    pub(crate) settle: std::time::Duration,
    pub(crate) load: usize,
}

/// A qcow2 image of `gib` GiB with `data` of it written by qemu-io in
/// 1 MiB extents spread evenly, from a deterministic pattern that is half
/// text and half noise (compresses about as a system disk does); then
/// its zlib- and zstd-compressed copies made by qemu-img convert -c; and
/// a chain: an overlay over the plain image (its backing file named
/// beside it, format qcow2) where another 5% of the disk is written,
/// spread over it, and 2% zeroed.
fn qcow2_images(
    q: &Qcow2Bench,
    scratch: &Path,
) -> Result<Vec<(String, PathBuf)>, String> {
    let stem = format!("q-{}g-{}", q.gib, (q.data * 100.0).round() as u64);
    let plain = scratch.join(format!("{stem}.qcow2"));
    if !plain.exists() {
        let pat = scratch.join("q-pattern.bin");
        let mut bytes = Vec::with_capacity(1 << 20);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let text = b"zinstall provisions guests from one cached image; ";
        while bytes.len() < 1 << 20 {
            for _ in 0..512 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x as u8);
            }
            for _ in 0..8 {
                bytes.extend_from_slice(&text[..64.min(text.len())]);
            }
        }
        bytes.truncate(1 << 20);
        fs::write(&pat, &bytes).map_err(|e| e.to_string())?;
        let size = q.gib << 30;
        let extents = ((size as f64 * q.data) as u64 >> 20).max(1);
        let step = (size / extents) & !0xffff;
        let mut cmds = String::new();
        for i in 0..extents {
            cmds.push_str(&format!(
                "write -q -s {} {} 1M\n",
                pat.display(),
                i * step
            ));
        }
        let cmdfile = scratch.join("q-cmds.txt");
        fs::write(&cmdfile, cmds).map_err(|e| e.to_string())?;
        let tmp = scratch.join(format!("{stem}.partial"));
        sh(&format!(
            "qemu-img create -q -f qcow2 {0} {1}G && qemu-io -f qcow2 {0} < {2} > /dev/null && mv {0} {3}",
            tmp.display(),
            q.gib,
            cmdfile.display(),
            plain.display()
        ))?;
    }
    let mut out = vec![("qcow2".to_string(), plain.clone())];
    for (label, opts) in [
        ("qcow2 zlib", "-c"),
        ("qcow2 zstd", "-c -o compression_type=zstd"),
    ] {
        let img =
            scratch.join(format!("{stem}-{}.qcow2", label.replace(' ', "-")));
        if !img.exists() {
            sh(&format!(
                "qemu-img convert -q -O qcow2 {opts} {} {}.partial && mv {1}.partial {1}",
                plain.display(),
                img.display()
            ))?;
        }
        out.push((label.to_string(), img));
    }
    let chain = scratch.join(format!("{stem}-chain.qcow2"));
    if !chain.exists() {
        let size = q.gib << 30;
        let pat = scratch.join("q-pattern.bin");
        let mut cmds = String::new();
        let extents = ((size as f64 * 0.05) as u64 >> 20).max(1);
        let step = (size / extents) & !0xffff;
        for i in 0..extents {
            // Offset from the base's extents, so that some overlap them.
            let at = i * step + step / 3;
            cmds.push_str(&format!(
                "write -q -s {} {} 1M\n",
                pat.display(),
                at & !0xffff
            ));
        }
        let zeros = ((size as f64 * 0.02) as u64 >> 20).max(1);
        let zstep = (size / zeros) & !0xffff;
        for i in 0..zeros {
            cmds.push_str(&format!("write -q -z {} 1M\n", i * zstep));
        }
        let cmdfile = scratch.join("q-chain-cmds.txt");
        fs::write(&cmdfile, cmds).map_err(|e| e.to_string())?;
        let base = plain.file_name().unwrap().to_string_lossy().into_owned();
        let tmp = scratch.join(format!("{stem}-chain.partial"));
        sh(&format!(
            "cd {0} && qemu-img create -q -f qcow2 -F qcow2 -b {1} {2} && qemu-io -f qcow2 {2} < {3} > /dev/null && mv {2} {4}",
            scratch.display(),
            base,
            tmp.display(),
            cmdfile.display(),
            chain.display()
        ))?;
    }
    out.push(("qcow2 chain of 2".to_string(), chain));
    Ok(out)
}

/// `zinstall provision IMAGE --count 1` with an empty cache (its one
/// flush included) against `qemu-img convert -O raw`, without and with a
/// `sync -f` (a syncfs of the output's filesystem, as zinstall's) after,
/// interleaved; each zinstall base checked against the image with
/// `qemu-img compare` once. zinstall's time without its flush is its
/// wall time less the flush it logs in the cache's `builds.log` (the
/// syncfs of the data, the immutable flag, the syncfs of the record and
/// the directory's fsync; older builds log less of it), from the same
/// run.
pub(crate) fn qcow2_bench(
    z: &Path,
    q: &Qcow2Bench,
    scratch: &Path,
) -> Result<(), String> {
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let images = qcow2_images(q, scratch)?;
    let mut zs = vec![("zinstall provision".to_string(), z.to_path_buf())];
    if let Some(o) = &q.other {
        zs.push(("zinstall provision (other)".to_string(), o.clone()));
    }
    let work = scratch.join("q-work");
    // Cache entries are immutable (chattr +i) when made as root.
    let clear = || {
        sh(&format!(
            "if [ -e {0} ]; then chattr -R -i {0} 2>/dev/null; rm -rf {0}; fi",
            work.display()
        ))
    };
    // The load: busy processes for the whole comparison, stopped (by
    // their own handles) when it ends, however it ends.
    struct Load(Vec<std::process::Child>);
    impl Drop for Load {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut load = Load(Vec::new());
    for _ in 0..q.load {
        load.0.push(
            std::process::Command::new("yes")
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("yes: {e}"))?,
        );
    }
    if q.load > 0 {
        eprintln!("under load: {} busy processes (yes > /dev/null)", q.load);
    }
    let mut tables = String::new();
    for (label, img) in &images {
        let mut names: Vec<String> =
            zs.iter().map(|(n, _)| n.clone()).collect();
        names.push(QEMU.into());
        names.push(QEMU_SYNC.into());
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut checked = vec![false; zs.len()];
        // Per zinstall binary: its wall times less its logged flush, and
        // the flush alone.
        let mut unsynced: Vec<Vec<std::time::Duration>> =
            vec![vec![]; zs.len()];
        let mut syncs: Vec<Vec<std::time::Duration>> = vec![vec![]; zs.len()];
        let samples = report::interleaved(
            &refs,
            q.runs,
            |i| {
                clear()?;
                fs::create_dir_all(&work).map_err(|e| e.to_string())?;
                peers::sync();
                peers::warm(img).map_err(|e| e.to_string())?;
                std::thread::sleep(q.settle);
                let out = work.join("out.raw");
                let t = match i {
                    i if i < zs.len() => {
                        let mut c = std::process::Command::new(&zs[i].1);
                        c.arg("provision")
                            .arg(img)
                            .args(["--count", "1", "--out"])
                            .arg(work.join("g"))
                            .arg("--cache")
                            .arg(work.join("c"));
                        let t = peers::time(c).map_err(|e| e.to_string())?;
                        if let Some(sync) = logged_sync(&work.join("c")) {
                            eprintln!(
                                "      {} flush {:.3} s",
                                zs[i].0,
                                sync.as_secs_f64()
                            );
                            unsynced[i].push(t.saturating_sub(sync));
                            syncs[i].push(sync);
                        }
                        if !checked[i] {
                            sh(&format!(
                                "qemu-img compare -q -f qcow2 -F qcow2 {} {}",
                                img.display(),
                                work.join("g/guest-0.qcow2").display()
                            ))
                            .map_err(|e| {
                                format!("{}: wrong guest: {e}", zs[i].0)
                            })?;
                            checked[i] = true;
                        }
                        t
                    }
                    i if i == zs.len() => sh(&format!(
                        "qemu-img convert -O raw {} {}",
                        img.display(),
                        out.display()
                    ))?,
                    _ => sh(&format!(
                        "qemu-img convert -O raw {0} {1} && sync -f {1}",
                        img.display(),
                        out.display()
                    ))?,
                };
                Ok::<_, String>(t)
            },
            &mut |l| eprintln!("{l}"),
        )?;
        // Each side with its flush, then each without.
        let pick =
            |name: &str| samples.iter().find(|s| s.tool == name).cloned();
        let mut synced: Vec<Samples> = Vec::new();
        let mut bare: Vec<Samples> = Vec::new();
        for (i, (name, _)) in zs.iter().enumerate() {
            synced.extend(pick(name));
            if !unsynced[i].is_empty() {
                bare.push(Samples {
                    tool: format!("{name}, less its flush"),
                    times: unsynced[i].clone(),
                });
                synced.push(Samples {
                    tool: format!("{name}: its flush alone"),
                    times: syncs[i].clone(),
                });
            }
        }
        synced.extend(pick(QEMU_SYNC));
        bare.extend(pick(QEMU));
        let _ = tables.write_fmt(format_args!(
            "\n{label} ({}, {} GiB, {:.0}% data{})\n\nwith the flush to disk:\n\n{}\nwithout it:\n\n{}",
            img.display(),
            q.gib,
            q.data * 100.0,
            if q.load > 0 {
                format!(", {} busy processes", q.load)
            } else {
                String::new()
            },
            report::markdown(&synced, QEMU_SYNC),
            report::markdown(&bare, QEMU)
        ));
    }
    clear()?;
    println!("{tables}");
    Ok(())
}

const QEMU: &str = "qemu-img convert";
const QEMU_SYNC: &str = "qemu-img convert; sync -f";

/// The flush of the last build in the cache at `cache`, as its
/// `builds.log` records it (time, pid, entry, build ms, flush ms,
/// source); `None` from a build that does not record it.
fn logged_sync(cache: &Path) -> Option<std::time::Duration> {
    let log = fs::read_to_string(cache.join("builds.log")).ok()?;
    let ms = log.lines().last()?.split(' ').nth(4)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ms))
}
