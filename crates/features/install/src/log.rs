//! The structured log: JSON lines, one record per step, appended to the
//! file the profile names.
//!
//! A log that cannot be written (a full `/var`, a dead disk) must not stop
//! an install half-way: slog's `Fuse` panics on a drain error, and with
//! `panic = "abort"` that would kill the process between two steps. The
//! drain here reports the first failure once, naming the file, and then
//! drops records.
//!
//! Root appends to the log by a path a profile or a caller named, so the
//! file is opened only where nobody else could have decided what is
//! there ([`open_file`]): its directory reached as a zonepath is
//! ([`zinstall_engine::trusted::open_dir`]) and writable by nobody else
//! unless it is sticky and root's; the file itself never through a symlink, and
//! only a regular file of root's or the directory owner's, with one link
//! (or a character device of root's, such as `/dev/null`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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

/// Why an install log was not opened: the path, and what was refused or
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The path names no file in a directory.
    #[error("{}: not a file's path", path.display())]
    NotAFile {
        /// The log's path.
        path: PathBuf,
    },
    /// Its directory could not be made or opened, or another user could
    /// change what is in it on the way there.
    #[error("directory {}: {error}", dir.display())]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What the walk to it refused or met.
        error: Box<zinstall_engine::Error>,
    },
    /// Another user may add, rename or remove entries in its directory.
    #[error("directory {} is {why}, so another user could plant the log", dir.display())]
    OpenDirectory {
        /// The directory.
        dir: PathBuf,
        /// Who may write it.
        why: String,
    },
    /// A symlink is at the log's path.
    #[error("{} is a symlink, which is never followed for a log", path.display())]
    Symlink {
        /// The log's path.
        path: PathBuf,
    },
    /// Something other than a regular file of root's (or the directory
    /// owner's) with one link is there.
    #[error("{} {why}", path.display())]
    NotOurs {
        /// The log's path.
        path: PathBuf,
        /// What it is.
        why: String,
    },
    /// A system call failed.
    #[error("{}: {op}: {error}", path.display())]
    Io {
        /// The log's path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// Why it failed.
        error: io::Error,
    },
}

/// Opens the install log `path` for appending
/// (`O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC`, mode 0640 when made):
/// its directory is made (0755) when missing and checked as a zonepath
/// is, so that a link or file another user planted is never written
/// through.
pub fn open_file(path: &Path) -> Result<File, LogError> {
    // I/O errors name the path as given.
    let given = path;
    let path =
        &std::path::absolute(path).map_err(io_error(given, "resolve"))?;
    let (Some(dir), Some(_)) = (path.parent(), path.file_name()) else {
        return Err(LogError::NotAFile { path: path.clone() });
    };
    let dir_md = checked_dir(dir)?;
    let (file, made) = open_appending(path, given)?;
    check_file(&file, made, &dir_md, path, given)?;
    Ok(file)
}

fn io_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |error: io::Error| LogError::Io {
        path: path.to_path_buf(),
        op,
        error,
    }
}

/// Opens (making it, 0755, when missing) and checks the log's directory
/// `dir`: its metadata, if no one but root or its owner can write in it.
fn checked_dir(dir: &Path) -> Result<std::fs::Metadata, LogError> {
    // Every directory on the way is root's or ours alone (or sticky and
    // holding only root's entries), so the path leads where it did when
    // checked.
    let opened = zinstall_engine::trusted::open_dir(dir, Some(0o755)).map_err(
        |error| LogError::Directory {
            dir: dir.to_path_buf(),
            error: Box::new(error),
        },
    )?;
    // The directory just checked, by its descriptor: not the name again.
    let dir_md = std::os::fd::AsFd::as_fd(&opened)
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .map_err(|error| LogError::Io {
            path: dir.to_path_buf(),
            op: "stat",
            error,
        })?;
    let sticky_root = dir_md.mode() & 0o1000 != 0 && dir_md.uid() == 0;
    let open_to = if dir_md.mode() & 0o002 != 0 {
        Some("writable by everyone".to_string())
    } else if dir_md.mode() & 0o020 != 0 && dir_md.gid() != 0 {
        Some(format!("writable by group {}", dir_md.gid()))
    } else {
        None
    };
    if let Some(why) = open_to.filter(|_| !sticky_root) {
        return Err(LogError::OpenDirectory {
            dir: dir.to_path_buf(),
            why,
        });
    }
    Ok(dir_md)
}

/// Opens `path` for appending, making it (0640) if missing; whether it
/// was made.
fn open_appending(path: &Path, given: &Path) -> Result<(File, bool), LogError> {
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
    let nofollow = |e: io::Error| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            LogError::Symlink {
                path: path.to_path_buf(),
            }
        } else {
            io_error(given, "open")(e)
        }
    };
    // Made here, it is ours; found, it must be root's or the directory
    // owner's (who could replace it anyway). Not blocking, so that a
    // FIFO planted there cannot hold the install. Opened for appending
    // only, never followed, and checked on its descriptor after.
    #[allow(clippy::disallowed_methods)]
    match OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o640)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let f = OpenOptions::new()
                .append(true)
                .custom_flags(flags | libc::O_NONBLOCK)
                .open(path)
                .map_err(nofollow)?;
            Ok((f, false))
        }
        Err(e) => Err(nofollow(e)),
    }
}

