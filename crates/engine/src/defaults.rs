//! Reading `/etc/default`-style files.
//!
//! illumos tools read these with defopen(3C)/defread(3C); SMF methods
//! source them as shell. The common subset both readers agree on is what
//! this parser accepts:
//!
//! * `KEY=value` lines, `KEY` being `[A-Za-z_][A-Za-z0-9_]*`, no spaces
//!   around `=` (defread matches the prefix `KEY=` literally);
//! * blank lines, and comment lines whose first non-blank is `#`;
//! * a comment after a value, `KEY=value # why`: a `#` after a blank
//!   starts it, as in the shell (defread would keep it in the value,
//!   which no number survives);
//! * a value wrapped in one pair of matching `"` or `'` quotes is unquoted,
//!   as the shell would (a `#` inside quotes is part of the value);
//! * a final line without a newline is read (defread silently drops it,
//!   which has surprised many an administrator).
//!
//! It is stricter than defread where defread's leniency hides mistakes:
//! any other line is an error naming the file and the line, and a key set
//! twice is an error (defread keeps the first setting, a shell the last;
//! refusing both readings is the only answer that cannot be wrong).
//! `export KEY=value` is refused with the reason: defread matches
//! `KEY=` at the start of a line and never sees an exported setting, so a
//! file using it would mean one thing to the shell and another to
//! defread. Which keys mean something is the caller's business, and a key
//! it does not know is an error there: see [`Tunables`](crate::Tunables).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use zinstall_core::foreign;

use crate::error::{DefaultsProblem, Error, Op, Result};
use crate::tunables::{Tunables, nearest_key};

/// The longest defaults file read. `/etc/default/zinstall` with every
/// comment is a few KiB.
pub const MAX_BYTES: u64 = 1 << 20;

/// One `KEY=value` setting and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The value, unquoted.
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// A parsed defaults file.
#[derive(Clone, Debug, Default)]
pub struct DefaultsFile {
    path: PathBuf,
    settings: HashMap<String, Setting>,
}

impl DefaultsFile {
    /// Reads and parses `path`, which must exist: a file named on purpose
    /// (`--defaults FILE`) that is missing is an error, not a silent fall
    /// back to the built-in defaults.
    pub fn load_required(path: &Path) -> Result<Self> {
        if let Err(e) = std::fs::symlink_metadata(path) {
            return Err(Error::io(Op::ReadDefaults, path, e));
        }
        Self::load(path)
    }

    /// Reads and parses `path`. A file that does not exist is an empty set
    /// of settings: every key then takes its built-in default.
    pub fn load(path: &Path) -> Result<Self> {
        let none = || DefaultsFile {
            path: path.to_path_buf(),
            settings: HashMap::new(),
        };
        // `/dev/null` is how a caller says "no file" (ZINSTALL_DEFAULTS):
        // the one device taken, as empty.
        if path == Path::new("/dev/null") {
            return Ok(none());
        }
        // The path may come from the environment: anything but a regular
        // file is refused, and a huge one is not read whole.
        let kind = foreign::Kind::Other {
            what: "a defaults file",
            cap: MAX_BYTES,
        };
        match foreign::read(path, foreign::Follow::Yes, kind) {
            Ok(bytes) => Self::parse(path, &bytes),
            Err(e) if e.is_not_found() => Ok(none()),
            Err(e) if matches!(e.problem, foreign::Problem::TooLarge(_)) => {
                Err(Error::Defaults {
                    file: path.to_path_buf(),
                    line: 0,
                    key: String::new(),
                    value: String::new(),
                    problem: DefaultsProblem::TooLong { max: MAX_BYTES },
                })
            }
            Err(e) => Err(Error::io(Op::ReadDefaults, path, e.into())),
        }
    }

    /// Parses the contents of a defaults file; `path` is used in errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let mut settings: HashMap<String, Setting> = HashMap::new();
        let text = String::from_utf8_lossy(bytes);
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let malformed = || Error::Defaults {
                file: path.to_path_buf(),
                line,
                key: String::new(),
                value: raw.to_string(),
                problem: DefaultsProblem::Malformed,
            };
            // defread skips leading blanks; so do we.
            let body = raw.trim_start();
            let (key, value) = body.split_once('=').ok_or_else(malformed)?;
            if let Some(k) = key.strip_prefix("export")
                && k.starts_with([' ', '\t'])
                && is_key(k.trim())
            {
                return Err(Error::Defaults {
                    file: path.to_path_buf(),
                    line,
                    key: k.trim().to_string(),
                    value: value.trim().to_string(),
                    problem: DefaultsProblem::Export,
                });
            }
            if !is_key(key) {
                return Err(malformed());
            }
            let value = unquote(strip_comment(value.trim_end()));
            if let Some(first) = settings.get(key) {
                return Err(Error::Defaults {
                    file: path.to_path_buf(),
                    line,
                    key: key.to_string(),
                    value: value.to_string(),
                    problem: DefaultsProblem::Duplicate {
                        first_line: first.line,
                    },
                });
            }
            settings.insert(
                key.to_string(),
                Setting {
                    value: value.to_string(),
                    line,
                },
            );
        }
        Ok(DefaultsFile {
            path: path.to_path_buf(),
            settings,
        })
    }

    /// The file these settings came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The setting of `key`, if the file has one.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.get(key)
    }

    /// Every key set in the file, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.settings.keys().map(String::as_str)
    }
}

