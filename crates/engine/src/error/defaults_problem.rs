//! Why a defaults file was rejected, and the message each reason prints
//! after the file and line; the defaults parser's own vocabulary, kept
//! apart from the engine's errors.

use std::fmt;

/// Why a defaults file was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DefaultsProblem {
    /// A line that is neither blank, a `#` comment nor `KEY=value`.
    Malformed,
    /// The same key set twice.
    Duplicate {
        /// Line of the first setting.
        first_line: usize,
    },
    /// A value that is not a number.
    NotANumber,
    /// A word that is not one of the key's values.
    NotOneOf {
        /// The values the key takes.
        choices: &'static [&'static str],
    },
    /// A number outside the accepted range.
    OutOfRange {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// A key zinstall does not read: a typo, most likely.
    UnknownKey {
        /// The known key closest to it, if one is close.
        nearest: Option<&'static str>,
    },
    /// `export KEY=value`: defread(3C) does not read it.
    Export,
    /// The file is longer than any defaults file needs to be.
    TooLong {
        /// The most bytes read.
        max: u64,
    },
}

pub(super) struct DefaultsMsg<'a>(
    pub(super) &'a DefaultsProblem,
    pub(super) &'a str,
    pub(super) &'a str,
);

impl fmt::Display for DefaultsMsg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DefaultsMsg(problem, key, value) = *self;
        match problem {
            DefaultsProblem::Malformed => {
                write!(f, "malformed line {value:?} (expected KEY=value)")
            }
            DefaultsProblem::Duplicate { first_line } => write!(
                f,
                "{key} set again (first set on line {first_line}); \
                 remove one"
            ),
            DefaultsProblem::NotANumber => {
                write!(f, "{key}={value}: not a number")
            }
            DefaultsProblem::NotOneOf { choices } => write!(
                f,
                "{key}={value}: must be one of {}",
                choices.join(", ")
            ),
            DefaultsProblem::OutOfRange { min, max } => write!(
                f,
                "{key}={value}: out of range (must be {min} to {max})"
            ),
            DefaultsProblem::UnknownKey { nearest: Some(n) } => {
                write!(f, "unknown key {key} (did you mean {n}?)")
            }
            DefaultsProblem::UnknownKey { nearest: None } => {
                write!(f, "unknown key {key}")
            }
            DefaultsProblem::Export => write!(
                f,
                "export {key}={value}: defread(3C) reads KEY=value lines \
                 only; drop the export (a shell sourcing the file sees the \
                 setting either way)"
            ),
            DefaultsProblem::TooLong { max } => {
                write!(f, "longer than {max} bytes; not a defaults file")
            }
        }
    }
}
