//! What a run did: counts, bytes, time, per-worker load, and notices about
//! what could not be kept.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Counters of one run.
///
/// Serialized (`--json`, the daemon's replies, the log) with times in
/// whole milliseconds (`ms`, `walker_blocked_ms`, `busy_ms`, ...) and
/// [`Stats::redirects`] as `linked`; a field missing when read is zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Regular files whose data was copied (or cloned).
    pub files: u64,
    /// Directories created (the top one included).
    pub dirs: u64,
    /// Symlinks recreated.
    pub symlinks: u64,
    /// Later names of an inode, made as hard links to its first copy.
    pub hardlinks: u64,
    /// Files replaced by a symlink by a link rule.
    #[serde(rename = "linked")]
    pub redirects: u64,
    /// FIFOs, sockets and device nodes recreated.
    pub specials: u64,
    /// Entries skipped by a rule or by `skip_special`.
    pub skipped: u64,
    /// Entries left as they were because the destination already matched
    /// (merging only).
    pub unchanged: u64,
    /// Bytes of file data copied (apparent size: holes count).
    pub bytes: u64,
    /// Files cloned by reflink.
    pub reflinked: u64,
    /// Files copied in the kernel (`copy_file_range`).
    pub kernel_copied: u64,
    /// Files copied through the worker's buffer.
    pub buffered: u64,
    /// Wall time of the run.
    #[serde(rename = "ms", with = "millis")]
    pub elapsed: Duration,
    /// Time the walkers spent blocked on a full queue, summed.
    #[serde(rename = "walker_blocked_ms", with = "millis")]
    pub walker_blocked: Duration,
    /// The soft limit on open descriptors (`RLIMIT_NOFILE`) the run's
    /// descriptor budget was derived from.
    pub fd_limit: u64,
    /// The descriptor budget: directories the run (with a pool, every
    /// run on it) may hold open at once, source and destination each
    /// counting one (see [`Descriptors`](crate::Descriptors)).
    pub fd_budget: u64,
    /// The most of the budget held at once.
    pub fd_peak: u64,
    /// One entry per worker.
    pub workers: Vec<WorkerStats>,
    /// One entry per walker.
    pub walkers: Vec<WalkerStats>,
}

/// The load of one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerStats {
    /// Jobs done.
    pub jobs: u64,
    /// Batches taken.
    pub batches: u64,
    /// Bytes of file data copied.
    pub bytes: u64,
    /// Time spent on jobs (not waiting for batches).
    #[serde(rename = "busy_ms", with = "millis")]
    pub busy: Duration,
}

/// The load of one walker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WalkerStats {
    /// Directories read.
    pub dirs: u64,
    /// Entries read from them.
    pub entries: u64,
    /// Batches handed to the workers.
    pub batches: u64,
    /// Directories taken from another walker or from the top queue.
    pub steals: u64,
    /// Time spent reading directories (making them included).
    #[serde(rename = "busy_ms", with = "millis")]
    pub busy: Duration,
    /// Of that, time blocked on a full queue.
    #[serde(rename = "blocked_ms", with = "millis")]
    pub blocked: Duration,
    /// Of the busy time, time waiting for the descriptor budget.
    #[serde(rename = "fd_wait_ms", with = "millis")]
    pub fd_wait: Duration,
    /// Time spent waiting for a directory to read.
    #[serde(rename = "idle_ms", with = "millis")]
    pub idle: Duration,
    /// CPU time the walker's thread used.
    #[serde(rename = "cpu_ms", with = "millis")]
    pub cpu: Duration,
}

