//! The structured log: JSON lines, one record per step, appended to the
//! file the profile names.
//!
//! A log that cannot be written (a full `/var`, a dead disk) must not stop
//! an install half-way: slog's `Fuse` panics on a drain error, and with
//! `panic = "abort"` that would kill the process between two steps. The
//! drain here reports the first failure once, naming the file, and then
//! drops records.

use std::fmt;
use std::fs::OpenOptions;
use std::io::BufWriter;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use slog::{Drain, Logger, Never, OwnedKVList, Record, o};

/// Where the one report of a failed log goes.
type Report = Box<dyn Fn(&str) + Send + Sync + RefUnwindSafe + UnwindSafe>;

/// A drain that never fails: the first error of `inner` is reported
/// through `report`, and from then on records are dropped (a log with a
/// hole in the middle and a torn line would mislead more than one that
/// stops).
struct Tolerant<D> {
    inner: Mutex<D>,
    path: PathBuf,
    failed: AtomicBool,
    report: Report,
}

impl<D> Drain for Tolerant<D>
where
    D: Drain,
    D::Err: fmt::Display,
{
    type Ok = ();
    type Err = Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), Never> {
        if self.failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        // One writer at a time: records stay whole lines.
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = inner.log(record, values)
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            (self.report)(&format!(
                "log {}: {e}; continuing without it",
                self.path.display()
            ));
        }
        Ok(())
    }
}

/// A JSON-lines logger appending to `path`, or, if it cannot be opened
/// (not root, no such directory), a logger that drops records, with the
/// reason to tell the user. If writing fails later, `report` hears of it
/// once (naming the file) and the install goes on.
pub fn open(
    path: &Path,
    argv: &[String],
    report: impl Fn(&str) + Send + Sync + RefUnwindSafe + UnwindSafe + 'static,
) -> (Logger, Option<String>) {
    open_reporting(path, argv, Box::new(report))
}

fn open_reporting(
    path: &Path,
    argv: &[String],
    report: Report,
) -> (Logger, Option<String>) {
    match OpenOptions::new().create(true).append(true).open(path) {
        Ok(f) => {
            // Buffered and flushed per record: each record goes out in
            // one write, so appends from several processes do not
            // interleave within a line.
            let drain = slog_json::Json::new(BufWriter::new(f))
                .set_newlines(true)
                .set_flush(true)
                .add_default_keys()
                .build();
            let drain = Tolerant {
                inner: Mutex::new(drain),
                path: path.to_path_buf(),
                failed: AtomicBool::new(false),
                report,
            };
            let log = Logger::root(
                drain,
                o!("pid" => std::process::id(), "argv" => argv.join(" ")),
            );
            (log, None)
        }
        Err(e) => (
            Logger::root(slog::Discard, o!()),
            Some(format!("log {} not written: {e}", path.display())),
        ),
    }
}

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::*;

    fn collecting() -> (Report, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let report: Report =
            Box::new(move |m| sink.lock().unwrap().push(m.to_string()));
        (report, seen)
    }

    /// A log on a full device: every record fails, the work goes on, and
    /// the failure is reported once, naming the file and the error.
    #[test]
    fn a_full_log_is_reported_once_and_does_not_stop_the_work() {
        let (report, seen) = collecting();
        let path = Path::new("/dev/full");
        let (log, warning) = open_reporting(path, &["zinstall".into()], report);
        assert!(warning.is_none(), "{warning:?}");
        let mut done = 0;
        for step in 0..100 {
            slog::info!(log, "step"; "n" => step, "pad" => "x".repeat(10_000));
            done += 1;
        }
        assert_eq!(done, 100);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].starts_with("log /dev/full: "), "{}", seen[0]);
        assert!(seen[0].contains("No space left on device"), "{}", seen[0]);
    }

    /// A writable log gets one JSON line per record.
    #[test]
    fn records_are_whole_json_lines() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("install.log");
        let (report, seen) = collecting();
        let (log, _) = open_reporting(&path, &["a".into(), "b".into()], report);
        for n in 0..3 {
            slog::info!(log, "step"; "n" => n);
        }
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["argv"], "a b");
        }
        assert!(seen.lock().unwrap().is_empty());
    }
}
