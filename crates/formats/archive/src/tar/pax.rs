//! PAX extended header records, and the values they carry.
//!
//! A record is `"%d %s=%s\n"`: its decimal length (counting itself),
//! a space, the keyword, `=`, the value and a newline. The value is
//! arbitrary bytes, newlines and NULs included (binary xattrs such as
//! `security.capability` hold both), so records are cut by their length
//! prefix and never split at newlines. The `tar` crate's `PaxExtensions`
//! does split at newlines, and so loses every record after the first value
//! holding a 0x0a; that is why records are parsed here.

use base64::Engine as _;

/// One record, borrowed from the header's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The keyword (bytes before the first `=`).
    pub key: &'a [u8],
    /// The value (bytes after it, without the final newline).
    pub value: &'a [u8],
}

/// A PAX record that does not parse: where it starts and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRecord {
    /// The record's first byte in the header's data.
    pub at: usize,
    /// What is wrong with it.
    pub why: Flaw,
}

/// What is wrong with a PAX record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// It does not start with decimal digits (or has over 20).
    NoLength,
    /// Its length is not followed by a space.
    NoSpace,
    /// Its length does not fit a `usize`.
    LengthOverflows,
    /// Its length is too short for a record or runs past the data.
    LengthDoesNotFit {
        /// The length it gives.
        len: usize,
        /// The bytes left from its start.
        left: usize,
    },
    /// Its last byte is not a newline.
    NoNewline {
        /// The length it gives.
        len: usize,
    },
    /// It has no `=`.
    NoEquals,
    /// Its keyword is empty.
    EmptyKeyword,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pos = self.at;
        match &self.why {
            Flaw::NoLength => {
                write!(f, "record at byte {pos} does not start with a length")
            }
            Flaw::NoSpace => {
                write!(f, "record at byte {pos}: no space after its length")
            }
            Flaw::LengthOverflows => {
                write!(f, "record at byte {pos}: length overflows")
            }
            Flaw::LengthDoesNotFit { len, left } => write!(
                f,
                "record at byte {pos}: length {len} does not fit the {left} \
                 bytes left"
            ),
            Flaw::NoNewline { len } => write!(
                f,
                "record at byte {pos}: length {len} does not end at a newline"
            ),
            Flaw::NoEquals => {
                write!(f, "record at byte {pos}: no '=' in the record")
            }
            Flaw::EmptyKeyword => {
                write!(f, "record at byte {pos}: empty keyword")
            }
        }
    }
}

/// Splits a PAX extended header's data into its records, in order.
///
/// Trailing NUL bytes after the last record are accepted (some writers
/// pad the data); anything else that is not a whole record is an error.
/// Pure and allocation-bounded by the input: suitable for fuzzing.
pub fn parse_pax(data: &[u8]) -> Result<Vec<Record<'_>>, BadRecord> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 20 {
            return Err(BadRecord {
                at: pos,
                why: Flaw::NoLength,
            });
        }
        if rest.get(digits) != Some(&b' ') {
            return Err(BadRecord {
                at: pos,
                why: Flaw::NoSpace,
            });
        }
        let len = decimal_u64(&rest[..digits])
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(BadRecord {
                at: pos,
                why: Flaw::LengthOverflows,
            })?;
        // Length, space, at least a one-byte key, '=', newline.
        if len < digits + 4 || len > rest.len() {
            return Err(BadRecord {
                at: pos,
                why: Flaw::LengthDoesNotFit {
                    len,
                    left: rest.len(),
                },
            });
        }
        let rec = &rest[digits + 1..len];
        let Some((&b'\n', body)) = rec.split_last() else {
            return Err(BadRecord {
                at: pos,
                why: Flaw::NoNewline { len },
            });
        };
        let eq = body.iter().position(|&b| b == b'=').ok_or(BadRecord {
            at: pos,
            why: Flaw::NoEquals,
        })?;
        if eq == 0 {
            return Err(BadRecord {
                at: pos,
                why: Flaw::EmptyKeyword,
            });
        }
        out.push(Record {
            key: &body[..eq],
            value: &body[eq + 1..],
        });
        pos += len;
    }
    Ok(out)
}

/// A plain unsigned decimal number (no sign, no spaces).
pub fn decimal_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// A PAX time: decimal seconds with an optional sign and fraction, read
/// as the decimal number it is (POSIX, GNU tar, star, Python, Go):
/// `-1.25` is 1.25 s before the epoch, `(-2, 750_000_000)`. Digits past
/// nanoseconds are dropped.
///
/// libarchive up to 3.7 writes a negative time with a fraction as the
/// seconds then the nanoseconds (`-315619200.25` for 1960-01-01
/// 00:00:00.25), and reads its own output that way; read here, such a
/// value is 0.5 s earlier than bsdtar meant. There is nothing in the
/// record to tell the two apart, and the decimal reading is the standard.
pub fn parse_time(v: &[u8]) -> Option<(i64, u32)> {
    let (negative, v) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], Some(&v[dot + 1..])),
        None => (v, None),
    };
    let secs = i64::try_from(decimal_u64(int)?).ok()?;
    let mut nanos: u32 = 0;
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        for i in 0..9 {
            let d = frac.get(i).map_or(0, |b| u32::from(b - b'0'));
            nanos = nanos * 10 + d;
        }
    }
    if !negative {
        return Some((secs, nanos));
    }
    if nanos == 0 {
        Some((secs.checked_neg()?, 0))
    } else {
        Some((secs.checked_neg()?.checked_sub(1)?, 1_000_000_000 - nanos))
    }
}

