//! What a decoder read past and ignored, logged for the caller: shared by
//! the gzip reader that logs and the decoder that hands the log out.

use std::fmt;
use std::sync::{Arc, Mutex};

/// What a decoder read past and ignored, as the format's own tool does;
/// the caller reports it (`Decoder::ignored`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// `len` zero bytes after the last gzip member, at byte `at` of the
    /// compressed stream: padding (`gzip -d` ignores it silently).
    GzipPadding {
        /// Where they start in the compressed stream.
        at: u64,
        /// How many.
        len: u64,
    },
    /// `len` bytes after the last gzip member, at byte `at` of the
    /// compressed stream, that do not start a member (`gzip -d`:
    /// "decompression OK, trailing garbage ignored").
    GzipGarbage {
        /// Where they start in the compressed stream.
        at: u64,
        /// How many.
        len: u64,
    },
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ignored::GzipPadding { at, len } => write!(
                f,
                "{len} zero bytes after the last gzip member (at byte {at}) \
                 ignored as padding, as gzip -d ignores them"
            ),
            Ignored::GzipGarbage { at, len } => write!(
                f,
                "{len} bytes after the last gzip member (at byte {at}) are \
                 not a gzip member: ignored, as gzip -d ignores them \
                 (\"trailing garbage ignored\")"
            ),
        }
    }
}

/// Where a decoder records what it ignored; a clone reads it after the
/// decoder has been handed on and read to its end.
#[derive(Clone, Debug, Default)]
pub struct IgnoredLog(Arc<Mutex<Vec<Ignored>>>);

impl IgnoredLog {
    pub(super) fn push(&self, i: Ignored) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(i);
    }

    /// What was ignored so far, in the order met.
    pub fn take(&self) -> Vec<Ignored> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
