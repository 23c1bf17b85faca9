//! `bench walk`: how many workers the walkers can feed: walk-only runs
//! (the jobs discarded) beside one worker's full copy, interleaved, with
//! the walkers' CPU, idle and blocked time.

use std::fs;
use std::path::Path;

use zinstall_tune::peers;
use zinstall_tune::report;

use crate::common::source;

/// What one run of `walk_bench` did, besides its time.
#[derive(Clone, Copy, Default)]
struct WalkRun {
    entries: u64,
    bytes: u64,
    walker_blocked: std::time::Duration,
    utilization: f64,
    /// The walkers' CPU time, summed.
    walker_cpu: std::time::Duration,
    /// The busiest walker's share of the walkers' CPU time.
    top_share: f64,
    /// Time the walkers waited for a directory to read, summed.
    walker_idle: std::time::Duration,
}

pub(crate) fn walk_bench(
    tree: &str,
    scale: f64,
    runs: usize,
    only: Option<&str>,
    walkers: &[usize],
    cold: bool,
    scratch: &Path,
) -> Result<(), String> {
    use std::time::Instant;
    if walkers.is_empty() {
        return Err("--walkers: no walker count".into());
    }
    let copy = "copy, 1 worker";
    let walks: Vec<String> =
        walkers.iter().map(|w| format!("walk-only-w{w}")).collect();
    let mut names: Vec<&str> = Vec::new();
    let mut counts: Vec<Option<usize>> = Vec::new();
    if only != Some("copy") {
        names.extend(walks.iter().map(String::as_str));
        counts.extend(walkers.iter().copied().map(Some));
    }
    if only != Some("walk") {
        names.push(copy);
        counts.push(None);
    }
    if let Some(o) = only.filter(|o| !["walk", "copy"].contains(o)) {
        return Err(format!("--only {o}: walk or copy"));
    }
    fs::create_dir_all(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let src = source(tree, scale, false, scratch)?;
    let dst = scratch.join("walk-dst");
    eprintln!(
        "{}: {runs} runs of {}, {} page cache, destination {}",
        src.display(),
        names.join(", "),
        if cold { "cold" } else { "warm" },
        dst.display()
    );
    let mut done: Vec<Vec<WalkRun>> = vec![Vec::new(); names.len()];
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            let _ = fs::remove_dir_all(&dst);
            if cold {
                peers::drop_caches().map_err(|e| e.to_string())?;
            } else {
                peers::sync();
                peers::warm(&src)
                    .map_err(|e| format!("{}: {e}", src.display()))?;
            }
            // One worker for the copy, and one walker: the copy as it
            // was timed before there were several. The walk-only runs
            // discard their batches in the walkers themselves.
            let tunables = zinstall_engine::Tunables {
                copy_threads: 1,
                copy_walkers: counts[i].unwrap_or(1),
                ..zinstall_engine::Tunables::default()
            };
            let plan = zinstall_engine::Plan::new(&src, &dst)
                .tunables(tunables)
                .walk_only(counts[i].is_some());
            let t0 = Instant::now();
            let r = plan.run().map_err(|f| f.to_string())?;
            let took = t0.elapsed();
            if counts[i].is_none() {
                peers::verify_copy(&src, &dst)
                    .map_err(|e| format!("{copy} made a wrong copy: {e}"))?;
            }
            done[i].push(WalkRun {
                entries: r.stats.entries(),
                bytes: r.stats.bytes,
                walker_blocked: r.stats.walker_blocked,
                utilization: r.stats.utilization(),
                walker_cpu: r.stats.walkers.iter().map(|w| w.cpu).sum(),
                walker_idle: r.stats.walkers.iter().map(|w| w.idle).sum(),
                top_share: r
                    .stats
                    .walkers
                    .iter()
                    .map(|w| w.cpu.as_secs_f64())
                    .fold(0.0, f64::max)
                    / r.stats
                        .walkers
                        .iter()
                        .map(|w| w.cpu.as_secs_f64())
                        .sum::<f64>()
                        .max(1e-9),
            });
            Ok::<_, String>(took)
        },
        &mut |l| eprintln!("{l}"),
    )?;
    let _ = fs::remove_dir_all(&dst);
    let reference = if names.contains(&copy) {
        copy
    } else {
        names[0]
    };
    let mut md = format!(
        "### {} ({} page cache, destination on {})\n\n{}",
        src.display(),
        if cold { "cold" } else { "warm" },
        scratch.display(),
        report::markdown(&samples, reference)
    );
    let median = |v: &[WalkRun], f: fn(&WalkRun) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        match x.len() {
            0 => 0.0,
            n if n % 2 == 1 => x[n / 2],
            n => (x[n / 2 - 1] + x[n / 2]) / 2.0,
        }
    };
    let rates: Vec<report::Rate> = samples
        .iter()
        .zip(&done)
        .map(|(s, d)| report::Rate {
            samples: s,
            entries: d.first().map_or(0, |r| r.entries),
            bytes: d.first().map_or(0, |r| r.bytes),
        })
        .collect();
    for (s, d) in samples.iter().zip(&done) {
        if d.iter().any(|r| r.entries != d[0].entries) {
            md.push_str(&format!(
                "\nThe source changed during the runs: {} counted {:?} \
                 entries.\n",
                s.tool,
                d.iter().map(|r| r.entries).collect::<Vec<_>>()
            ));
        }
        md.push_str(&format!(
            "\n{}: walkers' CPU {:.3} s (the busiest {:.0}% of it), idle \
             {:.3} s, blocked on the full queue {:.3} s; workers busy {:.0}% \
             of the wall time (medians).\n",
            s.tool,
            median(d, |r| r.walker_cpu.as_secs_f64()),
            100.0 * median(d, |r| r.top_share),
            median(d, |r| r.walker_idle.as_secs_f64()),
            median(d, |r| r.walker_blocked.as_secs_f64()),
            100.0 * median(d, |r| r.utilization),
        ));
    }
    let consumer = names.iter().position(|n| *n == copy).map(|i| &rates[i]);
    let first_walk = counts.iter().position(Option::is_some).map(|i| &rates[i]);
    if let Some(c) = consumer {
        for (r, w) in rates.iter().zip(&counts) {
            let Some(w) = w else { continue };
            let (table, ratio) = report::rates(r, c);
            md.push_str(&format!("\n{table}"));
            if let Some(x) = ratio {
                md.push_str(&format!(
                    "\n{w} walker(s) feed {x:.1} workers: walk-only \
                     entries/s over one worker's, at the medians.\n"
                ));
            }
        }
    }
    if let Some(base) = first_walk {
        let base_t = base.samples.median().as_secs_f64();
        md.push_str(&format!(
            "\n| walk-only | median s | × {} median | speed-up |\n\
             |---|---:|---:|---:|\n",
            base.samples.tool
        ));
        for (r, w) in rates.iter().zip(&counts) {
            if w.is_none() {
                continue;
            }
            let t = r.samples.median().as_secs_f64();
            md.push_str(&format!(
                "| {} | {t:.3} | {:.3} | {:.2}× |\n",
                r.samples.tool,
                t / base_t,
                base_t / t
            ));
        }
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("results-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let label = src.display().to_string();
    fs::write(out.join("walk.csv"), report::csv(&label, &samples))
        .map_err(|e| e.to_string())?;
    fs::write(out.join("walk.md"), &md).map_err(|e| e.to_string())?;
    println!("\n{md}");
    eprintln!("results in {}", out.display());
    Ok(())
}