// A defaults file read into the knobs: here, beside the file's format,
// so that the knobs (tunables.rs) know nothing of files and this file
// depends on them, not the other way round.
impl Tunables {
    /// Defaults overridden by the settings of `file`. A key that is not
    /// one of [`Tunables::KEYS`] is an error naming its line (a typo'd
    /// `COPY_THREAD=4` would otherwise be ignored without a word).
    pub fn from_defaults(file: &DefaultsFile) -> Result<Self> {
        let mut unknown: Vec<&str> =
            file.keys().filter(|k| !Self::KEYS.contains(k)).collect();
        unknown.sort_by_key(|k| file.get(k).map_or(0, |s| s.line));
        if let Some(k) = unknown.first() {
            let s = file.get(k).cloned().unwrap_or(Setting {
                value: String::new(),
                line: 0,
            });
            return Err(Error::Defaults {
                file: file.path().to_path_buf(),
                line: s.line,
                key: k.to_string(),
                value: s.value,
                problem: DefaultsProblem::UnknownKey {
                    nearest: nearest_key(k),
                },
            });
        }
        let mut t = Tunables::default();
        for key in Self::KEYS {
            if let Some(s) = file.get(key) {
                t.set(key, &s.value, file.path(), s.line)?;
            }
        }
        Ok(t)
    }

    /// Loads `path` (missing means defaults) and applies it.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_defaults(&DefaultsFile::load(path)?)
    }
}

