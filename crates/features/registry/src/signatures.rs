//! An image's signatures, fetched when the policy first asks for them:
//! simple-signing signatures from the lookaside store registries.d names
//! (`file://`, `http://`, `https://`), sigstore signatures from the
//! registry's attachments (tag `ALGO-HEX.sig`). What a pull accepted is
//! recorded in the store (`trust/ALGO-HEX.json`) with the signatures it
//! was accepted on, so a cached image is judged again by the current
//! policy before each use without a request.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use serde::{Deserialize, Serialize};

use zinstall_core::foreign::{self, Follow, Kind};

use crate::http::{Remote, read_bounded, read_bounded_until, status_error};
use crate::policy::payload::MAX_PAYLOAD;
use crate::policy::registries_d::signature_url;
use crate::policy::sigstore::{SIGNATURE_ANNOTATION, SIMPLESIGNING_TYPE};
use crate::policy::{
    DockerRef, PolicyError, RegistriesD, Signatures, SigstoreSig, Verdict,
};
use crate::{RegistryError, Result};

/// The most simple-signing signatures read for one manifest.
const MAX_SIGNATURES: usize = 64;

/// Accept header for a sigstore attachment's manifest.
const ATTACHMENT_TYPES: &str = "application/vnd.oci.image.manifest.v1+json,\
                                application/vnd.docker.distribution.manifest.v2+json";

/// What the store remembers of a verified image.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// The manifest digest verified.
    pub digest: String,
    /// The reference it was pulled as.
    pub reference: String,
    /// The policy file it was accepted by.
    pub policy: PathBuf,
    /// `sha256:HEX` of that policy file.
    pub policy_digest: String,
    /// The scope that applied.
    pub scope: String,
    /// Its requirements, described.
    pub requirements: Vec<String>,
    /// Simple-signing signatures (base64), if they were fetched.
    pub simple: Option<Vec<StoredSig>>,
    /// Sigstore signatures, if they were fetched.
    pub sigstore: Option<Vec<StoredSigstore>>,
}

/// A stored simple-signing signature.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredSig {
    /// Where it came from.
    pub source: String,
    /// The OpenPGP message, base64.
    pub bytes: String,
}

/// A stored sigstore signature.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredSigstore {
    /// Where it came from.
    pub source: String,
    /// The payload, base64.
    pub payload: String,
    /// The annotation.
    pub signature: String,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Where the record of manifest `digest` is kept.
pub fn record_path(store: &Path, digest: &str) -> PathBuf {
    store
        .join("trust")
        .join(format!("{}.json", digest.replace(':', "-")))
}

/// The record of `digest`, if one was written and reads.
pub fn read_record(store: &Path, digest: &str) -> Option<Record> {
    let bytes =
        foreign::read(&record_path(store, digest), Follow::No, Kind::Record)
            .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// An image's signatures: stored ones first, else fetched.
pub(crate) struct Fetched<'a> {
    remote: Arc<Remote>,
    image: DockerRef,
    digest: String,
    registries_d: &'a RegistriesD,
    simple: Option<Vec<(String, Vec<u8>)>>,
    sigstore: Option<Vec<SigstoreSig>>,
}

fn fetch_error(url: &str, e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Fetch {
        url: url.to_string(),
        why: e.to_string(),
    }
}

