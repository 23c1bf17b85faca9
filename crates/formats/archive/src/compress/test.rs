//! Detection and decoding of every format, damaged streams included.

use std::io::{self, Read};
use std::path::Path;

use super::*;
use std::io::Write;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e =
        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn read_all(v: &[u8]) -> io::Result<Vec<u8>> {
    let mut d = decompress(v, compression_of(v))?;
    let mut out = Vec::new();
    d.read_to_end(&mut out)?;
    Ok(out)
}

#[test]
fn magic() {
    assert_eq!(compression_of(&[0x1f, 0x8b, 8]), Compression::Gzip);
    assert_eq!(compression_of(&[0x28, 0xb5, 0x2f, 0xfd]), Compression::Zstd);
    assert_eq!(compression_of(&[0x50, 0x2a, 0x4d, 0x18]), Compression::Zstd);
    assert_eq!(compression_of(&[0x5e, 0x2a, 0x4d, 0x18]), Compression::Zstd);
    assert_eq!(compression_of(&[0x60, 0x2a, 0x4d, 0x18]), Compression::None);
    assert_eq!(compression_of(b"\xfd7zXZ\0"), Compression::Xz);
    assert_eq!(compression_of(b"BZh91AY&SY"), Compression::Bzip2);
    // An empty bzip2 stream: end-of-stream magic, then its CRC.
    assert_eq!(
        compression_of(b"BZh9\x17\x72\x45\x38\x50\x90\0\0\0\0"),
        Compression::Bzip2
    );
    assert_eq!(
        compression_of(b"BZh0\x31\x41\x59\x26\x53\x59"),
        Compression::None
    );
    assert_eq!(compression_of(b"BZh9"), Compression::None);
    assert_eq!(
        compression_of(&[4, 0x22, 0x4d, 0x18, 0x64]),
        Compression::Lz4
    );
    assert_eq!(
        compression_of(&[2, 0x21, 0x4c, 0x18]),
        Compression::Lz4Legacy
    );
    assert_eq!(compression_of(b"LZIP\x01\x0c"), Compression::Lzip);
    assert_eq!(
        compression_of(b"\x89LZO\0\r\n\x1a\n\x10"),
        Compression::Lzop
    );
    assert_eq!(compression_of(&[0x1f, 0x9d, 0x90]), Compression::Compress);
    assert_eq!(compression_of(&[0x1f, 0x9d, 0x08]), Compression::None);
    // xz --format=lzma -6: lc=3 lp=0 pb=2, 8 MiB, size unknown.
    let mut lzma = vec![0x5d, 0, 0, 0x80, 0];
    lzma.extend_from_slice(&[0xff; 8]);
    assert_eq!(compression_of(&lzma), Compression::Lzma);
    // 3 MiB (2^n + 2^(n-1)) and a known size.
    let mut lzma3 = vec![0x5d, 0, 0, 0x30, 0];
    lzma3.extend_from_slice(&1000u64.to_le_bytes());
    assert_eq!(compression_of(&lzma3), Compression::Lzma);
    lzma3[3] = 0x31;
    assert_eq!(compression_of(&lzma3), Compression::None);
    assert_eq!(compression_of(&lzma[..12]), Compression::None);
    // Tar heads whose first names start like these formats.
    for name in [&b"]"[..], b"]abcdefghijklm", b"LZIP-notes", b"BZh9x"] {
        let mut block = vec![0u8; 512];
        block[..name.len()].copy_from_slice(name);
        block[257..262].copy_from_slice(b"ustar");
        assert_eq!(compression_of(&block), Compression::None, "{name:?}");
    }
    assert_eq!(compression_of(b"\xfd7zXZ"), Compression::None);
    assert_eq!(compression_of(b""), Compression::None);
}

/// Skippable frames are shared by zstd and lz4: the first real frame
/// after them tells which, however far it is.
#[test]
fn skippable_frames_are_looked_past() {
    let skip = |len: u32| {
        let mut v = vec![0x5a, 0x2a, 0x4d, 0x18];
        v.extend_from_slice(&len.to_le_bytes());
        v.resize(8 + len as usize, 7);
        v
    };
    for (real, want) in [
        (&[0x28, 0xb5, 0x2f, 0xfd][..], Compression::Zstd),
        (&[0x04, 0x22, 0x4d, 0x18], Compression::Lz4),
        (&[0x02, 0x21, 0x4c, 0x18], Compression::Lz4Legacy),
    ] {
        let mut near = skip(4);
        near.extend_from_slice(&skip(0));
        near.extend_from_slice(real);
        assert_eq!(compression_of(&near), want);
        let mut far = skip(100_000);
        far.extend_from_slice(&skip(3));
        far.extend_from_slice(real);
        far.extend_from_slice(&[0; 10]);
        let mut c = io::Cursor::new(&far);
        c.set_position(0);
        assert_eq!(detect(&mut c).unwrap(), want);
        assert_eq!(c.position(), 0);
    }
    // Only skippable frames: zstd, whose decoder reads it as empty.
    let only = skip(3);
    assert_eq!(
        detect(&mut io::Cursor::new(&only)).unwrap(),
        Compression::Zstd
    );
    let mut cut = skip(3);
    cut.extend_from_slice(&[0x50, 0x2a, 0x4d]);
    assert_eq!(
        detect(&mut io::Cursor::new(&cut)).unwrap(),
        Compression::Zstd
    );
    let mut plain = io::Cursor::new(b"plain text".to_vec());
    assert_eq!(detect(&mut plain).unwrap(), Compression::None);
}

