//! OCI images pulled from a registry (`REGISTRY/REPO@sha256:...` or
//! `REGISTRY/REPO:TAG`) into a local image layout, the *store*, from
//! which they are read as any OCI layout is ([`zinstall_oci::Image`]).
//!
//! ```text
//! STORE/                      0700
//!   oci-layout, index.json    an OCI image layout: skopeo, umoci and
//!                             zinstall itself read it; index.json names
//!                             each image pulled, by digest (and by tag)
//!   blobs/sha256/HEX          blobs, whole and checked
//!   partial/sha256-HEX        a download in progress or broken: flock
//!                             held by the one process fetching it
//!   trust/ALGO-HEX.json       what the trust policy accepted, on which
//!                             signatures
//!   use.lock                  flock: shared while an image is open,
//!                             exclusive while gc collects ([`store`])
//! ```
//!
//! **Nothing unchecked becomes a blob.** A tag is resolved by fetching
//! its manifest (at most [`zinstall_oci::MAX_JSON`] bytes, refused past
//! that without reading on) and hashing it; the resolved digest is
//! reported ([`Event::Resolved`]). Every blob is downloaded into
//! `partial/`, hashed as it arrives, and renamed into `blobs/` only when
//! its size and digest are the descriptor's: a registry that serves other
//! bytes is refused naming the digest, and what it sent is thrown away.
//! The image is then opened and checked like any layout (platform, media
//! types, digests again as blobs are read).
//!
//! **Who made it is judged first.** With a trust policy
//! ([`PullOptions::trust`], containers-policy.json(5): [`policy`]), the
//! manifest's digest and its signatures are judged before the manifest is
//! kept or any other blob fetched; a refusal leaves nothing in the store.
//! What was accepted, by which policy and on which signatures, is
//! recorded (`trust/ALGO-HEX.json`), and an image already in the store is
//! judged again by the current policy each time it is opened.
//!
//! **Only what is read is fetched.** The image's blobs are fetched when
//! the image reads them ([`zinstall_oci::Fetch`]): index, manifest and
//! config at once, each layer when it is unpacked. A provision whose
//! cache already holds a layer (by diff_id) never downloads it.
//!
//! **Broken downloads resume.** A connection that breaks, times out or
//! stalls (less than [`Stall::min_bytes`] in a [`Stall::window`]) is
//! retried, from the byte received last (`Range`), with backoff, up to
//! [`Registry::retries`] times; if it still fails, what was received
//! stays in `partial/` and the next pull resumes from it. What is kept is
//! only ever resumed from the registry and repository that sent it (the
//! partial's `.from` file says which); and a blob whose bytes turn out
//! wrong after a resume is fetched once more whole before it is refused,
//! so bytes another registry left there never fail an honest pull, and a
//! refusal names the URL that served every byte of it. Failures that no
//! retry mends (TLS, a name that does not resolve, an address family the
//! system refuses, a 4xx status) are not retried: their [`Failure`] kind
//! says so.
//!
//! **Nothing waits forever.** Every request and every read is waited for
//! in short ticks by the pulling thread ([`PullOptions::cancel`] is
//! looked at between them), so a cancel ends a pull at once, leaving
//! only what a later pull may resume. A blob whose descriptor declares
//! more than [`PullOptions::max_blob_size`] is refused before a byte of
//! it is fetched, and a registry sending more than the descriptor says
//! is cut off, the partial removed.
//!
//! **One download per blob on a host.** The process fetching a blob
//! holds an exclusive `flock` on its partial file; another process (or
//! thread) wanting the same blob waits on it, then finds the blob in
//! `blobs/`. Eight provisions of one image started together download
//! each of its blobs once.
//!
//! **Transport.** HTTPS, verified against the system's certificate store;
//! plain HTTP only for a registry on the loopback (as docker does) or one
//! named insecure ([`Registry::insecure`]). Credentials come from the
//! files podman, skopeo and docker keep them in ([`auth`]).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
mod error;
mod http;
pub mod policy;
mod reference;
pub mod shortnames;
mod signatures;
pub mod store;
mod transfer;

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use copier::fsutil::Flock;
use oci_spec::image::{Descriptor, ImageIndex, MediaType};
use zinstall_oci::{BlobKind, Digest, Fetch, Hasher, Image, MAX_JSON, Select};

pub use error::{Failure, RegistryError, Result};
pub use reference::Reference;
pub use transfer::Stall;

use http::{MANIFEST_TYPES, Remote, read_bounded, status_error};
use transfer::Watch;

/// Retries of a failed request, after the first attempt.
pub const DEFAULT_RETRIES: u32 = 4;

/// The first wait before a retry; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Blobs are readable by their owner only: an image from a registry that
/// wanted credentials is no one else's to read, and cache entries made
/// from a pulled image take these permissions.
pub const BLOB_MODE: u32 = 0o600;

/// Bytes read from the network at a time.
const CHUNK: usize = 1 << 20;

