//! `/etc/default/zinstall` files: parse, then read the tunables; every
//! error names the file.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zinstall_engine::{DefaultsFile, Tunables};

fuzz_target!(|data: &[u8]| {
    let path = Path::new("/etc/default/zinstall");
    let file = match DefaultsFile::parse(path, data) {
        Ok(f) => f,
        Err(e) => {
            assert!(e.to_string().starts_with("/etc/default/zinstall:"), "{e}");
            return;
        }
    };
    match Tunables::from_defaults(&file) {
        Ok(t) => t.validate().expect("tunables read from a file are valid"),
        Err(e) => {
            assert!(e.to_string().starts_with("/etc/default/zinstall:"), "{e}")
        }
    }
});
