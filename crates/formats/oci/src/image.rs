//! One image of a layout: the manifest chosen from its index, its config
//! and its layers, every JSON blob checked before it is parsed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oci_spec::image::{
    Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType,
    OciLayout,
};
use serde::de::DeserializeOwned;
use zinstall_archive::compress::Compression;

use crate::digest::{Digest, sha256_hex};
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::store::{BlobKind, BlobReader, Fetch, Store};

/// The most an index, manifest or config may be: they are small JSON
/// documents (a manifest of 100 layers is about 20 KiB); anything larger
/// is refused before it is read.
pub const MAX_JSON: u64 = 4 << 20;

/// Indexes nested in indexes followed at most.
const MAX_DEPTH: usize = 4;

/// The annotation that names an image in a layout's index (`DIR:REF`).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

const DOCKER_MANIFEST: &str =
    "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str =
    "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const DOCKER_LAYER_GZIP: &str =
    "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Which image of a layout to take.
#[derive(Clone, Debug)]
pub struct Select {
    /// The index entry whose `org.opencontainers.image.ref.name` is this;
    /// `None`: the only one, or the one for `platform`.
    pub reference: Option<String>,
    /// The platform the image must be for (the host's, unless the user
    /// names another).
    pub platform: Platform,
}

impl Default for Select {
    fn default() -> Self {
        Select {
            reference: None,
            platform: Platform::host(),
        }
    }
}

/// One layer of an image.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The compressed blob's digest.
    pub digest: Digest,
    /// Its size, from the manifest (checked against the blob).
    pub size: u64,
    /// Its media type.
    pub media_type: String,
    /// How the tar stream is compressed.
    pub compression: Compression,
    /// The uncompressed stream's digest, from the config.
    pub diff_id: Digest,
}

/// An image: a layout (or oci-archive) and the manifest chosen in it.
#[derive(Debug)]
pub struct Image {
    /// The layout directory or archive, as given; a pulled image's
    /// reference.
    pub path: PathBuf,
    /// Where its files are: the layout directory or archive; for a
    /// pulled image, the directory its blobs are fetched into.
    pub location: PathBuf,
    pub(crate) store: Store,
    /// The manifest's digest, as the index gives it.
    pub manifest_digest: Digest,
    /// SHA-256 of the manifest's bytes: the image's content address.
    pub manifest_sha256: String,
    /// The config's os/architecture/variant.
    pub platform: Platform,
    /// The layers, lowest first.
    pub layers: Vec<Layer>,
    /// Read from a docker-archive's `manifest.json` (the manifest is
    /// the OCI one its config and layers make).
    pub docker_archive: bool,
    /// A docker-archive's layer members, named in messages.
    pub(crate) layer_members: Vec<String>,
}

impl Image {
    /// The image of the layout directory or oci-archive `store` (at
    /// `path`) that `select` chooses ([`Image::open`]).
    pub(crate) fn open_layout(
        path: &Path,
        store: Store,
        select: &Select,
    ) -> Result<Image> {
        let ctx = Ctx {
            image: path,
            store: &store,
        };
        let layout: OciLayout = ctx.parse(
            "oci-layout",
            &store.read_file(path, "oci-layout", MAX_JSON)?,
        )?;
        if !layout.image_layout_version().starts_with("1.") {
            return Err(ctx.bad(
                "oci-layout",
                format!(
                    "imageLayoutVersion {:?}; zinstall reads 1.x",
                    layout.image_layout_version()
                ),
            ));
        }
        let index: ImageIndex = ctx.parse(
            "index.json",
            &store.read_file(path, "index.json", MAX_JSON)?,
        )?;
        let mut candidates: Vec<Descriptor> = index.manifests().clone();
        if let Some(r) = &select.reference {
            let all = ref_names(&candidates);
            candidates.retain(|d| ref_name(d) == Some(r.as_str()));
            if candidates.is_empty() {
                return Err(ctx.bad(
                    "index.json",
                    format!("no image named {r:?} (it names {})", list(&all)),
                ));
            }
        }
        Image::chosen(path, path, store, candidates, select)
    }

    /// The image whose index or manifest is `top`, in the layout
    /// directory `dir`, which need not hold any of its blobs yet: each one
    /// read is first asked of `fetch` when absent (a registry pull), then
    /// checked as from any layout. `name` (the image's reference) names it
    /// in messages and in [`Image::path`].
    pub fn open_fetching(
        name: &Path,
        dir: &Path,
        top: Descriptor,
        select: &Select,
        fetch: Arc<dyn Fetch>,
    ) -> Result<Image> {
        let store = Store::fetching(dir, fetch);
        Image::chosen(name, dir, store, vec![top], select)
    }