impl<'a> Fetched<'a> {
    pub(crate) fn new(
        remote: Arc<Remote>,
        image: DockerRef,
        digest: String,
        registries_d: &'a RegistriesD,
        stored: Option<Record>,
    ) -> Fetched<'a> {
        let (simple, sigstore) = match stored {
            Some(r) if r.digest == digest => (
                r.simple.map(|v| {
                    v.into_iter()
                        .filter_map(|s| Some((s.source, unb64(&s.bytes)?)))
                        .collect()
                }),
                r.sigstore.map(|v| {
                    v.into_iter()
                        .filter_map(|s| {
                            Some(SigstoreSig {
                                source: s.source,
                                payload: unb64(&s.payload)?,
                                signature: s.signature,
                            })
                        })
                        .collect()
                }),
            ),
            _ => (None, None),
        };
        Fetched {
            remote,
            image,
            digest,
            registries_d,
            simple,
            sigstore,
        }
    }

    /// Writes what was accepted, and on which signatures, to the store.
    pub(crate) fn record(
        &self,
        store: &Path,
        reference: &str,
        policy_digest: &str,
        verdict: &Verdict,
    ) -> Result<()> {
        let rec = Record {
            digest: self.digest.clone(),
            reference: reference.to_string(),
            policy: verdict.policy.clone(),
            policy_digest: policy_digest.to_string(),
            scope: verdict.scope.clone(),
            requirements: verdict.requirements.clone(),
            simple: self.simple.as_ref().map(|v| {
                v.iter()
                    .map(|(source, b)| StoredSig {
                        source: source.clone(),
                        bytes: b64(b),
                    })
                    .collect()
            }),
            sigstore: self.sigstore.as_ref().map(|v| {
                v.iter()
                    .map(|s| StoredSigstore {
                        source: s.source.clone(),
                        payload: b64(&s.payload),
                        signature: s.signature.clone(),
                    })
                    .collect()
            }),
        };
        let path = record_path(store, &self.digest);
        let dir = path.parent().expect("trust/NAME");
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(|e| RegistryError::io("mkdir", dir, e))?;
        let bytes = serde_json::to_vec_pretty(&rec).map_err(|e| {
            RegistryError::io("write", &path, std::io::Error::other(e))
        })?;
        crate::layout::write_atomic(
            dir,
            &path.file_name().unwrap_or_default().to_string_lossy(),
            &bytes,
            0o644,
        )
    }

    fn lookaside(
        &self,
    ) -> std::result::Result<Vec<(String, Vec<u8>)>, PolicyError> {
        let base = self.registries_d.lookaside(&self.image);
        let mut out = Vec::new();
        for n in 1..=MAX_SIGNATURES {
            let url = signature_url(&base, &self.image, &self.digest, n);
            let got = if let Some(path) = url.strip_prefix("file://") {
                // A file skopeo wrote: a link, a FIFO or a device there is
                // refused, and the file is read within a signature's cap.
                match foreign::read(
                    Path::new(path),
                    Follow::No,
                    Kind::Signature,
                ) {
                    Ok(b) => Some(b),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(fetch_error(&url, e)),
                }
            } else if url.starts_with("http://") || url.starts_with("https://")
            {
                // One deadline for the request and the body together: a
                // lookaside that trickles bytes fast enough to pass the
                // stall floor still ends here.
                let until = Instant::now() + self.remote.watch.deadline;
                let resp = self
                    .remote
                    .get_elsewhere(&url, until)
                    .map_err(|e| fetch_error(&url, e))?;
                match resp.status().as_u16() {
                    404 => None,
                    200..=299 => Some(
                        read_bounded_until(
                            resp,
                            &url,
                            "signature",
                            Kind::Signature.cap(),
                            &self.remote.watch,
                            until,
                        )
                        .map_err(|e| fetch_error(&url, e))?,
                    ),
                    _ => {
                        return Err(fetch_error(
                            &url,
                            status_error(&url, resp, &self.remote.watch),
                        ));
                    }
                }
            } else {
                return Err(fetch_error(
                    &url,
                    "a lookaside is a file://, http:// or https:// URL",
                ));
            };
            match got {
                Some(b) => out.push((url, b)),
                None => break,
            }
        }
        Ok(out)
    }

    fn attachments(
        &self,
    ) -> std::result::Result<Vec<SigstoreSig>, PolicyError> {
        if !self.registries_d.use_sigstore_attachments(&self.image) {
            return Ok(Vec::new());
        }
        let tag = format!("{}.sig", self.digest.replace(':', "-"));
        let url = self.remote.manifest_url(&tag);
        let Some(m) = self.attachment_manifest(&url)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for layer in m["layers"].as_array().into_iter().flatten() {
            if layer["mediaType"].as_str() != Some(SIMPLESIGNING_TYPE) {
                continue;
            }
            let (Some(digest), Some(size)) =
                (layer["digest"].as_str(), layer["size"].as_u64())
            else {
                return Err(fetch_error(
                    &url,
                    "a layer without digest or size",
                ));
            };
            let want = zinstall_oci::Digest::parse(digest)
                .map_err(|e| fetch_error(&url, format!("layer digest: {e}")))?;
            out.push(SigstoreSig {
                source: format!("{url} layer {digest}"),
                payload: self.attached_payload(digest, &want, size)?,
                signature: layer["annotations"][SIGNATURE_ANNOTATION]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        Ok(out)
    }

    /// The manifest at `url` the signatures are attached to, or `None`
    /// if there is none.
    fn attachment_manifest(
        &self,
        url: &str,
    ) -> std::result::Result<Option<serde_json::Value>, PolicyError> {
        let resp = self
            .remote
            .get_watched(url, Some(ATTACHMENT_TYPES), None)
            .map_err(|e| fetch_error(url, e))?;
        match resp.status().as_u16() {
            404 => return Ok(None),
            200..=299 => {}
            _ => {
                return Err(fetch_error(
                    url,
                    status_error(url, resp, &self.remote.watch),
                ));
            }
        }
        let bytes = read_bounded(
            resp,
            url,
            "manifest",
            zinstall_oci::MAX_JSON,
            &self.remote.watch,
        )
        .map_err(|e| fetch_error(url, e))?;
        let m = serde_json::from_slice(&bytes)
            .map_err(|e| fetch_error(url, format!("not a manifest: {e}")))?;
        Ok(Some(m))
    }

    /// The payload blob `digest` of `size` bytes, checked to be `want`.
    fn attached_payload(
        &self,
        digest: &str,
        want: &zinstall_oci::Digest,
        size: u64,
    ) -> std::result::Result<Vec<u8>, PolicyError> {
        let burl = self.remote.blob_url(digest);
        if size > MAX_PAYLOAD as u64 {
            return Err(fetch_error(
                &burl,
                "larger than a signature payload may be",
            ));
        }
        let resp = self
            .remote
            .get_watched(&burl, None, None)
            .map_err(|e| fetch_error(&burl, e))?;
        if !resp.status().is_success() {
            return Err(fetch_error(
                &burl,
                status_error(&burl, resp, &self.remote.watch),
            ));
        }
        let payload = read_bounded(
            resp,
            &burl,
            "signature payload",
            size,
            &self.remote.watch,
        )
        .map_err(|e| fetch_error(&burl, e))?;
        let mut h = zinstall_oci::Hasher::new(want.algorithm());
        h.update(&payload);
        if h.finish() != *want {
            return Err(fetch_error(
                &burl,
                format!("the payload's bytes are not {want}"),
            ));
        }
        Ok(payload)
    }
}

impl Signatures for Fetched<'_> {
    fn simple(
        &mut self,
    ) -> std::result::Result<Vec<(String, Vec<u8>)>, PolicyError> {
        if self.simple.is_none() {
            self.simple = Some(self.lookaside()?);
        }
        Ok(self.simple.clone().unwrap_or_default())
    }

    fn sigstore(
        &mut self,
    ) -> std::result::Result<Vec<SigstoreSig>, PolicyError> {
        if self.sigstore.is_none() {
            self.sigstore = Some(self.attachments()?);
        }
        Ok(self.sigstore.clone().unwrap_or_default())
    }
}
