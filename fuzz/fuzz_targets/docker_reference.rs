//! Image references as a user or a signature names them: a registry
//! reference (`Reference`), a docker reference as containers/image
//! compares them (`DockerRef`), and a short name.

#![no_main]

use libfuzzer_sys::fuzz_target;
use zinstall_registry::Reference;
use zinstall_registry::policy::DockerRef;
use zinstall_registry::shortnames::looks_short;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Reference::looks_like(text);
    let _ = looks_short(text);
    if let Ok(r) = Reference::parse(text) {
        let _ = (r.manifest_ref(), r.api_host(), r.is_loopback());
        let _ = Reference::parse(&r.to_string());
    }
    if let Ok(d) = DockerRef::parse(text) {
        let _ = d.is_name_only();
    }
});
