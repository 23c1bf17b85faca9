//! The protocol's version and the bounds on what a client may send, and
//! how client text is cut before it is quoted back: every other part of
//! the protocol reads these, so they sit in a room of their own.

use std::path::{Path, PathBuf};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest request line accepted, newline included. The largest
/// request a client makes is a copy with its exclude patterns; 256 KiB
/// holds thousands of them, and bounds what a connection costs.
pub const MAX_LINE: usize = 256 << 10;

/// How deep arrays and objects may nest in a request: none needs more
/// than three levels.
pub const MAX_DEPTH: usize = 32;

/// The most bytes of a client's text (an operation's name, a path)
/// quoted back in a reply or the log.
pub const MAX_ECHO: usize = 200;

/// The most errors of one job kept, sent and logged; past them, only a
/// count ([`crate::protocol::WireError::more_errors`]). The engine
/// keeps as many.
pub const MAX_ERRORS: usize = zinstall_engine::Failure::MAX_ERRORS;

/// The most bytes of one error kept: its head and its tail (the path's
/// start and the reason at the end), the middle cut.
pub const MAX_ERROR_TEXT: usize = 1024;

/// The most bytes of a failure's whole message kept.
pub const MAX_MESSAGE: usize = 16 << 10;

/// The most bytes of a `jobs` reply: the running and queued jobs and
/// the newest finished ones that fit; `status` gives any one whole.
pub const MAX_JOBS_REPLY: usize = 1 << 20;

/// The most bytes of one line of the daemon's log; anything longer is
/// cut there (fields are clipped long before).
pub const MAX_LOG_LINE: usize = 64 << 10;

/// `s` with its middle cut so that at most `max` bytes of it are kept,
/// half from each end, on character boundaries, the cut marked with the
/// original length: an error's path begins it and its reason ends it.
pub fn clip_middle(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut head = max / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - (max - max / 2);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}…({} bytes)…{}", &s[..head], s.len(), &s[tail..])
}

/// `s` cut at `max` bytes on a character boundary, the cut marked with
/// `…` and the original length, so that nothing a client sends is
/// repeated whole into a reply or the log.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &s[..end], s.len())
}

/// A path cut as [`clip`] cuts text (shown lossily: it is for reading).
pub fn clip_path(p: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    if p.as_os_str().len() <= MAX_ECHO {
        return p.to_path_buf();
    }
    let shown = String::from_utf8_lossy(p.as_os_str().as_bytes());
    PathBuf::from(clip(&shown, MAX_ECHO))
}
