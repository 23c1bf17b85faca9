//! Digests as blob names: checked before they name anything.

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest as _, Sha256, Sha512};

/// The digest algorithms blobs may be named by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SHA-256: 64 hex digits.
    Sha256,
    /// SHA-512: 128 hex digits.
    Sha512,
}

impl Algorithm {
    /// `sha256` or `sha512`, as in a digest string and a blob path.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

/// Why a text is not a [`Digest`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// No `:` between an algorithm and its digits.
    #[error("{text:?} is not a digest (no ':')")]
    NoColon {
        /// The text.
        text: String,
    },
    /// An algorithm other than sha256 and sha512.
    #[error(
        "{text:?}: digest algorithm {algorithm:?} is not supported \
         (sha256, sha512)"
    )]
    Algorithm {
        /// The text.
        text: String,
        /// Its algorithm.
        algorithm: String,
    },
    /// Not as many lowercase hex digits as the algorithm makes.
    #[error(
        "{text:?} is not a {} digest ({} lowercase hex digits)",
        algorithm.name(),
        algorithm.hex_len()
    )]
    Hex {
        /// The text.
        text: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
}

/// A digest known to be `sha256:` and 64, or `sha512:` and 128,
/// lowercase hexadecimal digits: nothing else can be made into one, so a
/// blob path built from it ([`Digest::blob_path`]) is always
/// `blobs/ALG/HEX`, whatever the image said.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

impl Digest {
    /// Parses `ALG:HEX`; the error says what is wrong with it.
    pub fn parse(s: &str) -> Result<Digest, DigestError> {
        let Some((alg, hex)) = s.split_once(':') else {
            return Err(DigestError::NoColon { text: s.into() });
        };
        let algorithm = match alg {
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            other => {
                return Err(DigestError::Algorithm {
                    text: s.into(),
                    algorithm: other.into(),
                });
            }
        };
        if hex.len() != algorithm.hex_len()
            || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(DigestError::Hex {
                text: s.into(),
                algorithm,
            });
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_string(),
        })
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Its hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// Where the blob is in a layout: `blobs/ALG/HEX`.
    pub fn blob_path(&self) -> PathBuf {
        PathBuf::from("blobs")
            .join(self.algorithm.name())
            .join(&self.hex)
    }

    /// A SHA-256 naming this digest in a store keyed by SHA-256 (a
    /// cache): its own hex for a SHA-256 digest, else the SHA-256 of its
    /// text.
    pub fn sha256_key(&self) -> String {
        match self.algorithm {
            Algorithm::Sha256 => self.hex.clone(),
            Algorithm::Sha512 => hex(&Sha256::digest(self.to_string())),
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

/// A running digest of one algorithm.
#[derive(Clone)]
pub enum Hasher {
    /// SHA-256.
    Sha256(Sha256),
    /// SHA-512.
    Sha512(Sha512),
}

impl Hasher {
    /// A new digest of `a`.
    pub fn new(a: Algorithm) -> Hasher {
        match a {
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(Sha512::new()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }

    /// The digest of everything added.
    pub fn finish(self) -> Digest {
        match self {
            Hasher::Sha256(h) => Digest {
                algorithm: Algorithm::Sha256,
                hex: hex(&h.finalize()),
            },
            Hasher::Sha512(h) => Digest {
                algorithm: Algorithm::Sha512,
                hex: hex(&h.finalize()),
            },
        }
    }
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _infallible = write!(s, "{x:02x}");
    }
    s
}

/// The SHA-256 of `b`, hex.
pub fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn only_checked_digests_name_blobs() {
        let good = format!("sha256:{}", "ab".repeat(32));
        let d = Digest::parse(&good).unwrap();
        assert_eq!(d.to_string(), good);
        assert_eq!(
            d.blob_path(),
            PathBuf::from(format!("blobs/sha256/{}", "ab".repeat(32)))
        );
        assert_eq!(
            Digest::parse("md5:x").unwrap_err().to_string(),
            "\"md5:x\": digest algorithm \"md5\" is not supported \
             (sha256, sha512)"
        );
        assert_eq!(
            Digest::parse("sha512:ab").unwrap_err().to_string(),
            "\"sha512:ab\" is not a sha512 digest (128 lowercase hex digits)"
        );
        assert_eq!(
            Digest::parse("ab").unwrap_err().to_string(),
            "\"ab\" is not a digest (no ':')"
        );
        for bad in [
            "sha256:../../../etc/passwd",
            "sha256:..",
            "sha256/../x:ab",
            "../sha256:ab",
            "md5:d41d8cd98f00b204e9800998ecf8427e",
            &format!("sha256:{}", "AB".repeat(32)),
            &format!("sha256:{}", "ab".repeat(33)),
            &format!("sha512:{}", "ab".repeat(32)),
            &format!("sha256:{}/", "ab".repeat(32)),
            "sha256:",
            "",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
        let h = {
            let mut h = Hasher::new(Algorithm::Sha512);
            h.update(b"abc");
            h.finish()
        };
        assert!(h.hex().starts_with("ddaf35a193617aba"));
        assert_eq!(h.sha256_key().len(), 64);
    }
}
