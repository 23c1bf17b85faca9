//! `bench sweep`: COPY_THREADS x COPY_BATCH on one tree with the peers in
//! the same run, written as CSV, Markdown and charts.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_tune::peers::Tool;
use zinstall_tune::report;

use crate::common::{optional_peer, source, workspace};
use crate::plot;

#[allow(clippy::too_many_arguments)]
pub(crate) fn sweep_bench(
    tree: &str,
    scale: f64,
    threads: &str,
    batch: &str,
    runs: usize,
    peer_list: &str,
    floor: bool,
    cold: bool,
    scratch: &Path,
    keep: Option<&Path>,
    zinstall: Option<PathBuf>,
) -> Result<(), String> {
    use zinstall_tune::sweep::{self, Bench, Grid};
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let z =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let grid = Grid {
        threads: sweep::list(threads).map_err(|e| e.to_string())?,
        batches: sweep::list(batch).map_err(|e| e.to_string())?,
        walkers: Vec::new(),
    };
    let mut tools = grid.tools();
    for p in peer_list.split(',').filter(|p| !p.is_empty()) {
        match p {
            "cp" => tools.push(Tool::Cp),
            "tar" => tools.push(Tool::Tar),
            "rsync" => tools.push(Tool::Rsync),
            "serial8k" => tools.push(Tool::Serial8k),
            "xcp" | "fcp" => tools.extend(optional_peer(p)),
            other => return Err(format!("unknown peer {other}")),
        }
    }
    if !tools.contains(&(Tool::zinstall(1, 1))) {
        tools.push(Tool::zinstall(1, 1));
    }
    let src = source(tree, scale, false, scratch)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("sweep-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let mut log = |l: &str| eprintln!("{l}");
    eprintln!(
        "sweep of {} over {} points and {} peers, {runs} runs each",
        src.display(),
        grid.threads.len() * grid.batches.len(),
        tools.len() - grid.threads.len() * grid.batches.len()
    );
    let mut b = Bench {
        src: &src,
        dst: scratch.join("dst"),
        zinstall: &z,
        bench: &me,
        runs,
        cold,
        durable: false,
        log: &mut log,
    };
    let m = b.measure(&tools).map_err(|e| e.to_string())?;
    let label = if tree.contains('/') {
        tree.to_string()
    } else {
        format!("{tree} (scale {scale})")
    };
    let mut md =
        format!("### {label}\n\n{}", report::markdown(&m.samples, "cp -a"));
    for w in &m.wrong {
        md.push_str(&format!("\nNot counted, wrong copy: {w}\n"));
    }
    if let Some((p, s)) = sweep::best(&m.samples, &grid) {
        md.push_str(&format!(
            "\nBest point: COPY_THREADS={} COPY_BATCH={}, median {:.3} s.\n",
            p.threads,
            p.batch,
            s.median().as_secs_f64()
        ));
    }
    if floor {
        let empty = source(tree, scale, true, scratch)?;
        let floor_tools = [Tool::zinstall(8, 128), Tool::Cp];
        let mut b = Bench {
            src: &empty,
            dst: scratch.join("dst"),
            zinstall: &z,
            bench: &me,
            runs,
            cold,
            durable: false,
            log: &mut log,
        };
        let f = b.measure(&floor_tools).map_err(|e| e.to_string())?;
        md.push_str(&format!(
            "\n#### metadata floor: {label} with every file empty\n\n{}",
            report::markdown(&f.samples, "cp -a")
        ));
        fs::write(
            out.join("floor.csv"),
            report::csv(&format!("{label} empty"), &f.samples),
        )
        .map_err(|e| e.to_string())?;
    }
    fs::write(out.join("sweep.csv"), report::csv(&label, &m.samples))
        .map_err(|e| e.to_string())?;
    fs::write(out.join("sweep.md"), &md).map_err(|e| e.to_string())?;
    plot::sweep_charts(&out, &label, &grid, &m.samples)?;
    println!("{md}");
    if let Some(k) = keep {
        fs::create_dir_all(k).map_err(|e| e.to_string())?;
        for e in fs::read_dir(&out).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            fs::copy(e.path(), k.join(e.file_name()))
                .map_err(|e| e.to_string())?;
        }
        eprintln!("results copied to {}", k.display());
    }
    eprintln!("results in {}", out.display());
    Ok(())
}
