//! OCI layouts for the tests: written by hand (hostile ones included,
//! with correct digests wherever the test does not break one on purpose)
//! or built with umoci, as users make them.

// Shared by several test binaries, each using a part.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use zinstall_testkit::tools;

pub fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

pub fn zinstall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(args)
        .output()
        .unwrap()
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `program args`, which must succeed.
pub fn run(program: &str, args: &[&str]) -> Output {
    let o = tools::tool(program).args(args).output().unwrap();
    assert!(o.status.success(), "{program} {args:?}: {}", text(&o));
    o
}

/// The host's OCI architecture name.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// An architecture that is not the host's.
pub fn foreign_arch() -> &'static str {
    if host_arch() == "amd64" {
        "arm64"
    } else {
        "amd64"
    }
}

/// One member of a hand-made layer.
pub enum Ent<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    /// A hard link: its name, then the name it links to.
    HardLink(&'a str, &'a str),
    /// A file under a name the tar crate would refuse to write (`..`).
    RawName(&'a [u8]),
}

/// An uncompressed layer tar of `entries`, times fixed.
pub fn layer_tar(entries: &[Ent<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            Ent::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, p, &[][..]).unwrap();
            }
            Ent::File(p, data) => {
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, p, *data).unwrap();
            }
            Ent::Symlink(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, p, target).unwrap();
            }
            Ent::HardLink(p, target) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_mode(0o644);
                h.set_size(0);
                b.append_link(&mut h, p, target).unwrap();
            }
            Ent::RawName(name) => {
                h.set_mode(0o644);
                h.set_size(0);
                h.as_old_mut().name[..name.len()].copy_from_slice(name);
                h.set_cksum();
                b.append(&h, &[][..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

pub fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e =
        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Writes `bytes` as a blob of the layout `dir`; returns its digest.
pub fn put_blob(dir: &Path, bytes: &[u8]) -> String {
    let hex = sha256(bytes);
    let p = dir.join("blobs/sha256").join(&hex);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, bytes).unwrap();
    format!("sha256:{hex}")
}

pub fn blob_path(dir: &Path, digest: &str) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// A layout at `dir` whose one image (ref `t`) has `layers` (tars,
/// gzipped here) for linux/`arch`; `tweak` may change the config,
/// manifest and index (called with their names) before each is written.
pub fn write_layout(
    dir: &Path,
    layers: &[Vec<u8>],
    arch: &str,
    tweak: &dyn Fn(&str, &mut Value),
) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .unwrap();
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in layers {
        let gz = gzip(l);
        diff_ids.push(format!("sha256:{}", sha256(l)));
        descs.push(json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": put_blob(dir, &gz),
            "size": gz.len(),
        }));
    }
    let mut config = json!({
        "architecture": arch,
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    tweak("config", &mut config);
    let config = serde_json::to_vec(&config).unwrap();
    let mut manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": put_blob(dir, &config),
            "size": config.len(),
        },
        "layers": descs,
    });
    tweak("manifest", &mut manifest);
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let mut index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": put_blob(dir, &manifest),
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": "t"},
        }],
    });
    tweak("index", &mut index);
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap())
        .unwrap();
}

/// The manifest of the layout's first index entry: its path and JSON.
pub fn manifest_of(dir: &Path) -> (PathBuf, Value) {
    let index: Value =
        serde_json::from_slice(&fs::read(dir.join("index.json")).unwrap())
            .unwrap();
    let d = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let p = blob_path(dir, &d);
    (
        p.clone(),
        serde_json::from_slice(&fs::read(p).unwrap()).unwrap(),
    )
}

