//! A trust policy (containers-policy.json(5)) as `Policy::parse` reads
//! it, and the key data it may carry inline: parsed or refused, never a
//! crash or an allocation the input alone decides. Key files a policy
//! names are never read here (as root, /dev/zero never ends): the
//! reader's own tests cover those.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zinstall_registry::policy::Policy;
use zinstall_registry::policy::gpg::Keyring;
use zinstall_registry::policy::sigstore::Key;

fuzz_target!(|data: &[u8]| {
    let _ = Policy::parse(Path::new("policy.json"), data);
    // The same bytes as inline key data of each kind.
    let _ = Keyring::parse(&[("keyData".to_string(), data.to_vec())]);
    let _ = Key::parse("keyData", data);
});
