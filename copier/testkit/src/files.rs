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
pub fn exchange(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(a), Ok(b)) = (
        std::ffi::CString::new(a.as_os_str().as_bytes()),
        std::ffi::CString::new(b.as_os_str().as_bytes()),
    ) else {
        return false;
    };
    // SAFETY: two valid C strings; a plain system call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    rc == 0
}

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
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: a valid path and a buffer of the length given.
    let n = unsafe {
        libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len())
    };
    assert!(n >= 0, "llistxattr {}", p.display());
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: valid strings and a buffer of the length given.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cn.as_ptr(),
                v.as_mut_ptr().cast(),
                v.len(),
            )
        };
        assert!(n >= 0, "lgetxattr {} {cn:?}", p.display());
        v.truncate(n as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    out
}
