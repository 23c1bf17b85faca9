//! Digests: the XXH3-128 of a file's content and of extended
//! attributes (which it reads), and what an image argument is recorded
//! as. Apart from the walk: the update hashes and reads xattrs too.

use std::io::{self, Read, Write};
use std::path::Path;

use super::format::hex;

/// XXH3-128 of everything `r` reads, hex.
pub fn hash_reader(r: impl Read) -> io::Result<String> {
    hash_copy(r, &mut io::sink()).map(|(_, h)| h)
}

/// Copies everything `r` reads into `out`, hashing it as it goes (the
/// manifest's hash without a second read); the bytes and the hash.
pub fn hash_copy(
    mut r: impl Read,
    out: &mut impl Write,
) -> io::Result<(u64, String)> {
    // One buffer per thread: a fresh zeroed one per file cost more than
    // reading the file (tens of thousands of small files per root).
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> =
            std::cell::RefCell::new(vec![0u8; 256 << 10]);
    }
    BUF.with(|b| {
        let mut buf = b.borrow_mut();
        let mut h = twox_hash::XxHash3_128::new();
        let mut total = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.write(&buf[..n]);
            out.write_all(&buf[..n])?;
            total += n as u64;
        }
        Ok((total, format!("{:032x}", h.finish_128())))
    })
}

/// XXH3-128 of the file at `path` (never through a symlink).
pub fn hash_file(path: &Path) -> io::Result<String> {
    let f =
        zinstall_core::foreign::open(path, zinstall_core::foreign::Follow::No)?;
    hash_reader(f)
}

/// The digest of the extended attributes of `path` (not followed), or
/// `None` when it has none (or the platform lists none).
pub fn xattrs_digest(path: &Path) -> io::Result<Option<String>> {
    #[cfg(target_os = "linux")]
    {
        Ok(digest_of(xattrs(path)?))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(None)
    }
}

pub use zinstall_engine::contents::xattr_alias;

/// The digest of extended attributes (names and values, in any order,
/// XFS's aliases left out): `None` for none. The engine's, so that what
/// it records as it writes and what a walk reads are one digest.
pub fn digest_of(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Option<String> {
    zinstall_engine::contents::xattrs_digest(pairs)
        .map(zinstall_engine::contents::hex_of)
}

/// The extended attributes of what `fd` is open on, names and values
/// (none where the platform lists none).
pub fn xattrs_fd(
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    #[cfg(target_os = "linux")]
    {
        let names = match read_sized(|b| rustix::fs::flistxattr(fd, b)) {
            Ok(n) => n,
            Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for name in names
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty() && !xattr_alias(n))
        {
            let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
            let v = match read_sized(|b| rustix::fs::fgetxattr(fd, &c, b)) {
                Ok(v) => v,
                // Removed since it was listed.
                Err(rustix::io::Errno::NODATA) => continue,
                Err(e) => return Err(e.into()),
            };
            out.push((name.to_vec(), v));
        }
        Ok(out)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Ok(Vec::new())
    }
}

/// What `call` reads into a buffer it is given (an xattr list or value):
/// a small buffer first, the largest the kernel allows only when the
/// first is too short. Zeroing 64 KiB per entry cost more than the calls
/// on a root of tens of thousands of entries.
#[cfg(target_os = "linux")]
pub(crate) fn read_sized(
    mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
) -> rustix::io::Result<Vec<u8>> {
    let mut small = [0u8; 1024];
    match call(&mut small) {
        Ok(n) => return Ok(small[..n].to_vec()),
        Err(rustix::io::Errno::RANGE) => {}
        Err(e) => return Err(e),
    }
    let mut big = vec![0u8; 64 << 10];
    let n = call(&mut big)?;
    big.truncate(n);
    Ok(big)
}

/// The extended attributes of `path` (not followed), names and values.
#[cfg(target_os = "linux")]
pub fn xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use rustix::fs::{lgetxattr, llistxattr};
    let names = match read_sized(|b| llistxattr(path, b)) {
        Ok(n) => n,
        Err(e) if e == rustix::io::Errno::NOTSUP => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in names
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty() && !xattr_alias(n))
    {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        let v = match read_sized(|b| lgetxattr(path, cname.as_c_str(), b)) {
            Ok(v) => v,
            Err(rustix::io::Errno::NODATA) => continue,
            Err(e) => return Err(e.into()),
        };
        out.push((name.to_vec(), v));
    }
    Ok(out)
}

/// The digest of an image argument as the install applied it.
pub fn file_digest(path: &Path) -> io::Result<String> {
    use sha2::Digest;
    // An image a user names may be a link to it.
    let mut f = zinstall_core::foreign::open(
        path,
        zinstall_core::foreign::Follow::Yes,
    )?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex(&h.finalize())))
}