/// A duration as whole milliseconds, the unit the JSON has always used.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        d: &Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Stats {
    /// Entries of every kind written or kept.
    pub fn entries(&self) -> u64 {
        self.files
            + self.dirs
            + self.symlinks
            + self.hardlinks
            + self.redirects
            + self.specials
            + self.unchanged
    }

    pub(crate) fn merge(&mut self, o: &Stats) {
        self.files += o.files;
        self.dirs += o.dirs;
        self.symlinks += o.symlinks;
        self.hardlinks += o.hardlinks;
        self.redirects += o.redirects;
        self.specials += o.specials;
        self.skipped += o.skipped;
        self.unchanged += o.unchanged;
        self.bytes += o.bytes;
        self.reflinked += o.reflinked;
        self.kernel_copied += o.kernel_copied;
        self.buffered += o.buffered;
        // Runs one after another: the largest of each.
        self.fd_limit = self.fd_limit.max(o.fd_limit);
        self.fd_budget = self.fd_budget.max(o.fd_budget);
        self.fd_peak = self.fd_peak.max(o.fd_peak);
    }

    /// Share of the run's wall time the workers were busy, 0.0 to 1.0.
    pub fn utilization(&self) -> f64 {
        let wall = self.elapsed.as_secs_f64() * self.workers.len() as f64;
        if wall <= 0.0 {
            return 0.0;
        }
        let busy: f64 = self.workers.iter().map(|w| w.busy.as_secs_f64()).sum();
        (busy / wall).min(1.0)
    }
}

impl fmt::Display for Stats {
    /// One line, in the units of the progress line: `12 files, 3 dirs,
    /// 1 symlink, 0 hard links, 1.50 MiB in 25 ms (60.00 MiB/s)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {}, {}, {}",
            count(self.files, "file", "files"),
            count(self.dirs, "dir", "dirs"),
            count(self.symlinks, "symlink", "symlinks"),
            count(self.hardlinks, "hard link", "hard links"),
        )?;
        for (n, one, many) in [
            (self.redirects, "redirect", "redirects"),
            (self.specials, "special file", "special files"),
            (self.skipped, "skipped", "skipped"),
            (self.unchanged, "unchanged", "unchanged"),
        ] {
            if n > 0 {
                write!(f, ", {}", count(n, one, many))?;
            }
        }
        write!(
            f,
            ", {} in {}",
            human_bytes(self.bytes),
            human_duration(self.elapsed)
        )?;
        if self.bytes > 0 && !self.elapsed.is_zero() {
            let rate = self.bytes as f64 / self.elapsed.as_secs_f64();
            write!(f, " ({}/s)", human_bytes(rate as u64))?;
        }
        Ok(())
    }
}

/// `n` with the word that fits it: `1 file`, `2 files`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Bytes as the progress line shows them (binary units, two decimals):
/// `512 B`, `1.50 KiB`, `3.25 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// A run's time for a summary: `25 ms`, `3.42 s`, `2 min 5 s`.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=119_999 => format!("{:.2} s", d.as_secs_f64()),
        _ => format!("{} min {} s", d.as_secs() / 60, d.as_secs() % 60),
    }
}

/// Something that was not kept, said once for the whole run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// What was not kept.
    pub kind: NoticeKind,
    /// How many entries it concerned.
    pub count: u64,
    /// The first one.
    pub example: PathBuf,
}

/// The kinds of [`Notice`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoticeKind {
    /// Owners and groups could not be set (not running as root).
    Ownership,
    /// An extended attribute could not be set without privilege; the
    /// namespace or name is given (e.g. `trusted.*`, `security.capability`).
    Xattr(String),
    /// A special file could not be made and was skipped.
    SpecialSkipped,
    /// Setuid or setgid bits of an owner or group the copy does not keep
    /// were cleared (a run acting as a caller, as `cp -a` by the caller).
    SetId,
    /// This platform's build copies no extended attributes (illumos keeps
    /// them in attribute directories, which are not copied yet): said
    /// once per run rather than dropping them without a word.
    XattrsUnsupported,
    /// The compressed stream had bytes after its end that its tool
    /// ignores too (zeros or garbage after the last gzip member): read
    /// and ignored, as said. The example is the archive.
    StreamTrailer(String),
    /// Another filesystem is mounted on this directory of the source; not
    /// crossing filesystems, it was copied as an empty directory. One
    /// notice per mount point.
    MountPoint(PathBuf),
    /// An archive quirk GNU tar and bsdtar read past (bytes after the
    /// end, an absolute name, a mask-less ACL, ...): what was met and
    /// what was done, the example naming the member (or the archive).
    ArchiveQuirk(String),
}

