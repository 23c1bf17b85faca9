//! Terminal output: the progress bar, errors, notices, summaries.
//!
//! The bar is drawn only when stdout and stderr are terminals; otherwise
//! nothing but the summary and diagnostics is printed. File names printed
//! to a terminal have control characters escaped, so a hostile name cannot
//! rewrite the screen.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressState, ProgressStyle};

/// The program name diagnostics are prefixed with, unless a binary
/// sets its own ([`set_program`]).
pub const PROG: &str = "zinstall";

static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the running program in diagnostics (`zinstalld: error: ...`);
/// the first call wins.
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// The program name diagnostics carry.
pub fn program() -> &'static str {
    PROGRAM.get().copied().unwrap_or(PROG)
}

/// A progress line fed by the engine's workers: a spinner with entries,
/// bytes and rate while the size of the work is not known (a tree being
/// walked), a bar with the percentage and the time left once it is (an
/// archive's or image's length, a tree counted before). Drawn on a
/// terminal only.
pub struct Bar {
    bar: ProgressBar,
    entries: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    spinner: ProgressStyle,
    measured: ProgressStyle,
}

impl Bar {
    /// A bar if both stdout and stderr are terminals and `quiet` is off.
    pub fn for_terminal(quiet: bool, what: &str) -> Option<Arc<Bar>> {
        if quiet
            || !std::io::stdout().is_terminal()
            || !std::io::stderr().is_terminal()
        {
            return None;
        }
        let entries = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let e1 = Arc::clone(&entries);
        let (b1, b2) = (Arc::clone(&bytes), Arc::clone(&bytes));
        let spinner = ProgressStyle::with_template(
            "{spinner} {prefix} {elapsed_precise} {entries}, {data} ({rate})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key(
            "entries",
            move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                let n = e1.load(Ordering::Relaxed);
                let _ = write!(w, "{}", count(n, "entry", "entries"));
            },
        )
        .with_key(
            "data",
            move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}", HumanBytes(b1.load(Ordering::Relaxed)));
            },
        )
        .with_key(
            "rate",
            move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let secs = s.elapsed().as_secs_f64().max(1e-3);
                let rate = b2.load(Ordering::Relaxed) as f64 / secs;
                let _ = write!(w, "{}/s", HumanBytes(rate as u64));
            },
        );
        let measured = ProgressStyle::with_template(
            "{spinner} {prefix} [{bar:20}] {percent:>3}% of {total_bytes}, \
             {eta} left",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = ProgressBar::new_spinner()
            .with_style(spinner.clone())
            .with_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        // Drawn at once: a short run is still seen to run.
        bar.force_draw();
        Some(Arc::new(Bar {
            bar,
            entries,
            bytes,
            spinner,
            measured,
        }))
    }

    /// Says what is being done now.
    pub fn set_what(&self, what: &str) {
        self.bar.set_prefix(what.to_string());
    }

    /// Runs `f` (which prints) with the bar off the screen.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Removes the bar from the screen.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl std::fmt::Debug for Bar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bar").finish_non_exhaustive()
    }
}

impl zinstall_engine::Progress for Bar {
    fn advance(&self, entries: u64, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.entries.fetch_add(entries, Ordering::Relaxed);
    }

    fn begin(&self, total: Option<u64>) {
        self.entries.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        match total {
            Some(t) => {
                self.bar.set_style(self.measured.clone());
                self.bar.set_length(t);
            }
            None => {
                self.bar.set_style(self.spinner.clone());
                self.bar.unset_length();
            }
        }
        self.bar.reset();
        // Shown at once, however short the part: a new style and total
        // are worth a draw the rate limit would skip.
        self.bar.force_draw();
    }

    fn read(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
}

/// Runs `f`, which prints, with `bar` (if any) off the screen meanwhile.
pub fn above<R>(bar: &Option<Arc<Bar>>, f: impl FnOnce() -> R) -> R {
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}

/// `-v`: one line per entry on stdout, `'src' -> 'dst'` as `cp -v`
/// prints them (with the kind when it is not a plain copy: a hard link,
/// a link rule's symlink).
#[derive(Debug)]
pub struct Listing;

impl zinstall_engine::Listener for Listing {
    fn entry(&self, src: &Path, dst: &Path, kind: zinstall_engine::EntryKind) {
        let how = match kind {
            zinstall_engine::EntryKind::HardLink => " (hard link)",
            zinstall_engine::EntryKind::Redirect => " (link rule)",
            _ => "",
        };
        out(format_args!("'{}' -> '{}'{how}", show(src), show(dst)));
    }
}

/// `path` for a message: as is, or with control characters escaped when
/// going to a terminal.
pub fn show(path: &Path) -> String {
    escape(&path.display().to_string())
}

/// Escapes control characters (and the Unicode replacement for bytes that
/// are not UTF-8 stays visible as such).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

pub use zinstall_engine::stats::{count, human_bytes, human_duration};

/// Prints an error on stderr: `zinstall: error: ` and its first line,
/// then its other lines (a parser's quoted line and caret) as they are,
/// each escaped on its own.
pub fn error(msg: impl std::fmt::Display) {
    diagnostic("error", &msg.to_string());
}

/// Prints a note on stderr, as [`error`] prints an error.
pub fn note(msg: impl std::fmt::Display) {
    diagnostic("note", &msg.to_string());
}

fn diagnostic(what: &str, text: &str) {
    let mut lines = text.split('\n');
    let first = escape(lines.next().unwrap_or_default());
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}: {what}: {first}", program());
    for l in lines {
        let _ = writeln!(err, "{}", escape(l));
    }
}

