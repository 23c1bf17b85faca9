//! Platforms as OCI names them: `os/architecture[/variant]`, with Go's
//! names (`linux/amd64`, `linux/arm64/v8`).

use std::fmt;
use std::str::FromStr;

/// An operating system and CPU architecture, and optionally the CPU's
/// variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// `linux`, `illumos`, ...
    pub os: String,
    /// `amd64`, `arm64`, `386`, ...
    pub architecture: String,
    /// `v7`, `v8`, ...; `None` matches any.
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this program runs on.
    pub fn host() -> Platform {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "x86" => "386",
            "aarch64" => "arm64",
            "arm" => "arm",
            "loongarch64" => "loong64",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "powerpc64" => "ppc64",
            "riscv64" => "riscv64",
            "s390x" => "s390x",
            "sparc64" => "sparc64",
            "mips64" if cfg!(target_endian = "little") => "mips64le",
            other => other,
        };
        Platform {
            os: std::env::consts::OS.to_string(),
            architecture: arch.to_string(),
            variant: None,
        }
    }

    /// Whether an image for `os`/`arch`/`variant` runs here. An arm64
    /// image without a variant is `v8`.
    pub fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        if self.os != os || self.architecture != arch {
            return false;
        }
        let Some(want) = &self.variant else {
            return true;
        };
        let variant = variant.or((arch == "arm64").then_some("v8"));
        variant == Some(want.as_str())
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// A text that is not `OS/ARCH[/VARIANT]`.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a platform (OS/ARCH or OS/ARCH/VARIANT, such as \
     linux/amd64 or linux/arm64/v8)"
)]
pub struct NotPlatform(pub String);

impl FromStr for Platform {
    type Err = NotPlatform;

    fn from_str(s: &str) -> Result<Platform, NotPlatform> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'_' | b'.' | b'-')
                })
        };
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| ok(p)) {
            return Err(NotPlatform(s.into()));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn platforms() {
        let p: Platform = "linux/arm64/v8".parse().unwrap();
        assert!(p.matches("linux", "arm64", None));
        assert!(!p.matches("linux", "arm64", Some("v9")));
        assert!(!p.matches("linux", "amd64", None));
        let any: Platform = "linux/arm".parse().unwrap();
        assert!(any.matches("linux", "arm", Some("v7")));
        assert_eq!(p.to_string(), "linux/arm64/v8");
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d", "Linux/amd64"] {
            assert!(bad.parse::<Platform>().is_err(), "{bad}");
        }
        assert_eq!(
            "linux".parse::<Platform>().unwrap_err().to_string(),
            "\"linux\" is not a platform (OS/ARCH or OS/ARCH/VARIANT, such as \
             linux/amd64 or linux/arm64/v8)"
        );
        let h = Platform::host();
        assert_eq!(h.os, std::env::consts::OS);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(h.architecture, "amd64");
        }
    }
}
