//! The files an image names, opened as untrusted names: its external
//! data file and its backing chain, each beneath a directory descriptor,
//! never through a symlink, the chain bounded and free of loops.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::image::{Backing, DataFile, Image, Source};
use crate::error::{Error, Problem, Result};
use crate::header::AUTOCLEAR_DATA_FILE_RAW;
use crate::layout::MAX_CHAIN;

/// How [`Image::open_chain`] finds the files an image names.
#[derive(Clone, Debug, Default)]
pub struct ChainOptions {
    /// A directory beneath which backing and data file names may also
    /// lead: absolute names, and names with `..`, that fall (lexically)
    /// beneath it. Without it only names beside the naming image
    /// (relative, without `..`) are followed. Symlinks are never
    /// followed.
    pub backing_dir: Option<PathBuf>,
    /// Each image's L2 cache, bytes (0: 1 MiB).
    pub l2_cache_bytes: u64,
}

/// What opening a chain carries from image to image.
struct Walk<'a> {
    opts: &'a ChainOptions,
    /// The allowed directory, canonical, and its descriptor.
    backing_dir: Option<(PathBuf, File)>,
    /// The images opened so far and their (device, inode).
    chain: Vec<(PathBuf, (u64, u64))>,
}

/// An image file opened beneath the directory that holds it: the
/// directory first, then the image in it, so that what the image names
/// is found in the directory the image was read from, whatever is
/// renamed or swapped for a link meanwhile.
#[derive(Debug)]
pub struct InDir {
    /// The directory, as opened.
    pub dir: File,
    /// Its path (canonical when it could be made so), for messages.
    pub dir_shown: PathBuf,
    /// The image, a regular file.
    pub file: File,
}

impl InDir {
    /// Opens the directory of `path` (as the caller named it), then the
    /// image beneath that descriptor: a regular file, or refused naming
    /// what it is. The image's own name may be a link (the caller's);
    /// what it names is found beside the name, as QEMU finds it.
    pub fn open(path: &Path) -> Result<InDir> {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let Some(name) = path.file_name() else {
            return Err(Error::io(
                path,
                "open",
                std::io::Error::from(std::io::ErrorKind::IsADirectory),
            ));
        };
        let dir = open_dir(parent, "open directory")?;
        let file = zinstall_core::foreign::open_at(
            &dir,
            Path::new(name),
            path,
            zinstall_core::foreign::Follow::Yes,
        )
        .map_err(|e| Error::io(path, "open", e.into()))?;
        let dir_shown =
            std::fs::canonicalize(parent).unwrap_or_else(|_| parent.into());
        Ok(InDir {
            dir,
            dir_shown,
            file,
        })
    }
}

/// Opens the directory `path` (followed as named) for `*at` lookups.
fn open_dir(path: &Path, op: &'static str) -> Result<File> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(|e| Error::io(path, op, e.into()))
}

impl Image {
    /// Opens `path` and the files it names: its external data file and
    /// its backing chain (see the module documentation). The image's
    /// directory is opened first, and the image beneath it ([`InDir`]).
    pub fn open_chain(path: &Path, opts: &ChainOptions) -> Result<Image> {
        Self::open_chain_in(InDir::open(path)?, path, opts)
    }

    /// [`Self::open_chain`] for an image its caller opened already, at
    /// `path` (for messages).
    pub fn open_chain_in(
        at: InDir,
        path: &Path,
        opts: &ChainOptions,
    ) -> Result<Image> {
        let backing_dir = match &opts.backing_dir {
            Some(d) => {
                let c = std::fs::canonicalize(d).map_err(|e| {
                    Error::io(d, "resolve backing directory", e)
                })?;
                Some((c.clone(), open_dir(&c, "open backing directory")?))
            }
            None => None,
        };
        let mut walk = Walk {
            opts,
            backing_dir,
            chain: Vec::new(),
        };
        Self::open_level(
            path.to_path_buf(),
            at.file,
            at.dir,
            &at.dir_shown,
            &mut walk,
        )
    }