/// What a pull is doing, for progress and logs.
#[derive(Clone, Debug)]
pub enum Event {
    /// A short name (`debian:12`) was resolved to a full reference.
    ShortName {
        /// The name as given.
        name: String,
        /// The reference it stands for.
        reference: String,
        /// What said so.
        how: String,
    },
    /// A tag was resolved to the manifest (or index) digest it names.
    Resolved {
        /// The reference as given.
        reference: String,
        /// The digest it resolved to.
        digest: String,
    },
    /// A blob's download started (`from` > 0: resumed).
    Fetching {
        /// The blob.
        digest: String,
        /// Its size.
        size: u64,
        /// The offset it starts from.
        from: u64,
    },
    /// A request failed and is tried again.
    Retrying {
        /// The URL.
        url: String,
        /// The attempt about to be made (2 for the first retry).
        attempt: u32,
        /// What failed.
        why: String,
    },
    /// Bytes kept from an earlier download were thrown away: they came
    /// from elsewhere, or the blob was wrong with them.
    Discarded {
        /// The blob.
        digest: String,
        /// How many bytes.
        bytes: u64,
        /// Why.
        why: String,
    },
    /// No trust policy applies: only digests are checked (there is no
    /// policy file, and none was named).
    Unverified {
        /// The image.
        reference: String,
    },
    /// The trust policy accepted the image's manifest, before any of its
    /// layers was fetched.
    Trusted {
        /// The image.
        reference: String,
        /// Its manifest digest.
        digest: String,
        /// The policy file.
        policy: String,
        /// The scope that applied.
        scope: String,
        /// Its requirements, described.
        requirements: Vec<String>,
    },
    /// A blob is in the store, checked.
    Fetched {
        /// The blob.
        digest: String,
        /// Bytes downloaded by this process.
        bytes: u64,
        /// How long it took.
        took: Duration,
    },
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::ShortName {
                name,
                reference,
                how,
            } => write!(f, "short name {name} is {reference} (by {how})"),
            Event::Resolved { reference, digest } => {
                write!(f, "resolved {reference} to {digest}")
            }
            Event::Fetching { digest, size, from } if *from > 0 => write!(
                f,
                "fetching {digest}: resuming at {} of {}",
                Size(*from),
                Size(*size)
            ),
            Event::Fetching { digest, size, .. } => {
                write!(f, "fetching {digest} ({})", Size(*size))
            }
            Event::Retrying { url, attempt, why } => {
                write!(f, "retrying {url} (attempt {attempt}): {why}")
            }
            Event::Discarded { digest, bytes, why } => {
                write!(f, "discarded {} kept for {digest}: {why}", Size(*bytes))
            }
            Event::Unverified { reference } => write!(
                f,
                "{reference}: no trust policy: only digests are checked, \
                 not who signed the image"
            ),
            Event::Trusted {
                reference,
                digest,
                policy,
                scope,
                requirements,
            } => write!(
                f,
                "{reference}: {digest} accepted by {policy} scope {scope:?} ({})",
                requirements.join(", ")
            ),
            Event::Fetched {
                digest,
                bytes,
                took,
            } => write!(
                f,
                "fetched {digest}: {} in {:.1} s",
                Size(*bytes),
                took.as_secs_f64()
            ),
        }
    }
}

/// Bytes for people: `512 B`, `3.4 MiB`.
struct Size(u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut v = self.0 as f64;
        for unit in ["B", "KiB", "MiB", "GiB"] {
            if v < 1024.0 || unit == "GiB" {
                return if unit == "B" {
                    write!(f, "{} B", self.0)
                } else {
                    write!(f, "{v:.1} {unit}")
                };
            }
            v /= 1024.0;
        }
        Ok(())
    }
}

/// Hears of a pull's [`Event`]s.
pub type Events = Arc<dyn Fn(&Event) + Send + Sync>;

/// How pulls are made, as callers (install, provision, the daemon) pass
/// it on.
#[derive(Clone, Default)]
pub struct PullOptions {
    /// Registries (`HOST[:PORT]`) spoken to over plain HTTP besides those
    /// on the loopback.
    pub insecure: Vec<String>,
    /// Hears of each step (tag resolved, blob fetched, retry).
    pub events: Option<Events>,
    /// Raised to stop the pull: every wait on the network gives up
    /// within a tenth of a second.
    pub cancel: Option<copier::Cancel>,
    /// The most bytes a blob's descriptor may declare (the caller's
    /// `--max-archive-size`); a larger blob is refused before it is
    /// fetched. `None`: no bound but the descriptor's own.
    pub max_blob_size: Option<u64>,
    /// Hears how far each blob's download is: its size first
    /// ([`copier::Progress::begin`]), then the bytes as they arrive.
    pub progress: Option<Arc<dyn copier::Progress>>,
    /// The trust policy each image's manifest must satisfy before any
    /// layer is fetched; `None`: digests are checked, signatures are not
    /// (an [`Event::Unverified`] says so).
    pub trust: Option<Arc<policy::Trust>>,
}

