//! Where a configuration file does not parse, shown as compilers show it:
//! the line quoted and the column marked. Parsers outside the engine make
//! these, so they stand apart from the engine's error type.

use std::fmt;
use std::path::PathBuf;

/// Where a file does not parse, and why, shown as compilers show it:
///
/// ```text
/// /etc/zinstall/profile.toml:2:1: missing comma between array elements
///   |
/// 2 | log = 3
///   | ^
/// ```
///
/// Parsers of configuration (profiles, `zinstalld.toml`, statemaps) make
/// one from their error's position in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Syntax {
    /// The file.
    pub file: PathBuf,
    /// The line, from 1 (0: the position is unknown).
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
    /// The line's text, control characters shown escaped.
    pub text: String,
    /// How many characters the caret line marks (at least 1).
    pub width: usize,
    /// What is wrong.
    pub message: String,
}

impl Syntax {
    /// The error at byte range `span` of `source`, the text of `file`
    /// (no span: the position is unknown).
    pub fn at(
        file: impl Into<PathBuf>,
        source: &str,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
    ) -> Syntax {
        let mut s = Syntax {
            file: file.into(),
            line: 0,
            column: 0,
            text: String::new(),
            width: 1,
            message: message.into().trim_end().to_string(),
        };
        let Some(span) = span else { return s };
        let start = floor_char(source, span.start.min(source.len()));
        let end = floor_char(source, span.end.clamp(start, source.len()));
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let line = source[line_start..line_end].trim_end_matches('\r');
        s.line = source[..start].matches('\n').count() + 1;
        s.column = source[line_start..start].chars().count() + 1;
        s.text = line.chars().map(visible).collect();
        s.width = source[start..end.min(line_end).max(start)]
            .chars()
            .count()
            .max(1);
        // A long line (a statemap's, a minified file's) is shown around
        // the column only.
        let len = s.text.chars().count();
        if len > Self::MAX_SHOWN {
            let from = (s.column - 1).saturating_sub(Self::MAX_SHOWN / 2);
            let from = from.min(len - Self::MAX_SHOWN);
            let window: String =
                s.text.chars().skip(from).take(Self::MAX_SHOWN).collect();
            s.text = format!(
                "{}{window}{}",
                if from > 0 { "..." } else { "" },
                if from + Self::MAX_SHOWN < len {
                    "..."
                } else {
                    ""
                }
            );
            s.column = s.column - from + if from > 0 { 3 } else { 0 };
            s.width = s.width.min(Self::MAX_SHOWN);
        }
        s
    }

    /// The most characters of the line shown.
    pub const MAX_SHOWN: usize = 120;

    /// The error at `line` and `column` (from 1) of `source`.
    pub fn at_line(
        file: impl Into<PathBuf>,
        source: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
    ) -> Syntax {
        let offset = source
            .split_inclusive('\n')
            .take(line.saturating_sub(1))
            .map(str::len)
            .sum::<usize>();
        let in_line = source[offset.min(source.len())..]
            .chars()
            .take(column.saturating_sub(1))
            .map(char::len_utf8)
            .sum::<usize>();
        let at = offset + in_line;
        Syntax::at(file, source, (line > 0).then_some(at..at), message)
    }
}

/// The largest char boundary at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A character as it is shown in the quoted line: tabs as a space (so
/// the caret stays under it), other control characters as `?`.
fn visible(c: char) -> char {
    match c {
        '\t' => ' ',
        c if c.is_control() => '?',
        c => c,
    }
}

impl fmt::Display for Syntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}", self.file.display(), self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message.replace('\n', "; ")
        )?;
        let gutter = " ".repeat(self.line.to_string().len());
        write!(
            f,
            "\n{gutter} |\n{} | {}\n{gutter} | {}{}",
            self.line,
            self.text,
            " ".repeat(self.column - 1),
            "^".repeat(self.width)
        )
    }
}

impl std::error::Error for Syntax {}
