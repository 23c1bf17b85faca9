//! One 512-byte header block: its checksum, its numeric fields (octal or
//! GNU base-256) and its strings.
//!
//! We decode fields ourselves rather than through the `tar` crate's
//! `Header`: its base-256 decoder keeps only the last 8 bytes of a 12-byte
//! field and never sees a sign, so a negative (pre-1970) GNU mtime or an
//! oversized value is silently read as some other number. Here every field
//! is decoded in full, with checked arithmetic, and a value that does not
//! fit its destination is an error.

/// Size of a tar block.
pub const BLOCK: usize = 512;

/// The on-disk layout a header says it follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Version 7: no magic, no owner names, no device numbers, no prefix.
    V7,
    /// POSIX ustar (`ustar\0`): a 155-byte name prefix at 345.
    Ustar,
    /// Old GNU (`ustar  \0`): atime, ctime and a sparse map at 345.
    Gnu,
}

/// A field that could not be decoded: which one and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's name.
    pub field: &'static str,
    /// What is wrong with it.
    pub why: String,
}

/// Why a numeric field does not read as a number.
#[derive(Debug)]
enum BadNumber {
    /// The value does not fit; the encoding's name.
    Overflows(&'static str),
    /// A byte that is not an octal digit, in the field shown.
    NotOctal(String),
}

impl std::fmt::Display for BadNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadNumber::Overflows(encoding) => {
                write!(f, "{encoding} value overflows")
            }
            BadNumber::NotOctal(field) => {
                write!(f, "{field:?} is not an octal number")
            }
        }
    }
}

/// Is the block all zeros (an end-of-archive marker)?
pub fn is_zero(block: &[u8; BLOCK]) -> bool {
    block.iter().all(|&b| b == 0)
}

/// Checks the header checksum. Historic writers summed signed chars, so
/// both sums are accepted, as GNU tar and libarchive do. On mismatch
/// returns `(stored, computed)`, `stored` `None` for a checksum field
/// that is not a number.
pub fn check_sum(block: &[u8; BLOCK]) -> Result<(), (Option<u64>, u64)> {
    let stored = match octal(&block[148..156]) {
        Ok(Some(v)) => v,
        _ => return Err((None, unsigned_sum(block))),
    };
    let unsigned = unsigned_sum(block);
    let signed: i64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                i64::from(b' ')
            } else {
                i64::from(b as i8)
            }
        })
        .sum();
    if stored == unsigned || i64::try_from(stored).ok() == Some(signed) {
        Ok(())
    } else {
        Err((Some(stored), unsigned))
    }
}

fn unsigned_sum(block: &[u8; BLOCK]) -> u64 {
    block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum()
}

/// Octal digits after optional leading spaces, ended by a space, a NUL or
/// the end of the field; what follows the terminator is ignored (as GNU
/// tar does). `None` for a field with no digits at all.
fn octal(field: &[u8]) -> Result<Option<u64>, BadNumber> {
    let mut i = 0;
    while i < field.len() && field[i] == b' ' {
        i += 1;
    }
    let mut v: u64 = 0;
    let mut digits = 0;
    while i < field.len() {
        let b = field[i];
        match b {
            b'0'..=b'7' => {
                v = v
                    .checked_mul(8)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                    .ok_or(BadNumber::Overflows("octal"))?;
                digits += 1;
            }
            b' ' | 0 => break,
            _ => {
                return Err(BadNumber::NotOctal(
                    String::from_utf8_lossy(field).into_owned(),
                ));
            }
        }
        i += 1;
    }
    Ok((digits > 0).then_some(v))
}

/// GNU base-256: the first byte's top bit marks it, its next bit is the
/// sign, and the whole field is a big-endian two's-complement number.
fn base256(field: &[u8]) -> Result<i128, BadNumber> {
    // The marker bit takes the sign bit's value, so the first byte reads
    // as the signed top byte of the number.
    let first = if field[0] & 0x40 != 0 {
        field[0] | 0x80
    } else {
        field[0] & 0x7f
    };
    let mut v = i128::from(first as i8);
    for &b in &field[1..] {
        v = v
            .checked_mul(256)
            .and_then(|v| v.checked_add(i128::from(b)))
            .ok_or(BadNumber::Overflows("base-256"))?;
    }
    Ok(v)
}

