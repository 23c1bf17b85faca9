//! A qcow2 chain of two images: the input split in two files, the first
//! made to name the second as its backing file (the rest of its header
//! as the input says), both opened beneath their directory's descriptor
//! and read through the chain. Opening and reading end in data or an
//! error, never a crash, a loop or an allocation the input alone decides.

#![no_main]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zinstall_qcow2::{ChainOptions, ConvertOptions, Image, convert_to_raw};

/// Guest bytes read per input, at most.
const READ: u64 = 256 << 10;

/// This process's directory for the two images (tmpfs where there is
/// one), made for each input and removed after it: nothing is left
/// when the fuzzer exits.
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        Path::new(base)
            .join(format!("zinstall-fuzz-chain-{}", std::process::id()))
    })
}

/// One output file per process, reused: conversion needs a real file.
fn out() -> &'static File {
    static OUT: OnceLock<File> = OnceLock::new();
    OUT.get_or_init(|| {
        let p = std::env::temp_dir()
            .join(format!("zinstall-fuzz-chain-{}.raw", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .expect("output file");
        let _ = std::fs::remove_file(&p);
        f
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    // Where the input splits: its first two bytes say.
    let at = 2
        + (u16::from_le_bytes([data[0], data[1]]) as usize) % (data.len() - 1);
    let (mut top, base) = (data[2..at].to_vec(), &data[at..]);
    // The top names "base" beside it: the name goes at the end of the
    // file, its offset and length into the header.
    if top.len() >= 20 {
        let off = top.len() as u64;
        top[8..16].copy_from_slice(&off.to_be_bytes());
        top[16..20].copy_from_slice(&4u32.to_be_bytes());
        top.extend_from_slice(b"base");
    }
    let d = dir();
    let _ = std::fs::create_dir_all(d);
    let opened = if std::fs::write(d.join("top.qcow2"), &top).is_ok()
        && std::fs::write(d.join("base"), base).is_ok()
    {
        Image::open_chain(&d.join("top.qcow2"), &ChainOptions::default()).ok()
    } else {
        None
    };
    // Read through the descriptors opened: the names can go now.
    let _ = std::fs::remove_file(d.join("top.qcow2"));
    let _ = std::fs::remove_file(d.join("base"));
    let _ = std::fs::remove_dir(d);
    let Some(img) = opened else {
        return;
    };
    let size = img.virtual_size();
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = 0;
    while pos < size.min(READ) {
        if img.read_at(&mut buf, pos).is_err() {
            break;
        }
        pos += buf.len() as u64;
    }
    let _ = img.read_at(&mut buf, size.saturating_sub(1000));
    if size <= READ {
        let f = out();
        let _ = f.set_len(0);
        let _ =
            convert_to_raw(&img, f, &ConvertOptions { threads: 1 }, &|_| {});
    }
});
