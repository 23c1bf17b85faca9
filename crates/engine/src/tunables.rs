//! The engine's knobs: worker count, walker count, batch size, buffer
//! size, early writeback.
//!
//! Each has one default, defined here and nowhere else, and the same name
//! in three places: `COPY_THREADS` in `/etc/default/zinstall` and the man
//! page, `ZINSTALL_COPY_THREADS` in the environment, `copy_threads` here.
//! Precedence (the binary applies it) is flag > environment > file >
//! default.

use std::ffi::OsString;
use std::num::{IntErrorKind, ParseIntError};
use std::path::Path;

use crate::error::{DefaultsProblem, Error, Result};

/// Worker threads. On a 32-thread machine zone installs were fastest near
/// 8 workers (batches of 128); beyond that workers mostly wait on the
/// walker and on filesystem locks. `zinstall tune` finds a machine's own.
pub const DEFAULT_COPY_THREADS: usize = 8;
/// Walker threads reading the source tree's directories; 0 (the
/// default) is one per [`WORKERS_PER_WALKER`] workers, rounded up, and
/// no more than one per [`CORES_PER_WALKER`] cores ([`Tunables::walkers`]):
/// one up to 7 cores, and on a wide machine tuned to more workers more
/// walkers with them.
pub const DEFAULT_COPY_WALKERS: usize = 0;
/// Workers one walker is counted on to feed when `COPY_WALKERS` is 0.
/// One walker reads `/usr/share` about ten times as fast as one worker
/// copies it, but a package store of small directories only three
/// times (`bench walk`, bench/README.md "Wide machines"); four covers
/// trees between the two.
pub const WORKERS_PER_WALKER: usize = 4;
/// Cores each walker is counted on to leave the rest of to the workers
/// when `COPY_WALKERS` is 0: a walker is busy on a CPU all the while
/// it reads, and on a 2-core machine a second one copied no faster (2
/// walkers at 8 workers within a few percent of one on `/usr/share`, a
/// store and a few huge directories, bench/README.md).
pub const CORES_PER_WALKER: usize = 4;
/// Jobs per batch handed to a worker. Batching amortises the channel's
/// synchronisation over many small files; 128 was best in the same sweep.
pub const DEFAULT_COPY_BATCH: usize = 128;
/// Bytes per read/write when the kernel cannot copy for us.
/// `std::fs::copy`-sized buffers (8 KiB) cost a system call pair per 8 KiB;
/// 1 MiB made zone installs several times faster.
pub const DEFAULT_COPY_BUFSIZE: usize = 1 << 20;
/// When written data starts back to the disk: only in runs that flush
/// the destination at the end, where flushing as the run goes turns the
/// final flush into a wait for the tail (bench/README.md, "Durable
/// installs").
pub const DEFAULT_COPY_WRITEBACK: Writeback = Writeback::Sync;

/// When a run flushes what it has written as it goes (a flusher thread
/// calling `syncfs(2)` every 64 MiB or quarter second; see the
/// `writeback` module).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Writeback {
    /// In runs that flush the destination at the end (`--sync`, installs,
    /// the provision cache): the final flush then waits only for the last
    /// files, not for everything the run wrote.
    #[default]
    Sync,
    /// In every run: the page cache holds little dirty data at any time,
    /// which spares other writers on the same disk a burst at the end.
    Always,
    /// Never: the kernel writes back when it chooses.
    Never,
}

impl Writeback {
    /// The values `COPY_WRITEBACK` takes, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["sync", "always", "never"];

    /// The value's name in a defaults file.
    pub fn name(self) -> &'static str {
        match self {
            Writeback::Sync => "sync",
            Writeback::Always => "always",
            Writeback::Never => "never",
        }
    }

    /// Whether a run that does (`syncs`) or does not flush at the end
    /// starts writeback early.
    pub fn early(self, syncs: bool) -> bool {
        match self {
            Writeback::Sync => syncs,
            Writeback::Always => true,
            Writeback::Never => false,
        }
    }

    fn parse(text: &str) -> Option<Writeback> {
        match text.trim().to_ascii_lowercase().as_str() {
            "sync" => Some(Writeback::Sync),
            "always" => Some(Writeback::Always),
            "never" => Some(Writeback::Never),
            _ => None,
        }
    }
}

/// The accepted range of each knob: (key, min, max).
const LIMITS: [(&str, u64, u64); 4] = [
    ("COPY_THREADS", 1, 1024),
    // 0: one per WORKERS_PER_WALKER workers. A walker reads one
    // directory at a time: past a few hundred they only wait on each
    // other (few trees have that many directories to read at once) and
    // on the kernel's directory locks.
    ("COPY_WALKERS", 0, 256),
    // 128 was best; past 65536 a batch amortises nothing more and only
    // holds work back from idle workers.
    ("COPY_BATCH", 1, 1 << 16),
    // Under 4 KiB a buffer costs more in system calls than it saves in
    // memory. Every worker holds one: at 64 MiB the system calls saved
    // are long negligible (1 MiB was the measured knee), and more would
    // be gigabytes per worker.
    ("COPY_BUFSIZE", 4096, 64 << 20),
];