/// The formats not read are refused naming the command that
/// converts them.
#[test]
fn formats_not_read_name_their_converter() {
    let e = decompress(&b""[..], Compression::Lzip).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    assert!(e.to_string().contains("lzip -dc"), "{e}");
    for (c, path, want) in [
        (
            Compression::Lzip,
            "/a/x.tar.lz",
            "lzip -dc /a/x.tar.lz | zstd -o /a/x.tar.zst",
        ),
        (
            Compression::Lzma,
            "x.tar.lzma",
            "xz -dc x.tar.lzma | zstd -o x.tar.zst",
        ),
        (
            Compression::Lzop,
            "x.tzo",
            "lzop -dc x.tzo | zstd -o x.tar.zst",
        ),
        (
            Compression::Compress,
            "my x.tar.Z",
            "gzip -dc 'my x.tar.Z' | zstd -o 'my x.tar.zst'",
        ),
        (
            Compression::Lz4Legacy,
            "blob",
            "lz4 -dc blob | zstd -o blob.tar.zst",
        ),
    ] {
        assert!(!c.is_read());
        assert_eq!(c.convert_command(Path::new(path)).unwrap(), want);
        let r = c.refusal(Path::new(path)).unwrap().to_string();
        assert!(r.contains(c.name()) && r.contains(want), "{r}");
    }
    for c in [Compression::Gzip, Compression::Bzip2, Compression::Lz4] {
        assert!(c.is_read() && c.refusal(Path::new("x")).is_none());
    }
}

#[test]
fn bzip2_streams_and_crcs() {
    let bz = |d: &[u8]| {
        let mut e = bzip2::write::BzEncoder::new(
            Vec::new(),
            bzip2::Compression::fast(),
        );
        e.write_all(d).unwrap();
        e.finish().unwrap()
    };
    let mut two = bz(b"hello ");
    two.extend_from_slice(&bz(b"world"));
    assert_eq!(compression_of(&two), Compression::Bzip2);
    assert_eq!(read_all(&two).unwrap(), b"hello world");
    // The second stream's combined CRC, just before its end.
    let mut bad = two.clone();
    let n = bad.len();
    bad[n - 2] ^= 0x10;
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().starts_with("bzip2 stream corrupt"), "{e}");
    let e = read_all(&two[..two.len() - 3]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
}