/// A PAX time read as bsdtar reads it: the longest prefix that is a
/// time (`-`, digits, then `.` and digits), the fraction cut at
/// nanoseconds. The flag says whether that was all of the value (no
/// junk after it, at most 9 fraction digits). `None` when no prefix is
/// a time.
pub fn parse_time_prefix(v: &[u8]) -> Option<((i64, u32), bool)> {
    let sign = usize::from(v.first() == Some(&b'-'));
    let int = v[sign..].iter().take_while(|b| b.is_ascii_digit()).count();
    if int == 0 {
        return None;
    }
    let mut end = sign + int;
    let mut frac = 0;
    if v.get(end) == Some(&b'.') {
        frac = v[end + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if frac > 0 {
            end += 1 + frac;
        }
    }
    // At most 9 fraction digits go to parse_time: the rest are below a
    // nanosecond.
    let kept = if frac > 9 { end - (frac - 9) } else { end };
    let t = parse_time(&v[..kept])?;
    Some((t, end == v.len() && frac <= 9))
}

/// Decodes libarchive's URL-encoding of xattr names (`%XX` escapes).
pub fn url_decode(v: &[u8]) -> Option<Vec<u8>> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            let hi = hex(*v.get(i + 1)?)?;
            let lo = hex(*v.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Decodes a base64 value as libarchive writes it (standard alphabet,
/// padding usually left out).
pub fn base64_decode(v: &[u8]) -> Option<Vec<u8>> {
    const ENGINE: base64::engine::GeneralPurpose =
        base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(
                    base64::engine::DecodePaddingMode::Indifferent,
                ),
        );
    ENGINE.decode(v).ok()
}

#[cfg(test)]
mod test {
    /// A value may hold newlines and NULs: the length decides.
    #[test]
    fn a_record_is_as_long_as_it_says() {
        let recs =
            super::parse_pax(b"29 SCHILY.xattr.user.a=x\ny\0z\n").unwrap();
        assert_eq!(recs[0].key, b"SCHILY.xattr.user.a");
        assert_eq!(recs[0].value, b"x\ny\0z");
    }

    use super::*;

    #[test]
    fn records_are_cut_by_length_not_newline() {
        let data = b"15 path=a\nb\0c\n\n14 uname=root\n\0\0\0";
        let r = parse_pax(data).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].key, b"path");
        assert_eq!(r[0].value, b"a\nb\0c\n");
        assert_eq!(r[1].key, b"uname");
        assert_eq!(r[1].value, b"root");
    }

    #[test]
    fn lying_lengths_are_refused() {
        for bad in [
            &b"99 path=a\n"[..],
            b"5 path=a\n",
            b"10 path=a\nX",
            b"12 path=ab\n",
            b"10 path=ab\n",
            b"x path=a\n",
            b"10path=a\n\n",
            b"8 =abc\n\n",
            b"8 abcde\n",
            b"99999999999999999999999 a=b\n",
        ] {
            assert!(
                parse_pax(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn times() {
        assert_eq!(
            parse_time(b"1795401214.0206001"),
            Some((1795401214, 20600100))
        );
        assert_eq!(parse_time(b"-1.25"), Some((-2, 750_000_000)));
        assert_eq!(parse_time(b"-1"), Some((-1, 0)));
        assert_eq!(parse_time(b"-0.5"), Some((-1, 500_000_000)));
        // 1960-01-01 00:00:00.25 as GNU tar writes it.
        assert_eq!(
            parse_time(b"-315619199.75"),
            Some((-315_619_200, 250_000_000))
        );
        assert_eq!(parse_time(b"1.1234567899"), Some((1, 123_456_789)));
        for bad in
            [&b""[..], b"-", b"1.", b".5", b"1.2.3", b"+1", b"1e3", b" 1"]
        {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
        assert_eq!(parse_time(b"9223372036854775808"), None);
    }

    #[test]
    fn time_prefixes() {
        assert_eq!(parse_time_prefix(b"1.5"), Some(((1, 500_000_000), true)));
        assert_eq!(
            parse_time_prefix(b"1350244992.02396010XYZ"),
            Some(((1350244992, 23_960_100), false))
        );
        assert_eq!(
            parse_time_prefix(b"1.1234567899"),
            Some(((1, 123_456_789), false))
        );
        assert_eq!(parse_time_prefix(b"7."), Some(((7, 0), false)));
        assert_eq!(
            parse_time_prefix(b"-1.25x"),
            Some(((-2, 750_000_000), false))
        );
        for bad in [&b""[..], b"-", b"x1", b".5", b"-x"] {
            assert_eq!(parse_time_prefix(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn libarchive_encodings() {
        assert_eq!(url_decode(b"user.a%3Db%25").unwrap(), b"user.a=b%");
        assert_eq!(url_decode(b"bad%4"), None);
        assert_eq!(base64_decode(b"YQpiCg").unwrap(), b"a\nb\n");
        assert_eq!(base64_decode(b"YQpiCg==").unwrap(), b"a\nb\n");
        assert_eq!(base64_decode(b"Y!"), None);
    }
}
