//! `bench copy`: zinstall copy against cp -a, tar | tar, rsync -aH, xcp,
//! fcp and a serial 8 KiB copy, interleaved, on one tree; each run also
//! timed to the end of a flush of its copy.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers::{self, Tool};
use zinstall_tune::report;

use crate::common::{optional_peer, source, workspace};

#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_bench(
    tree: &str,
    scale: f64,
    runs: usize,
    tools: Option<&str>,
    floor: bool,
    scratch: &Path,
    zinstall: Option<PathBuf>,
    before: Option<PathBuf>,
) -> Result<(), String> {
    fs::create_dir_all(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let zinstall =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !zinstall.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            zinstall.display()
        ));
    }
    let bench_bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let all = if before.is_some() {
        "zinstall,zinstall-sync,before,zinstall1x1,cp,tar,rsync,xcp,fcp,serial8k"
    } else {
        "zinstall,zinstall-sync,zinstall1x1,cp,tar,rsync,xcp,fcp,serial8k"
    };
    let wanted: Vec<String> = tools
        .unwrap_or(all)
        .split(',')
        .map(str::to_string)
        .collect();
    let mut list = Vec::new();
    for t in &wanted {
        match t.as_str() {
            "zinstall" => list.push(Tool::zinstall(8, 128)),
            "zinstall1x1" => list.push(Tool::zinstall(1, 1)),
            "zinstall-sync" => list.push(Tool::ZinstallSync),
            "zinstall-always" => list.push(Tool::ZinstallAlways),
            "before" => {
                let bin = before.clone().ok_or("before: give --before BIN")?;
                if !bin.is_file() {
                    return Err(format!("{}: no such binary", bin.display()));
                }
                list.push(Tool::ZinstallAt {
                    bin,
                    label: "zinstall before 8x128".into(),
                });
            }
            w if w.starts_with("zinstall-w") => {
                let n = w["zinstall-w".len()..]
                    .parse()
                    .map_err(|_| format!("{w}: zinstall-wN, N a number"))?;
                list.push(Tool::Zinstall {
                    threads: 8,
                    batch: 128,
                    walkers: Some(n),
                });
            }
            "recorded" => list.push(Tool::ZinstallRecorded),
            "bpftraced" => list.push(Tool::ZinstallBpftraced),
            "noprobes" => {
                let bin = workspace().join("target/noprobes/release/zinstall");
                if !bin.is_file() {
                    return Err(format!(
                        "{}: build it first: cargo build --release -p zinstall \
                         --no-default-features --target-dir target/noprobes",
                        bin.display()
                    ));
                }
                list.push(Tool::ZinstallNoProbes(bin));
            }
            "cp" => list.push(Tool::Cp),
            "tar" => list.push(Tool::Tar),
            "rsync" => list.push(Tool::Rsync),
            "serial8k" => list.push(Tool::Serial8k),
            "xcp" | "fcp" => list.extend(optional_peer(t)),
            other => return Err(format!("unknown tool {other}")),
        }
    }
    let mut trees =
        vec![(tree.to_string(), source(tree, scale, false, scratch)?)];
    if floor {
        trees.push((
            format!("{tree} (empty files)"),
            source(tree, scale, true, scratch)?,
        ));
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("results-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    for (label, src) in trees {
        let bytes =
            peers::warm(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        eprintln!(
            "{label}: {} ({bytes} bytes), {runs} runs of {} tools",
            src.display(),
            list.len()
        );
        let mut log = |l: &str| eprintln!("{l}");
        let mut b = zinstall_tune::sweep::Bench {
            src: &src,
            dst: scratch.join("dst"),
            zinstall: &zinstall,
            bench: &bench_bin,
            runs,
            cold: false,
            durable: true,
            log: &mut log,
        };
        let zinstall_tune::sweep::Measured {
            mut samples,
            wrong,
            mut durable,
        } = b.measure(&list).map_err(|e| e.to_string())?;
        samples.retain(|s| !s.times.is_empty());
        durable.retain(|s| !s.times.is_empty());
        let reference = if samples.iter().any(|s| s.tool == "cp -a") {
            "cp -a"
        } else {
            "zinstall 8x128"
        };
        let mut table = report::markdown(&samples, reference);
        // The same runs, each to the end of a flush of its copy: what an
        // install that must survive a power cut waits for.
        table.push_str(&format!(
            "\nTo the disk (each run, then `sync -f` of its copy):\n\n{}",
            report::markdown(&durable, &peers::durable_name(reference))
        ));
        samples.extend(durable);
        for w in &wrong {
            table.push_str(&format!("\nNot counted, wrong copy: {w}\n"));
        }
        println!("\n{label} ({})\n\n{table}", src.display());
        let slug: String = label
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .trim_matches('-')
            .to_string();
        fs::write(
            out.join(format!("{slug}.csv")),
            report::csv(&label, &samples),
        )
        .map_err(|e| e.to_string())?;
        fs::write(out.join(format!("{slug}.md")), &table)
            .map_err(|e| e.to_string())?;
    }
    eprintln!("results in {}", out.display());
    Ok(())
}