impl std::fmt::Debug for PullOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullOptions")
            .field("insecure", &self.insecure)
            .field("events", &self.events.is_some())
            .field("cancel", &self.cancel.is_some())
            .field("max_blob_size", &self.max_blob_size)
            .field("progress", &self.progress.is_some())
            .field("trust", &self.trust.as_ref().map(|t| &t.policy.path))
            .finish()
    }
}

/// Pulls images into one store.
#[derive(Clone)]
pub struct Registry {
    store: PathBuf,
    insecure: Vec<String>,
    auth_files: Vec<PathBuf>,
    helpers: auth::HelperPath,
    retries: u32,
    events: Option<Events>,
    watch: Watch,
    max_blob_size: Option<u64>,
    progress: Option<Arc<dyn copier::Progress>>,
    trust: Option<Arc<policy::Trust>>,
}

impl Registry {
    /// Pulls into the image layout `store` (made, 0700, when first
    /// used).
    pub fn new(store: &Path) -> Registry {
        Registry {
            store: store.to_path_buf(),
            insecure: Vec::new(),
            auth_files: auth::auth_files(),
            helpers: auth::HelperPath::default(),
            retries: DEFAULT_RETRIES,
            events: None,
            watch: Watch::default(),
            max_blob_size: None,
            progress: None,
            trust: None,
        }
    }

    /// Takes `opts`' insecure registries, events, cancel flag, bound and
    /// progress.
    pub fn with(mut self, opts: &PullOptions) -> Registry {
        self.insecure = opts.insecure.clone();
        self.events = opts.events.clone();
        self.watch.cancel = opts.cancel.clone();
        self.max_blob_size = opts.max_blob_size;
        self.progress = opts.progress.clone();
        self.trust = opts.trust.clone();
        self
    }

    /// The trust policy images must satisfy.
    pub fn trust(mut self, trust: Option<Arc<policy::Trust>>) -> Registry {
        self.trust = trust;
        self
    }

    /// The least a transfer must bring in each window before it is
    /// taken for stalled (default: [`Stall::default`]).
    pub fn stall(mut self, stall: Stall) -> Registry {
        self.watch.stall = stall;
        self
    }

    /// Registries (`HOST[:PORT]`) spoken to over plain HTTP.
    pub fn insecure(mut self, hosts: Vec<String>) -> Registry {
        self.insecure = hosts;
        self
    }

    /// Where credentials are looked for (default: [`auth::auth_files`]).
    pub fn auth_files(mut self, files: Vec<PathBuf>) -> Registry {
        self.auth_files = files;
        self
    }

    /// Where credential helpers are looked for (default: `PATH`).
    pub fn helpers(mut self, path: auth::HelperPath) -> Registry {
        self.helpers = path;
        self
    }

    /// Retries of a failed request before giving up.
    pub fn retries(mut self, n: u32) -> Registry {
        self.retries = n;
        self
    }

    /// Hears of each step.
    pub fn events(mut self, e: Events) -> Registry {
        self.events = Some(e);
        self
    }

    /// The store.
    pub fn store(&self) -> &Path {
        &self.store
    }

    /// The image `reference` names, chosen for `select`'s platform: its
    /// manifest resolved (a tag: fetched and hashed; a digest already in
    /// the store: found there, with no request), the image opened from
    /// the store with its missing blobs fetched as they are read.
    /// [`Image::path`] is the reference, by digest.
    pub fn open(
        &self,
        reference: &Reference,
        select: &Select,
    ) -> Result<Image> {
        if let Some((name, how)) = &reference.short_name {
            self.emit(Event::ShortName {
                name: name.clone(),
                reference: reference.to_string(),
                how: how.clone(),
            });
        }
        self.prepare_store()?;
        let fetcher = self.fetcher(reference)?;
        if self.trust.is_none() {
            self.emit(Event::Unverified {
                reference: reference.to_string(),
            });
        }
        let top = self.resolve(&fetcher, reference)?;
        let digest = Digest::parse(top.digest().as_ref()).map_err(|why| {
            RegistryError::BadReference {
                text: reference.to_string(),
                why,
            }
        })?;
        let name = match &reference.tag {
            Some(t) if reference.digest.is_none() => format!(
                "{}/{}:{t}@{digest}",
                reference.registry, reference.repository
            ),
            _ => reference.with_digest(&digest).to_string(),
        };
        let image = Image::open_fetching(
            Path::new(&name),
            &self.store,
            top,
            select,
            fetcher,
        )?;
        Ok(image)
    }

    /// Whether the trust policy accepts the image `reference` names,
    /// and the rule that decided: its manifest is fetched (never
    /// stored) and its signatures looked at; nothing is written.
    /// `Ok(None)`: no trust policy is set.
    pub fn verify(
        &self,
        reference: &Reference,
    ) -> Result<Option<(Digest, policy::Verdict)>> {
        let Some(trust) = &self.trust else {
            return Ok(None);
        };
        let fetcher = self.fetcher_with(reference, None)?;
        let (_, _, digest) = self.fetch_manifest(&fetcher, reference)?;
        let image = identity_of(reference);
        let mut sigs = signatures::Fetched::new(
            Arc::clone(&fetcher.remote),
            image.clone(),
            digest.to_string(),
            &trust.registries_d,
            None,
        );
        let verdict =
            trust
                .policy
                .evaluate(&image, &digest.to_string(), &mut sigs)?;
        Ok(Some((digest, verdict)))
    }