    /// Opens one image of a chain, `file` at `path` in the directory
    /// `dir` (shown as `dir_shown`), and what it names.
    fn open_level(
        path: PathBuf,
        file: File,
        dir: File,
        dir_shown: &Path,
        walk: &mut Walk<'_>,
    ) -> Result<Image> {
        let md = file.metadata().map_err(|e| Error::io(&path, "stat", e))?;
        walk.chain.push((path.clone(), (md.dev(), md.ino())));
        let cache = match walk.opts.l2_cache_bytes {
            0 => 1 << 20,
            n => n,
        };
        let mut img = Self::from_source(
            &path,
            Source::File(file),
            md.len(),
            cache,
            true,
        )?;
        if img.header.external_data() {
            img.attach_data_file(&path, &dir, dir_shown, walk)?;
        }
        let Some(name) = img.header.backing_file.clone() else {
            return Ok(img);
        };
        let (file, shown, sub, sub_shown) =
            resolve(&path, "backing file", &dir, dir_shown, &name, walk)?;
        let md = file.metadata().map_err(|e| Error::io(&shown, "stat", e))?;
        let paths = |walk: &Walk<'_>, last: Option<&Path>| {
            let mut v: Vec<PathBuf> =
                walk.chain.iter().map(|(p, _)| p.clone()).collect();
            v.extend(last.map(Path::to_path_buf));
            v
        };
        if walk.chain.iter().any(|(_, id)| *id == (md.dev(), md.ino())) {
            return Err(img.problem(Problem::ChainLoop {
                chain: paths(walk, None),
                name,
            }));
        }
        if walk.chain.len() >= MAX_CHAIN {
            return Err(img.problem(Problem::ChainTooDeep {
                chain: paths(walk, Some(&shown)),
            }));
        }
        let qcow2 = img.backing_is_qcow2(&path, &shown, &file)?;
        img.backing = Some(if qcow2 {
            Backing::Qcow2(Box::new(Self::open_level(
                shown, file, sub, &sub_shown, walk,
            )?))
        } else {
            Backing::Raw {
                path: shown,
                file,
                len: md.len(),
            }
        });
        Ok(img)
    }

    /// Opens the external data file the image names, beside it in `dir`
    /// (shown as `dir_shown`) or beneath the allowed directory.
    fn attach_data_file(
        &mut self,
        path: &Path,
        dir: &File,
        dir_shown: &Path,
        walk: &mut Walk<'_>,
    ) -> Result<()> {
        let Some(name) = self.header.data_file.clone() else {
            return Err(self.problem(Problem::ExternalData));
        };
        let (file, shown, _, _) =
            resolve(path, "data file", dir, dir_shown, &name, walk)?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(&shown, "stat", e))?
            .len();
        if self.header.autoclear & AUTOCLEAR_DATA_FILE_RAW != 0 {
            self.notices.push(format!(
                "{}: data file {} is also a raw image; read through the \
                 image's tables",
                path.display(),
                shown.display()
            ));
        }
        self.data = Some(DataFile {
            path: shown,
            file,
            len,
        });
        Ok(())
    }

    /// Whether the backing `file` (at `shown`) is a qcow2 image, not a
    /// raw one: as the image records, else probed by its magic.
    fn backing_is_qcow2(
        &mut self,
        path: &Path,
        shown: &Path,
        file: &File,
    ) -> Result<bool> {
        match self.header.backing_format.as_deref() {
            Some("qcow2") => Ok(true),
            Some("raw") => Ok(false),
            Some(other) => {
                Err(self.problem(Problem::BackingFormat(other.into())))
            }
            None => {
                // No recorded format: probed by its magic, as QEMU does.
                let mut magic = [0u8; 4];
                let n = file.read_at(&mut magic, 0).unwrap_or(0);
                let q = n == 4 && &magic == b"QFI\xfb";
                self.notices.push(format!(
                    "{}: backing file {} has no recorded format; probed as {}",
                    path.display(),
                    shown.display(),
                    if q { "qcow2" } else { "raw" }
                ));
                Ok(q)
            }
        }
    }
}

