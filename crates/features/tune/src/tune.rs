//! `zinstall tune`: a short sweep on the user's own tree and filesystem,
//! and writing the winner into the defaults file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::peers::Tool;
use crate::report::{self, Samples};
use crate::sweep::{self, Bench, Grid, Point};
use crate::trees::{self, Shape};

/// Why a sweep could not finish.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A file or directory of the sweep's.
    #[error("{}: {op}: {error}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        error: io::Error,
    },
    /// A contender failed to run or copied wrong.
    #[error("{0}")]
    Measure(crate::peers::MeasureError),
    /// Every grid point failed: there is nothing to choose from.
    #[error("no grid point copied right")]
    NothingCopiedRight,
    /// A statemap that could not be read.
    #[error("{}: {why}", path.display())]
    Statemap {
        /// The statemap file.
        path: PathBuf,
        /// Why it could not be read.
        why: String,
    },
}

fn io_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> TuneError {
    let path = path.to_path_buf();
    move |error| TuneError::Io { op, path, error }
}

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
    /// Where to write one statemap per grid point, if anywhere.
    pub statemap: Option<PathBuf>,
}

/// What the sweep found.
pub struct TuneResult {
    /// The best point, and its median in seconds.
    pub best: (Point, f64),
    /// Median of the default point (8 × 128).
    pub default: f64,
    /// Median of `cp -a`, if it copied right.
    pub cp: Option<f64>,
    /// Every median, as a Markdown table.
    pub table: String,
    /// With [`TuneOptions::statemap`]: per point, where the workers'
    /// time went, as a Markdown table.
    pub shares: Option<String>,
    /// Why the best point may be noise rather than this machine's best
    /// (one run per point, runs that spread widely, a machine busy with
    /// other work); empty when nothing says so.
    pub warnings: Vec<String>,
}

/// Runs of one point that spread more than this share of their median
/// say more about the machine's noise than about the point.
pub const NOISY_SPREAD: f64 = 0.25;

/// Other processes using more than this share of the CPUs during the
/// sweep make the times the load's, not the copies'.
pub const BUSY_SHARE: f64 = 0.25;

/// What makes a sweep's best point doubtful: `runs` per point, the
/// best's and the default's samples, and the best point's runnable share
/// (time its workers waited for a CPU, if traced). The load of other
/// processes is judged by [`tune`] around the whole sweep.
pub fn noise_warnings(
    runs: usize,
    best: &Samples,
    default: Option<&Samples>,
    runnable: Option<f64>,
) -> Vec<String> {
    let mut w = Vec::new();
    if runs < 2 {
        w.push(
            "one run per point: each time is a single sample, and the best \
             may be luck; use --runs 5 or more before --write"
                .to_string(),
        );
    }
    let spread = |s: &Samples| {
        let m = s.median().as_secs_f64();
        (s.times.len() > 1 && m > 0.0)
            .then(|| (s.max() - s.min()).as_secs_f64() / m)
    };
    for (what, s) in std::iter::once(("the best point", best))
        .chain(default.map(|d| ("the default", d)))
    {
        if let Some(x) = spread(s).filter(|x| *x > NOISY_SPREAD) {
            w.push(format!(
                "{what}'s runs spread by {:.0}% of their median ({:.3} to \
                 {:.3} s): the machine is noisy",
                x * 100.0,
                s.min().as_secs_f64(),
                s.max().as_secs_f64()
            ));
        }
    }
    if let Some(d) = default {
        let (b, dm) = (best.median().as_secs_f64(), d.median().as_secs_f64());
        let gap = (dm - b).abs();
        let noise = (best.max() - best.min())
            .max(d.max() - d.min())
            .as_secs_f64();
        if best.tool != d.tool && runs > 1 && gap < noise {
            w.push(format!(
                "the best and the default differ by {gap:.3} s, less than \
                 their runs spread ({noise:.3} s): the difference may be \
                 noise"
            ));
        }
    }
    if let Some(r) = runnable.filter(|r| *r > 0.5) {
        w.push(format!(
            "the best point's workers waited for a CPU {:.0}% of their \
             life: the machine is oversubscribed",
            r * 100.0
        ));
    }
    w
}

/// Runs the sweep. Nothing is kept under `dest` afterwards.
pub fn tune(
    opts: &TuneOptions,
    log: &mut dyn FnMut(&str),
) -> Result<TuneResult, TuneError> {
    let work = opts
        .dest
        .join(format!(".zinstall-tune.{}", std::process::id()));
    fs::create_dir_all(&work).map_err(io_err("create directory", &work))?;
    let load = crate::sys::CpuLoad::now();
    let mut r = run(opts, &work, log);
    let _ = zinstall_engine::fsutil::remove_tree(&work);
    if let (Ok(r), Some(load)) = (&mut r, load)
        && let Some(o) = load.others_share().filter(|o| *o > BUSY_SHARE)
    {
        r.warnings.push(format!(
            "other processes used {:.0}% of the CPUs during the sweep: the \
             times measure the load as much as the copies; tune on a quiet \
             machine",
            o * 100.0
        ));
    }
    r
}