    /// The image among `candidates` that `select` picks, indexes followed.
    fn chosen(
        path: &Path,
        location: &Path,
        store: Store,
        candidates: Vec<Descriptor>,
        select: &Select,
    ) -> Result<Image> {
        let ctx = Ctx {
            image: path,
            store: &store,
        };
        let manifest_desc = ctx.manifest_among(candidates, select)?;
        let manifest_digest = ctx.digest(&manifest_desc)?;
        let (manifest, manifest_bytes): (ImageManifest, _) =
            ctx.blob_json(&manifest_desc, "manifest", BlobKind::Manifest)?;
        if let Some(mt) = manifest.media_type()
            && mt != manifest_desc.media_type()
        {
            return Err(ctx.bad(
                &format!("manifest {manifest_digest}"),
                format!(
                    "says it is {mt}, its descriptor {}",
                    manifest_desc.media_type()
                ),
            ));
        }
        let cd = manifest.config();
        let cmt = cd.media_type().to_string();
        if cd.media_type() != &MediaType::ImageConfig && cmt != DOCKER_CONFIG {
            return Err(ctx.bad(
                &format!("config {}", cd.digest()),
                format!("media type {cmt} is not an image config"),
            ));
        }
        let (config, _): (ImageConfiguration, _) =
            ctx.blob_json(cd, "config", BlobKind::Config)?;
        let config_name = format!("config {}", cd.digest());
        let platform = checked_config(path, &config_name, &config, select)?;
        let diff_ids = config.rootfs().diff_ids();
        if diff_ids.len() != manifest.layers().len() {
            return Err(ctx.bad(
                &config_name,
                format!(
                    "{} diff_ids for the manifest's {} layers",
                    diff_ids.len(),
                    manifest.layers().len()
                ),
            ));
        }
        let layers = ctx.layers(&manifest, diff_ids, &config_name)?;
        let manifest_sha256 = sha256_hex(&manifest_bytes);
        Ok(Image {
            path: path.to_path_buf(),
            location: location.to_path_buf(),
            store,
            manifest_digest,
            manifest_sha256,
            platform,
            layers,
            docker_archive: false,
            layer_members: Vec::new(),
        })
    }

    /// The compressed bytes of layer `i`, exactly its size (checked when
    /// opened), hashed as they are read: call [`BlobReader::finish`]
    /// after reading.
    pub fn layer(&self, i: usize) -> Result<BlobReader> {
        let l = &self.layers[i];
        self.store
            .blob(&self.path, &l.digest, l.size, BlobKind::Layer)
    }

    /// Where layer `i` is, for messages: `IMAGE/blobs/ALG/HEX` (inside
    /// the archive, for an oci-archive), or a docker-archive's member.
    pub fn layer_path(&self, i: usize) -> PathBuf {
        if let Some(m) = self.layer_members.get(i) {
            return self.path.join(m);
        }
        self.path.join(self.layers[i].digest.blob_path())
    }

    /// How layer `i` is named in messages: its digest, or a
    /// docker-archive's member and place.
    pub fn layer_name(&self, i: usize) -> String {
        match self.layer_members.get(i) {
            Some(m) => {
                format!("{m} (layer {} of {})", i + 1, self.layers.len())
            }
            None => self.layers[i].digest.to_string(),
        }
    }

    /// Every layer's compressed bytes checked against its digest, without
    /// unpacking anything.
    pub fn verify_layers(&self) -> Result<()> {
        for (i, l) in self.layers.iter().enumerate() {
            let mut blob = self.layer(i)?;
            if self.store.unhashed(&l.digest) {
                // Its digest is its diff_id: summed on the stream.
                crate::DiffReader::new(blob, &self.path, &l.digest, &l.diff_id)
                    .named(self.layer_name(i))
                    .finish()?;
            } else {
                blob.finish()?;
            }
        }
        Ok(())
    }
}

/// The platform of `config` (the config `name` of `image`), which must
/// be the one `select` asks for and describe a rootfs of layers.
pub(crate) fn checked_config(
    image: &Path,
    name: &str,
    config: &ImageConfiguration,
    select: &Select,
) -> Result<Platform> {
    let platform = Platform {
        os: config.os().to_string(),
        architecture: config.architecture().to_string(),
        variant: config.variant().clone(),
    };
    if !select.platform.matches(
        &platform.os,
        &platform.architecture,
        platform.variant.as_deref(),
    ) {
        return Err(Error::Platform {
            image: image.to_path_buf(),
            wanted: select.platform.to_string(),
            found: platform.to_string(),
        });
    }
    if config.rootfs().typ() != "layers" {
        return Err(Error::Layout {
            image: image.to_path_buf(),
            what: name.to_string(),
            why: format!(
                "rootfs.type {:?}, not \"layers\"",
                config.rootfs().typ()
            ),
        });
    }
    Ok(platform)
}

struct Ctx<'a> {
    image: &'a Path,
    store: &'a Store,
}

