//! A temporary directory that is removed even with immutable files in it:
//! as root the image cache makes its entries immutable (`chattr +i`), so
//! `chattr -R -i` runs first.

/// A temporary directory, removed on drop even when it holds immutable
/// files.
pub struct Tmp(tempfile::TempDir);

impl Tmp {
    /// A new, empty one.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Tmp {
        Tmp(tempfile::tempdir().unwrap())
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-R")
            .arg("-i")
            .arg(self.0.path())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