fn run(
    opts: &TuneOptions,
    work: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<TuneResult, TuneError> {
    let src = match &opts.tree {
        Some(t) => t.clone(),
        None => {
            let p = work.join("usr");
            log("generating a /usr-like tree (scale 0.5)...");
            trees::generate(Shape::Usr, &p, 0.5, false)
                .map_err(io_err("generate a tree", &p))?;
            p
        }
    };
    let mut tools = opts.grid.tools();
    let default = Tool::zinstall(8, 128);
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
        durable: false,
        log,
    };
    let m = bench.measure(&tools).map_err(TuneError::Measure)?;
    let (best, s) = sweep::best(&m.samples, &opts.grid)
        .ok_or(TuneError::NothingCopiedRight)?;
    let shares = match &opts.statemap {
        Some(dir) => {
            Some(statemaps(opts, &src, &work.join("copy"), dir, &m, log)?)
        }
        None => None,
    };
    let samples_of = |name: &str| {
        m.samples
            .iter()
            .find(|x| x.tool == name && !x.times.is_empty())
    };
    let runnable = shares
        .as_ref()
        .and_then(|(_, per)| per.iter().find(|(p, _)| *p == best))
        .and_then(|(_, sh)| sh.runnable);
    let warnings =
        noise_warnings(opts.runs, s, samples_of(&default.name()), runnable);
    let med = |name: &str| {
        m.samples
            .iter()
            .find(|x| x.tool == name && !x.times.is_empty())
            .map(|x: &Samples| x.median().as_secs_f64())
    };
    Ok(TuneResult {
        best: (best, s.median().as_secs_f64()),
        default: med(&default.name()).unwrap_or(f64::NAN),
        cp: med("cp -a"),
        table: report::markdown(&m.samples, "cp -a"),
        shares: shares.map(|(table, _)| table),
        warnings,
    })
}

/// Where one point's workers spent their time, as shares of their life
/// (from creation to exit).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerShares {
    /// Waiting for a batch from the walker (the recorder's `waiting`).
    pub waiting: f64,
    /// On CPU, in user mode or in system calls (the scheduler map's
    /// `on-cpu` and `on-cpu-syscall`), if traced.
    pub on_cpu: Option<f64>,
    /// Off CPU in reads, writes or uninterruptible sleep (the scheduler
    /// map's `off-cpu-io-read`, `off-cpu-io-write`, `off-cpu-blocked`),
    /// if traced.
    pub io: Option<f64>,
    /// Ready to run but not running, waiting for a CPU (the scheduler
    /// map's `off-cpu-runnable`), if traced.
    pub runnable: Option<f64>,
}

/// The summed share of `states` over the entities `is_worker` picks,
/// leaving out time after they exited (`off-cpu-dead`).
pub fn worker_share(
    map: &zinstall_statemap::Statemap,
    is_worker: impl Fn(&str) -> bool,
    states: &[&str],
) -> f64 {
    let s = zinstall_statemap::Summary::of(map);
    let index = |n: &str| s.states.iter().position(|x| x == n);
    let dead = index("off-cpu-dead");
    let (mut part, mut life) = (0u64, 0u64);
    for e in s.entities.iter().filter(|e| is_worker(&e.name)) {
        let gone = dead.map_or(0, |d| e.time_in[d]);
        life = life.saturating_add(e.span - gone);
        for st in states.iter().filter_map(|n| index(n)) {
            part = part.saturating_add(e.time_in[st]);
        }
    }
    if life == 0 {
        0.0
    } else {
        part as f64 / life as f64
    }
}

/// True if this process may run bpftrace: root, with bpftrace on PATH.
fn can_trace() -> bool {
    crate::sys::is_root()
        && std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join("bpftrace").is_file())
        })
}

/// One more copy per grid point, untimed, recording its statemap into
/// `dir` (`zinstall-TxB.statemap.json` and its SVG) and, as root with
/// bpftrace, tracing it too (`zinstall-TxB.sched.json` and its SVG);
/// returns the table of where the workers' time went.
fn statemaps(
    opts: &TuneOptions,
    src: &Path,
    dst: &Path,
    dir: &Path,
    m: &sweep::Measured,
    log: &mut dyn FnMut(&str),
) -> Result<(String, Vec<(Point, WorkerShares)>), TuneError> {
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let mut per_point = Vec::new();
    let trace = can_trace();
    if !trace {
        log("statemaps: the recorder's only (tracing needs root and bpftrace)");
    }
    let mut table = String::from(
        "| COPY_THREADS x COPY_BATCH | median s | workers waiting for the walker | on CPU | blocked in I/O | waiting for a CPU |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for p in opts.grid.points() {
        let name = p.tool().name();
        let median = m
            .samples
            .iter()
            .find(|s| s.tool == name && !s.times.is_empty())
            .map(|s| format!("{:.3}", s.median().as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        let (t, b) = (p.threads, p.batch);
        let (stem, label) = match p.walkers {
            None => (format!("zinstall-{t}x{b}"), format!("{t} x {b}")),
            Some(w) => (
                format!("zinstall-{t}x{b}-w{w}"),
                format!("{t} x {b}, {w} walkers"),
            ),
        };
        let sh = point(opts, src, dst, &dir.join(stem), p, trace, log)?;
        per_point.push((p, sh));
        let pct = |v: Option<f64>| {
            v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0))
        };
        table.push_str(&format!(
            "| {label} | {median} | {} | {} | {} | {} |\n",
            pct(Some(sh.waiting)),
            pct(sh.on_cpu),
            pct(sh.io),
            pct(sh.runnable)
        ));
    }
    let shares = dir.join("shares.md");
    fs::write(&shares, &table).map_err(io_err("write", &shares))?;
    Ok((table, per_point))
}