/// A numeric field as a signed number: octal, or base-256. An empty
/// field reads as 0 (as libarchive does).
pub fn number(field: &[u8], name: &'static str) -> Result<i128, FieldError> {
    let err = |why: BadNumber| FieldError {
        field: name,
        why: why.to_string(),
    };
    if field[0] & 0x80 != 0 {
        base256(field).map_err(err)
    } else {
        Ok(i128::from(octal(field).map_err(err)?.unwrap_or(0)))
    }
}

/// A numeric field that must fit `T` (e.g. `u64` sizes, `u32` ids, `i64`
/// times).
pub fn field<T: TryFrom<i128>>(
    block: &[u8; BLOCK],
    range: std::ops::Range<usize>,
    name: &'static str,
) -> Result<T, FieldError> {
    let v = number(&block[range], name)?;
    T::try_from(v).map_err(|_| FieldError {
        field: name,
        why: format!("value {v} out of range"),
    })
}

/// The bytes of a string field up to its first NUL.
pub fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// Which layout the block follows, from its magic.
pub fn format(block: &[u8; BLOCK]) -> Format {
    match &block[257..265] {
        b"ustar  \0" => Format::Gnu,
        m if &m[..6] == b"ustar\0" => Format::Ustar,
        _ => Format::V7,
    }
}

/// The name as the header itself gives it: for ustar, `prefix/name`.
pub fn name(block: &[u8; BLOCK], format: Format) -> Vec<u8> {
    let name = cstr(&block[0..100]);
    if format == Format::Ustar {
        let prefix = cstr(&block[345..500]);
        if !prefix.is_empty() {
            let mut v = Vec::with_capacity(prefix.len() + 1 + name.len());
            v.extend_from_slice(prefix);
            v.push(b'/');
            v.extend_from_slice(name);
            return v;
        }
    }
    name.to_vec()
}

/// Padding after `n` bytes of data, to the next block.
pub(super) fn pad(n: u64) -> u64 {
    (BLOCK as u64 - n % BLOCK as u64) % BLOCK as u64
}

pub(super) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn octal_fields() {
        assert_eq!(number(b"0000644\0", "mode"), Ok(0o644));
        assert_eq!(number(b"   644 \0", "mode"), Ok(0o644));
        assert_eq!(number(b"\0\0\0\0\0\0\0\0", "mode"), Ok(0));
        assert_eq!(number(b"777777777777", "size"), Ok(0o777777777777));
        // What follows the terminator is ignored.
        assert_eq!(number(b"12\0garbage\0\0", "size"), Ok(0o12));
        assert!(number(b"0000648\0", "mode").is_err());
        assert!(number(b"00x\0", "mode").is_err());
    }

    #[test]
    fn base256_fields() {
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[4..].copy_from_slice(&(10u64 << 30).to_be_bytes());
        assert_eq!(number(&f, "size"), Ok(10 << 30));
        // -1 and the mtime of 1960-01-01 as GNU tar writes them.
        assert_eq!(number(&[0xff; 12], "mtime"), Ok(-1));
        let mut f = [0xffu8; 12];
        f[4..].copy_from_slice(&(-315_619_200i64).to_be_bytes());
        assert_eq!(number(&f, "mtime"), Ok(-315_619_200));
        // A 12-byte field holds more than 64 bits: kept whole, so the
        // caller's conversion refuses it instead of truncating.
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[3] = 1;
        let mut block = [0u8; BLOCK];
        block[124..136].copy_from_slice(&f);
        assert!(field::<u64>(&block, 124..136, "size").is_err());
    }

    #[test]
    fn both_checksums() {
        let mut b = [0u8; BLOCK];
        b[0] = 0xe9; // a byte whose signed and unsigned sums differ
        b[148..156].copy_from_slice(b"        ");
        let unsigned: u64 = b.iter().map(|&x| u64::from(x)).sum();
        b[148..156].copy_from_slice(format!("{unsigned:06o}\0 ").as_bytes());
        assert_eq!(check_sum(&b), Ok(()));
        let signed: i64 = 256 + i64::from(0xe9u8 as i8);
        b[148..156].copy_from_slice(format!("{signed:06o}\0 ").as_bytes());
        assert_eq!(check_sum(&b), Ok(()));
        b[148..156].copy_from_slice(b"000001\0 ");
        assert!(check_sum(&b).is_err());
    }
}
