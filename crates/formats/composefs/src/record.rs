//! A composefs root on disk: a directory (a zonepath, a guest) holding
//! `composefs.json` (which store, which image, which ref keeps it), an
//! empty `root/` to mount it on, and `upper/` and `work/` for the
//! overlay's writable layer. `zinstall mount` reads the record; install
//! and provision write it, last, once the image is durable and named.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zinstall_core::foreign::{self, Kind};
use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};

/// The record's name in its directory.
pub const RECORD: &str = "composefs.json";
/// The mount point of the root.
pub const ROOT_DIR: &str = "root";
/// The overlay's upper layer: what the root's user changed.
pub const UPPER_DIR: &str = "upper";
/// The overlay's work directory.
pub const WORK_DIR: &str = "work";

/// The attributes of an image's top directory that a writable mount
/// shows from `upper/` instead: an overlay's top directory is its upper
/// layer's, so `upper/` must have them for the root to show the image's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Top {
    /// Permission bits (with setuid, setgid and sticky).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time: seconds, nanoseconds.
    pub mtime: (i64, i64),
}

impl Top {
    /// The top of a tree about to be written as an image.
    pub fn of_stat(st: &composefs::tree::Stat) -> Top {
        Top {
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime: (st.st_mtim_sec, i64::from(st.st_mtim_nsec)),
        }
    }

    /// The top of a directory on disk.
    pub fn of_metadata(md: &std::fs::Metadata) -> Top {
        use std::os::unix::fs::MetadataExt;
        Top {
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }
}

/// Gives `upper/` in the root directory `dir` (`shown`) the attributes
/// of the image's top directory; owner first, as a chown clears setuid
/// and setgid bits.
pub fn match_upper(
    dir: &impl AsFd,
    shown: &Path,
    top: &Top,
) -> Result<(), Error> {
    let path = shown.join(UPPER_DIR);
    let upper = at::open_dir(dir.as_fd().as_raw_fd(), c"upper")
        .map_err(|e| Error::io(&path, Op::Open, e))?;
    let failed = |e| Error::io(&path, Op::Attributes, e);
    at::fchown(&upper, top.uid, top.gid).map_err(failed)?;
    at::fchmod(&upper, top.mode).map_err(failed)?;
    let times = zinstall_sys::fs::Times {
        atime: top.mtime,
        mtime: top.mtime,
    };
    at::futimens(&upper, &times).map_err(failed)
}

/// The most bytes a record may have (its store path is the only field
/// of any length).
const RECORD_MAX: u64 = 16 << 10;

/// What `composefs.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The store's directory (absolute).
    pub store: PathBuf,
    /// The image's ID, hex.
    pub image: String,
    /// The ref in the store that keeps the image from `cache gc`.
    #[serde(rename = "ref")]
    pub ref_name: String,
}

impl Record {
    /// A record of the image `id` in the store at `store`, kept by the
    /// ref `ref_name`.
    pub fn new(store: &Path, id: &ObjectId, ref_name: &str) -> Record {
        Record {
            store: store.to_path_buf(),
            image: digest::hex(id),
            ref_name: ref_name.to_string(),
        }
    }

    /// The image's ID; an error naming `shown` if the record's is not
    /// 64 hex digits.
    pub fn image_id(&self, shown: &Path) -> Result<ObjectId, Error> {
        digest::parse_hex(&self.image)
            .ok_or_else(|| Error::new(shown, Op::Read, Problem::BadName))
    }

    /// Writes the record into the directory `dir` (`shown` names it):
    /// to a temporary name, synced, renamed into place, the directory
    /// synced.
    pub fn write(&self, dir: &OwnedFd, shown: &Path) -> Result<(), Error> {
        let path = shown.join(RECORD);
        let text = serde_json::to_vec_pretty(self).map_err(|e| {
            Error::io(&path, Op::Write, io::Error::other(e.to_string()))
        })?;
        let tmp = CString::new(format!(".{RECORD}.tmp-{}", std::process::id()))
            .map_err(|_| Error::new(&path, Op::Create, Problem::BadName))?;
        let leaf = CString::new(RECORD)
            .map_err(|_| Error::new(&path, Op::Create, Problem::BadName))?;
        let _ = at::unlink(dir.as_raw_fd(), &tmp, false);
        let mut f = at::create_file(dir.as_raw_fd(), &tmp)
            .map_err(|e| Error::io(&path, Op::Create, e))?;
        let done = f
            .write_all(&text)
            .and_then(|()| f.write_all(b"\n"))
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(&path, Op::Write, e))
            .and_then(|()| {
                at::rename(dir.as_raw_fd(), &tmp, &leaf)
                    .map_err(|e| Error::io(&path, Op::Rename, e))
            });
        if let Err(e) = done {
            let _ = at::unlink(dir.as_raw_fd(), &tmp, false);
            return Err(e);
        }
        let d = at::open_dir(dir.as_raw_fd(), c".")
            .map_err(|e| Error::io(shown, Op::Open, e))?;
        std::fs::File::from(d)
            .sync_all()
            .map_err(|e| Error::io(shown, Op::Sync, e))
    }

    /// Reads the record in the directory `dir` (`shown` names it),
    /// through the foreign-file seam: a regular file, not followed, at
    /// most 16 KiB. `Ok(None)` when there is none.
    pub fn read(dir: impl AsFd, shown: &Path) -> Result<Option<Record>, Error> {
        let path = shown.join(RECORD);
        let kind = Kind::Other {
            what: "a composefs record",
            cap: RECORD_MAX,
        };
        let bytes = match foreign::read_at(dir, Path::new(RECORD), &path, kind)
        {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                return Err(Error::new(&path, Op::Read, Problem::Foreign(e)));
            }
        };
        let r: Record = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(&path, Op::Read, Problem::Format(e.to_string()))
        })?;
        r.image_id(&path)?;
        Ok(Some(r))
    }
}
