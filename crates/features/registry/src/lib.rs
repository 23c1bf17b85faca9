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
mod client;
mod error;
mod event;
mod http;
mod layout;
pub mod policy;
mod pull;
mod reference;
pub mod shortnames;
mod signatures;
pub mod store;
mod transfer;

use std::fs;
use std::io;
use std::path::Path;

use zinstall_oci::Digest;

pub use error::{Failure, RegistryError, Result};
pub use event::{Event, Events};
pub use layout::BLOB_MODE;
pub use pull::{DEFAULT_RETRIES, PullOptions, Registry};
pub use reference::Reference;
pub use transfer::{DEFAULT_FETCH_DEADLINE, Stall};

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
    // `oci:`, `oci-archive:`, `docker-archive:` name images on this
    // machine (containers-transports(5)), never a registry's.
    if zinstall_oci::transport_name(arg).is_some()
        || fs::symlink_metadata(arg).is_ok()
    {
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