impl NoticeKind {
    /// A short name for machine-readable output: `ownership`, `xattr`,
    /// `special_skipped`, `set_id`, `xattrs_unsupported`, `mount_point`,
    /// `archive_quirk`.
    pub fn name(&self) -> &'static str {
        match self {
            NoticeKind::Ownership => "ownership",
            NoticeKind::Xattr(_) => "xattr",
            NoticeKind::SpecialSkipped => "special_skipped",
            NoticeKind::SetId => "set_id",
            NoticeKind::XattrsUnsupported => "xattrs_unsupported",
            NoticeKind::StreamTrailer(_) => "stream_trailer",
            NoticeKind::MountPoint(_) => "mount_point",
            NoticeKind::ArchiveQuirk(_) => "archive_quirk",
        }
    }
}

impl Notice {
    /// The notice that `archive`'s decoder ignored `what`.
    pub fn stream(
        what: zinstall_archive::compress::Ignored,
        archive: &Path,
    ) -> Notice {
        Notice {
            kind: NoticeKind::StreamTrailer(what.to_string()),
            count: 1,
            example: archive.to_path_buf(),
        }
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            NoticeKind::Ownership => {
                write!(f, "ownership not kept (not running as root)")?
            }
            NoticeKind::Xattr(name) => {
                write!(f, "extended attribute {name} not kept (no privilege)")?
            }
            NoticeKind::SpecialSkipped => {
                write!(f, "special files skipped (no privilege)")?
            }
            NoticeKind::SetId => write!(
                f,
                "setuid/setgid bits not kept (the owner or group is not kept)"
            )?,
            NoticeKind::XattrsUnsupported => write!(
                f,
                "extended attributes not copied (not supported on this \
                 platform)"
            )?,
            NoticeKind::ArchiveQuirk(what) => write!(f, "{what}")?,
            NoticeKind::MountPoint(path) => {
                return write!(
                    f,
                    "{}: another filesystem is mounted here; copied as an \
                     empty directory (not crossing filesystems)",
                    path.display()
                );
            }
            NoticeKind::StreamTrailer(what) => {
                return write!(f, "{}: {what}", self.example.display());
            }
        }
        match self.count {
            1 => write!(f, ": 1 entry, {}", self.example.display()),
            n => write!(f, ": {n} entries, first {}", self.example.display()),
        }
    }
}

/// Notices gathered from many threads: one per kind, counted.
#[derive(Default)]
pub(crate) struct NoticeBoard(Mutex<HashMap<NoticeKind, Notice>>);

impl NoticeBoard {
    /// Notes one more entry of `kind`; the first one's path is kept.
    pub(crate) fn add(&self, kind: NoticeKind, path: &Path) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(kind.clone())
            .or_insert_with(|| Notice {
                kind,
                count: 0,
                example: path.to_path_buf(),
            })
            .count += 1;
    }

    /// Every notice, in the order of their examples.
    pub(crate) fn into_vec(self) -> Vec<Notice> {
        let mut v: Vec<Notice> = self
            .0
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_values()
            .collect();
        v.sort_by(|a, b| a.example.cmp(&b.example));
        v
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn summaries_speak_as_the_progress_line_does() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
        assert_eq!(human_duration(Duration::from_millis(25)), "25 ms");
        assert_eq!(human_duration(Duration::from_millis(3420)), "3.42 s");
        assert_eq!(human_duration(Duration::from_secs(125)), "2 min 5 s");
        let s = Stats {
            files: 1,
            dirs: 2,
            symlinks: 1,
            hardlinks: 0,
            specials: 1,
            bytes: 3 << 20,
            elapsed: Duration::from_secs(2),
            ..Stats::default()
        };
        assert_eq!(
            s.to_string(),
            "1 file, 2 dirs, 1 symlink, 0 hard links, 1 special file, \
             3.00 MiB in 2.00 s (1.50 MiB/s)"
        );
    }
}