/// Tunables of one copier run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Number of worker threads (`COPY_THREADS`).
    pub copy_threads: usize,
    /// Number of walker threads reading directories (`COPY_WALKERS`);
    /// 0: one per [`WORKERS_PER_WALKER`] workers ([`Tunables::walkers`]).
    pub copy_walkers: usize,
    /// Jobs per batch (`COPY_BATCH`).
    pub copy_batch: usize,
    /// Read/write buffer size in bytes, one buffer per worker
    /// (`COPY_BUFSIZE`).
    pub copy_bufsize: usize,
    /// When written data starts back to the disk (`COPY_WRITEBACK`).
    pub copy_writeback: Writeback,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            copy_threads: DEFAULT_COPY_THREADS,
            copy_walkers: DEFAULT_COPY_WALKERS,
            copy_batch: DEFAULT_COPY_BATCH,
            copy_bufsize: DEFAULT_COPY_BUFSIZE,
            copy_writeback: DEFAULT_COPY_WRITEBACK,
        }
    }
}

impl Tunables {
    /// The keys understood in a defaults file, in order.
    pub const KEYS: [&'static str; 5] = [
        "COPY_THREADS",
        "COPY_WALKERS",
        "COPY_BATCH",
        "COPY_BUFSIZE",
        "COPY_WRITEBACK",
    ];

    /// Applies `ZINSTALL_<KEY>` variables found through `lookup`, so that
    /// the caller decides where the environment comes from.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<()> {
        for key in Self::KEYS {
            let var = format!("ZINSTALL_{key}");
            if let Some(v) = lookup(&var) {
                let v = v.to_string_lossy();
                self.set(key, &v, Path::new(&var), 0)?;
            }
        }
        Ok(())
    }

    /// Sets one knob from its text, checking its range. `origin` and
    /// `line` say where the text came from, for the error.
    pub fn set(
        &mut self,
        key: &str,
        text: &str,
        origin: &Path,
        line: usize,
    ) -> Result<()> {
        let (_, min, max) = LIMITS
            .iter()
            .find(|(k, _, _)| *k == key)
            .copied()
            .unwrap_or((key, 0, u64::MAX));
        let err = |problem| Error::Defaults {
            file: origin.to_path_buf(),
            line,
            key: key.to_string(),
            value: text.to_string(),
            problem,
        };
        if key == "COPY_WRITEBACK" {
            self.copy_writeback = Writeback::parse(text).ok_or_else(|| {
                err(DefaultsProblem::NotOneOf {
                    choices: &Writeback::NAMES,
                })
            })?;
            return Ok(());
        }
        // A size may carry a binary unit: 64K, 1M, 1MiB.
        let (digits, unit) = match key {
            "COPY_BUFSIZE" => split_unit(text.trim()),
            _ => (text.trim(), 1),
        };
        let n: u64 = digits.parse().map_err(|e: ParseIntError| {
            // Digits past u64 are a number, just far out of range.
            err(match e.kind() {
                IntErrorKind::PosOverflow => {
                    DefaultsProblem::OutOfRange { min, max }
                }
                _ => DefaultsProblem::NotANumber,
            })
        })?;
        let n = n
            .checked_mul(unit)
            .ok_or_else(|| err(DefaultsProblem::OutOfRange { min, max }))?;
        if n < min || n > max {
            return Err(err(DefaultsProblem::OutOfRange { min, max }));
        }
        let n = n as usize;
        match key {
            "COPY_THREADS" => self.copy_threads = n,
            "COPY_WALKERS" => self.copy_walkers = n,
            "COPY_BATCH" => self.copy_batch = n,
            "COPY_BUFSIZE" => self.copy_bufsize = n,
            _ => {}
        }
        Ok(())
    }

    /// The walker threads a run starts: `copy_walkers`, or for 0 one per
    /// [`WORKERS_PER_WALKER`] workers, rounded up, and no more than one
    /// per [`CORES_PER_WALKER`] of this machine's cores.
    pub fn walkers(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.walkers_on(cores)
    }

    /// [`Tunables::walkers`] on a machine of `cores` cores.
    pub fn walkers_on(&self, cores: usize) -> usize {
        match self.copy_walkers {
            0 => self
                .copy_threads
                .div_ceil(WORKERS_PER_WALKER)
                .min(cores / CORES_PER_WALKER)
                .max(1),
            n => n,
        }
    }

    /// Checks that every knob is in range (for values set directly).
    pub fn validate(&self) -> Result<()> {
        let mut copy = *self;
        // The numeric knobs; a Writeback is one of its values by type.
        for (key, v) in Self::KEYS[..4].iter().zip([
            self.copy_threads,
            self.copy_walkers,
            self.copy_batch,
            self.copy_bufsize,
        ]) {
            copy.set(key, &v.to_string(), Path::new("tunables"), 0)?;
        }
        Ok(())
    }
}

/// `64K` → (`64`, 1024): the binary units K, M, G (`KiB`, `MiB`, `GiB`
/// and a trailing `B` accepted, any case). No unit: 1.
fn split_unit(text: &str) -> (&str, u64) {
    let lower = text.to_ascii_lowercase();
    for (suffixes, unit) in [
        (["kib", "kb", "k"], 1u64 << 10),
        (["mib", "mb", "m"], 1 << 20),
        (["gib", "gb", "g"], 1 << 30),
    ] {
        for sfx in suffixes {
            if lower.ends_with(sfx) && lower.len() > sfx.len() {
                return (text[..text.len() - sfx.len()].trim_end(), unit);
            }
        }
    }
    (text, 1)
}

/// The known key a typo most likely meant: one within two edits.
pub(crate) fn nearest_key(key: &str) -> Option<&'static str> {
    Tunables::KEYS
        .iter()
        .map(|k| (edits(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, for a handful of short keys.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j]))
                .min(row[j] + 1)
                .min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod test;