    /// Judges manifest `digest` of `r` by the trust policy, before
    /// anything of the image is kept: a refusal is an error naming the
    /// rule; an acceptance is recorded with the signatures it rests on.
    /// A digest already in the store is judged on the signatures
    /// recorded with it, fetched only if the current policy asks for a
    /// kind not recorded.
    fn check_trust(
        &self,
        f: &Fetcher,
        r: &Reference,
        digest: &Digest,
        cached: bool,
    ) -> Result<()> {
        let Some(trust) = &self.trust else {
            return Ok(());
        };
        let image = identity_of(r);
        let stored = if cached {
            signatures::read_record(&self.store, &digest.to_string())
        } else {
            None
        };
        let mut sigs = signatures::Fetched::new(
            Arc::clone(&f.remote),
            image.clone(),
            digest.to_string(),
            &trust.registries_d,
            stored,
        );
        let verdict = trust
            .policy
            .evaluate(&image, &digest.to_string(), &mut sigs)?
            .into_result(&r.to_string())?;
        sigs.record(
            &self.store,
            &r.to_string(),
            &trust.policy.digest,
            &verdict,
        )?;
        self.emit(Event::Trusted {
            reference: r.to_string(),
            digest: digest.to_string(),
            policy: verdict.policy.display().to_string(),
            scope: verdict.scope.clone(),
            requirements: verdict.requirements.clone(),
        });
        Ok(())
    }

    fn fetcher(&self, reference: &Reference) -> Result<Arc<Fetcher>> {
        let in_use = store::InUse::take(&self.store)?;
        self.fetcher_with(reference, Some(in_use))
    }

    fn fetcher_with(
        &self,
        reference: &Reference,
        in_use: Option<store::InUse>,
    ) -> Result<Arc<Fetcher>> {
        let credentials =
            auth::find(&reference.registry, &self.auth_files, &self.helpers)?;
        let insecure = self.insecure.iter().any(|h| h == &reference.registry);
        let remote = Arc::new(Remote::new(
            reference,
            insecure,
            credentials,
            self.watch.clone(),
        ));
        Ok(Arc::new(Fetcher {
            remote,
            store: self.store.clone(),
            retries: self.retries,
            events: self.events.clone(),
            max_blob_size: self.max_blob_size,
            progress: self.progress.clone(),
            _in_use: in_use,
        }))
    }

    fn emit(&self, e: Event) {
        if let Some(f) = &self.events {
            f(&e);
        }
    }

    fn prepare_store(&self) -> Result<()> {
        for d in [
            self.store.clone(),
            self.store.join("blobs"),
            self.store.join("partial"),
        ] {
            match DirBuilder::new().recursive(true).mode(0o700).create(&d) {
                Ok(()) => {}
                Err(e) => return Err(RegistryError::io("mkdir", &d, e)),
            }
        }
        let layout = self.store.join("oci-layout");
        if fs::symlink_metadata(&layout).is_err() {
            write_atomic(
                &self.store,
                "oci-layout",
                br#"{"imageLayoutVersion":"1.0.0"}"#,
                0o644,
            )?;
        }
        Ok(())
    }

    /// The descriptor of the index or manifest `r` names, its blob in the
    /// store.
    fn resolve(&self, f: &Fetcher, r: &Reference) -> Result<Descriptor> {
        if let Some(d) = &r.digest
            && let Some(found) = self.recorded(d)?
            && fs::symlink_metadata(self.store.join(d.blob_path())).is_ok()
        {
            self.check_trust(f, r, d, true)?;
            return Ok(found);
        }
        let (bytes, media_type, digest) = self.fetch_manifest(f, r)?;
        let mismatch = |why: String| RegistryError::Mismatch {
            reference: r.to_string(),
            what: "manifest",
            digest: digest.to_string(),
            why,
        };
        if r.digest.is_none() {
            self.emit(Event::Resolved {
                reference: r.to_string(),
                digest: digest.to_string(),
            });
        }
        // Who made it is judged before anything of it is kept.
        self.check_trust(f, r, &digest, false)?;
        f.store_bytes(&digest, &bytes)?;
        let desc = Descriptor::new(
            MediaType::from(media_type.as_str()),
            bytes.len() as u64,
            oci_spec::image::Digest::try_from(digest.to_string().as_str())
                .map_err(|e| mismatch(e.to_string()))?,
        );
        let mut names = vec![r.with_digest(&digest).to_string()];
        if r.digest.is_none() {
            names.push(r.to_string());
        }
        self.record(&desc, &names)?;
        Ok(desc)
    }