/// Prints an install's step as zoneadm shows it: `INFO: zinstall: ...`.
pub fn event(e: &zinstall_install::Event) {
    out(format_args!("INFO: zinstall: {e}"));
}

/// Prints lines on stdout. Each line is escaped on its own, so
/// multi-line text keeps its lines. A closed stdout (`| head` read
/// enough) stops the running command, as ripgrep stops
/// ([`crate::interrupt::stdout_closed`]); nothing more is printed there.
pub fn out(msg: impl std::fmt::Display) {
    if crate::interrupt::reason()
        == Some(crate::interrupt::Reason::StdoutClosed)
    {
        return;
    }
    let text = msg.to_string();
    let mut stdout = std::io::stdout().lock();
    for line in text.split('\n') {
        if let Err(e) =
            writeln!(stdout, "{}", escape(line)).and_then(|()| stdout.flush())
        {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                crate::interrupt::stdout_closed();
            }
            return;
        }
    }
}

/// Prints the engine's failure: every error kept, then the count of the
/// rest; errors of a full destination (ENOSPC, EDQUOT) are said once, as
/// what they are: every entry after the first fails the same way, and a
/// hundred lines of it hide the one thing to do.
pub fn failure(f: &zinstall_engine::Failure, dst: &Path) {
    let full = |e: &zinstall_engine::Error| {
        matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
    };
    let (filled, other): (Vec<_>, Vec<_>) =
        f.errors.iter().partition(|e| full(e));
    for e in &other {
        error(e);
    }
    let Some(first) = filled.first() else {
        if f.more_errors > 0 {
            error(format_args!("... and {} more errors", f.more_errors));
        }
        return;
    };
    // The errors past the cap are only counted: when every one kept is
    // the full disk's, so are they (a full filesystem stays full).
    let (n, rest) = if other.is_empty() {
        (filled.len() as u64 + f.more_errors, 0)
    } else {
        (filled.len() as u64, f.more_errors)
    };
    let what = if first.raw_os_error() == Some(libc::EDQUOT) {
        "quota is used up"
    } else {
        "filesystem is full"
    };
    error(format_args!(
        "{}'s {what}: {} not copied (first: {first}); what was copied is \
         left in {}: free space and run the same copy with --merge to \
         finish it",
        show(dst),
        count(n, "entry", "entries"),
        show(dst),
    ));
    if rest > 0 {
        error(format_args!("... and {rest} more errors"));
    }
}

/// Prints the per-worker detail of `--stats`.
pub fn stats_detail(s: &zinstall_engine::Stats) {
    out(format_args!(
        "data: {} bytes: {} reflinked, {} copied in kernel, {} through buffer",
        s.bytes, s.reflinked, s.kernel_copied, s.buffered
    ));
    out(format_args!(
        "workers: {} busy {:.0}%, walkers: {} blocked {}",
        s.workers.len(),
        s.utilization() * 100.0,
        s.walkers.len(),
        human_duration(s.walker_blocked)
    ));
    out(format_args!(
        "descriptors: limit {}, budget {}, at most {} held",
        s.fd_limit, s.fd_budget, s.fd_peak
    ));
    for (i, w) in s.walkers.iter().enumerate() {
        out(format_args!(
            "  walker-{i}: {}, {}, {}, {} stolen, busy {} (blocked {}, waiting for descriptors {}), idle {}, CPU {}",
            count(w.dirs, "dir", "dirs"),
            count(w.entries, "entry", "entries"),
            count(w.batches, "batch", "batches"),
            w.steals,
            human_duration(w.busy),
            human_duration(w.blocked),
            human_duration(w.fd_wait),
            human_duration(w.idle),
            human_duration(w.cpu)
        ));
    }
    for (i, w) in s.workers.iter().enumerate() {
        out(format_args!(
            "  worker-{i}: {} in {}, {}, busy {}",
            count(w.jobs, "job", "jobs"),
            count(w.batches, "batch", "batches"),
            human_bytes(w.bytes),
            human_duration(w.busy)
        ));
    }
}

/// Help text shown as written. clap turns `{n}` anywhere in a help text
/// into a line break, which would eat a hostname pattern's `{n}`: each
/// `{` is followed by an empty style (an SGR reset), which breaks the
/// match and prints as nothing (clap strips it off a terminal, and a
/// terminal shows nothing for it).
pub fn verbatim(text: &str) -> clap::builder::StyledStr {
    clap::builder::StyledStr::from(text.replace('{', "{\u{1b}[0m"))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("a\nb\x1b[2J"), "a\\u{a}b\\u{1b}[2J");
        assert_eq!(escape("plain name"), "plain name");
    }
}
