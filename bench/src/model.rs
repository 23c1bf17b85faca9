//! `bench model`: the walk's critical path.
//!
//! A walker reads one directory at a time, and a directory's
//! subdirectories are known only once it has been read: so the
//! directories on one path from the top must be read one after another,
//! by however many walkers. Charging each directory `dir_us` plus
//! `entry_us` for each of its entries, one walker takes `T1` (the sum
//! over all directories) and no number of walkers takes less than `C`,
//! the costliest chain from the top down. W walkers, each taking work
//! when idle, take between `max(T1 / W, C)` and `T1 / W + C` (a greedy
//! schedule's bound), if the kernel does not make their calls wait on
//! each other.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Entries of each directory under `root` (without following links or
/// crossing filesystems), and each directory's parent.
struct Shape {
    entries: HashMap<PathBuf, u64>,
    children: HashMap<PathBuf, Vec<PathBuf>>,
}

fn shape(root: &Path) -> Result<Shape, String> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::symlink_metadata(root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .dev();
    let mut s = Shape {
        entries: HashMap::new(),
        children: HashMap::new(),
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd =
            fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        let mut n = 0;
        let mut kids = Vec::new();
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
            n += 1;
            let md = fs::symlink_metadata(e.path())
                .map_err(|err| format!("{}: {err}", e.path().display()))?;
            if md.is_dir() && md.dev() == dev {
                kids.push(e.path());
            }
        }
        stack.extend(kids.iter().cloned());
        s.entries.insert(d.clone(), n);
        s.children.insert(d, kids);
    }
    Ok(s)
}

/// The costliest chain from `root` down, and the directories on it.
fn chain(
    s: &Shape,
    root: &Path,
    cost: &dyn Fn(u64) -> f64,
) -> (f64, Vec<PathBuf>) {
    // Deepest first, so that every child's best chain is known before
    // its parent's.
    let mut order = vec![root.to_path_buf()];
    let mut i = 0;
    while i < order.len() {
        order.extend(s.children[&order[i]].iter().cloned());
        i += 1;
    }
    let mut best: HashMap<&Path, (f64, Option<&Path>)> = HashMap::new();
    for d in order.iter().rev() {
        let below = s.children[d]
            .iter()
            .map(|c| (best[c.as_path()].0, Some(c.as_path())))
            .fold((0.0, None), |a, b| if b.0 > a.0 { b } else { a });
        best.insert(d, (cost(s.entries[d]) + below.0, below.1));
    }
    let mut path = vec![root.to_path_buf()];
    let mut at = best[root].1;
    while let Some(p) = at {
        path.push(p.to_path_buf());
        at = best[p].1;
    }
    (best[root].0, path)
}

pub(crate) fn print(
    root: &Path,
    dir_us: f64,
    entry_us: f64,
    worker_rate: f64,
) -> Result<(), String> {
    let s = shape(root)?;
    let cost = |n: u64| dir_us + entry_us * n as f64;
    let dirs = s.entries.len() as u64;
    let entries: u64 = s.entries.values().sum::<u64>() + 1;
    let t1: f64 = s.entries.values().map(|&n| cost(n)).sum();
    let (c, path) = chain(&s, root, &cost);
    println!(
        "{}: {dirs} directories, {entries} entries; {dir_us} µs per \
         directory and {entry_us} µs per entry\n",
        root.display()
    );
    println!(
        "one walker: {:.1} ms; the costliest chain: {:.1} ms ({} \
         directories: {}); no number of walkers beats {:.1}×\n",
        t1 / 1e3,
        c / 1e3,
        path.len(),
        path.iter()
            .map(|p| {
                let name = p
                    .strip_prefix(root)
                    .ok()
                    .filter(|r| !r.as_os_str().is_empty())
                    .map(|r| r.display().to_string())
                    .unwrap_or_else(|| ".".into());
                format!("{name} ({})", s.entries[p])
            })
            .collect::<Vec<_>>()
            .join(", "),
        t1 / c
    );
    println!(
        "| walkers | time ms, best–worst | speed-up | workers fed (at {worker_rate:.0} entries/s each) |\n|---:|---:|---:|---:|"
    );
    for w in [1u32, 2, 4, 8, 16, 32] {
        let lo = (t1 / w as f64).max(c);
        let hi = t1 / w as f64 + if w > 1 { c } else { 0.0 };
        let fed = |t: f64| entries as f64 / (t / 1e6) / worker_rate;
        println!(
            "| {w} | {:.1}–{:.1} | {:.1}–{:.1}× | {:.0}–{:.0} |",
            lo / 1e3,
            hi / 1e3,
            t1 / hi,
            t1 / lo,
            fed(hi),
            fed(lo)
        );
    }
    Ok(())
}