/// Refuses a log `file` (at `path`, `made` here or found) that is not a
/// regular file (or a device of root's), is owned by someone other than
/// root or the owner of its directory (`dir_md`), or has other links.
fn check_file(
    file: &File,
    made: bool,
    dir_md: &std::fs::Metadata,
    path: &Path,
    given: &Path,
) -> Result<(), LogError> {
    let md = file.metadata().map_err(io_error(given, "stat"))?;
    let not_ours = |why: String| LogError::NotOurs {
        path: path.to_path_buf(),
        why,
    };
    // A device of root's (`/dev/null`, `/dev/full`) is the
    // administrator's choice; anything else must be a file.
    use std::os::unix::fs::FileTypeExt;
    let device = md.file_type().is_char_device() && md.uid() == 0;
    if !md.file_type().is_file() && !device {
        return Err(not_ours("is not a regular file".into()));
    }
    if !made && md.uid() != 0 && md.uid() != dir_md.uid() {
        return Err(not_ours(format!("is owned by uid {}", md.uid())));
    }
    if md.nlink() != 1 {
        return Err(not_ours(format!(
            "has {} hard links, so it may be another file too",
            md.nlink()
        )));
    }
    Ok(())
}

/// The one way a zinstall log is written: JSON lines with the time and
/// level, buffered and flushed per record, so that each record goes out
/// in one write and appends from several processes do not interleave
/// within a line.
fn json_lines<W: io::Write>(out: W) -> slog_json::Json<BufWriter<W>> {
    slog_json::Json::new(BufWriter::new(out))
        .set_newlines(true)
        .set_flush(true)
        .add_default_keys()
        .build()
}

/// A service's log: JSON lines on standard error, which the service
/// manager keeps (journald, SMF's log file), every record naming
/// `service`, none longer than [`MAX_SERVICE_LINE`]. A record that cannot
/// be written is dropped: there is nowhere else to say so.
pub fn to_stderr(service: &'static str) -> Logger {
    let out = LineCap::new(io::stderr(), MAX_SERVICE_LINE);
    Logger::root(
        slog::IgnoreResult::new(Mutex::new(json_lines(out))),
        o!("service" => service),
    )
}

/// The longest line a service's log writes: a record's fields are
/// clipped long before this (client text at 200 bytes, error lists at
/// 100 entries); a line that still comes out longer is cut here, marked.
pub const MAX_SERVICE_LINE: usize = 64 << 10;

/// A writer that passes on at most `max` bytes of each line: the rest
/// of a longer line is counted and dropped, and the line ends with a
/// mark saying how much was cut. One line is held at a time.
struct LineCap<W: io::Write> {
    out: W,
    max: usize,
    line: Vec<u8>,
    cut: usize,
}

impl<W: io::Write> LineCap<W> {
    fn new(out: W, max: usize) -> Self {
        LineCap {
            out,
            max,
            line: Vec::new(),
            cut: 0,
        }
    }
}

impl<W: io::Write> io::Write for LineCap<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            let (part, end) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], Some(i + 1)),
                None => (rest, None),
            };
            let room = self.max.saturating_sub(self.line.len());
            let kept = part.len().min(room);
            self.line.extend_from_slice(&part[..kept]);
            self.cut += part.len() - kept;
            let Some(next) = end else {
                break;
            };
            if self.cut > 0 {
                let mark = format!("…({} bytes cut)", self.cut);
                self.line.extend_from_slice(mark.as_bytes());
            }
            self.line.push(b'\n');
            let whole = self.out.write_all(&self.line);
            self.line.clear();
            self.cut = 0;
            whole?;
            rest = &rest[next..];
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A JSON-lines logger appending to `path` ([`open_file`]), or, if it
/// cannot be opened (not root, a symlink or an unsafe directory there), a
/// logger that drops records, with the reason to tell the user. If
/// writing fails later, `report` hears of it once (naming the file) and
/// the install goes on.
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
    match open_file(path) {
        Ok(f) => {
            let drain = Tolerant {
                inner: Mutex::new(json_lines(f)),
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
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use super::*;

    #[test]
    fn a_service_log_line_is_cut_at_its_bound() {
        use std::io::Write;
        let mut w = LineCap::new(Vec::new(), 10);
        w.write_all(b"short\n0123456789abcdef").unwrap();
        w.write_all(b"ghij\nnext\n").unwrap();
        let out = String::from_utf8(w.out).unwrap();
        assert_eq!(out, "short\n0123456789…(10 bytes cut)\nnext\n");
    }

    use std::sync::Arc;

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

    /// A symlink at the log's path is refused, naming it; its target is
    /// untouched, and so is a file planted in a directory others write.
    #[test]
    fn a_planted_log_is_never_written_through() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("install.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (report, _) = collecting();
        let (_log, warning) = open_reporting(&link, &[], report);
        let w = warning.unwrap();
        assert!(w.contains("is a symlink, which is never followed"), "{w}");
        assert!(w.contains(&link.display().to_string()), "{w}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // A missing directory is made; one open to everyone (not sticky)
        // is refused.
        let made = d.path().join("logs/install.log");
        assert!(open_file(&made).is_ok());
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = open_file(&open.join("install.log")).unwrap_err();
        assert!(e.to_string().contains("writable by everyone"), "{e}");
        // A FIFO is not a log, and does not hold the caller.
        let fifo = d.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = open_file(&fifo).unwrap_err();
        assert!(
            matches!(e, LogError::Io { .. } | LogError::NotOurs { .. }),
            "{e}"
        );
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