/// Sets keys (`COPY_THREADS`, `COPY_BATCH`, ...) in a defaults file's
/// text (as `zinstall tune --write` does), keeping every comment and
/// other line: a setting line is replaced; a commented-out one
/// (`#COPY_THREADS=8`) gets the setting after it; otherwise the setting
/// is appended. The text must parse first (`path` names it in the
/// error): a file with a typo is refused rather than rewritten with the
/// typo kept.
pub fn rewrite(
    path: &Path,
    text: &str,
    settings: &[(&str, usize)],
) -> Result<String> {
    Tunables::from_defaults(&DefaultsFile::parse(path, text.as_bytes())?)?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for &(key, value) in settings {
        let setting = format!("{key}={value}");
        let is_key = |l: &str| l.trim_start().starts_with(&format!("{key}="));
        if let Some(i) = lines.iter().position(|l| is_key(l)) {
            lines[i] = setting;
            // A key set twice is an error in the file: keep the first.
            let mut j = i + 1;
            while j < lines.len() {
                if is_key(&lines[j]) {
                    lines.remove(j);
                } else {
                    j += 1;
                }
            }
        } else if let Some(i) = lines.iter().position(|l| {
            l.trim_start()
                .trim_start_matches('#')
                .trim_start()
                .starts_with(&format!("{key}="))
        }) {
            lines.insert(i + 1, setting);
        } else {
            lines.push(setting);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

fn is_key(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `value # comment` → `value`: a `#` after a blank, outside quotes.
fn strip_comment(v: &str) -> &str {
    if v.starts_with(['"', '\'']) {
        let q = &v[..1];
        // The quoted part, then whatever comment follows it.
        if let Some(end) = v[1..].find(q) {
            let rest = v[end + 2..].trim_start();
            if rest.is_empty() || rest.starts_with('#') {
                return &v[..end + 2];
            }
        }
        return v;
    }
    let b = v.as_bytes();
    for i in 1..b.len() {
        if b[i] == b'#' && (b[i - 1] == b' ' || b[i - 1] == b'\t') {
            return v[..i].trim_end();
        }
    }
    v
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

#[cfg(test)]
mod test {
    use super::*;

    fn parse(s: &str) -> Result<DefaultsFile> {
        DefaultsFile::parse(Path::new("/etc/default/zinstall"), s.as_bytes())
    }

    #[test]
    fn reads_keys_comments_quotes_and_a_last_line_without_newline() {
        let f = parse(
            "# comment\n\n  # indented comment\nCOPY_THREADS=4\n\
             COPY_BATCH=\"64\"\n  COPY_BUFSIZE='65536'",
        )
        .unwrap();
        assert_eq!(f.get("COPY_THREADS").unwrap().value, "4");
        assert_eq!(f.get("COPY_THREADS").unwrap().line, 4);
        assert_eq!(f.get("COPY_BATCH").unwrap().value, "64");
        assert_eq!(f.get("COPY_BUFSIZE").unwrap().value, "65536");
        assert_eq!(f.get("COPY_BUFSIZE").unwrap().line, 6);
        assert!(f.get("MISSING").is_none());
    }

    #[test]
    fn malformed_line_is_an_error_naming_the_line() {
        let e = parse("COPY_THREADS=4\nthis is not a setting\n").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/etc/default/zinstall:2: malformed"), "{s}");
        assert!(s.contains("this is not a setting"), "{s}");
        assert!(parse("COPY THREADS=4\n").is_err());
        assert!(parse("=4\n").is_err());
        assert!(parse("1KEY=4\n").is_err());
    }

    #[test]
    fn trailing_comments_and_quoted_hashes() {
        let f = parse(
            "COPY_THREADS=4 # two per core\nCOPY_BATCH=\"64\"  # quoted\n\
             COPY_BUFSIZE='1#2'\n",
        )
        .unwrap();
        assert_eq!(f.get("COPY_THREADS").unwrap().value, "4");
        assert_eq!(f.get("COPY_BATCH").unwrap().value, "64");
        assert_eq!(f.get("COPY_BUFSIZE").unwrap().value, "1#2");
        // Without a blank before it, `#` is part of the value.
        let f = parse("COPY_THREADS=4#x\n").unwrap();
        assert_eq!(f.get("COPY_THREADS").unwrap().value, "4#x");
    }

    #[test]
    fn export_is_refused_with_the_reason() {
        let e = parse("# c\nexport COPY_THREADS=4\n").unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("/etc/default/zinstall:2: export COPY_THREADS=4"),
            "{s}"
        );
        assert!(s.contains("defread"), "{s}");
    }

    #[test]
    fn a_required_file_that_is_missing_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("absent");
        let e = DefaultsFile::load_required(&p).unwrap_err();
        assert!(e.to_string().contains("absent"), "{e}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn duplicate_key_is_an_error() {
        let e = parse("COPY_BATCH=1\nCOPY_BATCH=2\n").unwrap_err();
        assert!(e.to_string().contains("first set on line 1"), "{e}");
    }

    #[test]
    fn a_file_too_long_or_a_device_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let long = d.path().join("long");
        let line = "# padding padding padding padding padding padding\n";
        std::fs::write(
            &long,
            line.repeat((MAX_BYTES as usize) / line.len() + 1),
        )
        .unwrap();
        let e = DefaultsFile::load(&long).unwrap_err();
        assert!(e.to_string().contains("longer than 1048576"), "{e}");
        assert!(e.to_string().starts_with(&*long.to_string_lossy()), "{e}");
        // A device is not read at all, whatever it would give.
        let e = DefaultsFile::load(Path::new("/dev/zero")).unwrap_err();
        let said = e.to_string();
        assert!(said.contains("/dev/zero"), "{e}");
        assert!(said.contains("a character device"), "{e}");
        // /dev/null is how a caller says "no file".
        assert_eq!(
            DefaultsFile::load(Path::new("/dev/null"))
                .unwrap()
                .keys()
                .count(),
            0
        );
    }

    #[test]
    fn missing_file_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let f = DefaultsFile::load(&d.path().join("absent")).unwrap();
        assert_eq!(f.keys().count(), 0);
    }

    #[test]
    fn rewrite_keeps_comments() {
        let shipped = include_str!("../../../etc/default/zinstall");
        let p = Path::new("/etc/default/zinstall");
        let out =
            rewrite(p, shipped, &[("COPY_THREADS", 4), ("COPY_BATCH", 32)])
                .unwrap();
        assert!(out.contains("#COPY_THREADS=8\nCOPY_THREADS=4\n"), "{out}");
        assert!(out.contains("#COPY_BATCH=128\nCOPY_BATCH=32\n"), "{out}");
        let comments =
            |s: &str| s.lines().filter(|l| l.starts_with('#')).count();
        assert_eq!(comments(&out), comments(shipped));
        // It parses, and says what was written.
        let f = DefaultsFile::parse(Path::new("x"), out.as_bytes()).unwrap();
        let t = crate::Tunables::from_defaults(&f).unwrap();
        assert_eq!((t.copy_threads, t.copy_batch), (4, 32));
        // Run again: replaced in place, not added.
        let again = rewrite(
            p,
            &out,
            &[("COPY_THREADS", 2), ("COPY_BATCH", 8), ("COPY_WALKERS", 3)],
        )
        .unwrap();
        assert_eq!(again.matches("COPY_THREADS=").count(), 2);
        assert!(again.contains("\nCOPY_THREADS=2\n"));
        assert!(again.contains("#COPY_WALKERS=0\nCOPY_WALKERS=3\n"));
        assert_eq!(
            rewrite(p, "", &[("COPY_THREADS", 1), ("COPY_BATCH", 1)]).unwrap(),
            "COPY_THREADS=1\nCOPY_BATCH=1\n"
        );
    }

    #[test]
    fn rewrite_refuses_a_file_that_does_not_parse() {
        let p = Path::new("/etc/default/zinstall");
        let set = [("COPY_THREADS", 2), ("COPY_BATCH", 8)];
        let e = rewrite(p, "COPY_THREAD=4\n", &set).unwrap_err();
        assert!(e.to_string().contains("unknown key COPY_THREAD"), "{e}");
        assert!(rewrite(p, "garbage\n", &set).is_err());
    }
}