/// Opens `name`, which the image at `image` records as its `what`,
/// beneath `dir` (the image's directory, shown as `dir_shown`) or the
/// allowed directory; see the module documentation. Returns the file,
/// its path, its directory and that one's path.
fn resolve(
    image: &Path,
    what: &'static str,
    dir: &File,
    dir_shown: &Path,
    name: &str,
    walk: &Walk<'_>,
) -> Result<(File, PathBuf, File, PathBuf)> {
    let refuse = |why: String| {
        Error::problem(
            image,
            Problem::NameRefused {
                what,
                name: name.to_string(),
                why,
            },
        )
    };
    if name.is_empty() || name.contains('\0') {
        return Err(refuse("empty, or holds a NUL byte".into()));
    }
    let p = Path::new(name);
    let Some((start, start_shown, rel)) = start_of(p, dir, dir_shown, walk)
    else {
        let how = if p.is_absolute() {
            "an absolute name"
        } else {
            "a name with `..`"
        };
        return Err(refuse(format!(
            "{how}; only names beside the image are followed, or \
             names beneath a directory allowed for backing files{}",
            match &walk.backing_dir {
                Some((d, _)) => format!(" ({}), which it is not", d.display()),
                None => " (none is)".into(),
            }
        )));
    };
    open_beneath(start, start_shown, &rel, what, &refuse)
}

/// Opens the regular file `rel` beneath `start` (shown as
/// `start_shown`) one component at a time, following no symlink; its
/// refusals made by `refuse`. The file, its path, its directory and
/// that one's path.
fn open_beneath(
    start: &File,
    start_shown: &Path,
    rel: &Path,
    what: &'static str,
    refuse: &dyn Fn(String) -> Error,
) -> Result<(File, PathBuf, File, PathBuf)> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(refuse("names a directory".into()));
    };
    let op = match what {
        "data file" => "open data file",
        _ => "open backing file",
    };
    let mut cur = start
        .try_clone()
        .map_err(|e| Error::io(start_shown, op, e))?;
    let mut shown = start_shown.to_path_buf();
    let step = |cur: &File, shown: &Path, part: &std::ffi::OsStr, flags| {
        rustix::fs::openat(cur, part, flags, Mode::empty()).map_err(|e| {
            // A symlink, whichever error the system gives for it.
            let link = rustix::fs::statat(cur, part, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| {
                    FileType::from_raw_mode(st.st_mode).is_symlink()
                });
            if link {
                refuse(format!(
                    "{} is a symlink, which is not followed",
                    shown.join(part).display()
                ))
            } else {
                Error::io(shown.join(part), op, e.into())
            }
        })
    };
    let base = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for part in dirs {
        let fd = step(&cur, &shown, part, base | OFlags::DIRECTORY)?;
        cur = File::from(fd);
        shown.push(part);
    }
    // Non-blocking: a FIFO planted there must not hang the open.
    let fd = step(&cur, &shown, last, base | OFlags::NONBLOCK)?;
    let file = File::from(fd);
    let path = shown.join(last);
    let md = file.metadata().map_err(|e| Error::io(&path, "stat", e))?;
    if !md.is_file() {
        return Err(refuse(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok((file, path, cur, shown))
}

/// Where the search for `p` starts, shown how, and the rest of it: the
/// image's directory for a name beside the image, else the directory
/// allowed for backing files if the name lies beneath it; `None` if
/// neither.
fn start_of<'a>(
    p: &Path,
    dir: &'a File,
    dir_shown: &'a Path,
    walk: &'a Walk<'_>,
) -> Option<(&'a File, &'a Path, PathBuf)> {
    let beside = !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if beside {
        return Some((dir, dir_shown, p.components().collect()));
    }
    let lexical = lexical(&dir_shown.join(p));
    walk.backing_dir.as_ref().and_then(|(d, f)| {
        let rest = lexical.as_deref()?.strip_prefix(d).ok()?;
        Some((f, d.as_path(), rest.to_path_buf()))
    })
}

/// `p` with `.` and `..` resolved lexically; `None` if `..` climbs above
/// the root.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}