    /// The manifest (or index) `r` names: its bytes, checked against the
    /// digest asked for and the one the registry declares, its media
    /// type and its digest.
    fn fetch_manifest(
        &self,
        f: &Fetcher,
        r: &Reference,
    ) -> Result<(Vec<u8>, String, Digest)> {
        let url = f.remote.manifest_url(&r.manifest_ref());
        let (bytes, media_type, header_digest) = f.retrying(&url, || {
            let resp =
                f.remote.get_watched(&url, Some(MANIFEST_TYPES), None)?;
            if !resp.status().is_success() {
                return Err(status_error(&url, resp, &f.remote.watch));
            }
            let media_type = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
            let header_digest = resp
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = read_bounded(
                resp,
                &url,
                "manifest",
                MAX_JSON,
                &f.remote.watch,
            )?;
            Ok((bytes, media_type, header_digest))
        })?;
        let algorithm = r
            .digest
            .as_ref()
            .map_or(zinstall_oci::Algorithm::Sha256, |d| d.algorithm());
        let mut h = Hasher::new(algorithm);
        h.update(&bytes);
        let digest = h.finish();
        let mismatch = |why: String| RegistryError::Mismatch {
            reference: r.to_string(),
            what: "manifest",
            digest: digest.to_string(),
            why,
        };
        if let Some(want) = &r.digest
            && want != &digest
        {
            return Err(RegistryError::Mismatch {
                reference: r.to_string(),
                what: "manifest",
                digest: want.to_string(),
                why: format!("the registry served {digest}"),
            });
        }
        if let Some(hd) = header_digest
            && let Ok(hd) = Digest::parse(&hd)
            && hd.algorithm() == digest.algorithm()
            && hd != digest
        {
            return Err(mismatch(format!(
                "the registry says it is {hd}, its bytes are {digest}"
            )));
        }
        let media_type = media_type
            .filter(|m| is_manifest_type(m))
            .or_else(|| json_media_type(&bytes).filter(|m| is_manifest_type(m)))
            .ok_or_else(|| {
                mismatch("not an image manifest or index".to_string())
            })?;
        Ok((bytes, media_type, digest))
    }

    /// The descriptor recorded in the store's index for `digest`.
    fn recorded(&self, digest: &Digest) -> Result<Option<Descriptor>> {
        let index = self.read_index()?;
        Ok(index
            .manifests()
            .iter()
            .find(|d| d.digest().as_ref() == digest.to_string())
            .cloned())
    }

    fn read_index(&self) -> Result<ImageIndex> {
        store::read_index(&self.store)
    }

    /// Names `desc` in the store's index under each of `names`
    /// (replacing what those names pointed at), under the store's lock.
    fn record(&self, desc: &Descriptor, names: &[String]) -> Result<()> {
        let lock_path = self.store.join("index.json.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&lock_path)
            .map_err(|e| RegistryError::io("open", &lock_path, e))?;
        lock.flock_exclusive()
            .map_err(|e| RegistryError::io("lock", &lock_path, e))?;
        let r = (|| {
            let mut index = self.read_index()?;
            let mut manifests: Vec<Descriptor> = index
                .manifests()
                .iter()
                .filter(|d| {
                    !d.annotations()
                        .as_ref()
                        .and_then(|a| a.get(zinstall_oci::REF_NAME))
                        .is_some_and(|n| names.contains(n))
                })
                .cloned()
                .collect();
            for n in names {
                let mut d = desc.clone();
                d.set_annotations(Some(
                    [(zinstall_oci::REF_NAME.to_string(), n.clone())].into(),
                ));
                manifests.push(d);
            }
            index.set_manifests(manifests);
            let bytes = serde_json::to_vec_pretty(&index).map_err(|e| {
                RegistryError::io(
                    "write",
                    self.store.join("index.json"),
                    io::Error::other(e),
                )
            })?;
            write_atomic(&self.store, "index.json", &bytes, 0o644)
        })();
        let _unlocked = lock.flock_unlock();
        r
    }
}

/// The identity the trust policy judges `r` by: tagged, or by digest
/// when a digest was given (it decides what is pulled).
fn identity_of(r: &Reference) -> policy::DockerRef {
    policy::DockerRef {
        name: format!("{}/{}", r.registry, r.repository),
        tag: if r.digest.is_some() {
            None
        } else {
            r.tag.clone()
        },
        digest: r.digest.as_ref().map(ToString::to_string),
    }
}

fn is_manifest_type(m: &str) -> bool {
    MANIFEST_TYPES.split(',').any(|t| t.trim() == m)
}

fn json_media_type(bytes: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    Some(v.get("mediaType")?.as_str()?.to_string())
}

/// Writes `dir/name` whole or not at all: a temporary file, synced, then
/// renamed over it.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let dst = dir.join(name);
    let r = (|| {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| RegistryError::io("open", &tmp, e))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| RegistryError::io("write", &tmp, e))?;
        fs::rename(&tmp, &dst).map_err(|e| RegistryError::io("rename", &dst, e))
    })();
    if r.is_err() {
        let _already_failing = fs::remove_file(&tmp);
    }
    r
}

/// Fetches the blobs an image reads into the store.
struct Fetcher {
    remote: Arc<Remote>,
    store: PathBuf,
    retries: u32,
    events: Option<Events>,
    max_blob_size: Option<u64>,
    progress: Option<Arc<dyn copier::Progress>>,
    /// Keeps gc out of the store while the image is open (`None` when
    /// only a manifest is looked at, nothing stored).
    _in_use: Option<store::InUse>,
}

