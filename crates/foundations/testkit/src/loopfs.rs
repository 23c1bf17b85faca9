//! Loop-mounted filesystems for tests that need a particular one (reflink
//! on XFS and btrfs, a small filesystem to fill).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The filesystem to make.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// XFS with reflink.
    Xfs,
    /// btrfs.
    Btrfs,
    /// ext4.
    Ext4,
    /// ext4 with fs-verity (`-O verity`).
    Ext4Verity,
}

/// A filesystem on a loop device, unmounted and removed on drop.
pub struct LoopFs {
    dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl LoopFs {
    /// Makes and mounts one for the running test. Without root (or without
    /// loop devices) that is [`crate::unmet`]: `None` outside CI, a failure
    /// under it. A missing `mkfs` fails naming its package; a `mkfs` or
    /// `mount` that fails is a failure too, never a skip.
    #[track_caller]
    pub fn require(kind: Kind, size: u64) -> Option<LoopFs> {
        if !crate::require_root() {
            return None;
        }
        if !Path::new("/dev/loop-control").exists()
            && !crate::unmet("loop devices (/dev/loop-control is missing)")
        {
            return None;
        }
        Some(
            LoopFs::new(kind, size)
                .unwrap_or_else(|e| panic!("loop-mounted {kind:?}: {e}")),
        )
    }

    /// Makes and mounts one, or says why it cannot (not root, a tool that
    /// failed).
    pub fn new(kind: Kind, size: u64) -> Result<LoopFs, String> {
        if !crate::is_root() {
            return Err("needs root to mount".into());
        }
        let (mkfs, args): (&str, &[&str]) = match kind {
            Kind::Xfs => ("mkfs.xfs", &["-q", "-m", "reflink=1"]),
            Kind::Btrfs => ("mkfs.btrfs", &["-q"]),
            Kind::Ext4 => ("mkfs.ext4", &["-q"]),
            Kind::Ext4Verity => ("mkfs.ext4", &["-q", "-O", "verity"]),
        };
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = dir.path().join("fs.img");
        File::create(&img)
            .and_then(|f| f.set_len(size))
            .map_err(|e| format!("{}: {e}", img.display()))?;
        let out = crate::tool(mkfs)
            .args(args)
            .arg(&img)
            .output()
            .map_err(|e| format!("{mkfs}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{mkfs}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(LoopFs { dir, mnt })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let _ = self.dir.path();
    }
}

use zinstall_sys::support::Fiemap;

const FIEMAP_FLAG_SYNC: u32 = 1;
const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;

/// True if every extent of `path` is shared with another file (a
/// reflink), as FIEMAP reports it.
pub fn shares_extents(path: &Path) -> bool {
    let m = fiemap(path, FIEMAP_FLAG_SYNC);
    let n = m.mapped_extents as usize;
    n > 0
        && m.extents[..n.min(32)]
            .iter()
            .all(|e| e.flags & FIEMAP_EXTENT_SHARED != 0)
}

/// How many of `path`'s extents are still only in the page cache, their
/// blocks not yet allocated (delayed allocation: ext4, XFS): data that
/// has not started back to the disk. Read without flushing the file.
/// `(delayed, all)`.
pub fn delayed_extents(path: &Path) -> (usize, usize) {
    let m = fiemap(path, 0);
    let n = (m.mapped_extents as usize).min(32);
    let delayed = m.extents[..n]
        .iter()
        .filter(|e| e.flags & FIEMAP_EXTENT_DELALLOC != 0)
        .count();
    (delayed, n)
}

/// `FS_IOC_FIEMAP` of `path` with `flags`, up to 32 extents.
fn fiemap(path: &Path, flags: u32) -> Fiemap {
    let f = File::open(path).unwrap();
    zinstall_sys::support::fiemap(&f, flags)
        .unwrap_or_else(|e| panic!("FIEMAP {}: {e}", path.display()))
}
