//! What a file that is not a tar archive looks like, told from its
//! first bytes, so that an HTML page saved as `app.tar` is named as one
//! rather than as a truncated archive.

use super::header::{BLOCK, check_sum, is_zero};
use crate::ArchiveRefusal;

/// Bytes of the file shown in the refusal.
const SHOWN: usize = 40;

/// `None` if `head` (the first bytes of the decompressed stream, up to a
/// block) may begin a tar archive: a whole header (ustar magic or a
/// checksum that holds), zeros (an empty archive), or a header cut short
/// (a truncated archive, which its reader names as one). Else the
/// refusal saying what it looks like.
pub fn not_tar(head: &[u8]) -> Option<ArchiveRefusal> {
    if head.is_empty() || head.iter().all(|&b| b == 0) {
        return None;
    }
    if head.len() > 262 && &head[257..262] == b"ustar" {
        return None;
    }
    if let Ok(block) = <&[u8; BLOCK]>::try_from(head) {
        if is_zero(block) || check_sum(block).is_ok() {
            return None;
        }
    } else if head.contains(&0) {
        // A header cut short: its name is NUL-padded, text is not.
        return None;
    }
    Some(ArchiveRefusal::NotAnArchive {
        looks: looks_like(head).to_string(),
        starts: shown(head),
    })
}

/// What kind of file `head` begins.
fn looks_like(head: &[u8]) -> &'static str {
    let t = head.trim_ascii_start();
    let lower: Vec<u8> =
        t.iter().take(16).map(u8::to_ascii_lowercase).collect();
    let text = std::str::from_utf8(head).is_ok()
        || head
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    if lower.starts_with(b"<!doctype html") || lower.starts_with(b"<html") {
        "an HTML page"
    } else if lower.starts_with(b"<?xml") {
        "an XML document"
    } else if text && matches!(t.first(), Some(b'{' | b'[')) {
        "JSON"
    } else if text {
        "text"
    } else {
        "data of an unknown kind"
    }
}

/// The first printable bytes, quoted, cut to [`SHOWN`] characters.
fn shown(head: &[u8]) -> String {
    let s = String::from_utf8_lossy(head);
    let cut: String = s.chars().take(SHOWN).collect();
    let more = if cut.len() < s.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

#[cfg(test)]
mod test {
    use super::not_tar;

    #[test]
    fn html_is_named_and_a_cut_header_is_not() {
        let html = b"<!DOCTYPE html>\n<html><head><title>404</title>";
        let r = not_tar(html).unwrap().to_string();
        assert!(r.contains("an HTML page"), "{r}");
        assert!(
            r.contains("\"<!DOCTYPE html>\\n<html><head><title>404<"),
            "{r}"
        );
        let mut cut = b"etc/passwd".to_vec();
        cut.resize(200, 0);
        assert!(not_tar(&cut).is_none());
        assert!(not_tar(&[0u8; 512]).is_none());
    }
}
