//! `zinstall tune`: a short sweep on the user's own tree and filesystem,
//! and writing the winner into the defaults file.

use std::fs;
use std::path::{Path, PathBuf};

use crate::peers::Tool;
use crate::report::{self, Samples};
use crate::sweep::{self, Bench, Grid};
use crate::trees::{self, Shape};

/// What to tune on.
pub struct TuneOptions {
    /// The tree to copy; a generated `/usr`-like one if `None`.
    pub tree: Option<PathBuf>,
    /// A directory on the filesystem to tune for; copies go under it.
    pub dest: PathBuf,
    /// The grid.
    pub grid: Grid,
    /// Runs per point.
    pub runs: usize,
    /// The zinstall binary to time.
    pub zinstall: PathBuf,
}

/// What the sweep found.
pub struct TuneResult {
    /// The best point: threads, batch, median seconds.
    pub best: (usize, usize, f64),
    /// Median of the default point (8 × 128).
    pub default: f64,
    /// Median of `cp -a`, if it copied right.
    pub cp: Option<f64>,
    /// Every median, as a Markdown table.
    pub table: String,
}

/// Runs the sweep. Nothing is kept under `dest` afterwards.
pub fn tune(
    opts: &TuneOptions,
    log: &mut dyn FnMut(&str),
) -> Result<TuneResult, String> {
    let work = opts
        .dest
        .join(format!(".zinstall-tune.{}", std::process::id()));
    fs::create_dir_all(&work)
        .map_err(|e| format!("{}: {e}", work.display()))?;
    let r = run(opts, &work, log);
    let _ = copier::fsutil::remove_tree(&work);
    r
}

fn run(
    opts: &TuneOptions,
    work: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<TuneResult, String> {
    let src = match &opts.tree {
        Some(t) => t.clone(),
        None => {
            let p = work.join("usr");
            log("generating a /usr-like tree (scale 0.5)...");
            trees::generate(Shape::Usr, &p, 0.5, false)
                .map_err(|e| format!("{}: {e}", p.display()))?;
            p
        }
    };
    let mut tools = opts.grid.tools();
    let default = Tool::Zinstall {
        threads: 8,
        batch: 128,
    };
    if !tools.contains(&default) {
        tools.push(default.clone());
    }
    tools.push(Tool::Cp);
    let mut bench = Bench {
        src: &src,
        dst: work.join("copy"),
        zinstall: &opts.zinstall,
        bench: &opts.zinstall,
        runs: opts.runs,
        cold: false,
        log,
    };
    let m = bench.measure(&tools)?;
    let (t, b, s) = sweep::best(&m.samples, &opts.grid)
        .ok_or("no grid point copied right")?;
    let med = |name: &str| {
        m.samples
            .iter()
            .find(|x| x.tool == name && !x.times.is_empty())
            .map(|x: &Samples| x.median().as_secs_f64())
    };
    Ok(TuneResult {
        best: (t, b, s.median().as_secs_f64()),
        default: med(&default.name()).unwrap_or(f64::NAN),
        cp: med("cp -a"),
        table: report::markdown(&m.samples, "cp -a"),
    })
}

/// Sets `COPY_THREADS` and `COPY_BATCH` in a defaults file's text,
/// keeping every comment and other line: a setting line is replaced; a
/// commented-out one (`#COPY_THREADS=8`) gets the setting after it;
/// otherwise the setting is appended.
pub fn rewrite_defaults(text: &str, threads: usize, batch: usize) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for (key, value) in [("COPY_THREADS", threads), ("COPY_BATCH", batch)] {
        let setting = format!("{key}={value}");
        let is_key = |l: &str| l.trim_start().starts_with(&format!("{key}="));
        if let Some(i) = lines.iter().position(|l| is_key(l)) {
            lines[i] = setting;
            // A key set twice is an error in the file: keep the first.
            let mut j = i + 1;
            while j < lines.len() {
                if is_key(&lines[j]) {
                    lines.remove(j);
                } else {
                    j += 1;
                }
            }
        } else if let Some(i) = lines.iter().position(|l| {
            l.trim_start()
                .trim_start_matches('#')
                .trim_start()
                .starts_with(&format!("{key}="))
        }) {
            lines.insert(i + 1, setting);
        } else {
            lines.push(setting);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rewrite_keeps_comments() {
        let shipped = include_str!("../../etc/default/zinstall");
        let out = rewrite_defaults(shipped, 4, 32);
        assert!(out.contains("#COPY_THREADS=8\nCOPY_THREADS=4\n"), "{out}");
        assert!(out.contains("#COPY_BATCH=128\nCOPY_BATCH=32\n"), "{out}");
        let comments =
            |s: &str| s.lines().filter(|l| l.starts_with('#')).count();
        assert_eq!(comments(&out), comments(shipped));
        // It parses, and says what was written.
        let f = copier::DefaultsFile::parse(Path::new("x"), out.as_bytes())
            .unwrap();
        let t = copier::Tunables::from_defaults(&f).unwrap();
        assert_eq!((t.copy_threads, t.copy_batch), (4, 32));
        // Run again: replaced in place, not added.
        let again = rewrite_defaults(&out, 2, 8);
        assert_eq!(again.matches("COPY_THREADS=").count(), 2);
        assert!(again.contains("\nCOPY_THREADS=2\n"));
        assert_eq!(
            rewrite_defaults("", 1, 1),
            "COPY_THREADS=1\nCOPY_BATCH=1\n"
        );
    }
}
