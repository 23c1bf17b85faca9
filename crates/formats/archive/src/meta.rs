//! `zinstall.json`: what an archive is.

use std::fmt;

use serde::Deserialize;

/// The kinds of zinstall archives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveKind {
    /// The base of a zone root, unpacked once after the host trees.
    Baseline,
    /// An image layer, unpacked over the baseline, in order.
    Layer,
}

impl ArchiveKind {
    /// `baseline` or `layer`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArchiveKind::Baseline => "baseline",
            ArchiveKind::Layer => "layer",
        }
    }
}

/// The parsed first member, `{"v":"1","t":"layer"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveMeta {
    /// What the archive is.
    pub kind: ArchiveKind,
    /// Optional string pairs (`i`), kept as given.
    pub info: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    v: String,
    t: String,
    #[serde(default)]
    i: std::collections::BTreeMap<String, String>,
}

/// The name of the metadata member.
pub const NAME: &str = "zinstall.json";

/// Why a `zinstall.json` is refused (the archive and member are the
/// caller's to name).
#[derive(Debug)]
pub enum MetaError {
    /// Not JSON, or not the fields `v`, `t` and `i`.
    Json(serde_json::Error),
    /// A version other than `1`.
    Version(String),
    /// A type other than `baseline` and `layer`.
    Kind(String),
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::Json(e) => write!(f, "{e}"),
            MetaError::Version(v) => write!(f, "version {v:?}, not \"1\""),
            MetaError::Kind(t) => {
                write!(f, "type {t:?}, not baseline or layer")
            }
        }
    }
}

/// The JSON error is in the message, so no `source()`
/// (CONTRIBUTING.md: a cause is said once).
impl std::error::Error for MetaError {}

/// Parses `zinstall.json`; the error says what is wrong.
pub fn parse(bytes: &[u8]) -> Result<ArchiveMeta, MetaError> {
    let raw: Raw = serde_json::from_slice(bytes).map_err(MetaError::Json)?;
    if raw.v != "1" {
        return Err(MetaError::Version(raw.v));
    }
    let kind = match raw.t.as_str() {
        "baseline" => ArchiveKind::Baseline,
        "layer" => ArchiveKind::Layer,
        other => return Err(MetaError::Kind(other.into())),
    };
    Ok(ArchiveMeta {
        kind,
        info: raw.i.into_iter().collect(),
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn reads_kinds_and_refuses_the_rest() {
        assert_eq!(
            parse(br#"{"v":"1","t":"layer"}"#).unwrap().kind,
            ArchiveKind::Layer
        );
        let m =
            parse(br#"{"v":"1","t":"baseline","i":{"name":"base"}}"#).unwrap();
        assert_eq!(m.kind, ArchiveKind::Baseline);
        assert_eq!(m.info, vec![("name".into(), "base".into())]);
        assert_eq!(
            parse(br#"{"v":"2","t":"layer"}"#).unwrap_err().to_string(),
            r#"version "2", not "1""#
        );
        assert_eq!(
            parse(br#"{"v":"1","t":"os"}"#).unwrap_err().to_string(),
            r#"type "os", not baseline or layer"#
        );
        assert!(parse(br#"{"v":"1","t":"layer","x":1}"#).is_err());
        assert!(parse(b"not json").is_err());
    }
}
