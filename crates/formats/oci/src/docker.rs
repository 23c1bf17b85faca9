//! A docker-archive: the tar `docker save` writes (and `skopeo copy ...
//! docker-archive:`). `manifest.json` lists its images, each a config
//! member, its tags (`RepoTags`) and its layer members in order; a layer
//! is a tar, plain or compressed. Read in place, as an oci-archive is:
//! the config's `rootfs.diff_ids` are the layers' digests, so each
//! layer is checked against its diff_id as it is unpacked.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use oci_spec::image::ImageConfiguration;
use serde::Deserialize;
use zinstall_archive::compress::{Compression, MAGIC_LEN, compression_of};

use crate::digest::{Digest, Hasher, sha256_hex};
use crate::error::{Error, Result};
use crate::image::{Image, Layer, MAX_JSON, Select, checked_config};
use crate::store::{Store, member_name};

/// One image of `manifest.json`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// Whether `store` is a docker-archive: a tar holding `manifest.json`.
pub(crate) fn is_docker(store: &Store) -> bool {
    matches!(store, Store::Archive { members, .. }
        if members.contains_key("manifest.json"))
}

/// The image of the docker-archive `path` that `select` names (by one of
/// its `RepoTags`, or `@N`, its place in `manifest.json`), or its only
/// one.
pub(crate) fn open(
    path: &Path,
    mut store: Store,
    select: &Select,
) -> Result<Image> {
    let bytes = store.read_file(path, "manifest.json", MAX_JSON)?;
    let entries: Vec<Entry> = serde_json::from_slice(&bytes)
        .map_err(|e| bad(path, "manifest.json", e.to_string()))?;
    let entry = choose(&entries, select.reference.as_deref())
        .map_err(|why| bad(path, "manifest.json", why.to_string()))?;
    let config_name = member(&entry.config).ok_or_else(|| {
        bad(path, "manifest.json", format!("Config {:?}", entry.config))
    })?;
    let config_bytes = store.read_file(path, &config_name, MAX_JSON)?;
    let config: ImageConfiguration = serde_json::from_slice(&config_bytes)
        .map_err(|e| bad(path, &config_name, e.to_string()))?;
    let what = format!("config {config_name}");
    let platform = checked_config(path, &what, &config, select)?;
    let diff_ids = config.rootfs().diff_ids();
    if diff_ids.len() != entry.layers.len() {
        return Err(bad(
            path,
            &what,
            format!(
                "{} diff_ids for manifest.json's {} layers",
                diff_ids.len(),
                entry.layers.len()
            ),
        ));
    }
    let Store::Archive {
        file,
        members,
        unhashed,
    } = &mut store
    else {
        unreachable!("a docker-archive is a tar");
    };
    let mut layers = Vec::with_capacity(diff_ids.len());
    let mut layer_members = Vec::with_capacity(diff_ids.len());
    for (name, diff) in entry.layers.iter().zip(diff_ids) {
        let found = LayerMember {
            image: path,
            config: &what,
            name,
            diff,
        }
        .locate(file, members, unhashed)?;
        layer_members.push(found.member);
        layers.push(found.layer);
    }
    let (manifest_digest, manifest_sha256) =
        manifest_address(path, &config_bytes, &layers)?;
    Ok(Image {
        path: path.to_path_buf(),
        location: path.to_path_buf(),
        store,
        manifest_digest,
        manifest_sha256,
        platform,
        layers,
        docker_archive: true,
        layer_members,
    })
}

/// A refusal of the docker-archive `image` about `what` (a member).
fn bad(image: &Path, what: &str, why: String) -> Error {
    Error::Layout {
        image: image.to_path_buf(),
        what: what.to_string(),
        why,
    }
}

/// One layer as `manifest.json` and the config name it.
struct LayerMember<'a> {
    image: &'a Path,
    /// The config, as errors name it.
    config: &'a str,
    /// The member name `manifest.json` gives.
    name: &'a str,
    /// Its diff_id from the config.
    diff: &'a str,
}

/// A layer found in the archive, and the member that holds it.
struct Located {
    member: String,
    layer: Layer,
}

impl LayerMember<'_> {
    /// Finds the member, tells its compression from its first bytes and
    /// files it in `members` under its blob's digest.
    fn locate(
        &self,
        file: &Arc<File>,
        members: &mut HashMap<String, (u64, u64)>,
        unhashed: &mut HashSet<String>,
    ) -> Result<Located> {
        let path = self.image;
        let layer =
            |why: String| bad(path, &format!("layer {}", self.name), why);
        let m = member(self.name)
            .ok_or_else(|| layer("not a member name".into()))?;
        let &(off, len) = members
            .get(&m)
            .ok_or_else(|| layer("not in the archive".into()))?;
        let diff_id = Digest::parse(self.diff)
            .map_err(|why| bad(path, self.config, format!("diff_id: {why}")))?;
        let mut head = [0u8; MAGIC_LEN];
        let n = zinstall_archive::compress::read_up_to(
            &mut Store::range(file, off, len),
            &mut head,
        )
        .map_err(|e| io(path, &m, e))?;
        let (compression, media_type) = match compression_of(&head[..n]) {
            Compression::None => (Compression::None, LAYER),
            Compression::Gzip => (Compression::Gzip, LAYER_GZIP),
            Compression::Zstd => (Compression::Zstd, LAYER_ZSTD),
            c => {
                return Err(layer(format!(
                    "compressed with {}; a layer is tar, tar+gzip or \
                     tar+zstd",
                    c.name()
                )));
            }
        };
        // A plain layer's digest is its diff_id, checked as it is
        // unpacked; a compressed one's is summed now, so that its blob is
        // checked as an OCI layer's is.
        let digest = if compression == Compression::None {
            unhashed.insert(blob_key(&diff_id));
            diff_id.clone()
        } else {
            let mut h = Hasher::new(diff_id.algorithm());
            let mut r = Store::range(file, off, len);
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let k = r.read(&mut buf).map_err(|e| io(path, &m, e))?;
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
            }
            h.finish()
        };
        members.insert(blob_key(&digest), (off, len));
        Ok(Located {
            member: m,
            layer: Layer {
                digest,
                size: len,
                media_type: media_type.to_string(),
                compression,
                diff_id,
            },
        })
    }
}

