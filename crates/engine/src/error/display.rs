//! The pieces of the error type's messages that are there or not (a
//! second path, an entry's name, a line number), so that each variant's
//! format string stays one line of what it prints.

use std::fmt;
use std::path::{Path, PathBuf};

pub(super) struct Arrow<'a>(pub(super) Option<&'a Path>);

impl fmt::Display for Arrow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, " -> {}", p.display()),
            None => Ok(()),
        }
    }
}

/// Paths separated by commas.
pub(super) struct Paths<'a>(pub(super) &'a [PathBuf]);

impl fmt::Display for Paths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", p.display())?;
        }
        Ok(())
    }
}

/// `PATH: ` before what is in its way, unless that is the path itself.
pub(super) struct Wanted<'a>(pub(super) &'a Path, pub(super) &'a Path);

impl fmt::Display for Wanted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == self.1 {
            Ok(())
        } else {
            write!(f, "{}: ", self.0.display())
        }
    }
}

pub(super) struct EntryName<'a>(pub(super) &'a str);

impl fmt::Display for EntryName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "entry {:?}: ", self.0)
        }
    }
}

pub(super) struct LineNo(pub(super) usize);

impl fmt::Display for LineNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > 0 {
            write!(f, ":{}", self.0)
        } else {
            Ok(())
        }
    }
}
