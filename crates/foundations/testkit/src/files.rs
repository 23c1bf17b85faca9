//! Files as the tests make and read them: seeded contents, atomic swaps,
//! listings deeper than a path, extended attributes.

/// Seeded bytes (xorshift), the same on every run.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `renameat2(a, b, RENAME_EXCHANGE)`: both names stay, their inodes
/// trade places atomically (how the race tests swap a directory and a
/// symlink under a running copy). False if the kernel refused.
#[cfg(target_os = "linux")]
pub use zinstall_sys::support::exchange;

/// `find DIR -printf` of depth, type, mode, modification time and size
/// of every entry, sorted: find descends by descriptor, so it lists
/// trees deeper than a path can name.
pub fn listing(dir: &std::path::Path) -> Vec<String> {
    let o = crate::tool("find")
        .arg(dir)
        .args(["-printf", "%d %y %m %T@ %s %P\\n"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// The extended attributes of `p` (not following a symlink), by name,
/// as the kernel returns them.
#[cfg(target_os = "linux")]
pub fn xattrs(p: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use zinstall_sys::fs::{XattrTarget, get_xattr, list_xattrs};
    let c = zinstall_sys::cstr(p).unwrap();
    let t = XattrTarget::Path(&c);
    let names = list_xattrs(&t)
        .unwrap_or_else(|e| panic!("llistxattr {}: {e}", p.display()));
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = std::ffi::CString::new(name).unwrap();
        let v = get_xattr(&t, &cn)
            .unwrap_or_else(|e| panic!("lgetxattr {} {cn:?}: {e}", p.display()))
            .unwrap_or_else(|| {
                panic!("lgetxattr {} {cn:?}: gone", p.display())
            });
        out.push((name.to_vec(), v));
    }
    out.sort();
    out
}

/// Makes a FIFO at `p` with `mode`, failing the test if it cannot.
pub fn mkfifo(p: &std::path::Path, mode: u32) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .unwrap_or_else(|_| panic!("{}: a NUL in the path", p.display()));
    let fifo = libc::S_IFIFO | mode;
    zinstall_sys::fs::at::mknod(libc::AT_FDCWD, &c, fifo, 0)
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}
