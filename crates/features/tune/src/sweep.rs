//! Timing contenders side by side, and sweeping the tunables' grid.

use std::fs;
use std::path::{Path, PathBuf};

use crate::peers::{self, Tool};
use crate::report::Samples;

/// Where and how to measure.
pub struct Bench<'a> {
    /// The tree copied.
    pub src: &'a Path,
    /// The copy's path (removed between runs), beside the source.
    pub dst: PathBuf,
    /// The zinstall binary.
    pub zinstall: &'a Path,
    /// The bench binary (for the serial baseline).
    pub bench: &'a Path,
    /// Timed runs per contender.
    pub runs: usize,
    /// Drop the page cache before each run instead of warming the source
    /// (root only).
    pub cold: bool,
    /// Also time each run to the end of a `syncfs` of its copy (`sync
    /// -f`): the durable time, in [`Measured::durable`].
    pub durable: bool,
    /// Progress lines.
    pub log: &'a mut dyn FnMut(&str),
}

/// The outcome: samples per tool (in `tools` order, empty for tools that
/// made a wrong copy) and what went wrong with those.
pub struct Measured {
    /// One entry per tool.
    pub samples: Vec<Samples>,
    /// `tool: difference` for each tool whose copy was wrong.
    pub wrong: Vec<String>,
    /// With [`Bench::durable`]: each tool's time to the end of the flush
    /// of its copy, named by [`peers::durable_name`]; empty otherwise.
    pub durable: Vec<Samples>,
}

impl Bench<'_> {
    /// Runs every tool `runs` times, interleaved (the order rotates each
    /// run), each after `sync` and a warm read of the source, each copy
    /// verified before its time counts.
    pub fn measure(
        &mut self,
        tools: &[Tool],
    ) -> Result<Measured, peers::MeasureError> {
        let mut samples: Vec<Samples> = tools
            .iter()
            .map(|t| Samples {
                tool: t.name(),
                times: Vec::new(),
            })
            .collect();
        let mut durable: Vec<Samples> = tools
            .iter()
            .map(|t| Samples {
                tool: peers::durable_name(&t.name()),
                times: Vec::new(),
            })
            .collect();
        let mut wrong: Vec<String> = Vec::new();
        let mut bad = vec![false; tools.len()];
        for run in 0..self.runs {
            for k in 0..tools.len() {
                let i = (k + run) % tools.len();
                if bad[i] {
                    continue;
                }
                let _ = fs::remove_dir_all(&self.dst);
                let _ =
                    fs::remove_file(self.dst.with_extension("statemap.json"));
                peers::sync();
                peers::warm(self.src).map_err(|error| {
                    peers::MeasureError::Warm {
                        path: self.src.to_path_buf(),
                        error,
                    }
                })?;
                let t = peers::time(tools[i].command(
                    self.src,
                    &self.dst,
                    self.zinstall,
                    self.bench,
                ))?;
                let flushed = if self.durable {
                    let t0 = std::time::Instant::now();
                    peers::sync_fs(&self.dst)?;
                    Some(t + t0.elapsed())
                } else {
                    None
                };
                if let Err(e) = peers::verify_copy(self.src, &self.dst) {
                    (self.log)(&format!(
                        "  {} made a wrong copy, its times are dropped: {e}",
                        tools[i].name()
                    ));
                    wrong.push(format!(
                        "{} (its one run took {:.3} s): {e}",
                        tools[i].name(),
                        t.as_secs_f64()
                    ));
                    bad[i] = true;
                    continue;
                }
                let also = flushed.map_or(String::new(), |d| {
                    format!(", {:.3} s with sync -f", d.as_secs_f64())
                });
                (self.log)(&format!(
                    "  run {run} {:<24} {:>8.3} s{also}",
                    tools[i].name(),
                    t.as_secs_f64()
                ));
                samples[i].times.push(t);
                if let Some(d) = flushed {
                    durable[i].times.push(d);
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dst);
        if !self.durable {
            durable.clear();
        }
        Ok(Measured {
            samples,
            wrong,
            durable,
        })
    }
}

/// A grid of tunables.
#[derive(Clone, Debug)]
pub struct Grid {
    /// COPY_THREADS values.
    pub threads: Vec<usize>,
    /// COPY_BATCH values.
    pub batches: Vec<usize>,
    /// COPY_WALKERS values; empty: not swept (the built-in default).
    pub walkers: Vec<usize>,
}

/// One point of a [`Grid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// COPY_THREADS.
    pub threads: usize,
    /// COPY_BATCH.
    pub batch: usize,
    /// COPY_WALKERS, if swept.
    pub walkers: Option<usize>,
}

impl Point {
    /// The contender this point is.
    pub fn tool(&self) -> Tool {
        Tool::Zinstall {
            threads: self.threads,
            batch: self.batch,
            walkers: self.walkers,
        }
    }
}

impl Grid {
    /// Every point, threads-major, then batch, then walkers.
    pub fn points(&self) -> Vec<Point> {
        let walkers: Vec<Option<usize>> = if self.walkers.is_empty() {
            vec![None]
        } else {
            self.walkers.iter().copied().map(Some).collect()
        };
        let mut v = Vec::new();
        for &threads in &self.threads {
            for &batch in &self.batches {
                for &walkers in &walkers {
                    v.push(Point {
                        threads,
                        batch,
                        walkers,
                    });
                }
            }
        }
        v
    }

    /// Every point as a contender.
    pub fn tools(&self) -> Vec<Tool> {
        self.points().iter().map(Point::tool).collect()
    }
}

/// The fastest grid point by median, with its samples.
pub fn best<'a>(
    samples: &'a [Samples],
    grid: &Grid,
) -> Option<(Point, &'a Samples)> {
    let mut out: Option<(Point, &Samples)> = None;
    for p in grid.points() {
        let name = p.tool().name();
        if let Some(s) = samples
            .iter()
            .find(|s| s.tool == name && !s.times.is_empty())
            && out.is_none_or(|(_, o)| s.median() < o.median())
        {
            out = Some((p, s));
        }
    }
    out
}

/// An item of a list of numbers (shown) that is not one.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a number")]
pub struct NotANumber(pub String);

/// Parses `1,2,4` into numbers.
pub fn list(s: &str) -> Result<Vec<usize>, NotANumber> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| NotANumber(x.to_string()))
        })
        .filter(|r| !matches!(r, Ok(0)))
        .collect()
}
