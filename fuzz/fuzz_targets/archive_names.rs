//! Archive member names: what `check` accepts stays beneath the root.
//!

#![no_main]

use std::ffi::CString;

use libfuzzer_sys::fuzz_target;

use zinstall_archive::names;

fuzz_target!(|raw: &[u8]| {
    let _ = names::show(raw);
    let Ok(name) = names::check(raw) else {
        return;
    };
    assert_ne!(raw.first(), Some(&b'/'), "absolute name accepted");
    for p in &name.parts {
        let b = p.as_bytes();
        assert!(!b.is_empty() && b != b"." && b != b"..", "{raw:?}");
        assert!(!b.contains(&b'/') && !b.contains(&0), "{raw:?}");
    }
    let joined = names::Name::joined(&name.parts);
    let kept: Vec<&[u8]> = raw
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    assert_eq!(joined.as_bytes(), kept.join(&b'/').as_slice());
    assert_eq!(name.leaf().map(CString::as_bytes), kept.last().copied());
    assert_eq!(name.parent().len(), kept.len().saturating_sub(1));
});