#[test]
fn lz4_frames_skippable_frames_and_checksums() {
    let lz4 = |d: &[u8], info: lz4_flex::frame::FrameInfo| {
        let mut e =
            lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        e.write_all(d).unwrap();
        e.finish().unwrap()
    };
    let checked = lz4_flex::frame::FrameInfo::new()
        .content_checksum(true)
        .block_checksums(true);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut v = vec![0x5f, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9];
    v.extend_from_slice(&lz4(b"hello ", checked.clone()));
    v.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
    v.extend_from_slice(&lz4(&big, lz4_flex::frame::FrameInfo::new()));
    assert_eq!(compression_of(&v), Compression::Lz4);
    let out = read_all(&v).unwrap();
    assert_eq!(&out[..6], b"hello ");
    assert_eq!(&out[6..], &big[..]);
    // The content checksum is the frame's last 4 bytes.
    let mut bad = lz4(b"hello", checked.clone());
    let n = bad.len();
    bad[n - 1] ^= 1;
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    // Cut between blocks (before the end mark) and inside a block.
    let whole = lz4(&big, lz4_flex::frame::FrameInfo::new());
    let e = read_all(&whole[..whole.len() - 4]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    let e = read_all(&whole[..whole.len() - 100]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    let mut junk = whole.clone();
    junk.extend_from_slice(b"junk");
    let e = read_all(&junk).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

/// Streams cut and flipped at every few bytes: the decoders give
/// data or one of the promised errors, never a panic or a hang.
#[test]
fn damaged_streams_give_errors_of_the_promised_kinds() {
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 13) as u8).collect();
    let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
    lz4.write_all(&data).unwrap();
    let mut bz =
        bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    bz.write_all(&data).unwrap();
    let mut gz = gzip(&data);
    gz.extend_from_slice(&gzip(b"second"));
    for good in [lz4.finish().unwrap(), bz.finish().unwrap(), gz] {
        let c = compression_of(&good);
        for at in (0..good.len()).step_by(3) {
            let mut flipped = good.clone();
            flipped[at] ^= 0x5a;
            for bytes in [&good[..at], &flipped[..]] {
                let Ok(mut d) = decompress(bytes, c) else {
                    continue;
                };
                if let Err(e) = d.finish() {
                    assert!(
                        matches!(
                            e.kind(),
                            io::ErrorKind::InvalidData
                                | io::ErrorKind::UnexpectedEof
                        ),
                        "{c:?} at {at}: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn gzip_members_and_trailers() {
    let mut two = gzip(b"hello ");
    two.extend_from_slice(&gzip(b"world"));
    assert_eq!(read_all(&two).unwrap(), b"hello world");
    // CRC32 is the 8 bytes before the end (then ISIZE).
    let mut bad = gzip(b"hello");
    let n = bad.len();
    bad[n - 8] ^= 1;
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    let mut bad = gzip(b"hello");
    let n = bad.len();
    bad[n - 1] ^= 1;
    assert!(read_all(&bad).is_err(), "bad ISIZE");
    let good = gzip(b"hello");
    let e = read_all(&good[..good.len() - 3]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
}

/// After the last member, as `gzip -d`: zeros are padding, other
/// bytes garbage, both read and ignored, and logged; a member after
/// them is not looked for, but a corrupt member after a good one is
/// still corrupt.
#[test]
fn gzip_trailing_zeros_and_garbage_are_ignored_and_logged() {
    let read_logged = |v: &[u8]| {
        let mut d = decompress(v, Compression::Gzip).unwrap();
        let log = d.ignored();
        let mut out = Vec::new();
        d.read_to_end(&mut out).map(|_| (out, log.take()))
    };
    let one = gzip(b"hello");
    let n = one.len() as u64;
    let mut padded = one.clone();
    padded.extend_from_slice(&[0; 1000]);
    assert_eq!(
        read_logged(&padded).unwrap(),
        (
            b"hello".to_vec(),
            vec![Ignored::GzipPadding { at: n, len: 1000 }]
        )
    );
    let mut garbage = one.clone();
    garbage.extend_from_slice(b"junk\0\0");
    garbage.extend_from_slice(&gzip(b"unseen"));
    let (out, log) = read_logged(&garbage).unwrap();
    assert_eq!(out, b"hello");
    assert_eq!(
        log,
        vec![Ignored::GzipGarbage {
            at: n,
            len: 6 + n + 1
        }]
    );
    assert!(log[0].to_string().contains("trailing garbage ignored"));
    // A single byte after the member is not the start of one either.
    let mut one_byte = one.clone();
    one_byte.push(0x1f);
    assert_eq!(
        read_logged(&one_byte).unwrap().1,
        vec![Ignored::GzipGarbage { at: n, len: 1 }]
    );
    assert_eq!(read_logged(&one).unwrap().1, vec![]);
    let mut bad_second = one.clone();
    let mut second = gzip(b"world");
    let m = second.len();
    second[m - 8] ^= 1;
    bad_second.extend_from_slice(&second);
    let e = read_logged(&bad_second).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

#[test]
fn zstd_skippable_frames_and_checksum() {
    let mut frame = Vec::new();
    let mut e = zstd::stream::write::Encoder::new(&mut frame, 3).unwrap();
    e.include_checksum(true).unwrap();
    e.write_all(b"hello").unwrap();
    e.finish().unwrap();
    let mut skippable = vec![0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
    skippable.extend_from_slice(&frame);
    skippable.extend_from_slice(&frame);
    skippable.extend_from_slice(&[0x5f, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
    assert_eq!(read_all(&skippable).unwrap(), b"hellohello");
    // The content checksum is the frame's last 4 bytes.
    let mut bad = frame.clone();
    let n = bad.len();
    bad[n - 1] ^= 1;
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    let e = read_all(&frame[..frame.len() - 2]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
}

#[test]
fn xz_streams() {
    let xz = |d: &[u8]| {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(d).unwrap();
        e.finish().unwrap()
    };
    let mut two = xz(b"hello ");
    two.extend_from_slice(&xz(b"world"));
    assert_eq!(read_all(&two).unwrap(), b"hello world");
    let good = xz(b"hello");
    let mut bad = good.clone();
    // The block's CRC64 sits before the index and footer.
    let n = bad.len();
    bad[n - 30] ^= 1;
    assert!(read_all(&bad).is_err());
    let e = read_all(&good[..good.len() - 5]).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
        ),
        "{e}"
    );
}
