//! A compressed stream's bytes, as the unpacker tells and decodes them:
//! never a panic, a decoder only for a format that is read, and every
//! error one of the three kinds the module promises.

#![no_main]

use std::io::{self, Read};

use libfuzzer_sys::fuzz_target;

use zinstall_archive::compress::{
    Compression, compression_of, decompress, detect,
};

fuzz_target!(|raw: &[u8]| {
    let told = compression_of(raw);
    let sought = detect(&mut io::Cursor::new(raw)).unwrap();
    // The walk past skippable frames only goes further than the head.
    if raw.len() < 64 {
        assert_eq!(told, sought);
    }
    for c in [
        told,
        Compression::Gzip,
        Compression::Lz4,
        Compression::Bzip2,
    ] {
        match decompress(raw, c) {
            Ok(d) => {
                assert!(c.is_read());
                let log = d.ignored();
                // Bounded: a few bytes can declare a great deal.
                let r = io::copy(&mut d.take(1 << 24), &mut io::sink());
                if let Err(e) = r {
                    assert!(
                        matches!(
                            e.kind(),
                            io::ErrorKind::InvalidData
                                | io::ErrorKind::UnexpectedEof
                        ),
                        "{c:?}: {e}"
                    );
                }
                if c != Compression::Gzip {
                    assert!(log.take().is_empty());
                }
            }
            Err(e) => {
                assert!(!c.is_read() || c == Compression::Zstd, "{c:?}: {e}")
            }
        }
    }
});
