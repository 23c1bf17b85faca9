//! The customisation and seed requests as the wire carries them: files'
//! contents, never their paths, each bounded as it is read. A leaf: it
//! names nothing else of the crate, so that the options and both the
//! customisation and the seed can name it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The most bytes of one file's contents a request carries (a key file,
/// a password file, a script, a file copied in, user-data,
/// network-config); a daemon's request line bounds them all together.
pub const MAX_SENT_FILE: usize = 64 << 10;

/// The customisation of every guest, files read: one entry for all
/// guests, or one per guest when a value names the guest (`{n}`,
/// `{name}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomizeRequest {
    /// Each guest's, or one for all.
    pub guests: Vec<GuestRequest>,
    /// `--run-timeout`, in seconds; `None`: the default.
    #[serde(default)]
    pub run_timeout: Option<u64>,
}

/// One guest's customisation, in the order it is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestRequest {
    /// `--copy-in` of a regular file: its contents.
    #[serde(default)]
    pub copy_in: Vec<SentFile>,
    /// `--write`.
    #[serde(default)]
    pub writes: Vec<SentWrite>,
    /// `--timezone`.
    #[serde(default)]
    pub timezone: Option<String>,
    /// `--root-password`, `--password`.
    #[serde(default)]
    pub passwords: Vec<SentPassword>,
    /// `--ssh-inject`: each user's key lines.
    #[serde(default)]
    pub keys: Vec<SentKeys>,
    /// `--firstboot`: each script's name and contents.
    #[serde(default)]
    pub firstboot: Vec<SentScript>,
    /// `--firstboot-command`.
    #[serde(default)]
    pub firstboot_commands: Vec<String>,
    /// `--run` and `--run-command`, in the order given: run in the
    /// guest at provision time, last.
    #[serde(default)]
    pub run: Vec<SentRun>,
}

/// `--run` or `--run-command`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SentRun {
    /// `--run`: a script, its name and contents, for the guest's
    /// `/bin/sh`.
    Script(SentScript),
    /// `--run-command`: for the guest's `/bin/sh -c`.
    Command(String),
}

/// A file's contents, copied into a guest's directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentFile {
    /// Its name in the directory: one component.
    pub name: String,
    /// The directory in the guest, absolute.
    pub remote_dir: PathBuf,
    /// Its mode (permission bits).
    pub mode: u32,
    /// Its bytes.
    #[serde(with = "base64_bounded")]
    pub content: Vec<u8>,
}

/// `--write FILE:CONTENT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentWrite {
    /// Where in the guest, absolute.
    pub path: PathBuf,
    /// The file's text.
    pub content: String,
}

/// A password of one user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentPassword {
    /// `false`: `--root-password`; `true`: `--password USER:`.
    #[serde(default)]
    pub user_option: bool,
    /// The user.
    pub user: String,
    /// The password.
    pub secret: SentSecret,
    /// `locked:`.
    #[serde(default)]
    pub locked: bool,
}

/// A password as sent: a password file already read into `given`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum SentSecret {
    /// This password.
    Given(String),
    /// A new one per guest, told in the reply.
    Random,
    /// No password login.
    Disabled,
}

/// One user's SSH public keys, each a line as `authorized_keys` holds
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentKeys {
    /// The user.
    pub user: String,
    /// The keys.
    pub keys: Vec<String>,
}

/// A script: its name in the guest and its contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentScript {
    /// Its name (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// Its bytes.
    #[serde(with = "base64_bounded")]
    pub content: Vec<u8>,
}

/// Bytes as base64 text; refused past [`MAX_SENT_FILE`] as they are
/// read, before they are decoded.
pub mod base64_bounded {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::MAX_SENT_FILE;

    /// `bytes` as base64.
    pub fn serialize<S: Serializer>(
        bytes: &[u8],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(
            &base64::engine::general_purpose::STANDARD.encode(bytes),
        )
    }

    /// Base64 text as bytes, at most [`MAX_SENT_FILE`] of them.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        // Four characters for three bytes.
        if text.len() / 4 * 3 > MAX_SENT_FILE {
            return Err(serde::de::Error::custom(format!(
                "a file of more than {MAX_SENT_FILE} bytes: a request \
                 carries files of at most {} KiB",
                MAX_SENT_FILE >> 10
            )));
        }
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| serde::de::Error::custom(format!("not base64: {e}")))
    }
}

/// Optional bytes as [`base64_bounded`] reads and writes them.
pub mod base64_bounded_option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// `bytes`, if any, as base64.
    pub fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::base64_bounded::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    /// Base64 text or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::base64_bounded")] Vec<u8>);
        Ok(Option::<Wrapped>::deserialize(d)?.map(|w| w.0))
    }
}

/// A disk guest's NoCloud seed as sent: the seed's options with every
/// file read (a key file's keys, a password file's line, user-data and
/// network-config).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSent {
    /// `--ssh-inject`: each user's key lines.
    #[serde(default)]
    pub keys: Vec<SentKeys>,
    /// `--root-password`.
    #[serde(default)]
    pub root_password: Option<SentPassword>,
    /// `--firstboot-command`.
    #[serde(default)]
    pub firstboot_commands: Vec<String>,
    /// `--run-command`.
    #[serde(default)]
    pub run_commands: Vec<String>,
    /// `--write`.
    #[serde(default)]
    pub writes: Vec<SentWrite>,
    /// `--user-data`'s contents.
    #[serde(default, with = "base64_bounded_option")]
    pub user_data: Option<Vec<u8>>,
    /// `--network-config`'s contents.
    #[serde(default, with = "base64_bounded_option")]
    pub network_config: Option<Vec<u8>>,
}
