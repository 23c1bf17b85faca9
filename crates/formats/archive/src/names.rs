//! Checking archive names before they touch the filesystem.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;

use crate::ArchiveRefusal;

/// A checked relative name: components that are neither empty, `.`, nor
/// `..`, and contain no NUL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    /// The components, in order.
    pub parts: Vec<CString>,
}

impl Name {
    /// The directory part (all but the last component).
    pub fn parent(&self) -> &[CString] {
        &self.parts[..self.parts.len().saturating_sub(1)]
    }

    /// The last component.
    pub fn leaf(&self) -> Option<&CString> {
        self.parts.last()
    }

    /// `a/b/c` for messages and openat2.
    pub fn joined(parts: &[CString]) -> CString {
        let mut v = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                v.push(b'/');
            }
            v.extend_from_slice(p.as_bytes());
        }
        // Components hold no NUL, so neither does their join.
        CString::new(v).unwrap_or_default()
    }
}

/// Checks a name from an archive. Absolute names and `..` anywhere are
/// refused, even where `..` would stay inside: a name that needs it is
/// not one a well-made archive has. `.` and empty components (`./a`,
/// `a//b`, a trailing `/`) are dropped.
pub fn check(raw: &[u8]) -> Result<Name, ArchiveRefusal> {
    if raw.first() == Some(&b'/') {
        return Err(ArchiveRefusal::AbsolutePath);
    }
    let mut parts = Vec::new();
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(ArchiveRefusal::DotDot),
            c => parts.push(CString::new(c).map_err(|_| {
                ArchiveRefusal::Corrupt("NUL byte in a name".into())
            })?),
        }
    }
    Ok(Name { parts })
}

/// A name with its leading slashes removed, and whether it had any.
/// GNU tar extracts `/etc/passwd` as `etc/passwd` beneath the directory
/// it extracts into ("Removing leading `/' from member names"), and so
/// does the unpack: beneath a root that is safe. `..` is still for
/// [`check`] to refuse.
pub fn strip_leading_slashes(raw: &[u8]) -> (&[u8], bool) {
    let n = raw.iter().take_while(|&&b| b == b'/').count();
    (&raw[n..], n > 0)
}

/// The name shown in messages.
pub fn show(raw: &[u8]) -> String {
    OsStr::from_bytes(raw).to_string_lossy().into_owned()
}

#[cfg(test)]
mod test {
    use super::*;

    fn parts(s: &str) -> Vec<String> {
        check(s.as_bytes())
            .unwrap()
            .parts
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn names() {
        assert_eq!(parts("./root/usr//bin/"), ["root", "usr", "bin"]);
        assert_eq!(parts("."), Vec::<String>::new());
        assert_eq!(check(b"/etc/passwd"), Err(ArchiveRefusal::AbsolutePath));
        assert_eq!(check(b"root/../../etc"), Err(ArchiveRefusal::DotDot));
        assert_eq!(check(b"root/a/.."), Err(ArchiveRefusal::DotDot));
        assert_eq!(parts("root/..."), ["root", "..."]);
        assert_eq!(
            strip_leading_slashes(b"//etc/passwd"),
            (&b"etc/passwd"[..], true)
        );
        assert_eq!(strip_leading_slashes(b"etc/x"), (&b"etc/x"[..], false));
        let (rest, _) = strip_leading_slashes(b"/../etc");
        assert_eq!(check(rest), Err(ArchiveRefusal::DotDot));
    }
}
