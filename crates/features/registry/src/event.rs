//! What a pull reports as it goes ([`Event`]) and how a caller hears of
//! it ([`Events`]): the pull and the blob fetcher both speak it, so it
//! sits apart from either.

use std::sync::Arc;
use std::time::Duration;

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