impl Ctx<'_> {
    /// The image manifest among `candidates` that `select` picks,
    /// indexes (an OCI index, a docker manifest list) followed.
    fn manifest_among(
        &self,
        mut candidates: Vec<Descriptor>,
        select: &Select,
    ) -> Result<Descriptor> {
        let mut depth = 0;
        loop {
            let d = self.choose(&candidates, select)?;
            let mt = d.media_type().to_string();
            if d.media_type() == &MediaType::ImageIndex || mt == DOCKER_LIST {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(self.bad(
                        "index.json",
                        format!("indexes nested more than {MAX_DEPTH} deep"),
                    ));
                }
                let (inner, _): (ImageIndex, _) =
                    self.blob_json(&d, "index", BlobKind::Index)?;
                candidates = inner.manifests().clone();
                continue;
            }
            if d.media_type() != &MediaType::ImageManifest
                && mt != DOCKER_MANIFEST
            {
                return Err(self.bad(
                    &format!("descriptor {}", d.digest()),
                    format!("media type {mt} is not an image manifest"),
                ));
            }
            return Ok(d);
        }
    }

    /// The layers `manifest` lists, each with its diff_id from the config
    /// (named `config_name` in messages).
    fn layers(
        &self,
        manifest: &ImageManifest,
        diff_ids: &[String],
        config_name: &str,
    ) -> Result<Vec<Layer>> {
        let mut layers = Vec::with_capacity(diff_ids.len());
        for (d, diff) in manifest.layers().iter().zip(diff_ids) {
            let digest = self.digest(d)?;
            let media_type = d.media_type().to_string();
            let compression = match d.media_type() {
                MediaType::ImageLayer => Compression::None,
                MediaType::ImageLayerGzip => Compression::Gzip,
                MediaType::ImageLayerZstd => Compression::Zstd,
                MediaType::Other(s) if s == DOCKER_LAYER_GZIP => {
                    Compression::Gzip
                }
                _ => {
                    return Err(Error::MediaType {
                        image: self.image.to_path_buf(),
                        digest: digest.to_string(),
                        media_type,
                    });
                }
            };
            let diff_id = Digest::parse(diff).map_err(|why| {
                self.bad(config_name, format!("diff_id: {why}"))
            })?;
            layers.push(Layer {
                digest,
                size: d.size(),
                media_type,
                compression,
                diff_id,
            });
        }
        Ok(layers)
    }

    fn bad(&self, what: &str, why: String) -> Error {
        Error::Layout {
            image: self.image.to_path_buf(),
            what: what.to_string(),
            why,
        }
    }

    fn parse<T: DeserializeOwned>(
        &self,
        what: &str,
        bytes: &[u8],
    ) -> Result<T> {
        serde_json::from_slice(bytes).map_err(|e| self.bad(what, e.to_string()))
    }

    fn digest(&self, d: &Descriptor) -> Result<Digest> {
        Digest::parse(d.digest().as_ref()).map_err(|why| {
            self.bad(&format!("descriptor {}", d.digest()), why.to_string())
        })
    }

    /// A JSON blob: its size bounded before reading, its digest checked
    /// before parsing.
    fn blob_json<T: DeserializeOwned>(
        &self,
        d: &Descriptor,
        what: &str,
        kind: BlobKind,
    ) -> Result<(T, Vec<u8>)> {
        let digest = self.digest(d)?;
        if d.size() > MAX_JSON {
            return Err(Error::TooLarge {
                image: self.image.to_path_buf(),
                what: format!("{what} {digest}"),
                size: d.size(),
                limit: MAX_JSON,
            });
        }
        let bytes = self
            .store
            .blob(self.image, &digest, d.size(), kind)?
            .read_checked()?;
        let v = self.parse(&format!("{what} {digest}"), &bytes)?;
        Ok((v, bytes))
    }

    /// The one descriptor of `c` to take: the only one, else the one for
    /// the platform.
    fn choose(&self, c: &[Descriptor], select: &Select) -> Result<Descriptor> {
        match c {
            [] => return Err(self.bad("index.json", "no manifests".into())),
            [one] => return Ok(one.clone()),
            _ => {}
        }
        let fits: Vec<&Descriptor> = c
            .iter()
            .filter(|d| {
                d.platform().as_ref().is_some_and(|p| {
                    select.platform.matches(
                        &p.os().to_string(),
                        &p.architecture().to_string(),
                        p.variant().as_deref(),
                    )
                })
            })
            .collect();
        match fits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(self.bad(
                "index.json",
                format!(
                    "{} images, none for {} (platforms: {}; refs: {}); name \
                     one as IMAGE:REF or with --platform",
                    c.len(),
                    select.platform,
                    list(&platforms(c)),
                    list(&ref_names(c))
                ),
            )),
            many => Err(self.bad(
                "index.json",
                format!(
                    "{} images for {} (refs: {}); name one as IMAGE:REF",
                    many.len(),
                    select.platform,
                    list(&ref_names(c))
                ),
            )),
        }
    }
}

fn ref_name(d: &Descriptor) -> Option<&str> {
    d.annotations()
        .as_ref()
        .and_then(|a| a.get(REF_NAME))
        .map(String::as_str)
}

fn ref_names(c: &[Descriptor]) -> Vec<String> {
    c.iter()
        .filter_map(|d| ref_name(d).map(str::to_string))
        .collect()
}

fn platforms(c: &[Descriptor]) -> Vec<String> {
    c.iter()
        .filter_map(|d| {
            d.platform()
                .as_ref()
                .map(|p| format!("{}/{}", p.os(), p.architecture()))
        })
        .collect()
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
