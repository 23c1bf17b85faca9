//! A containers-registries.d(5) file: parsed (strict YAML, unknown fields
//! refused), then asked where an image's signatures are.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zinstall_registry::policy::DockerRef;
use zinstall_registry::policy::registries_d::{RegistriesD, signature_url};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(d) = RegistriesD::parse(Path::new("fuzz.yaml"), text) else {
        return;
    };
    for image in [
        "reg.example.com/ns/app:1",
        "docker.io/library/debian@sha256:ab",
    ] {
        let Ok(r) = DockerRef::parse(image) else {
            continue;
        };
        let base = d.lookaside(&r);
        let _ = d.use_sigstore_attachments(&r);
        let _ = signature_url(&base, &r, "sha256:ab", 1);
    }
});
