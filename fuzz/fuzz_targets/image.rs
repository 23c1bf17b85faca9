//! An image's first bytes, as provision tells what it is: never a panic,
//! a kind that matches the magic it was given, and a fixed-VHD footer
//! accepted only when it describes the file it ends.

#![no_main]

use libfuzzer_sys::fuzz_target;

use zinstall_image::{Compression, ImageKind, classify, vhd_footer};

fuzz_target!(|raw: &[u8]| {
    for c in [
        Compression::None,
        Compression::Gzip,
        Compression::Zstd,
        Compression::Xz,
        Compression::Bzip2,
        Compression::Lz4,
    ] {
        let Ok(kind) = classify(raw, c) else {
            continue;
        };
        match kind {
            ImageKind::Qcow2 | ImageKind::CompressedQcow2(_) => {
                assert!(raw.starts_with(b"QFI\xfb"), "{kind:?}")
            }
            ImageKind::Tree(_) => {
                assert_eq!(raw.get(257..262), Some(&b"ustar"[..]))
            }
            _ => {}
        }
        let _ = kind.describe();
    }
    // The input as a file's tail at every length it could end a file of.
    for at in [0, raw.len() as u64, 1 << 40] {
        if let Ok(Some(len)) = vhd_footer(raw, at) {
            assert_eq!(len, at);
            assert!(raw.starts_with(b"conectix"));
        }
    }
});