/// Appends a hand-made layer (`tar`, gzipped) to the image of the layout
/// `dir` (one image, as umoci makes it): blob, config diff_ids, manifest
/// and index updated with their digests.
pub fn append_layer(dir: &Path, tar: &[u8]) {
    let gz = gzip(tar);
    let layer = put_blob(dir, &gz);
    let (_, mut manifest) = manifest_of(dir);
    let cfg_path =
        blob_path(dir, manifest["config"]["digest"].as_str().unwrap());
    let mut config: Value =
        serde_json::from_slice(&fs::read(cfg_path).unwrap()).unwrap();
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .unwrap()
        .push(json!(format!("sha256:{}", sha256(tar))));
    if let Some(h) = config["history"].as_array_mut() {
        h.push(json!({"created_by": "zinstall test", "comment": "by hand"}));
    }
    let config = serde_json::to_vec(&config).unwrap();
    manifest["config"]["digest"] = json!(put_blob(dir, &config));
    manifest["config"]["size"] = json!(config.len());
    manifest["layers"].as_array_mut().unwrap().push(json!({
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
        "digest": layer,
        "size": gz.len(),
    }));
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let mut index: Value =
        serde_json::from_slice(&fs::read(dir.join("index.json")).unwrap())
            .unwrap();
    index["manifests"][0]["digest"] = json!(put_blob(dir, &manifest));
    index["manifests"][0]["size"] = json!(manifest.len());
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap())
        .unwrap();
}

/// Every member name of every layer of the layout's image, per layer.
pub fn layer_members(dir: &Path) -> Vec<Vec<String>> {
    let (_, manifest) = manifest_of(dir);
    manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let p = blob_path(dir, l["digest"].as_str().unwrap());
            let f = fs::File::open(p).unwrap();
            let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
            a.entries()
                .unwrap()
                .map(|e| {
                    e.unwrap().path().unwrap().to_string_lossy().into_owned()
                })
                .collect()
        })
        .collect()
}

/// A profile with nothing but images: no host trees.
pub fn bare_profile(dir: &Path) -> PathBuf {
    let p = dir.join("profile.toml");
    fs::write(
        &p,
        format!(
            "source_root = \"/\"\ntrees = []\nlog = \"{}\"\n",
            dir.join("install.log").display()
        ),
    )
    .unwrap();
    p
}

/// A layout at `dir` whose one image (ref `t`) has one zstd layer: the
/// tar `write_tar` writes, streamed through the `zstd` program (so a
/// layer of gigabytes never sits in memory).
pub fn write_zstd_layout(dir: &Path, write_tar: &dyn Fn(&mut dyn Write)) {
    use std::process::Stdio;
    fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .unwrap();
    let tmp = dir.join("layer.zst");
    let mut z = tools::tool("zstd")
        .args(["-q", "-1", "-o"])
        .arg(&tmp)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    struct Hashing<W>(W, Sha256);
    impl<W: Write> Write for Hashing<W> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = self.0.write(b)?;
            self.1.update(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }
    let mut w = Hashing(z.stdin.take().unwrap(), Sha256::new());
    write_tar(&mut w);
    let diff_id: String =
        w.1.finalize().iter().map(|x| format!("{x:02x}")).collect();
    drop(w.0);
    assert!(z.wait().unwrap().success());
    let layer = fs::read(&tmp).unwrap();
    fs::remove_file(&tmp).unwrap();
    let config = serde_json::to_vec(&json!({
        "architecture": host_arch(),
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": put_blob(dir, &config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
            "digest": put_blob(dir, &layer),
            "size": layer.len(),
        }],
    }))
    .unwrap();
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": put_blob(dir, &manifest),
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": "t"},
        }],
    });
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap())
        .unwrap();
}

/// An OCI image of one layer: a chain of `depth` directories `d/d/...`
/// with a file every 100 levels.
pub fn deep_image(dir: &Path, depth: usize) -> PathBuf {
    let mut b = tar::Builder::new(Vec::new());
    let mut path = String::new();
    for i in 0..depth {
        path.push_str("d/");
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_mtime(1_700_000_000);
        h.set_size(0);
        b.append_data(&mut h, &path, &[][..]).unwrap();
        if i % 100 == 0 {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_mtime(1_700_000_000);
            h.set_size(3);
            b.append_data(&mut h, format!("{path}f"), &b"abc"[..])
                .unwrap();
        }
    }
    let lay = dir.join(format!("deep-{depth}"));
    write_layout(&lay, &[b.into_inner().unwrap()], host_arch(), &|_, _| {});
    lay
}