impl Fetcher {
    fn emit(&self, e: Event) {
        if let Some(f) = &self.events {
            f(&e);
        }
    }

    /// `attempt` until it succeeds or fails for good: transient failures
    /// (connection, 5xx, 429) are retried with backoff.
    fn retrying<T>(
        &self,
        url: &str,
        mut attempt: impl FnMut() -> Result<T>,
    ) -> Result<T> {
        let mut wait = FIRST_BACKOFF;
        let mut n = 1;
        loop {
            match attempt() {
                Err(e) if e.is_transient() && n <= self.retries => {
                    n += 1;
                    self.emit(Event::Retrying {
                        url: url.to_string(),
                        attempt: n,
                        why: e.to_string(),
                    });
                    self.pause(url, wait)?;
                    wait *= 2;
                }
                r => return r,
            }
        }
    }

    /// Waits `wait` before a retry, unless the pull is cancelled.
    fn pause(&self, url: &str, wait: Duration) -> Result<()> {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self
                .remote
                .watch
                .cancel
                .as_ref()
                .is_some_and(copier::Cancel::is_cancelled)
            {
                return Err(RegistryError::Cancelled {
                    op: "GET",
                    url: url.to_string(),
                });
            }
            std::thread::sleep(Duration::from_millis(50).min(wait));
        }
        Ok(())
    }

    /// Puts bytes already checked (a manifest just hashed) into the
    /// store.
    fn store_bytes(&self, digest: &Digest, bytes: &[u8]) -> Result<()> {
        let Some(dst) = self.missing(digest)? else {
            return Ok(());
        };
        let dir = dst.parent().expect("blobs/ALG/HEX");
        write_atomic(dir, digest.hex(), bytes, BLOB_MODE)
    }

    /// Where blob `digest` goes, its directory made, if the store lacks
    /// it; `None` if it is there.
    fn missing(&self, digest: &Digest) -> Result<Option<PathBuf>> {
        let dst = self.store.join(digest.blob_path());
        if fs::symlink_metadata(&dst).is_ok() {
            return Ok(None);
        }
        let dir = dst.parent().expect("blobs/ALG/HEX");
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| RegistryError::io("mkdir", dir, e))?;
        Ok(Some(dst))
    }

    /// Downloads blob `digest` into the store, resuming what an earlier
    /// attempt left, or waits for the process already doing so. A blob
    /// declaring more than the pull's bound is refused first, with
    /// nothing written.
    fn download(
        &self,
        kind: BlobKind,
        digest: &Digest,
        size: u64,
    ) -> Result<()> {
        if let Some(limit) = self.max_blob_size
            && size > limit
        {
            return Err(RegistryError::BlobTooLarge {
                reference: self.remote.reference.to_string(),
                digest: digest.to_string(),
                size,
                limit,
            });
        }
        let Some(dst) = self.missing(digest)? else {
            return Ok(());
        };
        let partial = self.store.join("partial").join(format!(
            "{}-{}",
            digest.algorithm().name(),
            digest.hex()
        ));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(BLOB_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&partial)
            .map_err(|e| RegistryError::io("open", &partial, e))?;
        file.flock_exclusive()
            .map_err(|e| RegistryError::io("lock", &partial, e))?;
        let r = self.download_locked(kind, digest, size, &file, &partial, &dst);
        let _unlocked = file.flock_unlock();
        r
    }

    fn download_locked(
        &self,
        kind: BlobKind,
        digest: &Digest,
        size: u64,
        file: &File,
        partial: &Path,
        dst: &Path,
    ) -> Result<()> {
        let from_file = from_path(partial);
        // Another process finished it while this one waited.
        if fs::symlink_metadata(dst).is_ok() {
            let _gone = fs::remove_file(partial);
            let _gone = fs::remove_file(&from_file);
            return Ok(());
        }
        let io_err = |op, e| RegistryError::io(op, partial, e);
        let mut have = file.metadata().map_err(|e| io_err("stat", e))?.len();
        // What is kept is resumed only from where it came from: bytes
        // another registry (or repository) sent are no prefix of this one's.
        let origin = self.remote.origin();
        let left_by = fs::read(&from_file)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string());
        if have > size || (have > 0 && left_by.as_deref() != Some(&origin)) {
            self.emit(Event::Discarded {
                digest: digest.to_string(),
                bytes: have,
                why: match &left_by {
                    _ if have > size => {
                        format!("more than the {size} bytes the blob has")
                    }
                    Some(o) => format!("left by a pull from {o}"),
                    None => "left by a pull from an unknown registry".into(),
                },
            });
            file.set_len(0).map_err(|e| io_err("truncate", e))?;
            have = 0;
        }
        write_atomic(
            from_file.parent().unwrap_or(Path::new(".")),
            &from_file.file_name().unwrap_or_default().to_string_lossy(),
            origin.as_bytes(),
            BLOB_MODE,
        )?;
        let resumed = have;
        let (url, accept) = match kind {
            BlobKind::Index | BlobKind::Manifest => (
                self.remote.manifest_url(&digest.to_string()),
                Some(MANIFEST_TYPES),
            ),
            BlobKind::Config | BlobKind::Layer => {
                (self.remote.blob_url(&digest.to_string()), None)
            }
        };
        self.emit(Event::Fetching {
            digest: digest.to_string(),
            size,
            from: have,
        });
        let started = Instant::now();
        let mut found =
            self.transfer(&url, accept, digest, size, file, partial, have)?;
        if &found != digest && resumed > 0 {
            // The kept bytes may be the wrong ones: the whole blob once
            // more from this registry decides.
            self.emit(Event::Discarded {
                digest: digest.to_string(),
                bytes: size,
                why: format!(
                    "with the {resumed} bytes resumed from {}, the blob's \
                     bytes are {found}; fetching it whole",
                    partial.display()
                ),
            });
            file.set_len(0).map_err(|e| io_err("truncate", e))?;
            found =
                self.transfer(&url, accept, digest, size, file, partial, 0)?;
        }
        if &found != digest {
            return Err(self.reject(
                partial,
                file,
                digest,
                format!("{url} served {size} bytes that are {found}"),
            ));
        }
        file.sync_all().map_err(|e| io_err("sync", e))?;
        fs::rename(partial, dst)
            .map_err(|e| RegistryError::io("rename", dst, e))?;
        let _gone = fs::remove_file(&from_file);
        self.emit(Event::Fetched {
            digest: digest.to_string(),
            bytes: size - resumed,
            took: started.elapsed(),
        });
        Ok(())
    }

    /// Brings `partial` (holding `have` bytes) to the blob's `size` from
    /// `url`, retrying broken, timed-out and stalled transfers from where
    /// they stopped; returns the digest of all its bytes.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        url: &str,
        accept: Option<&'static str>,
        digest: &Digest,
        size: u64,
        file: &File,
        partial: &Path,
        mut have: u64,
    ) -> Result<Digest> {
        let io_err = |op, e| RegistryError::io(op, partial, e);
        // How far the blob is, from what was kept.
        let begin = |have: u64| {
            if let Some(p) = &self.progress {
                p.begin(Some(size));
                p.read(have);
            }
        };
        begin(have);
        // What earlier attempts left is hashed first: the digest covers
        // every byte of the blob.
        let mut hasher = hash_kept(digest, file, partial, have)?;
        let mut attempts = 0u32;
        let mut wait = FIRST_BACKOFF;
        let mut last = String::new();
        while have < size {
            if attempts > self.retries {
                return Err(RegistryError::Interrupted {
                    reference: self.remote.reference.to_string(),
                    digest: digest.to_string(),
                    got: have,
                    size,
                    attempts,
                    last,
                });
            }
            if attempts > 0 {
                self.emit(Event::Retrying {
                    url: url.to_string(),
                    attempt: attempts + 1,
                    why: last.clone(),
                });
                self.pause(url, wait)?;
                wait *= 2;
            }
            attempts += 1;
            last.clear();
            let from = (have > 0).then_some(have);
            let resp = match self.remote.get_watched(url, accept, from) {
                Ok(r) => r,
                Err(e) if e.is_transient() => {
                    last = e.to_string();
                    continue;
                }
                Err(e) => return Err(e),
            };
            let status = resp.status().as_u16();
            match status {
                206 if from.is_some() => {
                    let starts = range_start(&resp);
                    if starts != Some(have) {
                        return Err(RegistryError::Mismatch {
                            reference: self.remote.reference.to_string(),
                            what: "blob",
                            digest: digest.to_string(),
                            why: format!(
                                "asked {url} for bytes from {have}, it sent \
                                 {starts:?}"
                            ),
                        });
                    }
                }
                200 => {
                    // The whole blob again: start over.
                    if have > 0 {
                        file.set_len(0).map_err(|e| io_err("truncate", e))?;
                        have = 0;
                        hasher = Hasher::new(digest.algorithm());
                        begin(0);
                    }
                }
                _ => {
                    let e = status_error(url, resp, &self.remote.watch);
                    if e.is_transient() {
                        last = e.to_string();
                        continue;
                    }
                    return Err(e);
                }
            }
            let blob = Blob {
                url,
                digest,
                size,
                file,
                partial,
            };
            if let Some(why) =
                self.receive(&blob, resp, &mut have, &mut hasher)?
            {
                last = why;
            }
            if have < size && last.is_empty() {
                last = format!("read {url}: the body ended early");
            }
        }
        Ok(hasher.finish())
    }

    /// Writes the body of `resp` to `blob.file` from `*have` on, hashing
    /// it; returns why it stopped short if a transient failure cut it
    /// (the caller retries from where it stopped).
    fn receive(
        &self,
        blob: &Blob<'_>,
        resp: ureq::http::Response<ureq::Body>,
        have: &mut u64,
        hasher: &mut Hasher,
    ) -> Result<Option<String>> {
        let Blob {
            url,
            digest,
            size,
            file,
            partial,
        } = *blob;
        // A registry announcing more than the blob has is cut off before
        // its first byte is written.
        if let Some(n) = resp.body().content_length()
            && n > size - *have
        {
            return Err(self.reject(
                partial,
                file,
                digest,
                format!(
                    "{url} announces {n} bytes where {} remain of its {size}",
                    size - *have
                ),
            ));
        }
        let mut body = self
            .remote
            .watch
            .body(url, resp.into_body().into_reader().take(size - *have + 1))?;
        loop {
            let chunk = match body.next() {
                Ok(c) if c.is_empty() => return Ok(None),
                Ok(c) => c,
                Err(e) if e.is_transient() => return Ok(Some(e.to_string())),
                Err(e) => return Err(e),
            };
            if *have + chunk.len() as u64 > size {
                return Err(self.reject(
                    partial,
                    file,
                    digest,
                    format!("{url} sent more than its {size} bytes"),
                ));
            }
            file.write_all_at(&chunk, *have)
                .map_err(|e| RegistryError::io("write", partial, e))?;
            hasher.update(&chunk);
            *have += chunk.len() as u64;
            if let Some(p) = &self.progress {
                p.read(chunk.len() as u64);
            }
        }
    }

    /// A blob that is not what it must be: what was received is thrown
    /// away (it can never become right), and the error names it.
    fn reject(
        &self,
        partial: &Path,
        file: &File,
        digest: &Digest,
        why: String,
    ) -> RegistryError {
        let _already_failing = file.set_len(0);
        let _already_failing = fs::remove_file(partial);
        let _already_failing = fs::remove_file(from_path(partial));
        RegistryError::Mismatch {
            reference: self.remote.reference.to_string(),
            what: "blob",
            digest: digest.to_string(),
            why,
        }
    }
}

