//! Layer and baseline archives for the unpack benchmarks.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use zinstall_tune::rng::Rng;

/// A layer archive of `files` × `size`-byte files of random data under
/// `root/`, with its `zinstall.json`, written as an uncompressed tar.
/// Returns the bytes of file data.
pub fn layer_tar(out: &Path, files: usize, size: usize) -> io::Result<u64> {
    archive_tar(out, "layer", files, size)
}

/// As [`layer_tar`], of either kind (`layer` or `baseline`).
pub fn archive_tar(
    out: &Path,
    kind: &str,
    files: usize,
    size: usize,
) -> io::Result<u64> {
    let f = File::create(out)?;
    let mut b = tar::Builder::new(io::BufWriter::with_capacity(1 << 20, f));
    let meta = format!("{{\"v\":\"1\",\"t\":\"{kind}\"}}\n").into_bytes();
    let header = |size: u64, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_600_000_000);
        h
    };
    let mut h = header(meta.len() as u64, 0o444);
    b.append_data(&mut h, "zinstall.json", &meta[..])?;
    let mut rng = Rng::new(42);
    let mut data = vec![0u8; size];
    for i in 0..files {
        if i % 100 == 0 {
            let mut h = header(0, 0o755);
            h.set_entry_type(tar::EntryType::Directory);
            b.append_data(&mut h, format!("root/d{}/", i / 100), io::empty())?;
        }
        rng.fill(&mut data);
        let mut h = header(size as u64, 0o644);
        b.append_data(&mut h, format!("root/d{}/f{i}", i / 100), &data[..])?;
    }
    b.into_inner()?.flush()?;
    Ok((files * size) as u64)
}
