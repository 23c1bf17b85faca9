//! The compressions there are: their names, suffixes, the commands that
//! convert those not read, and the one a file name asks for.

use std::path::Path;

use crate::ArchiveRefusal;

/// How a stream is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (`1f 8b`).
    Gzip,
    /// zstd (`28 b5 2f fd`, possibly after skippable frames).
    Zstd,
    /// xz (`fd 37 7a 58 5a 00`).
    Xz,
    /// bzip2 (`BZh1` to `BZh9`, then a block or end-of-stream magic).
    Bzip2,
    /// lz4 frames (`04 22 4d 18`, possibly after skippable frames).
    Lz4,
    /// The legacy lz4 frame (`02 21 4c 18`, `lz4 -l`): not read.
    Lz4Legacy,
    /// Legacy lzma (`.lzma`, `xz --format=lzma`): not read.
    Lzma,
    /// lzip (`LZIP` and version 1): not read.
    Lzip,
    /// lzop (`89 4c 5a 4f 00 0d 0a 1a 0a`): not read.
    Lzop,
    /// compress, `.Z` (`1f 9d`): not read.
    Compress,
}

impl Compression {
    /// The format's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
            Compression::Lz4 => "lz4",
            Compression::Lz4Legacy => "legacy lz4 (lz4 -l)",
            Compression::Lzma => "legacy lzma (.lzma)",
            Compression::Lzip => "lzip",
            Compression::Lzop => "lzop",
            Compression::Compress => "compress (.Z)",
        }
    }

    /// The usual file name suffix: `.gz`, `.zst`, `.bz2`; empty for
    /// [`Compression::None`].
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
            Compression::Xz => ".xz",
            Compression::Bzip2 => ".bz2",
            Compression::Lz4 | Compression::Lz4Legacy => ".lz4",
            Compression::Lzma => ".lzma",
            Compression::Lzip => ".lz",
            Compression::Lzop => ".lzo",
            Compression::Compress => ".Z",
        }
    }

    /// Whether `decompress` reads it.
    pub fn is_read(self) -> bool {
        self.decompressor().is_none()
    }

    /// For a format that is not read, the command that decompresses it
    /// to standard output (each tool's own, or `gzip`, which reads
    /// `.Z`).
    pub(super) fn decompressor(self) -> Option<&'static str> {
        match self {
            Compression::Lz4Legacy => Some("lz4 -dc"),
            Compression::Lzma => Some("xz -dc"),
            Compression::Lzip => Some("lzip -dc"),
            Compression::Lzop => Some("lzop -dc"),
            Compression::Compress => Some("gzip -dc"),
            _ => None,
        }
    }

    /// For a format that is not read, the command that converts the file
    /// `path` into a zstd-compressed one zinstall reads:
    /// `lzip -dc x.tar.lz | zstd -o x.tar.zst`.
    pub fn convert_command(self, path: &Path) -> Option<String> {
        let tool = self.decompressor()?;
        let shown = path.to_string_lossy();
        let stem = [
            ".tar.lz4",
            ".tar.lzma",
            ".tlz",
            ".tar.lz",
            ".tar.lzo",
            ".tzo",
            ".tar.Z",
            ".taz",
            ".lz4",
            ".lzma",
            ".lz",
            ".lzo",
            ".Z",
        ]
        .iter()
        .find_map(|s| shown.strip_suffix(s))
        .unwrap_or(&shown);
        let out = if stem.ends_with(".tar") {
            format!("{stem}.zst")
        } else {
            format!("{stem}.tar.zst")
        };
        Some(format!(
            "{tool} {} | zstd -o {}",
            shell_quoted(&shown),
            shell_quoted(&out)
        ))
    }

    /// The refusal of a file `path` compressed in a format that is not
    /// read, naming the format and the command that converts it; `None`
    /// for a format that is read.
    pub fn refusal(self, path: &Path) -> Option<ArchiveRefusal> {
        Some(ArchiveRefusal::UnreadCompression {
            format: self.name().into(),
            convert: self.convert_command(path)?,
        })
    }
}

/// `s` as one shell word: as it is when that is safe, quoted otherwise.
fn shell_quoted(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The compression a file name asks for: `.tar.zst`/`.tzst` zstd,
/// `.tar.gz`/`.tgz` gzip, `.tar.xz`/`.txz` xz, `.tar` none; `None` for
/// any other name.
pub fn compression_for_name(name: &Path) -> Option<Compression> {
    let n = name.file_name()?.to_str()?;
    let ends = |sfx: &[&str]| sfx.iter().any(|s| n.ends_with(s));
    if ends(&[".tar.zst", ".tzst"]) {
        Some(Compression::Zstd)
    } else if ends(&[".tar.gz", ".tgz"]) {
        Some(Compression::Gzip)
    } else if ends(&[".tar.xz", ".txz"]) {
        Some(Compression::Xz)
    } else if ends(&[".tar"]) {
        Some(Compression::None)
    } else {
        None
    }
}