/// Where a partial download's origin is written: `PARTIAL.from`.
fn from_path(partial: &Path) -> PathBuf {
    let mut name = partial.file_name().unwrap_or_default().to_os_string();
    name.push(".from");
    partial.with_file_name(name)
}

impl Fetch for Fetcher {
    fn fetch(
        &self,
        kind: BlobKind,
        digest: &Digest,
        size: u64,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.download(kind, digest, size).map_err(Into::into)
    }
}

/// `arg` as a registry reference, if it is meant as one (see
/// [`Reference::looks_like`]) and is not a path that exists.
///
/// A text whose first component names a host (`HOST.DOMAIN/...`,
/// `HOST:PORT/...`, `localhost/...`) but is no valid reference is an
/// error saying why, and that no such file exists either. A short name
/// with a tag or digest (`debian:12`) is resolved by the system's
/// registries.conf ([`shortnames`]), or is an error saying how to write
/// it in full.
pub fn reference_of(arg: &Path) -> Option<Result<Reference>> {
    if fs::symlink_metadata(arg).is_ok() {
        return None;
    }
    let s = arg.to_str()?;
    if s.starts_with("docker://") || Reference::looks_like(s) {
        return Some(Reference::parse(s));
    }
    if shortnames::looks_short(s) {
        return Some(shortnames::ShortNames::system().and_then(|names| {
            let (mut r, how) = names.resolve(s)?;
            r.short_name = Some((s.to_string(), how));
            Ok(r)
        }));
    }
    let host = s.split_once('/').map(|(h, _)| h)?;
    if !host.starts_with('.')
        && (host.contains(':') || host.contains('.') || host == "localhost")
    {
        return Some(Reference::parse(s).map_err(|e| match e {
            RegistryError::BadReference { text, why } => {
                RegistryError::BadReference {
                    text,
                    why: format!("{why}; and no such file exists"),
                }
            }
            e => e,
        }));
    }
    None
}

