//! docker save archives: a tar holding `manifest.json`, a config and one
//! layer the input gives, with their true names (so the fuzzer gets past
//! the lookups to the parsers and checks), opened as an image for the
//! host's platform and every layer read and checked against its diff_id.
//! Opening and reading must end in an image or an error, never a crash or
//! an allocation the input alone decides.

#![no_main]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zinstall_oci::{Image, Platform, Select, sha256_hex};

/// Layer bytes read per input, at most.
const READ: u64 = 1 << 20;

/// One archive path per process, rewritten for each input.
fn archive() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        Path::new(base).join(format!(
            "zinstall-fuzz-docker-{}.tar",
            std::process::id()
        ))
    })
}

/// One ustar member: header, body, padding.
fn member(out: &mut Vec<u8>, name: &str, body: &[u8]) {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name.as_bytes()[..name.len().min(100)]);
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{:011o}", body.len()).as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(body);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fuzz_target!(|data: &[u8]| {
    // manifest.json \xff config \xff layer; in manifest.json @C and @L
    // stand for the config's and the layer's member names, in the config
    // @D for the layer's diff_id.
    let mut parts = data.splitn(3, |&b| b == 0xff);
    let (Some(manifest), Some(config), layer) =
        (parts.next(), parts.next(), parts.next().unwrap_or_default())
    else {
        return;
    };
    let layer_hex = sha256_hex(layer);
    let config = String::from_utf8_lossy(config)
        .replace("@D", &format!("sha256:{layer_hex}"));
    let config_name = format!("{}.json", sha256_hex(config.as_bytes()));
    let layer_name = format!("{layer_hex}/layer.tar");
    let manifest = String::from_utf8_lossy(manifest)
        .replace("@C", &config_name)
        .replace("@L", &layer_name);
    let mut tar = Vec::new();
    member(&mut tar, "manifest.json", manifest.as_bytes());
    member(&mut tar, &config_name, config.as_bytes());
    member(&mut tar, &layer_name, layer);
    tar.resize(tar.len() + 1024, 0);
    let path = archive();
    std::fs::write(path, &tar).expect("archive");
    let select = Select {
        reference: None,
        platform: Platform::host(),
    };
    let Ok(image) = Image::open(path, &select) else {
        return;
    };
    for i in 0..image.layers.len() {
        if let Ok(r) = image.layer(i) {
            let _ = std::io::copy(&mut r.take(READ), &mut std::io::sink());
        }
    }
    let _ = image.verify_layers();
});
