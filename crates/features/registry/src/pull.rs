//! The pull: a reference resolved to its manifest, judged by the trust
//! policy, recorded in the store's index, and the image opened with its
//! blobs fetched as they are read (by the client, `client.rs`).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oci_spec::image::{Descriptor, ImageIndex, MediaType};
use zinstall_core::Flock;
use zinstall_oci::{Digest, Hasher, Image, MAX_JSON, Select};

use crate::auth;
use crate::client::Fetcher;
use crate::error::{RegistryError, Result};
use crate::event::{Event, Events};
use crate::http::{MANIFEST_TYPES, Remote, read_bounded, status_error};
use crate::layout::write_atomic;
use crate::policy;
use crate::reference::Reference;
use crate::signatures;
use crate::store;
use crate::transfer::{Stall, Watch};

/// Retries of a failed request, after the first attempt.
pub const DEFAULT_RETRIES: u32 = 4;

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
    pub cancel: Option<zinstall_core::Cancel>,
    /// The most bytes a blob's descriptor may declare (the caller's
    /// `--max-archive-size`); a larger blob is refused before it is
    /// fetched. `None`: no bound but the descriptor's own.
    pub max_blob_size: Option<u64>,
    /// Hears how far each blob's download is: its size first
    /// ([`zinstall_core::Progress::begin`]), then the bytes as they arrive.
    pub progress: Option<Arc<dyn zinstall_core::Progress>>,
    /// The trust policy each image's manifest must satisfy before any
    /// layer is fetched; `None`: digests are checked, signatures are not
    /// (an [`Event::Unverified`] says so).
    pub trust: Option<Arc<policy::Trust>>,
    /// How long a small body (a manifest, a token, a signature) may take
    /// whole, request included; `None`: [`crate::DEFAULT_FETCH_DEADLINE`].
    pub fetch_deadline: Option<Duration>,
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
            .field("fetch_deadline", &self.fetch_deadline)
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
    progress: Option<Arc<dyn zinstall_core::Progress>>,
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
        if let Some(d) = opts.fetch_deadline {
            self.watch.deadline = d;
        }
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

    /// How long a small body (a manifest, a token, a signature from a
    /// lookaside, request included) may take whole, however steadily it
    /// comes (default: [`crate::DEFAULT_FETCH_DEADLINE`]).
    pub fn fetch_deadline(mut self, deadline: Duration) -> Registry {
        self.watch.deadline = deadline;
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
                why: why.to_string(),
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
        // The store's own lock file, made here, never followed.
        #[allow(clippy::disallowed_methods)]
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
/// The identity a signature is judged against: the reference as the
/// user wrote it, a tag kept beside a digest (containers/image's policy
/// then wants a claim of exactly `NAME:TAG@DIGEST` for matchExact,
/// matchRepoDigestOrExact and remapIdentity).
fn identity_of(r: &Reference) -> policy::DockerRef {
    policy::DockerRef {
        name: format!("{}/{}", r.registry, r.repository),
        tag: r.tag.clone(),
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
