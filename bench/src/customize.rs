//! `bench customize`: the same Debian root customised with the same
//! options by virt-customize (per guest, on a qcow2 overlay, through its
//! appliance) and by `zinstall provision --count 100` (beneath each
//! directory guest's root), timed side by side; then one guest of each
//! compared file by file (`customize_check`).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use zinstall_tune::peers;
use zinstall_tune::report::{self, Samples};

use crate::customize_check;
use crate::customize_setup::{
    guestfs_env, inputs, load, options, provision, run, s,
};

pub(crate) struct CustomizeBench<'a> {
    pub guests: usize,
    pub virt_guests: usize,
    pub runs: usize,
    pub root: Option<&'a Path>,
    pub scratch: &'a Path,
    pub zinstall: &'a Path,
}
struct Log {
    samples: Vec<Samples>,
    lines: String,
}

impl Log {
    fn record(&mut self, name: &str, t: Duration) {
        let l = load();
        eprintln!("  {name:<44} {:>9.3} s   load {l}", t.as_secs_f64());
        let _ =
            writeln!(self.lines, "| {name} | {:.3} | {l} |", t.as_secs_f64());
        match self.samples.iter_mut().find(|s| s.tool == name) {
            Some(s) => s.times.push(t),
            None => self.samples.push(Samples {
                tool: name.to_string(),
                times: vec![t],
            }),
        }
    }

    fn median(&self, name: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.tool == name && !s.times.is_empty())
            .map(|s| s.median().as_secs_f64())
    }
}

pub(crate) fn bench(b: &CustomizeBench) -> Result<(), String> {
    if !b.zinstall.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            b.zinstall.display()
        ));
    }
    fs::create_dir_all(b.scratch).map_err(|e| e.to_string())?;
    let i = inputs(b.root, b.scratch)?;
    let work = b.scratch.join("customize");
    let started_load = load();
    let mut log = Log {
        samples: Vec::new(),
        lines: String::new(),
    };

    // virt-customize: one overlay per guest, each customised alone.
    let virt = work.join("virt");
    let _ = fs::remove_dir_all(&virt);
    fs::create_dir_all(&virt).map_err(|e| e.to_string())?;
    let vname = "virt-customize, one guest";
    for n in 0..b.virt_guests {
        let disk = virt.join(format!("g-{n}.qcow2"));
        run(
            "qemu-img",
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                s(&i.base),
                "-F",
                "qcow2",
                s(&disk),
            ],
        )?;
        peers::sync();
        let mut c = Command::new("virt-customize");
        c.envs(guestfs_env())
            .args(["-q", "-a", s(&disk)])
            .args(options(&i, Some(n)));
        log.record(vname, peers::time(c).map_err(|e| e.to_string())?);
    }

    // zinstall: the cache filled first (untimed), so both timed
    // provisions copy from it; then 100 guests with the options and
    // without, interleaved.
    let cache = work.join("cache");
    let prime = work.join("prime");
    let _ = fs::remove_dir_all(&prime);
    peers::time(provision(b.zinstall, &i, 1, &prime, &cache, false))
        .map_err(|e| e.to_string())?;
    let _ = fs::remove_dir_all(&prime);
    let g = b.guests;
    let plain = format!("zinstall provision --count {g}, hostname only");
    let custom = format!("zinstall provision --count {g}, customised");
    let out = work.join("zi");
    for run_no in 0..b.runs {
        for k in 0..2 {
            let customised = (run_no + k) % 2 == 0;
            let _ = fs::remove_dir_all(&out);
            peers::sync();
            let t = peers::time(provision(
                b.zinstall, &i, g, &out, &cache, customised,
            ))
            .map_err(|e| e.to_string())?;
            log.record(if customised { &custom } else { &plain }, t);
        }
    }
    let _ = fs::remove_dir_all(&out);

    let check = customize_check::compare(b.zinstall, &i, &work, &cache)?;

    let per_guest = log.median(vname).unwrap_or(0.0);
    let virt_100 = per_guest * g as f64;
    let zc = log.median(&custom).unwrap_or(0.0);
    let zp = log.median(&plain).unwrap_or(0.0);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "root: {} ({}), {} virt-customize guests measured, {} runs of \
         zinstall; load (1/5/15 min) at the start: {started_load}, at the \
         end: {}\n",
        i.root.display(),
        i.tar.display(),
        b.virt_guests,
        b.runs,
        load()
    );
    md.push_str(&report::markdown(&log.samples, ""));
    let _ = writeln!(
        md,
        "\n| {g} guests | s | × virt-customize |\n|---|---:|---:|\n\
         | virt-customize (extrapolated: {per_guest:.3} s per guest, median of \
         {} measured, × {g}) | {virt_100:.1} | 1.000 |\n\
         | zinstall provision, customised | {zc:.3} | {:.4} |\n\
         | zinstall provision, hostname only | {zp:.3} | {:.4} |\n\
         | customisation alone (customised − hostname only) | {:.3} | {:.4} |",
        b.virt_guests,
        ratio(zc, virt_100),
        ratio(zp, virt_100),
        zc - zp,
        ratio(zc - zp, virt_100),
    );
    let _ = writeln!(
        md,
        "\nEach timing, with the load after it:\n\n| what | s | load |\n\
         |---|---:|---|\n{}",
        log.lines
    );
    md.push_str(&check);
    fs::write(work.join("customize.md"), &md).map_err(|e| e.to_string())?;
    fs::write(
        work.join("customize.csv"),
        report::csv("debian", &log.samples),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "\ncustomize: {}\n\n{md}",
        work.join("customize.md").display()
    );
    Ok(())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}