/// The digest of the manifest skopeo would write for the image, and its
/// hex: the image's content address, as a layout's manifest digest is.
fn manifest_address(
    path: &Path,
    config_bytes: &[u8],
    layers: &[Layer],
) -> Result<(Digest, String)> {
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", sha256_hex(config_bytes)),
            "size": config_bytes.len(),
        },
        "layers": layers.iter().map(|l| serde_json::json!({
            "mediaType": l.media_type,
            "digest": l.digest.to_string(),
            "size": l.size,
        })).collect::<Vec<_>>(),
    });
    let manifest_sha256 = sha256_hex(manifest.to_string().as_bytes());
    let manifest_digest =
        Digest::parse(&format!("sha256:{manifest_sha256}"))
            .map_err(|why| bad(path, "manifest.json", why.to_string()))?;
    Ok((manifest_digest, manifest_sha256))
}

const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";

fn io(image: &Path, member: &str, e: std::io::Error) -> Error {
    Error::Io {
        image: image.to_path_buf(),
        path: member.into(),
        op: "read",
        error: e,
    }
}

/// Where the store finds the blob `d`.
fn blob_key(d: &Digest) -> String {
    d.blob_path().to_string_lossy().into_owned()
}

/// A member name from `manifest.json`, as the store keys it.
fn member(name: &str) -> Option<String> {
    member_name(name.as_bytes())
}

/// Why no entry of `manifest.json` is the one wanted.
#[derive(Debug)]
enum NoChoice {
    /// The archive holds no image.
    Empty,
    /// None named and several there; their tags.
    Many { count: usize, tags: String },
    /// `@N` names no image (or N is not a number).
    NoIndex { n: String, count: usize },
    /// No image has this tag; the tags there are.
    NoTag { reference: String, tags: String },
}

impl std::fmt::Display for NoChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoChoice::Empty => f.write_str("no images"),
            NoChoice::Many { count, tags } => write!(
                f,
                "{count} images (tags: {tags}); name one as \
                 docker-archive:FILE:TAG or docker-archive:FILE:@N (N from 0)"
            ),
            NoChoice::NoIndex { n, count } => {
                write!(f, "no image @{n} (it holds {count})")
            }
            NoChoice::NoTag { reference, tags } => {
                write!(f, "no image tagged {reference:?} (tags: {tags})")
            }
        }
    }
}

/// The entry `reference` names, else the only one; a refusal naming the
/// tags to choose from.
fn choose<'a>(
    entries: &'a [Entry],
    reference: Option<&str>,
) -> std::result::Result<&'a Entry, NoChoice> {
    let tags: Vec<&str> = entries
        .iter()
        .flat_map(|e| e.repo_tags.iter().flatten().map(String::as_str))
        .collect();
    let listed = if tags.is_empty() {
        "none".to_string()
    } else {
        tags.join(", ")
    };
    let Some(r) = reference else {
        return match entries {
            [] => Err(NoChoice::Empty),
            [one] => Ok(one),
            many => Err(NoChoice::Many {
                count: many.len(),
                tags: listed,
            }),
        };
    };
    if let Some(n) = r.strip_prefix('@') {
        return n
            .parse::<usize>()
            .ok()
            .and_then(|n| entries.get(n))
            .ok_or_else(|| NoChoice::NoIndex {
                n: n.to_string(),
                count: entries.len(),
            });
    }
    let want = normal(r);
    entries
        .iter()
        .find(|e| e.repo_tags.iter().flatten().any(|t| normal(t) == want))
        .ok_or_else(|| NoChoice::NoTag {
            reference: r.to_string(),
            tags: listed,
        })
}

/// A docker reference as docker compares them: `docker.io/library/`
/// before a bare name, `docker.io/` before a name without a registry,
/// `:latest` where no tag is given.
fn normal(r: &str) -> String {
    let (first, _) = r.split_once('/').unwrap_or(("", r));
    let named = if !r.contains('/') {
        format!("docker.io/library/{r}")
    } else if first.contains('.') || first.contains(':') || first == "localhost"
    {
        r.to_string()
    } else {
        format!("docker.io/{r}")
    };
    let last = named.rsplit('/').next().unwrap_or("");
    if last.contains(':') || last.contains('@') {
        named
    } else {
        format!("{named}:latest")
    }
}

#[cfg(test)]
mod test {
    use super::normal;

    #[test]
    fn references_compare_as_docker_compares_them() {
        assert_eq!(normal("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normal("foo/bar:v1"), "docker.io/foo/bar:v1");
        assert_eq!(normal("docker.io/foo/bar:v1"), "docker.io/foo/bar:v1");
        assert_eq!(normal("localhost:5000/x"), "localhost:5000/x:latest");
    }
}