fn point(
    opts: &TuneOptions,
    src: &Path,
    dst: &Path,
    stem: &Path,
    p: Point,
    trace: bool,
    log: &mut dyn FnMut(&str),
) -> Result<WorkerShares, TuneError> {
    let (threads, batch) = (p.threads, p.batch);
    use std::process::Command;
    use zinstall_statemap as statemap;
    let json = stem.with_extension("statemap.json");
    let sched = stem.with_extension("sched.json");
    let _ = fs::remove_dir_all(dst);
    let mut copy: Vec<std::ffi::OsString> = vec![
        opts.zinstall.clone().into(),
        "copy".into(),
        "-q".into(),
        "--threads".into(),
        threads.to_string().into(),
        "--batch".into(),
        batch.to_string().into(),
        "--statemap".into(),
        json.clone().into(),
    ];
    if let Some(w) = p.walkers {
        copy.push("--walkers".into());
        copy.push(w.to_string().into());
    }
    copy.push(src.into());
    copy.push(dst.into());
    let mut cmd = if trace {
        let mut c = Command::new(&opts.zinstall);
        c.arg("trace").arg("-o").arg(&sched).arg("--").args(&copy);
        c
    } else {
        let mut c = Command::new(&copy[0]);
        c.args(&copy[1..]);
        c
    };
    let out = cmd
        .env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null")
        .output()
        .map_err(io_err("run", &opts.zinstall))?;
    let _ = fs::remove_dir_all(dst);
    if !out.status.success() {
        log(&format!(
            "  statemap of {threads}x{batch}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let read = |p: &Path| -> Result<statemap::Statemap, TuneError> {
        let f = fs::File::open(p).map_err(io_err("open", p))?;
        statemap::parse(std::io::BufReader::new(f)).map_err(|e| {
            TuneError::Statemap {
                path: p.to_path_buf(),
                why: e.to_string(),
            }
        })
    };
    let draw = |map: &statemap::Statemap, p: &Path| -> Result<(), TuneError> {
        let svg = p.with_extension("svg");
        let mut buf = Vec::new();
        statemap::render_svg(map, &statemap::RenderOptions::default(), &mut buf)
            .and_then(|()| fs::write(&svg, buf))
            .map_err(io_err("write", &svg))
    };
    let rec = read(&json)?;
    draw(&rec, &stem.with_extension("statemap"))?;
    let mut shares = WorkerShares {
        waiting: worker_share(&rec, |n| n.starts_with("worker"), &["waiting"]),
        ..WorkerShares::default()
    };
    if trace && sched.is_file() {
        let s = read(&sched)?;
        draw(&s, &sched)?;
        let copy = |n: &str| n.starts_with("copy-");
        shares.on_cpu =
            Some(worker_share(&s, copy, &["on-cpu", "on-cpu-syscall"]));
        shares.io = Some(worker_share(
            &s,
            copy,
            &["off-cpu-io-read", "off-cpu-io-write", "off-cpu-blocked"],
        ));
        shares.runnable = Some(worker_share(&s, copy, &["off-cpu-runnable"]));
    }
    log(&format!(
        "  statemap of {threads}x{batch}: {}",
        json.display()
    ));
    Ok(shares)
}

#[cfg(test)]
mod noise_test {
    use super::*;
    use std::time::Duration;

    fn samples(tool: &str, ms: &[u64]) -> Samples {
        Samples {
            tool: tool.into(),
            times: ms.iter().map(|m| Duration::from_millis(*m)).collect(),
        }
    }

    #[test]
    fn quiet_runs_raise_nothing_and_noisy_ones_are_named() {
        let best = samples("zinstall 4x64", &[100, 102, 101, 99, 100]);
        let default = samples("zinstall 8x128", &[130, 131, 129, 130, 132]);
        assert!(noise_warnings(5, &best, Some(&default), Some(0.1)).is_empty());
        let w = noise_warnings(1, &samples("a", &[100]), None, None);
        assert!(w[0].starts_with("one run per point"), "{w:?}");
        let noisy = samples("zinstall 4x64", &[100, 160, 90, 100, 140]);
        let w = noise_warnings(5, &noisy, Some(&default), None);
        assert!(w.iter().any(|x| x.contains("spread by 70%")), "{w:?}");
        assert!(w.iter().any(|x| x.contains("may be noise")), "{w:?}");
        let w = noise_warnings(5, &best, Some(&default), Some(0.75));
        assert!(
            w.iter().any(|x| x.contains("waited for a CPU 75%")),
            "{w:?}"
        );
    }
}
