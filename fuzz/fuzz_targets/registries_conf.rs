//! A registries.conf(5) as short names are resolved by it: parsed, then
//! asked for a few short names.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zinstall_registry::shortnames::ShortNames;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(names) = ShortNames::parse(Path::new("registries.conf"), text)
    else {
        return;
    };
    for short in ["debian:12", "app", "ns/app@sha256:ab", "a:b"] {
        let _ = names.resolve(short);
    }
});
