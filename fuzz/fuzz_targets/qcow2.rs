//! The qcow2 header and L1/L2 reader, from bytes in memory: open, read
//! the start and the end of the disk, and convert small disks to raw.
//! Opening and reading must end in data or an error, never a crash or an
//! allocation the input alone decides.

#![no_main]

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use zinstall_qcow2::{ConvertOptions, Image, convert_to_raw};
use libfuzzer_sys::fuzz_target;

/// Guest bytes read per input, at most.
const READ: u64 = 256 << 10;

/// One output file per process, reused: conversion needs a real file.
fn out() -> &'static File {
    static OUT: OnceLock<File> = OnceLock::new();
    OUT.get_or_init(|| tempfile_in_shm().expect("output file"))
}

fn tempfile_in_shm() -> std::io::Result<File> {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let path = Path::new(dir)
        .join(format!("zinstall-fuzz-qcow2-{}", std::process::id()));
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

fuzz_target!(|data: &[u8]| {
    let Ok(img) = Image::from_bytes(Path::new("fuzz.qcow2"), data.to_vec())
    else {
        return;
    };
    let size = img.virtual_size();
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0;
    while at < size.min(READ) {
        if img.read_at(&mut buf, at).is_err() {
            break;
        }
        at += buf.len() as u64;
    }
    let _ = img.read_at(&mut buf, size.saturating_sub(1000));
    let _ = img.read_at(&mut buf, u64::MAX - 10);
    if size <= READ {
        let f = out();
        let _ = f.set_len(0);
        let threads = 1 + data.len() % 4;
        let _ = convert_to_raw(&img, f, &ConvertOptions { threads }, &|_| {});
    }
});
