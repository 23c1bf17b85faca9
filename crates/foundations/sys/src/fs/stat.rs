//! What the engine keeps of a `stat`, and access and modification times
//! to the nanosecond: plain values, no call made here.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// Access and modification times, to the nanosecond, as stat gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    pub atime: (i64, i64),
    pub mtime: (i64, i64),
}

impl Times {
    pub fn of(md: &Metadata) -> Self {
        Times {
            atime: (md.atime(), md.atime_nsec()),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }

    pub fn timespecs(&self) -> [libc::timespec; 2] {
        let ts = |(s, ns): (i64, i64)| libc::timespec {
            tv_sec: s as libc::time_t,
            tv_nsec: ns as _,
        };
        [ts(self.atime), ts(self.mtime)]
    }
}

/// What the engine keeps of a `stat`: type and permission bits, owner,
/// link count, identity, device number, size and times. Made from
/// `fstatat` (std makes no `Metadata` from a directory descriptor and a
/// name) or from a `Metadata`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    pub rdev: u64,
    pub size: u64,
    pub times: Times,
}

// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#[allow(clippy::unnecessary_cast)]
impl Stat {
    pub fn of(st: &libc::stat) -> Self {
        Stat {
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            nlink: st.st_nlink as u64,
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            rdev: st.st_rdev as u64,
            size: st.st_size as u64,
            times: Times {
                atime: (st.st_atime as i64, st.st_atime_nsec as i64),
                mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            },
        }
    }

    pub fn of_metadata(md: &Metadata) -> Self {
        Stat {
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            nlink: md.nlink(),
            dev: md.dev(),
            ino: md.ino(),
            rdev: md.rdev(),
            size: md.len(),
            times: Times::of(md),
        }
    }

    /// The type bits (`S_IFMT`).
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT as u32
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR as u32
    }

    pub fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK as u32
    }

    /// `(dev, ino)`: the identity of a file.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}
