//! A path as a request names one: absolute and without `.` or `..`
//! components, so that it means one place to the grant check, the job and
//! the job's process alike. It is made once, as the request is read: a
//! request naming any other path is refused there, and nothing after it
//! looks at the text again.

use std::ops::Deref;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::bounds::clip_path;

/// An absolute path without `.` or `..` components, repeated and trailing
/// slashes dropped.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PathBuf", into = "PathBuf")]
pub struct CleanPath(PathBuf);

/// A path that is relative or has `.` or `..` components: whoever the
/// caller, a path must mean one place. Shown cut at
/// [`MAX_ECHO`](super::MAX_ECHO) bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: paths must be absolute, without . or .. components", clip_path(.0).display())]
pub struct UncleanPath(pub PathBuf);

impl CleanPath {
    /// `p`, if it is absolute and has no `.` or `..` component.
    pub fn new(p: impl Into<PathBuf>) -> Result<CleanPath, UncleanPath> {
        let p = p.into();
        // `components` hides a `.` in the middle: look at the bytes.
        use std::os::unix::ffi::OsStrExt;
        let dots = p
            .as_os_str()
            .as_bytes()
            .split(|b| *b == b'/')
            .any(|c| c == b"." || c == b"..");
        if !p.is_absolute() || dots {
            return Err(UncleanPath(p));
        }
        let mut out = PathBuf::from("/");
        for c in p.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(n) => out.push(n),
                Component::CurDir
                | Component::ParentDir
                | Component::Prefix(_) => return Err(UncleanPath(p)),
            }
        }
        Ok(CleanPath(out))
    }

    /// The path.
    pub fn as_path(&self) -> &Path {
        &self.0
    }
}

impl TryFrom<PathBuf> for CleanPath {
    type Error = UncleanPath;
    fn try_from(p: PathBuf) -> Result<CleanPath, UncleanPath> {
        CleanPath::new(p)
    }
}

impl From<CleanPath> for PathBuf {
    fn from(p: CleanPath) -> PathBuf {
        p.0
    }
}

impl Deref for CleanPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for CleanPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// An image a request names: a file, by its clean path, or a registry
/// reference (`REGISTRY/REPO:TAG`, `@sha256:...`), told apart by the text
/// alone: the daemon's paths are absolute, a reference never is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PathBuf", into = "PathBuf")]
pub enum ImageArg {
    /// An image file.
    File(CleanPath),
    /// An image in a registry, as given.
    Reference(String),
}

impl ImageArg {
    /// The file, or the reference as a path (how the install library
    /// takes both).
    pub fn as_path(&self) -> &Path {
        match self {
            ImageArg::File(p) => p,
            ImageArg::Reference(r) => Path::new(r),
        }
    }

    /// The image file, if this is one: what a grant must cover.
    pub fn file(&self) -> Option<&CleanPath> {
        match self {
            ImageArg::File(p) => Some(p),
            ImageArg::Reference(_) => None,
        }
    }
}

impl TryFrom<PathBuf> for ImageArg {
    type Error = UncleanPath;
    fn try_from(p: PathBuf) -> Result<ImageArg, UncleanPath> {
        match p.to_str() {
            Some(s) if is_reference(s) => {
                Ok(ImageArg::Reference(s.to_string()))
            }
            _ => CleanPath::new(p).map(ImageArg::File),
        }
    }
}

impl From<ImageArg> for PathBuf {
    fn from(i: ImageArg) -> PathBuf {
        match i {
            ImageArg::File(p) => p.into(),
            ImageArg::Reference(r) => PathBuf::from(r),
        }
    }
}

/// Whether an image argument's text is a registry reference.
pub fn is_reference(s: &str) -> bool {
    !s.starts_with('/')
        && (s.starts_with("docker://")
            || zinstall_registry::Reference::looks_like(s))
}
