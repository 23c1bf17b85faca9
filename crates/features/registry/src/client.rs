//! The registry client of one pull: requests retried with backoff, and
//! each blob brought into the store (resumed, hashed, checked, renamed
//! into `blobs/`) when the image reads it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zinstall_core::Flock;
use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_oci::{BlobKind, Digest, Fetch, Hasher};

use crate::error::{RegistryError, Result};
use crate::event::{Event, Events};
use crate::http::{MANIFEST_TYPES, Remote, status_error};
use crate::layout::{BLOB_MODE, write_atomic};
use crate::store;

/// The first wait before a retry; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Bytes read from the network at a time.
const CHUNK: usize = 1 << 20;

/// Fetches the blobs an image reads into the store.
pub(crate) struct Fetcher {
    pub(crate) remote: Arc<Remote>,
    pub(crate) store: PathBuf,
    pub(crate) retries: u32,
    pub(crate) events: Option<Events>,
    pub(crate) max_blob_size: Option<u64>,
    pub(crate) progress: Option<Arc<dyn zinstall_core::Progress>>,
    /// Keeps gc out of the store while the image is open (`None` when
    /// only a manifest is looked at, nothing stored).
    pub(crate) _in_use: Option<store::InUse>,
}

impl Fetcher {
    fn emit(&self, e: Event) {
        if let Some(f) = &self.events {
            f(&e);
        }
    }

    /// `attempt` until it succeeds or fails for good: transient failures
    /// (connection, 5xx, 429) are retried with backoff.
    pub(crate) fn retrying<T>(
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
                .is_some_and(zinstall_core::Cancel::is_cancelled)
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
    pub(crate) fn store_bytes(
        &self,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<()> {
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
        // The store's own partial file, made here, never followed.
        #[allow(clippy::disallowed_methods)]
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
        let have = self.kept_bytes(digest, size, file, partial, &from_file)?;
        let resumed = have;
        let (url, accept) = self.url_of(kind, digest);
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

    /// The bytes of `partial` (locked as `file`) a download of `digest`
    /// (`size` bytes) resumes from: none when they came from elsewhere
    /// (as `from_file` records) or are too many. Records this registry as
    /// where they come from now.
    fn kept_bytes(
        &self,
        digest: &Digest,
        size: u64,
        file: &File,
        partial: &Path,
        from_file: &Path,
    ) -> Result<u64> {
        let io_err = |op, e| RegistryError::io(op, partial, e);
        let mut have = file.metadata().map_err(|e| io_err("stat", e))?.len();
        // What is kept is resumed only from where it came from: bytes
        // another registry (or repository) sent are no prefix of this one's.
        let origin = self.remote.origin();
        let left_by = foreign::read(from_file, Follow::No, Kind::Record)
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
        Ok(have)
    }

    /// Where the blob `digest` of `kind` is fetched, and the media types
    /// accepted.
    fn url_of(
        &self,
        kind: BlobKind,
        digest: &Digest,
    ) -> (String, Option<&'static str>) {
        match kind {
            BlobKind::Index | BlobKind::Manifest => (
                self.remote.manifest_url(&digest.to_string()),
                Some(MANIFEST_TYPES),
            ),
            BlobKind::Config | BlobKind::Layer => {
                (self.remote.blob_url(&digest.to_string()), None)
            }
        }
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
                return Err(
                    self.interrupted(digest, have, size, attempts, last)
                );
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
            let resp = match self.ask(url, accept, digest, have)? {
                Answer::Rest(resp) => resp,
                Answer::Whole(resp) => {
                    // The whole blob again: start over.
                    if have > 0 {
                        file.set_len(0).map_err(|e| io_err("truncate", e))?;
                        have = 0;
                        hasher = Hasher::new(digest.algorithm());
                        begin(0);
                    }
                    resp
                }
                Answer::Retry(why) => {
                    last = why;
                    continue;
                }
            };
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

    /// A transfer given up after `attempts`, `have` of the blob's `size`
    /// bytes kept, and the `last` failure's words.
    fn interrupted(
        &self,
        digest: &Digest,
        have: u64,
        size: u64,
        attempts: u32,
        last: String,
    ) -> RegistryError {
        RegistryError::Interrupted {
            reference: self.remote.reference.to_string(),
            digest: digest.to_string(),
            got: have,
            size,
            attempts,
            last,
        }
    }

    /// Asks `url` for the blob's bytes from `have` on (all of them when
    /// `have` is 0) and judges the answer by its status: the rest, the
    /// whole blob, or why a transient failure cut it.
    fn ask(
        &self,
        url: &str,
        accept: Option<&'static str>,
        digest: &Digest,
        have: u64,
    ) -> Result<Answer> {
        let from = (have > 0).then_some(have);
        let resp = match self.remote.get_watched(url, accept, from) {
            Ok(r) => r,
            Err(e) if e.is_transient() => {
                return Ok(Answer::Retry(e.to_string()));
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
                Ok(Answer::Rest(resp))
            }
            200 => Ok(Answer::Whole(resp)),
            _ => {
                let e = status_error(url, resp, &self.remote.watch);
                if e.is_transient() {
                    return Ok(Answer::Retry(e.to_string()));
                }
                Err(e)
            }
        }
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

/// A registry's answer to a request for a blob's bytes, by its status.
enum Answer {
    /// The bytes from where the kept ones end (206, its range checked).
    Rest(ureq::http::Response<ureq::Body>),
    /// The whole blob, whatever was asked (200).
    Whole(ureq::http::Response<ureq::Body>),
    /// Why a transient failure stopped it: to retry.
    Retry(String),
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
