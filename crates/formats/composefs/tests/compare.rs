//! Two trees compared entry by entry: names, type, mode with special
//! bits, owner, modification time to the nanosecond, size, device
//! number, link count and hard link groups, contents, symlink targets
//! and extended attributes.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Every difference between the trees `a` and `b`, as lines naming the
/// path (relative to the top) and what differs; empty if they are equal.
pub fn differences(a: &Path, b: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut groups: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    entry(a, b, Path::new(""), &mut out, &mut groups);
    for (_, paths) in groups.into_iter().filter(|(_, p)| p.len() > 1) {
        let inos: Vec<u64> = paths
            .iter()
            .map(|p| fs::symlink_metadata(b.join(p)).unwrap().ino())
            .collect();
        if inos.windows(2).any(|w| w[0] != w[1]) {
            out.push(format!("{paths:?}: one inode in a, {inos:?} in b"));
        }
    }
    out
}

fn names(p: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<_> = fs::read_dir(p)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", p.display()))
        .map(|e| e.unwrap().file_name())
        .collect();
    v.sort();
    v
}

fn entry(
    a: &Path,
    b: &Path,
    rel: &Path,
    out: &mut Vec<String>,
    groups: &mut HashMap<u64, Vec<PathBuf>>,
) {
    let (pa, pb) = (a.join(rel), b.join(rel));
    let ma = fs::symlink_metadata(&pa).unwrap();
    let mb = match fs::symlink_metadata(&pb) {
        Ok(m) => m,
        Err(e) => return out.push(format!("{}: {e}", rel.display())),
    };
    let r = rel.display();
    let mut diff = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{r}: {what} {x} != {y}"));
        }
    };
    diff(
        "mode",
        format!("{:o}", ma.mode()),
        format!("{:o}", mb.mode()),
    );
    diff("owner", format!("{}:{}", ma.uid(), ma.gid()), {
        format!("{}:{}", mb.uid(), mb.gid())
    });
    diff(
        "mtime",
        format!("{}.{:09}", ma.mtime(), ma.mtime_nsec()),
        format!("{}.{:09}", mb.mtime(), mb.mtime_nsec()),
    );
    diff("nlink", ma.nlink().to_string(), mb.nlink().to_string());
    let xa = zinstall_testkit::xattrs(&pa);
    let xb = zinstall_testkit::xattrs(&pb);
    diff("xattrs", format!("{xa:?}"), format!("{xb:?}"));
    let ft = ma.file_type();
    if ft.is_dir() {
        let (na, nb) = (names(&pa), names(&pb));
        if na != nb {
            out.push(format!("{r}: entries {na:?} != {nb:?}"));
            return;
        }
        for n in na {
            entry(a, b, &rel.join(n), out, groups);
        }
        return;
    }
    if ma.nlink() > 1 {
        groups.entry(ma.ino()).or_default().push(rel.to_path_buf());
    }
    diff("size", ma.size().to_string(), mb.size().to_string());
    diff("rdev", ma.rdev().to_string(), mb.rdev().to_string());
    if ft.is_symlink() {
        let ta = fs::read_link(&pa).unwrap();
        let tb = fs::read_link(&pb).unwrap();
        diff("target", ta.display().to_string(), tb.display().to_string());
    } else if ft.is_file() {
        let same = fs::read(&pa).unwrap() == fs::read(&pb).unwrap();
        diff(
            "contents",
            "same".into(),
            (if same { "same" } else { "differ" }).into(),
        );
    }
}
