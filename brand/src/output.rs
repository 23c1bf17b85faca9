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

/// The program name used as a prefix on diagnostics.
pub const PROG: &str = "zinstall";

/// A progress bar fed by the engine's workers.
pub struct Bar {
    bar: ProgressBar,
    bytes: Arc<AtomicU64>,
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
        let bytes = Arc::new(AtomicU64::new(0));
        let (b1, b2) = (Arc::clone(&bytes), Arc::clone(&bytes));
        let style = ProgressStyle::with_template(
            "{spinner} {prefix} {elapsed_precise} {pos} entries, {bytes} \
             ({rate})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key(
            "bytes",
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
        let bar = ProgressBar::new_spinner()
            .with_style(style)
            .with_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        Some(Arc::new(Bar { bar, bytes }))
    }

    /// Removes the bar from the screen.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl copier::Progress for Bar {
    fn advance(&self, entries: u64, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.bar.inc(entries);
    }
}

/// `-v`: one line per entry on stdout, `'src' -> 'dst'` as `cp -v`
/// prints them (with the kind when it is not a plain copy: a hard link,
/// a link rule's symlink).
#[derive(Debug)]
pub struct Listing;

impl copier::Listener for Listing {
    fn entry(&self, src: &Path, dst: &Path, kind: copier::EntryKind) {
        let how = match kind {
            copier::EntryKind::HardLink => " (hard link)",
            copier::EntryKind::Redirect => " (link rule)",
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

/// `n` with the word that fits it: `1 file`, `2 files`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints an error line on stderr.
pub fn error(msg: impl std::fmt::Display) {
    let line = escape(&msg.to_string());
    let _ = writeln!(std::io::stderr(), "{PROG}: error: {line}");
}

/// Prints a note on stderr.
pub fn note(msg: impl std::fmt::Display) {
    let line = escape(&msg.to_string());
    let _ = writeln!(std::io::stderr(), "{PROG}: note: {line}");
}

/// Prints an install's step as zoneadm shows it: `INFO: zinstall: ...`.
pub fn event(e: &zinstall_install::Event) {
    out(format_args!("INFO: zinstall: {e}"));
}

/// Prints lines on stdout, ignoring a closed pipe (`| head` is fine).
/// Each line is escaped on its own, so multi-line text keeps its lines.
pub fn out(msg: impl std::fmt::Display) {
    let text = msg.to_string();
    let mut stdout = std::io::stdout().lock();
    for line in text.split('\n') {
        let _ = writeln!(stdout, "{}", escape(line));
    }
}

/// Prints the engine's failure: every error kept, then the count of the
/// rest.
pub fn failure(f: &copier::Failure) {
    for e in &f.errors {
        error(e);
    }
    if f.more_errors > 0 {
        error(format_args!("... and {} more errors", f.more_errors));
    }
}

/// Prints the per-worker detail of `--stats`.
pub fn stats_detail(s: &copier::Stats) {
    out(format_args!(
        "data: {} reflinked, {} copied in kernel, {} through buffer",
        s.reflinked, s.kernel_copied, s.buffered
    ));
    out(format_args!(
        "workers: {} busy {:.0}%, walkers: {} blocked {} ms",
        s.workers.len(),
        s.utilization() * 100.0,
        s.walkers.len(),
        s.walker_blocked.as_millis()
    ));
    for (i, w) in s.walkers.iter().enumerate() {
        out(format_args!(
            "  walker-{i}: {} dirs, {} entries, {} batches, {} stolen, busy {} ms (blocked {} ms), idle {} ms, CPU {} ms",
            w.dirs,
            w.entries,
            w.batches,
            w.steals,
            w.busy.as_millis(),
            w.blocked.as_millis(),
            w.idle.as_millis(),
            w.cpu.as_millis()
        ));
    }
    for (i, w) in s.workers.iter().enumerate() {
        out(format_args!(
            "  worker-{i}: {} jobs in {} batches, {} bytes, busy {} ms",
            w.jobs,
            w.batches,
            w.bytes,
            w.busy.as_millis()
        ));
    }
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
