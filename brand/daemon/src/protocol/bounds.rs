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
