//! OCI image layouts: an index naming a manifest the input gives, its
//! config and one layer, all with their true digests (so the fuzzer gets
//! past the hashes to the parsers and checks), opened for the host's
//! platform and every layer read. Opening and reading must end in an
//! image or an error, never a crash or an allocation the input alone
//! decides. The provision cache's record of a layer's changes (whiteouts,
//! links) is decoded from the same bytes and must round-trip.

#![no_main]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zinstall_engine::oci::{decode_changes, encode_changes};
use zinstall_oci::{Image, Platform, Select, sha256_hex};

/// Layer bytes read per input, at most.
const READ: u64 = 1 << 20;

/// One layout directory per process, rewritten for each input.
fn layout() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let d = Path::new(base)
            .join(format!("zinstall-fuzz-oci-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("blobs/sha256")).expect("layout");
        std::fs::write(
            d.join("oci-layout"),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .expect("oci-layout");
        d
    })
}

fn put(dir: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = sha256_hex(bytes);
    std::fs::write(dir.join("blobs/sha256").join(&hex), bytes).expect("blob");
    (format!("sha256:{hex}"), bytes.len())
}

fn replace(doc: &[u8], token: &str, with: &str) -> Vec<u8> {
    String::from_utf8_lossy(doc)
        .replace(token, with)
        .into_bytes()
}

fuzz_target!(|data: &[u8]| {
    if let Ok(changes) = decode_changes(data) {
        assert_eq!(decode_changes(&encode_changes(&changes)).unwrap(), changes);
    }

    // manifest \xff config \xff layer; in the manifest @C/@CS and @L/@LS
    // stand for the config's and the layer's digest and size, in the
    // config @D for the layer's digest (its diff_id if uncompressed).
    let mut parts = data.splitn(3, |&b| b == 0xff);
    let (Some(manifest), Some(config), layer) =
        (parts.next(), parts.next(), parts.next().unwrap_or_default())
    else {
        return;
    };
    let dir = layout();
    let blobs = dir.join("blobs/sha256");
    if let Ok(rd) = std::fs::read_dir(&blobs) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let (ld, ls) = put(dir, layer);
    let (cd, cs) = put(dir, &replace(config, "@D", &ld));
    let m = replace(manifest, "@CS", &cs.to_string());
    let m = replace(&m, "@LS", &ls.to_string());
    let m = replace(&m, "@C", &cd);
    let m = replace(&m, "@L", &ld);
    let (md, ms) = put(dir, &m);
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{md}","size":{ms},"annotations":{{"org.opencontainers.image.ref.name":"t"}}}}]}}"#
    );
    std::fs::write(dir.join("index.json"), index).expect("index");
    let select = Select {
        reference: None,
        platform: Platform::host(),
    };
    let Ok(image) = Image::open(dir, &select) else {
        return;
    };
    for i in 0..image.layers.len() {
        if let Ok(r) = image.layer(i) {
            let _ = std::io::copy(&mut r.take(READ), &mut std::io::sink());
        }
    }
    let _ = image.verify_layers();
});