/// Blobs pulled into `store` that a caller no longer needs (a layer now
/// unpacked into a cache entry) are removed with this; a later pull
/// fetches them again if asked.
pub fn forget_blob(store: &Path, digest: &Digest) -> Result<()> {
    let p = store.join(digest.blob_path());
    match fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RegistryError::io("remove", &p, e)),
    }
}

/// The blob one transfer brings to `partial`.
#[derive(Clone, Copy)]
struct Blob<'a> {
    url: &'a str,
    digest: &'a Digest,
    size: u64,
    file: &'a File,
    partial: &'a Path,
}

/// A hasher fed the first `have` bytes of `file`, what earlier attempts
/// kept.
fn hash_kept(
    digest: &Digest,
    file: &File,
    partial: &Path,
    have: u64,
) -> Result<Hasher> {
    let mut hasher = Hasher::new(digest.algorithm());
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < have {
        let want = ((have - off) as usize).min(CHUNK);
        let n = file
            .read_at(&mut buf[..want], off)
            .map_err(|e| RegistryError::io("read", partial, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        off += n as u64;
    }
    Ok(hasher)
}

/// Where a 206 response's `Content-Range: bytes FROM-TO/SIZE` starts.
fn range_start<B>(resp: &ureq::http::Response<B>) -> Option<u64> {
    resp.headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split('-').next())
        .and_then(|v| v.parse::<u64>().ok())
}
