//! The update's manifest read back (`zinstall_install::manifest::parse`):
//! the bytes as a stored manifest (zstd), and the same bytes compressed
//! first, so that the JSON lines behind the decoder are fuzzed too.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zinstall_install::manifest;

fuzz_target!(|data: &[u8]| {
    let p = Path::new("fuzz.manifest");
    let _ = manifest::parse(data, p);
    if let Ok(z) = zstd::stream::encode_all(data, 1)
        && let Ok(m) = manifest::parse(&z[..], p)
    {
        // What an update makes of it.
        let _ = m.header.recipe();
        let _ = m.by_path();
        for e in &m.entries {
            let _ = e.target();
        }
    }
});
