//! Tar members from untrusted bytes: the reader never panics, never
//! allocates past its limits, and what it returns keeps its promises
//! (sparse maps ordered and within the size, bodies exactly as long as
//! declared, names without NUL).

#![no_main]

use std::io::Read;

use zinstall_archive::tar::internals::{acl_from_text, parse_pax, parse_time};
use zinstall_archive::tar::{Limits, NameTable, Reader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The record parsers on their own, on the raw bytes.
    let _ = parse_pax(data);
    let _ = parse_time(data);
    let _ = acl_from_text(data, &NameTable::empty());

    let limits = Limits {
        max_pax_bytes: 64 << 10,
        max_name_bytes: 8 << 10,
        max_sparse_entries: 4096,
        max_total_bytes: 16 << 20,
    };
    let mut r = Reader::new(data, limits).with_names(NameTable::empty());
    let mut members = 0;
    loop {
        let m = match r.next() {
            Ok(Some(m)) => m,
            Ok(None) => {
                let _ = r.finish();
                return;
            }
            Err(_) => return,
        };
        members += 1;
        assert!(!m.name.is_empty() && !m.name.contains(&0));
        if let Some(map) = &m.sparse {
            let mut end = 0u64;
            for &(off, len) in map {
                assert!(off >= end && len > 0, "{map:?}");
                end = off.checked_add(len).expect("segment end overflows");
                assert!(end <= m.size, "{map:?} past {}", m.size);
            }
        }
        let mut body = Vec::new();
        match r.body().take(limits.max_total_bytes + 1).read_to_end(&mut body) {
            Ok(n) => assert_eq!(n as u64, m.stored_size),
            Err(_) => return,
        }
        assert!(members < 100_000);
    }
});
